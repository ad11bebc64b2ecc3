/* A passive one-sided client, the KV-cache transfer pattern (Mooncake's Transfer Engine, NIXL,
 * NVSHMEM): the initiator RDMA-WRITEs into and RDMA-READs from a target buffer whose process
 * neither posts nor polls after setup. Two processes, one RC QP each, exchanging their QP
 * numbers, GIDs and the target's rkey through files in DIR; the phases are coordinated through
 * files too (never through verbs: the target must stay passive).
 *
 *   passive_target target    DIR host|cuda SIZE [linger]
 *   passive_target initiator DIR host|cuda SIZE
 *
 * Both register UCX-like: access with IBV_ACCESS_RELAXED_ORDERING (the target's also
 * LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ, the initiator's LOCAL_WRITE only). Phases:
 *   1. the target fills its buffer with generation 1; the initiator READs it all and checks it;
 *   2. the initiator WRITEs generation 2 into it; the target checks its own buffer (host: the
 *      CPU reads it; cuda: cuMemcpyDtoH);
 *   3. the target refills its buffer with generation 3 (a new KV block); the initiator READs
 *      it all and checks it.
 * Each process prints "ok", or per phase "stale: N of M pages" (exit 1). A target whose
 * registration fails prints "target: registration refused: errno N (NAME)" and exits 2 (the
 * initiator then prints "target refused" and exits 2 as well); setup failures exit 3.
 *
 * `linger` (the target only): still passive, it sleeps 3 s after the initiator's WRITE before it
 * checks its buffer, and 3 s after the initiator's last READ, then leaves with _exit (no exit
 * handler runs: only what the shim said while the process ran is said). Each step is announced on
 * stderr ("target: sleeping after the WRITE", "target: refilling", "target: sleeping after the
 * READ", "target: _exit"), so a test sees what came between them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static const char *dir;
static int cuda;
static size_t size;
static int linger;

/* A step of the target, on stderr (unbuffered) between the shim's own lines. */
static void step(const char *what) { fprintf(stderr, "target: %s\n", what); }

static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(3);
}

/* ---- files in DIR: written whole, then renamed into place ---- */

static void path(char *out, const char *name) { snprintf(out, 512, "%s/%s", dir, name); }

static void put(const char *name, const void *data, size_t len) {
    char p[512], tmp[600];
    path(p, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) die(tmp);
    if (rename(tmp, p)) die(p);
}

/* Waits up to 60 s for NAME; reads len bytes of it into data (if any). */
static void wait_for(const char *name, void *data, size_t len) {
    char p[512];
    path(p, name);
    for (int i = 0; i < 60000; i++) {
        FILE *f = fopen(p, "rb");
        if (f) {
            size_t got = len ? fread(data, 1, len, f) : 0;
            fclose(f);
            if (got == len) return;
        }
        usleep(1000);
    }
    fprintf(stderr, "timed out waiting for %s\n", p);
    exit(3);
}

/* ---- memory: host or the simulated GPU (libcuda.so.1, dlopen'ed as NCCL does) ---- */

static int (*cu_htod)(uint64_t, const void *, size_t);
static int (*cu_dtoh)(void *, uint64_t, size_t);

static void *sym(void *h, const char *n) {
    void *p = dlsym(h, n);
    if (!p) { fprintf(stderr, "%s: %s\n", n, dlerror()); exit(3); }
    return p;
}

static void *alloc(void) {
    if (!cuda) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap");
        return p;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(3); }
    int (*init)(unsigned) = sym(h, "cuInit");
    int (*dev_get)(int *, int) = sym(h, "cuDeviceGet");
    int (*retain)(void **, int) = sym(h, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = sym(h, "cuCtxSetCurrent");
    int (*mem_alloc)(uint64_t *, size_t) = sym(h, "cuMemAlloc_v2");
    cu_htod = sym(h, "cuMemcpyHtoD_v2");
    cu_dtoh = sym(h, "cuMemcpyDtoH_v2");
    int dev = 0;
    void *ctx = NULL;
    uint64_t d = 0;
    if (init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx) || mem_alloc(&d, size)) {
        fprintf(stderr, "CUDA setup failed\n");
        exit(3);
    }
    return (void *)(uintptr_t)d;
}

static unsigned char *scratch; /* host staging for device memory */

static void fill(void *buf, int gen) {
    unsigned char *p = cuda ? scratch : buf;
    for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(gen * 37 + i * 7 + i / PAGE);
    if (cuda && cu_htod((uint64_t)(uintptr_t)buf, scratch, size)) { fprintf(stderr, "cuMemcpyHtoD failed\n"); exit(3); }
}

/* Pages of buf that do not hold generation gen (0: all do). */
static size_t stale_pages(void *buf, int gen) {
    const unsigned char *p = buf;
    if (cuda) {
        if (cu_dtoh(scratch, (uint64_t)(uintptr_t)buf, size)) { fprintf(stderr, "cuMemcpyDtoH failed\n"); exit(3); }
        p = scratch;
    }
    size_t stale = 0;
    for (size_t pg = 0; pg < size; pg += PAGE) {
        size_t end = pg + PAGE < size ? pg + PAGE : size;
        for (size_t i = pg; i < end; i++)
            if (p[i] != (unsigned char)(gen * 37 + i * 7 + i / PAGE)) { stale++; break; }
    }
    return stale;
}

static int report(const char *who, const char *phase, size_t stale) {
    if (!stale) return 0;
    printf("%s: %s: stale: %zu of %zu pages\n", who, phase, stale, (size + PAGE - 1) / PAGE);
    fflush(stdout);
    return 1;
}

/* ---- verbs ---- */

struct info { uint32_t refused, qpn, rkey, pad; uint64_t addr; union ibv_gid gid; };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

static void open_qp(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) { fprintf(stderr, "no devices\n"); exit(3); }
    ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    if (!ctx || !(pd = ibv_alloc_pd(ctx)) || !(cq = ibv_create_cq(ctx, 16, NULL, NULL, 0))) die("context");
    struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
    if (!(qp = ibv_create_qp(pd, &a))) die("ibv_create_qp");
}

static void connect_qp(const struct info *peer) {
    struct ibv_port_attr port;
    if (ibv_query_port(ctx, 1, &port)) die("ibv_query_port");
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
    struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = peer->qpn,
        .rq_psn = 7, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
        .ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                     .grh = { .dgid = peer->gid, .sgid_index = 3, .hop_limit = 1 } } };
    if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) die("RTR");
    struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
        .max_rd_atomic = 1 };
    if (ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_MAX_QP_RD_ATOMIC)) die("RTS");
}

static void my_info(struct info *in) {
    memset(in, 0, sizeof *in);
    in->qpn = qp->qp_num;
    if (ibv_query_gid(ctx, 1, 3, &in->gid)) die("ibv_query_gid");
}

/* The initiator's one-sided op on the whole buffer, waited for on its own CQ. */
static void rdma(enum ibv_wr_opcode op, struct ibv_mr *mr, void *buf, const struct info *t) {
    struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)size, .lkey = mr->lkey };
    struct ibv_send_wr wr = { .wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
        .send_flags = IBV_SEND_SIGNALED, .wr.rdma = { .remote_addr = t->addr, .rkey = t->rkey } }, *bad;
    if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc;
    for (long i = 0;; i++) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) die("ibv_poll_cq");
        if (n == 1) break;
        if (i > 2000000000L) { fprintf(stderr, "no completion\n"); exit(3); }
    }
    if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "initiator: %s completed with %s\n", op == IBV_WR_RDMA_READ ? "READ" : "WRITE",
                ibv_wc_status_str(wc.status));
        exit(3);
    }
}

static int target(void) {
    void *buf = alloc();
    fill(buf, 1);
    open_qp();
    struct info me;
    my_info(&me);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_RELAXED_ORDERING;
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, size, access);
    if (!mr) {
        int e = errno;
        printf("target: registration refused: errno %d (%s)\n", e, strerrorname_np(e));
        fflush(stdout);
        me.refused = 1;
        put("target", &me, sizeof me);
        return 2;
    }
    me.rkey = mr->rkey;
    me.addr = (uintptr_t)buf;
    put("target", &me, sizeof me);
    struct info peer;
    wait_for("initiator", &peer, sizeof peer);
    connect_qp(&peer);
    put("connected", "", 0);
    /* From here on, no verb: the target only looks at and refills its own memory. */
    int bad = 0;
    wait_for("written", NULL, 0);
    if (linger) {
        step("sleeping after the WRITE");
        sleep(3);
        step("refilling");
    }
    bad |= report("target", "after the initiator's WRITE", stale_pages(buf, 2));
    fill(buf, 3);
    put("refilled", "", 0);
    wait_for("done", NULL, 0);
    if (!bad) printf("target: ok\n");
    if (linger) {
        step("sleeping after the READ");
        sleep(3);
        step("_exit");
        fflush(stdout);
        _exit(bad);
    }
    return bad;
}

static int initiator(void) {
    void *buf = alloc();
    open_qp();
    /* Its own buffer first (local access only: inside the bounce contract), then the target's. */
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    if (!mr) {
        int e = errno;
        printf("initiator: registration refused: errno %d (%s)\n", e, strerrorname_np(e));
        return 3;
    }
    struct info t;
    wait_for("target", &t, sizeof t);
    if (t.refused) {
        printf("initiator: target refused\n");
        return 2;
    }
    struct info me;
    my_info(&me);
    connect_qp(&t);
    put("initiator", &me, sizeof me);
    wait_for("connected", NULL, 0);
    int bad = 0;
    rdma(IBV_WR_RDMA_READ, mr, buf, &t);
    bad |= report("initiator", "READ of the first fill", stale_pages(buf, 1));
    fill(buf, 2);
    rdma(IBV_WR_RDMA_WRITE, mr, buf, &t);
    put("written", "", 0);
    wait_for("refilled", NULL, 0);
    rdma(IBV_WR_RDMA_READ, mr, buf, &t);
    bad |= report("initiator", "READ after the target's refill", stale_pages(buf, 3));
    put("done", "", 0);
    if (!bad) printf("initiator: ok\n");
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "linger"))) {
        fprintf(stderr, "usage: passive_target target|initiator DIR host|cuda SIZE [linger]\n");
        return 3;
    }
    linger = argc == 6;
    dir = argv[2];
    cuda = !strcmp(argv[3], "cuda");
    size = strtoull(argv[4], NULL, 0);
    if (size == 0 || size > UINT32_MAX) return 3;
    scratch = malloc(size);
    if (!scratch) die("malloc");
    return !strcmp(argv[1], "target") ? target() : initiator();
}
