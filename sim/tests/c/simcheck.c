/* Exercises the simulated device through the ordinary verbs API (linked with -libverbs) and
 * prints one line per check, e.g. "len0 errno=22". Used by sim/tests/registration.rs and
 * sim/tests/transport.rs, where every expected value is asserted, by tests/bounce_sim.rs, and
 * (bench-* modes) by benches/rescue.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include <arpa/inet.h>

#define FULL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void report(const char *name, struct ibv_mr *mr) {
    if (mr) {
        printf("%s ok\n", name);
        ibv_dereg_mr(mr);
    } else {
        printf("%s errno=%d\n", name, errno);
    }
    fflush(stdout);
}

static void *page_buf(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    memset(p, 1, len);
    return p;
}

static void open_dev(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) { fprintf(stderr, "no devices (errno %d)\n", errno); exit(3); }
    ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    if (!ctx) { perror("open"); exit(3); }
    pd = ibv_alloc_pd(ctx);
    if (!pd) { perror("pd"); exit(3); }
}

static void set_memlock(rlim_t soft) {
    struct rlimit r;
    getrlimit(RLIMIT_MEMLOCK, &r);
    r.rlim_cur = soft;
    if (r.rlim_max != RLIM_INFINITY && r.rlim_max < soft) r.rlim_max = soft;
    if (setrlimit(RLIMIT_MEMLOCK, &r)) { perror("setrlimit"); exit(2); }
}

static int reg_checks(const char *which) {
    size_t pg = 4096;
    char *b = page_buf(1 << 20);
    int all = !strcmp(which, "all");
#define CASE(n) if (all || !strcmp(which, n))
    CASE("ok") report("ok", ibv_reg_mr(pd, b, 4096, FULL));
    CASE("len0") report("len0", ibv_reg_mr(pd, b, 0, FULL));
    CASE("remote_write_without_local_write") report("remote_write_without_local_write", ibv_reg_mr(pd, b, 64, IBV_ACCESS_REMOTE_WRITE));
    CASE("remote_atomic_without_local_write") report("remote_atomic_without_local_write", ibv_reg_mr(pd, b, 64, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ));
    CASE("remote_read_only") report("remote_read_only", ibv_reg_mr(pd, b, 64, IBV_ACCESS_REMOTE_READ));
    CASE("unknown_mandatory_bit") report("unknown_mandatory_bit", ibv_reg_mr_iova2(pd, b, 64, (uintptr_t)b, IBV_ACCESS_LOCAL_WRITE | 0x400));
    CASE("relaxed_ordering") report("relaxed_ordering", ibv_reg_mr_iova2(pd, b, 4096, (uintptr_t)b, FULL | IBV_ACCESS_RELAXED_ORDERING));
    CASE("unknown_optional_bit") report("unknown_optional_bit", ibv_reg_mr_iova2(pd, b, 4096, (uintptr_t)b, FULL | (1u << 27)));
    CASE("iova_page_offset_differs") report("iova_page_offset_differs", ibv_reg_mr_iova2(pd, b + 16, 64, 0x10000, FULL));
    CASE("iova_same_page_offset") report("iova_same_page_offset", ibv_reg_mr_iova2(pd, b + 16, 64, 0x7000000010ull, FULL));
    CASE("iova_legacy_entry") report("iova_legacy_entry", ibv_reg_mr_iova(pd, b + 16, 64, 0x10000, FULL));
    CASE("odp") report("odp", ibv_reg_mr(pd, b, 64, FULL | IBV_ACCESS_ON_DEMAND));
    CASE("unmapped") {
        char *u = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(u, 2 * pg);
        report("unmapped", ibv_reg_mr(pd, u, pg, FULL));
    }
    CASE("prot_none") {
        char *u = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        report("prot_none", ibv_reg_mr(pd, u, pg, IBV_ACCESS_REMOTE_READ));
    }
    CASE("runs_into_unmapped") {
        char *u = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(u + pg, pg);
        report("runs_into_unmapped", ibv_reg_mr(pd, u, 2 * pg, FULL));
    }
    CASE("readonly_with_write") {
        char *u = mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        report("readonly_with_write", ibv_reg_mr(pd, u, pg, FULL));
        report("readonly_read_only_access", ibv_reg_mr(pd, u, pg, IBV_ACCESS_REMOTE_READ));
    }
    CASE("dmabuf") {
        report("dmabuf_fd_minus_one", ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, FULL));
        int f = open("/proc/self/exe", O_RDONLY);
        report("dmabuf_not_a_dmabuf", ibv_reg_dmabuf_mr(pd, 0, 4096, 0, f, FULL));
        int m = memfd_create("mrshim-dmabuf-test", 0);
        ftruncate(m, 65536);
        report("dmabuf_ok", ibv_reg_dmabuf_mr(pd, 0, 65536, 0x100000, m, FULL));
        report("dmabuf_beyond_end", ibv_reg_dmabuf_mr(pd, 4096, 65536, 0x101000, m, FULL));
        report("dmabuf_offset_mismatch", ibv_reg_dmabuf_mr(pd, 16, 64, 0x100000, m, FULL));
    }
    CASE("device_memory") {
        int m = memfd_create("mrshim-gpu", 0);
        ftruncate(m, 1 << 20);
        char *g = mmap(NULL, 1 << 20, PROT_NONE, MAP_SHARED, m, 0);
        report("device_memory", ibv_reg_mr(pd, g, 1 << 20, FULL));
        report("device_memory_iova2", ibv_reg_mr_iova2(pd, g, 1 << 20, (uintptr_t)g, FULL | IBV_ACCESS_RELAXED_ORDERING));
    }
    CASE("dmabuf_va") {
        /* a dmabuf that is also mapped at the iova: the VA path can stand in for it */
        int m = memfd_create("mrshim-dmabuf-va", 0);
        ftruncate(m, 65536);
        char *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
        struct ibv_mr *mr = ibv_reg_dmabuf_mr(pd, 0, 65536, (uintptr_t)p, m, FULL);
        if (mr) printf("dmabuf_va ok addr=%#lx length=%zu\n", (unsigned long)(uintptr_t)mr->addr, mr->length);
        else printf("dmabuf_va errno=%d\n", errno);
        fflush(stdout);
        if (mr) ibv_dereg_mr(mr);
    }
    if (!strcmp(which, "cycles")) {
        /* 10,000 register/deregister cycles: resident memory and open fds before and after */
        long rss0 = 0, rss1 = 0, pages;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f && fscanf(f, "%ld %ld", &pages, &rss0) != 2) rss0 = 0;
        if (f) fclose(f);
        int fd0 = dup(0); close(fd0);
        int fails = 0;
        for (int i = 0; i < 10000; i++) {
            struct ibv_mr *mr = ibv_reg_mr_iova2(pd, b, 256 * 1024, (uintptr_t)b, FULL | IBV_ACCESS_RELAXED_ORDERING);
            if (!mr) fails++;
            else ibv_dereg_mr(mr);
        }
        f = fopen("/proc/self/statm", "r");
        if (f && fscanf(f, "%ld %ld", &pages, &rss1) != 2) rss1 = 0;
        if (f) fclose(f);
        int fd1 = dup(0); close(fd1);
        printf("cycles failures=%d rss_growth_kb=%ld next_fd_growth=%d\n", fails, (rss1 - rss0) * 4, fd1 - fd0);
    }
    if (!strcmp(which, "many_relaxed")) {
        int fails = 0;
        for (int i = 0; i < 1000; i++) {
            struct ibv_mr *mr = ibv_reg_mr_iova2(pd, b, 65536, (uintptr_t)b, FULL | IBV_ACCESS_RELAXED_ORDERING);
            if (!mr) fails++;
            else ibv_dereg_mr(mr);
        }
        printf("many_relaxed failures=%d\n", fails);
    }
    CASE("memlock") {
        set_memlock(64 * 1024);
        struct ibv_mr *a = ibv_reg_mr(pd, b, 32 * 1024, FULL);
        report("memlock_first_32k", a ? ibv_reg_mr(pd, b, 16 * 1024, FULL) : NULL);
        report("memlock_over_limit", ibv_reg_mr(pd, b + 65536, 64 * 1024, FULL));
        if (a) ibv_dereg_mr(a);
        report("memlock_after_dereg", ibv_reg_mr(pd, b, 64 * 1024, FULL));
    }
    CASE("memlock_zero") {
        set_memlock(0);
        report("memlock_zero", ibv_reg_mr(pd, b, 4096, FULL));
    }
    CASE("repeat") {
        for (int i = 1; i <= 4; i++) {
            char n[32];
            snprintf(n, sizeof n, "repeat_%d", i);
            report(n, ibv_reg_mr(pd, b, 4096 * i, FULL));
        }
        report("repeat_relaxed", ibv_reg_mr_iova2(pd, b, 4096, (uintptr_t)b, FULL | IBV_ACCESS_RELAXED_ORDERING));
        report("repeat_relaxed_reg_mr", ibv_reg_mr(pd, b, 4096, FULL | IBV_ACCESS_RELAXED_ORDERING));
        report("repeat_big", ibv_reg_mr(pd, b, 1 << 20, FULL));
    }
    if (!strcmp(which, "rereg")) { /* not in "all": its records are no registrations */
#define REREG(n, call) do { errno = 0; int r_ = (call); printf("%s ret=%d errno=%d\n", n, r_, r_ ? errno : 0); } while (0)
        struct ibv_mr *mr = ibv_reg_mr(pd, b, 4096, IBV_ACCESS_LOCAL_WRITE);
        struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
        REREG("rereg_unknown_flag", ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0));
        REREG("rereg_access_without_flag", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, FULL));
        REREG("rereg_translation_without_length", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, 0, 0));
        REREG("rereg_access", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, FULL));
        REREG("rereg_bad_access", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE));
        REREG("rereg_pd", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0));
        printf("rereg_pd_is_new %d\n", mr->pd == pd2);
        uint32_t key = mr->lkey;
        REREG("rereg_translation", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b + 8192, 8192, 0));
        printf("rereg_translation_moved %d new_keys %d\n", mr->addr == b + 8192 && mr->length == 8192, mr->lkey != key);
        char *u = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(u, pg);
        REREG("rereg_translation_unmapped", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, u, pg, 0));
        printf("rereg_unmapped_kept %d\n", mr->addr == b + 8192 && mr->lkey != key);
        ibv_dereg_mr(mr);
        int m = memfd_create("mrshim-dmabuf-rereg", 0);
        ftruncate(m, 65536);
        struct ibv_mr *dm = ibv_reg_dmabuf_mr(pd, 0, 65536, 0x100000, m, FULL);
        REREG("rereg_dmabuf", ibv_rereg_mr(dm, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, FULL));
        ibv_dereg_mr(dm);
#undef REREG
    }
    return 0;
}

/* ---- transport checks: two QPs in this process, connected to each other ---- */

struct end { struct ibv_cq *cq; struct ibv_qp *qp; char *buf; struct ibv_mr *mr; };

static struct ibv_port_attr port;
/* Buffer size of every end (the bench modes raise it). */
static size_t buf_len = 1 << 16;

/* An end: CQ, RC QP, buffer, MR (none for access -1). With qx, the QP comes from ibv_create_qp_ex with the ibv_wr_*
 * ops, and its ibv_qp_ex is taken before the buffer is registered. */
static void mkend_qp(struct end *e, int access, struct ibv_qp_ex **qx) {
    /* SIMCHECK_EXTRA_ACCESS: bits added to every buffer's registration (the bounce tests use
     * RELAXED_ORDERING to make the device refuse the application's buffers but not the shim's
     * shadows, which are registered without optional bits). */
    const char *extra = getenv("SIMCHECK_EXTRA_ACCESS");
    if (extra) access |= (int)strtoul(extra, NULL, 0);
    e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr_ex ia = { .send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 4, .max_recv_sge = 4 },
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
        .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ };
    if (qx) {
        e->qp = ibv_create_qp_ex(ctx, &ia);
        *qx = e->qp ? ibv_qp_to_qp_ex(e->qp) : NULL;
        if (!*qx) { fprintf(stderr, "qp_ex setup failed %d\n", errno); exit(4); }
    } else {
        struct ibv_qp_init_attr a = { .send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC, .cap = ia.cap };
        e->qp = ibv_create_qp(pd, &a);
    }
    e->buf = page_buf(buf_len);
    e->mr = access < 0 ? NULL : ibv_reg_mr(pd, e->buf, buf_len, access);
    if (!e->cq || !e->qp || (access >= 0 && !e->mr)) { fprintf(stderr, "setup failed %d\n", errno); exit(4); }
}

static void mkend(struct end *e, int access) {
    mkend_qp(e, access, NULL);
}

static int to_init(struct ibv_qp *qp, int qp_access) {
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = qp_access };
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest, int mask_drop) {
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 3, &gid);
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dest, .rq_psn = 7,
        .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
        .ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid ? port.lid : 0, .port_num = 1,
                     .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 1 } } };
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return ibv_modify_qp(qp, &a, mask & ~mask_drop);
}

static int to_rts(struct ibv_qp *qp) {
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void connect_pair(struct end *a, struct end *b, int qp_access) {
    if (to_init(a->qp, qp_access) || to_init(b->qp, qp_access) || to_rtr(a->qp, b->qp->qp_num, 0) || to_rtr(b->qp, a->qp->qp_num, 0) || to_rts(a->qp) || to_rts(b->qp)) {
        fprintf(stderr, "connect failed %d\n", errno); exit(4);
    }
}

static struct ibv_wc wait1(struct ibv_cq *cq) {
    struct ibv_wc wc;
    for (long spins = 0;; spins++) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n == 1) return wc;
        if (spins > 200000000L) { fprintf(stderr, "timeout\n"); exit(5); }
        if (spins % 1000 == 0) usleep(100);
    }
}

static int post(struct end *e, enum ibv_wr_opcode op, void *laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm) {
    struct ibv_sge s = { .addr = (uintptr_t)laddr, .length = len, .lkey = lkey };
    struct ibv_send_wr wr = { .wr_id = 42, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED, .imm_data = imm }, *bad;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(e->qp, &wr, &bad);
}

static int post_recv(struct end *e, void *addr, uint32_t len) {
    struct ibv_sge s = { .addr = (uintptr_t)addr, .length = len, .lkey = e->mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &s, .num_sge = 1 }, *bad;
    return ibv_post_recv(e->qp, &wr, &bad);
}

static void show(const char *name, struct ibv_wc wc) {
    printf("%s status=%s opcode=%d byte_len=%u wr_id=%llu", name, ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len, (unsigned long long)wc.wr_id);
    if (wc.wc_flags & IBV_WC_WITH_IMM) printf(" imm=0x%x", ntohl(wc.imm_data));
    printf("\n");
    fflush(stdout);
}

static int transport_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b, c, d;
    mkend(&a, FULL);
    mkend(&b, FULL);
    connect_pair(&a, &b, FULL);

    /* SEND/RECV with data check */
    for (int i = 0; i < 4096; i++) a.buf[i] = (char)(i * 7 + 1);
    post_recv(&b, b.buf, 8192);
    post(&a, IBV_WR_SEND, a.buf, 4096, a.mr->lkey, 0, 0, 0);
    show("send_requester", wait1(a.cq));
    show("send_responder", wait1(b.cq));
    printf("send_data %s\n", memcmp(a.buf, b.buf, 4096) ? "differs" : "equal");

    /* RDMA WRITE_WITH_IMM */
    memset(b.buf, 0, 1 << 16);
    for (int i = 0; i < 40000; i++) a.buf[i] = (char)(i * 13 + 5);
    post_recv(&b, b.buf, 0);
    post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, a.buf, 40000, a.mr->lkey, (uintptr_t)b.buf + 100, b.mr->rkey, htonl(0xC0FFEE));
    show("write_imm_requester", wait1(a.cq));
    show("write_imm_responder", wait1(b.cq));
    printf("write_data %s\n", memcmp(a.buf, b.buf + 100, 40000) ? "differs" : "equal");

    /* RDMA READ */
    memset(a.buf, 0, 1 << 16);
    post(&a, IBV_WR_RDMA_READ, a.buf, 30000, a.mr->lkey, (uintptr_t)b.buf + 100, b.mr->rkey, 0);
    show("read", wait1(a.cq));
    printf("read_data %s\n", memcmp(a.buf, b.buf + 100, 30000) ? "differs" : "equal");

    /* remote access errors: each breaks the pair, so use fresh pairs */
    mkend(&c, IBV_ACCESS_LOCAL_WRITE);
    mkend(&d, IBV_ACCESS_LOCAL_WRITE); /* d's MR allows no remote access */
    connect_pair(&c, &d, FULL);
    post(&c, IBV_WR_RDMA_WRITE, c.buf, 64, c.mr->lkey, (uintptr_t)d.buf, d.mr->rkey, 0);
    show("write_no_remote_write", wait1(c.cq));
    post(&c, IBV_WR_RDMA_WRITE, c.buf, 64, c.mr->lkey, (uintptr_t)d.buf, d.mr->rkey, 0);
    show("after_error_flushed", wait1(c.cq));

    struct end e, f;
    mkend(&e, FULL);
    mkend(&f, FULL);
    connect_pair(&e, &f, FULL);
    post(&e, IBV_WR_RDMA_WRITE, e.buf, 64, e.mr->lkey, (uintptr_t)f.buf, f.mr->rkey + 0x100, 0);
    show("write_bad_rkey", wait1(e.cq));

    mkend(&e, FULL);
    mkend(&f, FULL);
    connect_pair(&e, &f, FULL);
    post(&e, IBV_WR_RDMA_WRITE, e.buf, 4096, e.mr->lkey, (uintptr_t)f.buf + (1 << 16) - 100, f.mr->rkey, 0);
    show("write_out_of_bounds", wait1(e.cq));

    mkend(&e, FULL);
    mkend(&f, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    connect_pair(&e, &f, FULL);
    post(&e, IBV_WR_RDMA_READ, e.buf, 64, e.mr->lkey, (uintptr_t)f.buf, f.mr->rkey, 0);
    show("read_no_remote_read", wait1(e.cq));

    mkend(&e, FULL);
    mkend(&f, FULL);
    connect_pair(&e, &f, IBV_ACCESS_LOCAL_WRITE); /* the QPs allow no remote access */
    post(&e, IBV_WR_RDMA_WRITE, e.buf, 64, e.mr->lkey, (uintptr_t)f.buf, f.mr->rkey, 0);
    show("write_qp_access_denied", wait1(e.cq));

    mkend(&e, FULL);
    mkend(&f, FULL);
    connect_pair(&e, &f, FULL);
    post(&e, IBV_WR_SEND, e.buf, 64, e.mr->lkey + 0x100, 0, 0, 0);
    show("send_bad_lkey", wait1(e.cq));

    mkend(&e, FULL);
    mkend(&f, FULL);
    connect_pair(&e, &f, FULL);
    post_recv(&f, f.buf, 16);
    post(&e, IBV_WR_SEND, e.buf, 64, e.mr->lkey, 0, 0, 0);
    show("send_too_long_requester", wait1(e.cq));
    show("send_too_long_responder", wait1(f.cq));
    return 0;
}

static int wr_post(struct ibv_qp_ex *qx, enum ibv_wr_opcode op, struct ibv_sge *sg, int n, void *raddr, uint32_t rkey, uint32_t imm);

/* A SEND gathering three unaligned pieces of a's buffer, scattered into two pieces of b's;
 * through ibv_post_send, or with qx through the ibv_wr_* API. a's buffer gets its data only
 * after b's receive is posted (so a bounce layer must copy it at the post, not earlier).
 * 1 if b received exactly those bytes. */
static int gather_scatter(struct end *a, struct end *b, struct ibv_qp_ex *qx) {
    memset(b->buf, 0, 65536);
    struct ibv_sge rs[2] = { { (uintptr_t)b->buf + 3, 1000, b->mr->lkey }, { (uintptr_t)b->buf + 5001, 9000, b->mr->lkey } };
    struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = rs, .num_sge = 2 }, *rbad;
    ibv_post_recv(b->qp, &rwr, &rbad);
    for (int i = 0; i < 65536; i++) a->buf[i] = (char)(i * 31 + 7);
    struct ibv_sge ss[3] = { { (uintptr_t)a->buf + 1, 2000, a->mr->lkey }, { (uintptr_t)a->buf + 7777, 3000, a->mr->lkey }, { (uintptr_t)a->buf + 40001, 5000, a->mr->lkey } };
    if (qx) {
        if (wr_post(qx, IBV_WR_SEND, ss, 3, NULL, 0, 0)) { fprintf(stderr, "wr_complete failed\n"); exit(5); }
    } else {
        struct ibv_send_wr swr = { .wr_id = 2, .sg_list = ss, .num_sge = 3, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
        ibv_post_send(a->qp, &swr, &sbad);
    }
    wait1(a->cq);
    struct ibv_wc wc = wait1(b->cq);
    char want[10000];
    memcpy(want, a->buf + 1, 2000); memcpy(want + 2000, a->buf + 7777, 3000); memcpy(want + 5000, a->buf + 40001, 5000);
    return wc.byte_len == 10000 && !memcmp(b->buf + 3, want, 1000) && !memcmp(b->buf + 5001, want + 1000, 9000);
}

/* Multiple SGEs, unaligned ranges, two QP pairs at once, and deregistration of one region while
 * others live: each prints "name equal|differs". */
static int multi_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b, c, d;
    mkend(&a, FULL); mkend(&b, FULL); mkend(&c, FULL); mkend(&d, FULL);
    connect_pair(&a, &b, FULL);
    connect_pair(&c, &d, FULL);
    printf("multi_sge %s\n", gather_scatter(&a, &b, NULL) ? "equal" : "differs");
    /* two pairs at once: WRITE_WITH_IMM on both before polling either */
    memset(b.buf, 0, 65536); memset(d.buf, 0, 65536);
    for (int i = 0; i < 65536; i++) c.buf[i] = (char)(i * 17 + 3);
    post_recv(&b, b.buf, 0); post_recv(&d, d.buf, 0);
    post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, a.buf + 11, 30000, a.mr->lkey, (uintptr_t)b.buf + 333, b.mr->rkey, 1);
    post(&c, IBV_WR_RDMA_WRITE_WITH_IMM, c.buf + 5, 60000, c.mr->lkey, (uintptr_t)d.buf + 7, d.mr->rkey, 2);
    wait1(a.cq); wait1(c.cq); wait1(d.cq); wait1(b.cq);
    printf("concurrent_qps %s\n", !memcmp(a.buf + 11, b.buf + 333, 30000) && !memcmp(c.buf + 5, d.buf + 7, 60000) ? "equal" : "differs");
    /* deregister c's and d's regions while a's and b's live, then use a/b again */
    ibv_dereg_mr(c.mr); ibv_dereg_mr(d.mr);
    memset(b.buf, 0, 65536);
    post_recv(&b, b.buf, 0);
    post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, a.buf, 65536, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey, 3);
    wait1(a.cq); wait1(b.cq);
    printf("after_other_dereg %s\n", !memcmp(a.buf, b.buf, 65536) ? "equal" : "differs");
    /* RDMA READ into an unaligned range */
    memset(a.buf, 0, 65536);
    post(&a, IBV_WR_RDMA_READ, a.buf + 4097, 12345, a.mr->lkey, (uintptr_t)b.buf + 99, b.mr->rkey, 0);
    wait1(a.cq);
    printf("read_unaligned %s\n", !memcmp(a.buf + 4097, b.buf + 99, 12345) ? "equal" : "differs");
    return 0;
}

/* A large RDMA READ followed by a small WRITE: the WRITE's ACK comes back long before the READ's
 * data has all arrived; completions are in order and the READ's must mean its data is there. */
static int read_order_checks(void) {
    ibv_query_port(ctx, 1, &port);
    buf_len = 16 << 20;
    struct end a, b;
    mkend(&a, FULL);
    mkend(&b, FULL);
    connect_pair(&a, &b, FULL);
    for (size_t i = 0; i < buf_len; i++) b.buf[i] = (char)(i * 31 + 3);
    memset(a.buf, 0, buf_len);
    size_t read_len = buf_len - 4096; /* the WRITE goes to the last page, outside the READ */
    post(&a, IBV_WR_RDMA_READ, a.buf, (uint32_t)read_len, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey, 0);
    post(&a, IBV_WR_RDMA_WRITE, a.buf + read_len, 8, a.mr->lkey, (uintptr_t)b.buf + read_len, b.mr->rkey, 0);
    struct ibv_wc first = wait1(a.cq);
    int same = !memcmp(a.buf, b.buf, read_len);
    if (!same) {
        size_t i = 0;
        while (i < read_len && a.buf[i] == b.buf[i]) i++;
        fprintf(stderr, "first difference at byte %zu of %zu\n", i, read_len);
    }
    struct ibv_wc second = wait1(a.cq);
    printf("first opcode=%d status=%s data %s\n", first.opcode, ibv_wc_status_str(first.status), same ? "equal" : "differs");
    printf("second opcode=%d status=%s\n", second.opcode, ibv_wc_status_str(second.status));
    return 0;
}

static int qpstate_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b;
    mkend(&a, FULL);
    mkend(&b, FULL);
    printf("post_send_in_reset=%d\n", post(&a, IBV_WR_SEND, a.buf, 8, a.mr->lkey, 0, 0, 0));
    printf("post_recv_in_reset=%d\n", post_recv(&a, a.buf, 8));
    printf("reset_to_rtr=%d\n", to_rtr(a.qp, b.qp->qp_num, 0));
    struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
    printf("init_missing_access=%d\n", ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX));
    at.port_num = 2;
    printf("init_bad_port=%d\n", ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));
    printf("init=%d\n", to_init(a.qp, FULL));
    printf("post_recv_in_init=%d\n", post_recv(&a, a.buf, 8));
    printf("post_send_in_init=%d\n", post(&a, IBV_WR_SEND, a.buf, 8, a.mr->lkey, 0, 0, 0));
    printf("init_to_rts=%d\n", to_rts(a.qp));
    printf("rtr_missing_dest_qpn=%d\n", to_rtr(a.qp, b.qp->qp_num, IBV_QP_DEST_QPN));
    printf("rtr=%d\n", to_rtr(a.qp, b.qp->qp_num, 0));
    printf("rtr_to_rts_missing_timeout=%d\n", ({ struct ibv_qp_attr x = { .qp_state = IBV_QPS_RTS, .sq_psn = 1 };
        ibv_modify_qp(a.qp, &x, IBV_QP_STATE | IBV_QP_SQ_PSN); }));
    printf("rts=%d\n", to_rts(a.qp));
    printf("state_field=%d\n", a.qp->state);
    struct ibv_qp_attr q; struct ibv_qp_init_attr qi;
    ibv_query_qp(a.qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi);
    printf("query_state=%d dest_ok=%d\n", q.qp_state, q.dest_qp_num == b.qp->qp_num);
    struct ibv_qp_attr er = { .qp_state = IBV_QPS_ERR };
    printf("to_err=%d\n", ibv_modify_qp(a.qp, &er, IBV_QP_STATE));
    printf("cq_busy=%d\n", ibv_destroy_cq(a.cq));
    return 0;
}

/* One signaled WR through the ibv_wr_* builder API. */
static int wr_post(struct ibv_qp_ex *qx, enum ibv_wr_opcode op, struct ibv_sge *sg, int n, void *raddr, uint32_t rkey, uint32_t imm) {
    ibv_wr_start(qx);
    qx->wr_id = 9;
    qx->wr_flags = IBV_SEND_SIGNALED;
    switch (op) {
    case IBV_WR_SEND: ibv_wr_send(qx); break;
    case IBV_WR_RDMA_WRITE_WITH_IMM: ibv_wr_rdma_write_imm(qx, rkey, (uintptr_t)raddr, htonl(imm)); break;
    case IBV_WR_RDMA_READ: ibv_wr_rdma_read(qx, rkey, (uintptr_t)raddr); break;
    default: ibv_wr_rdma_write(qx, rkey, (uintptr_t)raddr); break;
    }
    if (n == 1) ibv_wr_set_sge(qx, sg->lkey, sg->addr, sg->length);
    else ibv_wr_set_sge_list(qx, n, sg);
    return ibv_wr_complete(qx);
}

/* The coherence clauses through the ibv_wr_* API, on QPs whose ibv_qp_ex was taken before any
 * buffer was registered: SEND gathered with wr_set_sge_list, WRITE_WITH_IMM and an unaligned RDMA
 * READ with wr_set_sge, and a new QP pair after two others were destroyed. Each prints
 * "name equal|differs". */
static int qpex_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b, c, d;
    struct ibv_qp_ex *qa, *qb, *qc, *qd;
    mkend_qp(&a, FULL, &qa); mkend_qp(&b, FULL, &qb);
    connect_pair(&a, &b, FULL);
    printf("qpex_send_sge_list %s\n", gather_scatter(&a, &b, qa) ? "equal" : "differs");
    /* the application changes its buffer after the peer posted its receive, then writes it */
    memset(b.buf, 0, 65536);
    post_recv(&b, b.buf, 0);
    for (int i = 0; i < 65536; i++) a.buf[i] = (char)(i * 13 + 5);
    struct ibv_sge s1 = { (uintptr_t)a.buf + 11, 30000, a.mr->lkey };
    wr_post(qa, IBV_WR_RDMA_WRITE_WITH_IMM, &s1, 1, b.buf + 333, b.mr->rkey, 1);
    wait1(a.cq); wait1(b.cq);
    printf("qpex_write_imm %s\n", !memcmp(a.buf + 11, b.buf + 333, 30000) ? "equal" : "differs");
    memset(a.buf, 0, 65536);
    struct ibv_sge s2 = { (uintptr_t)a.buf + 4097, 12345, a.mr->lkey };
    wr_post(qa, IBV_WR_RDMA_READ, &s2, 1, b.buf + 99, b.mr->rkey, 0);
    wait1(a.cq);
    printf("qpex_read_unaligned %s\n", !memcmp(a.buf + 4097, b.buf + 99, 12345) ? "equal" : "differs");
    /* destroy a second pair's QPs, then a new pair reuses what followed them */
    mkend_qp(&c, FULL, &qc); mkend_qp(&d, FULL, &qd);
    if (ibv_destroy_qp(c.qp) || ibv_destroy_qp(d.qp)) { fprintf(stderr, "destroy_qp failed\n"); return 5; }
    mkend_qp(&c, FULL, &qc); mkend_qp(&d, FULL, &qd);
    connect_pair(&c, &d, FULL);
    post_recv(&d, d.buf, 0);
    for (int i = 0; i < 65536; i++) c.buf[i] = (char)(i * 17 + 3);
    struct ibv_sge s3 = { (uintptr_t)c.buf, 65536, c.mr->lkey };
    wr_post(qc, IBV_WR_RDMA_WRITE_WITH_IMM, &s3, 1, d.buf, d.mr->rkey, 2);
    wait1(c.cq); wait1(d.cq);
    printf("qpex_after_destroy %s\n", !memcmp(c.buf, d.buf, 65536) ? "equal" : "differs");
    (void)qb; (void)qd;
    return 0;
}

/* ---- benchmark modes (benches/bounce.rs): numbers on stdout, checked data ---- */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static uint64_t median(uint64_t *v, int n) {
    qsort(v, n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* Streaming RDMA WRITE_WITH_IMM of SIZE bytes, a -> b, up to 16 in flight, the receiver
 * reposting a zero-SGE receive per completion (the NCCL pattern). The sender alternates between
 * two halves of its buffer that differ in every byte, so every message changes every byte the
 * receiver holds. Prints "MB/s X data equal|differs". */
/* bench-bw SIZE ITERS [refill]: a stream of RDMA WRITE_WITH_IMM, 16 in flight. Without `refill` the
 * sender alternates two halves of its buffer that it never writes again (each message differs from
 * the one before, the buffer does not change); with `refill` it has 32 slots and writes every byte of
 * a slot anew just before posting from it (a slot is reused only after its WRITE completed). */
static int bench_bw(size_t size, long iters, int refill) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b;
    size_t slots = refill ? 32 : 2;
    buf_len = slots * size;
    mkend(&a, FULL);
    buf_len = size;
    mkend(&b, FULL);
    connect_pair(&a, &b, FULL);
    for (size_t i = 0; i < 2 * size; i++) a.buf[i] = (char)(i < size ? i * 7 + 1 : (i - size) * 7 + 2);
    long posted = 0, sent = 0, recvd = 0;
    for (int i = 0; i < 16; i++) post_recv(&b, b.buf, 0);
    struct ibv_wc wc[16];
    uint64_t t0 = now_ns();
    /* The stream in 16 windows of equal message counts: the median window's rate is the bench's
     * figure, which a process preempted for part of the run moves far less than the mean. A
     * window is at least 16 messages (the depth in flight; completions come in bursts): shorter
     * streams have one, the whole run. */
    enum { WINDOWS = 16 };
    long per = iters / WINDOWS >= 16 ? iters / WINDOWS : iters;
    uint64_t marks[WINDOWS + 1] = {t0};
    int w = 0;
    while (recvd < iters) {
        while (posted < iters && posted - sent < 16 && posted - recvd < 16) {
            char *src = a.buf + (size_t)(posted % (long)slots) * size;
            if (refill) memset(src, (int)(posted * 13 + 5), size);
            if (post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, src, size, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey, (uint32_t)posted)) { fprintf(stderr, "post_send failed\n"); return 5; }
            posted++;
        }
        int n = ibv_poll_cq(a.cq, 16, wc);
        for (int i = 0; i < n; i++) if (wc[i].status) { fprintf(stderr, "send wc %s\n", ibv_wc_status_str(wc[i].status)); return 5; }
        sent += n > 0 ? n : 0;
        n = ibv_poll_cq(b.cq, 16, wc);
        for (int i = 0; i < n; i++) {
            if (wc[i].status) { fprintf(stderr, "recv wc %s\n", ibv_wc_status_str(wc[i].status)); return 5; }
            if (++recvd + 16 <= iters) post_recv(&b, b.buf, 0);
            if (recvd % per == 0 && w < WINDOWS) marks[++w] = now_ns();
        }
    }
    double secs = (now_ns() - t0) / 1e9;
    uint64_t span[WINDOWS];
    for (int i = 0; i < w && i < WINDOWS; i++) span[i] = marks[i + 1] - marks[i];
    double window = w ? size * (double)per / (median(span, w) / 1e9) / 1e6 : 0;
    int equal = !memcmp(b.buf, a.buf + (size_t)((iters - 1) % (long)slots) * size, size);
    printf("MB/s %.1f window_MB/s %.1f data %s\n", size * (double)iters / secs / 1e6, window, equal ? "equal" : "differs");
    return equal ? 0 : 6;
}

/* The cost of the verbs the bounce layer wraps, for WRs that touch no bounce region. With
 * SIMCHECK_BOUNCE_REGION set, one more 4 KiB buffer is registered with RELAXED_ORDERING (which
 * the benchmark's fault makes the device refuse, so the shim bounces it) and never used.
 * Prints "poll_empty_ns W post_ns X post_list_ns Y roundtrip_ns Z": an ibv_poll_cq that finds
 * nothing; one ibv_post_send of a 64-byte RDMA WRITE (16 per batch, the last signaled); per WR,
 * one ibv_post_send of a chain of 16 such WRs (the device's doorbell once per call, so the
 * per-WR work of any wrapper shows); and per WR, a batch posted and its completion polled.
 * Medians over BATCHES. */
/* The two connected ends of bench-post; `before_region` runs before the bounce region (if any)
 * is registered. Returns 0, or 4 when that registration fails. */
static int bench_pair(struct end *a, struct end *b, void (*before_region)(void)) {
    ibv_query_port(ctx, 1, &port);
    mkend(a, FULL);
    mkend(b, FULL);
    connect_pair(a, b, FULL);
    if (before_region) before_region();
    if (getenv("SIMCHECK_BOUNCE_REGION")) {
        char *x = page_buf(4096);
        if (!ibv_reg_mr(pd, x, 4096, FULL | IBV_ACCESS_RELAXED_ORDERING)) { fprintf(stderr, "bounce region: errno %d\n", errno); return 4; }
    }
    return 0;
}

static int bench_post(int batches) {
    struct end a, b;
    if (bench_pair(&a, &b, NULL)) return 4;
    uint64_t *poll_t = malloc(batches * sizeof *poll_t), *post_t = malloc(batches * sizeof *post_t), *rt = malloc(batches * sizeof *rt), *list_t = malloc(batches * sizeof *list_t);
    struct ibv_sge ls = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
    struct ibv_send_wr chain[16];
    for (int i = 0; i < 16; i++) {
        chain[i] = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &ls, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = i == 15 ? IBV_SEND_SIGNALED : 0, .next = i < 15 ? &chain[i + 1] : NULL };
        chain[i].wr.rdma.remote_addr = (uintptr_t)b.buf;
        chain[i].wr.rdma.rkey = b.mr->rkey;
    }
    struct ibv_wc wc;
    for (int k = 0; k < batches; k++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < 1000; i++) ibv_poll_cq(a.cq, 1, &wc);
        poll_t[k] = (now_ns() - t0) / 1000;
        struct ibv_sge s = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
        struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE }, *bad;
        wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
        wr.wr.rdma.rkey = b.mr->rkey;
        uint64_t post_sum = 0;
        t0 = now_ns();
        for (int i = 0; i < 16; i++) {
            wr.send_flags = i == 15 ? IBV_SEND_SIGNALED : 0;
            uint64_t p0 = now_ns();
            if (ibv_post_send(a.qp, &wr, &bad)) { fprintf(stderr, "post_send failed\n"); return 5; }
            post_sum += now_ns() - p0;
        }
        while (ibv_poll_cq(a.cq, 1, &wc) == 0) {}
        rt[k] = (now_ns() - t0) / 16;
        post_t[k] = post_sum / 16;
        if (wc.status) { fprintf(stderr, "wc %s\n", ibv_wc_status_str(wc.status)); return 5; }
        t0 = now_ns();
        if (ibv_post_send(a.qp, chain, &bad)) { fprintf(stderr, "post_send list failed\n"); return 5; }
        list_t[k] = (now_ns() - t0) / 16;
        while (ibv_poll_cq(a.cq, 1, &wc) == 0) {}
        if (wc.status) { fprintf(stderr, "wc %s\n", ibv_wc_status_str(wc.status)); return 5; }
    }
    printf("poll_empty_ns %llu post_ns %llu post_list_ns %llu roundtrip_ns %llu\n", (unsigned long long)median(poll_t, batches), (unsigned long long)median(post_t, batches), (unsigned long long)median(list_t, batches), (unsigned long long)median(rt, batches));
    return 0;
}

/* The wrappers' own cost, without the simulator's: "bench-post BATCHES null" replaces the
 * context's post_send and poll_cq with functions that return at once before anything else is
 * registered, so a shim that wraps them (a bounce region registered, SIMCHECK_BOUNCE_REGION) saves
 * those as the provider's and what is timed is the wrapper alone. The simulated post (a few
 * hundred ns, several us under load, and different in every process) is what makes the rows of
 * bench-post swing by more than a wrapper costs. Prints "poll_empty_ns W post_ns X post_list_ns Y"
 * (no completion is ever made): per call, medians over BATCHES of 1000 empty polls, 1000 posts of
 * one WR and 64 posts of a 16-WR chain (per WR). Time per call is a batch's time over its calls,
 * so the clock's own cost is spread over the batch; printed to 0.01 ns. */
static int null_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    (void)qp; (void)wr; (void)bad;
    return 0;
}

static int null_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    (void)cq; (void)n; (void)wc;
    return 0;
}

static void null_ops(void) {
    ctx->ops.post_send = null_post_send;
    ctx->ops.poll_cq = null_poll_cq;
}

static int bench_post_null(int batches) {
    struct end a, b;
    if (bench_pair(&a, &b, null_ops)) return 4;
    uint64_t *poll_t = malloc(batches * sizeof *poll_t), *post_t = malloc(batches * sizeof *post_t), *list_t = malloc(batches * sizeof *list_t);
    struct ibv_sge s = { .addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey };
    struct ibv_send_wr chain[16], *bad;
    for (int i = 0; i < 16; i++) {
        chain[i] = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = i == 15 ? IBV_SEND_SIGNALED : 0, .next = i < 15 ? &chain[i + 1] : NULL };
        chain[i].wr.rdma.remote_addr = (uintptr_t)b.buf;
        chain[i].wr.rdma.rkey = b.mr->rkey;
    }
    struct ibv_send_wr wr = chain[15];
    wr.next = NULL;
    struct ibv_wc wc;
    for (int k = 0; k < batches; k++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < 1000; i++) ibv_poll_cq(a.cq, 1, &wc);
        poll_t[k] = (now_ns() - t0) * 100 / 1000;
        t0 = now_ns();
        for (int i = 0; i < 1000; i++)
            if (ibv_post_send(a.qp, &wr, &bad)) { fprintf(stderr, "post_send failed\n"); return 5; }
        post_t[k] = (now_ns() - t0) * 100 / 1000;
        t0 = now_ns();
        for (int i = 0; i < 64; i++)
            if (ibv_post_send(a.qp, chain, &bad)) { fprintf(stderr, "post_send list failed\n"); return 5; }
        list_t[k] = (now_ns() - t0) * 100 / (64 * 16);
    }
    /* kept in hundredths of a ns */
    printf("poll_empty_ns %.2f post_ns %.2f post_list_ns %.2f\n", median(poll_t, batches) / 100.0, median(post_t, batches) / 100.0, median(list_t, batches) / 100.0);
    return 0;
}

/* ---- fuzz: seeded random registrations, each pair used for data ----
 * Every round registers a source and a destination range (random entry point, length, page
 * offset, relaxed ordering or not) and, when both registrations succeed, checks that the MRs
 * are what the caller asked for and carry data both ways: WRITE_WITH_IMM a -> b, READ b -> a,
 * byte-exact, with the caller's own addresses and keys. One line per round:
 * "rN a=ok|errno=E b=ok|errno=E [write=equal|differs|STATUS read=... mr=ok|bad dereg=ok|rc]". */
static uint64_t fuzz_state;
static uint64_t fuzz_rnd(void) {
    fuzz_state ^= fuzz_state << 13;
    fuzz_state ^= fuzz_state >> 7;
    fuzz_state ^= fuzz_state << 17;
    return fuzz_state;
}

static struct ibv_mr *fuzz_reg(char *p, size_t len, unsigned access) {
    /* (name): the functions themselves, not verbs.h's macros (which turn both into iova2) */
    switch (fuzz_rnd() % 3) {
    case 0: return (ibv_reg_mr)(pd, p, len, (int)access);
    case 1: return (ibv_reg_mr_iova)(pd, p, len, (uintptr_t)p, (int)access);
    default: return ibv_reg_mr_iova2(pd, p, len, (uintptr_t)p, access);
    }
}

static const char *fuzz_status(struct ibv_wc wc, int ok) {
    return wc.status != IBV_WC_SUCCESS ? ibv_wc_status_str(wc.status) : ok ? "equal" : "differs";
}

static int fuzz(uint64_t seed, int rounds) {
    ibv_query_port(ctx, 1, &port);
    fuzz_state = seed * 0x9e3779b97f4a7c15ull + 1;
    buf_len = 1 << 19;
    struct end a, b;
    mkend(&a, -1);
    mkend(&b, -1);
    connect_pair(&a, &b, FULL);
    for (int r = 0; r < rounds; r++) {
        size_t len = 1 + fuzz_rnd() % (256 * 1024);
        char *pa = a.buf + fuzz_rnd() % 4096, *pb = b.buf + fuzz_rnd() % 4096;
        unsigned acc_a = FULL | (fuzz_rnd() % 2 ? IBV_ACCESS_RELAXED_ORDERING : 0);
        unsigned acc_b = FULL | (fuzz_rnd() % 2 ? IBV_ACCESS_RELAXED_ORDERING : 0);
        struct ibv_mr *ma = fuzz_reg(pa, len, acc_a);
        int ea = errno;
        struct ibv_mr *mb = fuzz_reg(pb, len, acc_b);
        int eb = errno;
        printf("r%d", r);
        if (ma) printf(" a=ok"); else printf(" a=errno=%d", ea);
        if (mb) printf(" b=ok"); else printf(" b=errno=%d", eb);
        if (ma && mb) {
            int mr_ok = ma->addr == pa && ma->length == len && mb->addr == pb && mb->length == len && ma->pd == pd && mb->pd == pd;
            for (size_t i = 0; i < len; i++) pa[i] = (char)(fuzz_rnd() >> 29);
            memset(pb, 0, len);
            struct ibv_recv_wr rw = { .wr_id = 9 }, *rbad;
            ibv_post_recv(b.qp, &rw, &rbad);
            post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, pa, (uint32_t)len, ma->lkey, (uintptr_t)pb, mb->rkey, htonl(r));
            struct ibv_wc w = wait1(a.cq), w2 = wait1(b.cq);
            printf(" write=%s", fuzz_status(w.status ? w : w2, !memcmp(pa, pb, len)));
            memset(pa, 0, len);
            post(&a, IBV_WR_RDMA_READ, pa, (uint32_t)len, ma->lkey, (uintptr_t)pb, mb->rkey, 0);
            w = wait1(a.cq);
            printf(" read=%s mr=%s", fuzz_status(w, !memcmp(pa, pb, len)), mr_ok ? "ok" : "bad");
            if (w.status) break; /* the QP is in error now: the rest of the rounds cannot run */
        }
        int da = ma ? ibv_dereg_mr(ma) : 0, db = mb ? ibv_dereg_mr(mb) : 0;
        if (da || db) printf(" dereg=%d,%d", da, db); else if (ma || mb) printf(" dereg=ok");
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

/* A dmabuf MR (a memfd, also mapped at the iova) used for data in both roles: as the target of
 * a WRITE_WITH_IMM and a READ (rkey, iova), and as the local buffer of a WRITE (lkey, iova). With
 * MRSHIM_SIM_DMABUF=off and MRSHIM_RETRY=dmabuf-to-va, the MR the caller gets came from the VA
 * path: this checks that it is usable exactly as the dmabuf MR it asked for. */
static int dmabuf_data(void) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b;
    mkend(&a, FULL);
    mkend(&b, -1);
    connect_pair(&a, &b, FULL);
    size_t len = 65536;
    int m = memfd_create("mrshim-dmabuf-data", 0);
    if (m < 0 || ftruncate(m, (off_t)len)) { perror("memfd"); return 2; }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    struct ibv_mr *mr = ibv_reg_dmabuf_mr(pd, 0, len, (uintptr_t)p, m, FULL);
    if (!mr) { printf("dmabuf_data errno=%d\n", errno); return 0; }
    printf("dmabuf_data addr=%#lx length=%zu", (unsigned long)(uintptr_t)mr->addr, mr->length);
    for (size_t i = 0; i < len; i++) a.buf[i] = (char)(i * 31 + 3);
    struct ibv_recv_wr rw = { .wr_id = 1 }, *rbad;
    ibv_post_recv(b.qp, &rw, &rbad);
    post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, a.buf, (uint32_t)len, a.mr->lkey, (uintptr_t)p, mr->rkey, 0);
    struct ibv_wc w = wait1(a.cq), w2 = wait1(b.cq);
    printf(" write_in=%s", fuzz_status(w.status ? w : w2, !memcmp(a.buf, p, len)));
    memset(a.buf, 0, len);
    post(&a, IBV_WR_RDMA_READ, a.buf, (uint32_t)len, a.mr->lkey, (uintptr_t)p, mr->rkey, 0);
    w = wait1(a.cq);
    printf(" read_out=%s", fuzz_status(w, !memcmp(a.buf, p, len)));
    for (size_t i = 0; i < len; i++) p[i] = (char)(i * 17 + 9);
    memset(a.buf, 0, len);
    post(&b, IBV_WR_RDMA_WRITE, p, (uint32_t)len, mr->lkey, (uintptr_t)a.buf, a.mr->rkey, 0);
    w = wait1(b.cq);
    printf(" write_out=%s dereg=%d\n", fuzz_status(w, !memcmp(a.buf, p, len)), ibv_dereg_mr(mr));
    return 0;
}

/* rdma-core's test_resize_cq: a UD QP fills its CQ with send completions and the CQ is resized
 * below them at once, without polling; the NIC has executed the sends by the time the command
 * reaches the device, so that is EINVAL. Then the same after polling them. */
static int resize_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct ibv_cq *cq = ibv_create_cq(ctx, 3, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
        .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *qp = cq ? ibv_create_qp(pd, &ia) : NULL;
    char *buf = page_buf(4096);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x11111111 };
    int bad = !qp || !mr || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    a.qp_state = IBV_QPS_RTR;
    bad = bad || ibv_modify_qp(qp, &a, IBV_QP_STATE);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    bad = bad || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 3, &gid);
    struct ibv_ah_attr ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                                   .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 1 } };
    struct ibv_ah *ah = bad ? NULL : ibv_create_ah(pd, &ah_attr);
    if (!ah) { fprintf(stderr, "ud setup failed %d\n", errno); return 4; }
    int rc = ibv_resize_cq(cq, 1);
    printf("shrink_empty=%d cqe=%d\n", rc, cq->cqe);
    rc = ibv_resize_cq(cq, 7);
    printf("grow=%d cqe=%d\n", rc, cq->cqe);
    int sends = cq->cqe - 1;
    for (int i = 0; i < sends; i++) {
        struct ibv_sge sg = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
        struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *b;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = qp->qp_num;
        wr.wr.ud.remote_qkey = 0x11111111;
        if (ibv_post_send(qp, &wr, &b)) { fprintf(stderr, "post failed %d\n", errno); return 4; }
    }
    printf("shrink_below_unpolled=%d\n", ibv_resize_cq(cq, 1));
    for (int i = 0; i < sends; i++) wait1(cq);
    rc = ibv_resize_cq(cq, 1);
    printf("polled=%d shrink_after_poll=%d cqe=%d\n", sends, rc, cq->cqe);
    return 0;
}

/* The context's cmd_fd is a real read-write, close-on-exec descriptor, as rdma-core's
 * /dev/infiniband/uverbsN: pyverbs dup()s it to import the context, which then reports
 * EOPNOTSUPP; closing the device closes it. */
static int cmdfd_checks(void) {
    int fd = ctx->cmd_fd;
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    printf("cmd_fd_open=%d rdwr=%d cloexec=%d\n", fl >= 0, fl >= 0 && (fl & O_ACCMODE) == O_RDWR, fdfl >= 0 && (fdfl & FD_CLOEXEC));
    int d = dup(fd);
    errno = 0;
    struct ibv_context *imported = ibv_import_device(d);
    printf("dup=%d import=%s errno=%d\n", d >= 0, imported ? "context" : "NULL", errno);
    close(d);
    ibv_dealloc_pd(pd);
    int rc = ibv_close_device(ctx);
    printf("close=%d closed=%d\n", rc, fcntl(fd, F_GETFD) < 0 && errno == EBADF);
    return 0;
}

/* A send to a QP that is gone: nothing completes until the retry timer (timeout 14: 67 ms) has
 * expired retry_cnt + 1 (8) times, then the send fails with a retry error, as on a NIC. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int lost_peer_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct end a, b;
    mkend(&a, FULL);
    mkend(&b, FULL);
    connect_pair(&a, &b, FULL);
    if (ibv_destroy_qp(b.qp)) { fprintf(stderr, "destroy failed %d\n", errno); return 4; }
    double t0 = now_s();
    if (post(&a, IBV_WR_SEND, a.buf, 64, a.mr->lkey, 0, 0, 0)) { fprintf(stderr, "post failed\n"); return 4; }
    struct ibv_wc wc;
    int early = 0;
    while (!early && now_s() - t0 < 0.25)
        early = ibv_poll_cq(a.cq, 1, &wc) > 0;
    printf("completions_within_250ms=%d\n", early);
    if (!early) wc = wait1(a.cq);
    double waited = now_s() - t0;
    show("send_to_gone_qp", wc);
    printf("waited_for_8_timers=%d\n", waited >= 8 * 0.067);
    return 0;
}

/* A datagram for a receive whose buffer the process unmapped while it stayed registered (a
 * teardown in the wrong order): a NIC writes into the pinned pages the process no longer sees and
 * completes the receive; the process must not crash. */
static struct ibv_qp *ud_qp(struct ibv_cq *cq) {
    struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
        .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *qp = ibv_create_qp(pd, &a);
    struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
    if (!qp || ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) goto bad;
    at.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &at, IBV_QP_STATE)) goto bad;
    at.qp_state = IBV_QPS_RTS;
    at.sq_psn = 1;
    if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN)) goto bad;
    return qp;
bad:
    fprintf(stderr, "ud setup failed %d\n", errno);
    exit(4);
}

static int ud_unmapped_checks(void) {
    ibv_query_port(ctx, 1, &port);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp *a = ud_qp(cq), *b = ud_qp(cq);
    char *src = page_buf(4096), *dst = page_buf(8192);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 8192, IBV_ACCESS_LOCAL_WRITE);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 3, &gid);
    struct ibv_ah_attr aa = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                              .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 1 } };
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    if (!cq || !smr || !dmr || !ah) { fprintf(stderr, "setup failed %d\n", errno); return 4; }
    struct ibv_sge rs = { .addr = (uintptr_t)dst, .length = 8192, .lkey = dmr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rbad;
    if (ibv_post_recv(b, &rw, &rbad)) { fprintf(stderr, "post_recv failed\n"); return 4; }
    munmap(dst, 8192);
    struct ibv_sge ss = { .addr = (uintptr_t)src, .length = 1024, .lkey = smr->lkey };
    struct ibv_send_wr sw = { .wr_id = 42, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
    sw.wr.ud.ah = ah;
    sw.wr.ud.remote_qpn = b->qp_num;
    sw.wr.ud.remote_qkey = 0x11111111;
    if (ibv_post_send(a, &sw, &sbad)) { fprintf(stderr, "post_send failed\n"); return 4; }
    for (int got = 0; got < 2; got++) {
        struct ibv_wc wc = wait1(cq);
        show(wc.wr_id == 7 ? "recv_into_unmapped" : "send", wc);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: simcheck reg SCENARIO|all | transport | qpstate | multi | read-order | qpex | resize | cmdfd | bench-bw SIZE ITERS [refill] | bench-post BATCHES [null] | fuzz SEED ROUNDS | dmabuf-data\n"); return 2; }
    open_dev();
    if (!strcmp(argv[1], "reg")) return reg_checks(argc > 2 ? argv[2] : "all");
    if (!strcmp(argv[1], "transport")) return transport_checks();
    if (!strcmp(argv[1], "qpstate")) return qpstate_checks();
    if (!strcmp(argv[1], "multi")) return multi_checks();
    if (!strcmp(argv[1], "read-order")) return read_order_checks();
    if (!strcmp(argv[1], "qpex")) return qpex_checks();
    if (!strcmp(argv[1], "resize")) return resize_checks();
    if (!strcmp(argv[1], "cmdfd")) return cmdfd_checks();
    if (!strcmp(argv[1], "lost-peer")) return lost_peer_checks();
    if (!strcmp(argv[1], "ud-unmapped")) return ud_unmapped_checks();
    if (!strcmp(argv[1], "bench-bw") && argc > 3) return bench_bw((size_t)atol(argv[2]), atol(argv[3]), argc > 4 && !strcmp(argv[4], "refill"));
    if (!strcmp(argv[1], "bench-post") && argc > 3 && !strcmp(argv[3], "null")) return bench_post_null(atoi(argv[2]));
    if (!strcmp(argv[1], "bench-post") && argc > 2) return bench_post(atoi(argv[2]));
    if (!strcmp(argv[1], "dmabuf-data")) return dmabuf_data();
    if (!strcmp(argv[1], "fuzz") && argc > 3) return fuzz(strtoull(argv[2], NULL, 0), atoi(argv[3]));
    return 2;
}
