/* Device memory of the simulated GPU runtimes registered with the NIC directly (linked with
 * -libverbs: the simulated NIC, which refuses device memory on its VA path), for the shim's
 * rescues. The runtimes are dlopen'ed as the collective libraries do.
 *   gpu_mix two-runtimes ROUNDS   CUDA (libcuda.so.1) and HIP (libamdhip64.so.5) device memory
 *                                 in one process, registered alternately (HIP first) ROUNDS
 *                                 times each; every registration must succeed
 *   gpu_mix hip-offset OFF LEN    a HIP allocation of 1 MiB filled with a pattern, LEN bytes
 *                                 registered at OFF inside it; an RDMA WRITE from that MR into
 *                                 host memory and one from host memory into it, each checked
 *                                 byte for byte (the second by reading the device back)
 * Prints "ok" (and exits 0) or what failed (exit 1). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ALLOC (1 << 20)
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static void *must_sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) { fprintf(stderr, "%s: %s\n", name, dlerror()); exit(3); }
    return p;
}

static void *must_open(const char *name) {
    void *h = dlopen(name, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(3); }
    return h;
}

/* HIP: device memory of ALLOC bytes, filled with `pattern` (also kept on the host). */
static int (*hip_memcpy_htod)(void *, const void *, size_t);
static int (*hip_memcpy_dtoh)(void *, void *, size_t);
static void *hip_alloc(const unsigned char *pattern) {
    void *h = must_open("libamdhip64.so.5");
    int (*hip_malloc)(void **, size_t) = must_sym(h, "hipMalloc");
    hip_memcpy_htod = must_sym(h, "hipMemcpyHtoD");
    hip_memcpy_dtoh = must_sym(h, "hipMemcpyDtoH");
    void *d = NULL;
    int rc = hip_malloc(&d, ALLOC);
    if (rc || !d) { fprintf(stderr, "hipMalloc: %d\n", rc); exit(3); }
    if ((rc = hip_memcpy_htod(d, pattern, ALLOC))) { fprintf(stderr, "hipMemcpyHtoD: %d\n", rc); exit(3); }
    return d;
}

static void *cuda_alloc(void) {
    void *h = must_open("libcuda.so.1");
    int (*init)(unsigned) = must_sym(h, "cuInit");
    int (*dev_get)(int *, int) = must_sym(h, "cuDeviceGet");
    int (*retain)(void **, int) = must_sym(h, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = must_sym(h, "cuCtxSetCurrent");
    int (*mem_alloc)(uint64_t *, size_t) = must_sym(h, "cuMemAlloc_v2");
    int dev = 0;
    void *ctx = NULL;
    uint64_t d = 0;
    if (init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx) || mem_alloc(&d, ALLOC)) {
        fprintf(stderr, "CUDA setup failed\n");
        exit(3);
    }
    return (void *)(uintptr_t)d;
}

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void open_nic(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) { fprintf(stderr, "no devices\n"); exit(3); }
    ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    if (!ctx || !(pd = ibv_alloc_pd(ctx))) { perror("pd"); exit(3); }
}

static int two_runtimes(int rounds) {
    unsigned char *pattern = malloc(ALLOC);
    memset(pattern, 0x5a, ALLOC);
    void *hip = hip_alloc(pattern);
    void *cuda = cuda_alloc();
    open_nic();
    for (int i = 0; i < rounds; i++) {
        struct ibv_mr *h = ibv_reg_mr(pd, hip, 65536, ACCESS);
        if (!h) { fprintf(stderr, "round %d: HIP memory: %s\n", i, strerror(errno)); return 1; }
        struct ibv_mr *c = ibv_reg_mr(pd, cuda, 65536, ACCESS);
        if (!c) { fprintf(stderr, "round %d: CUDA memory: %s\n", i, strerror(errno)); return 1; }
        if (ibv_dereg_mr(h) || ibv_dereg_mr(c)) { perror("ibv_dereg_mr"); return 1; }
    }
    printf("ok\n");
    return 0;
}

/* A connected loopback pair of RC QPs on ctx. */
static struct ibv_cq *cq[2];
static struct ibv_qp *qp[2];
static int connect_pair(void) {
    struct ibv_port_attr port;
    union ibv_gid gid;
    if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 3, &gid)) return -1;
    for (int i = 0; i < 2; i++) {
        cq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
        struct ibv_qp_init_attr a = { .send_cq = cq[i], .recv_cq = cq[i], .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
        if (!cq[i] || !(qp[i] = ibv_create_qp(pd, &a))) return -1;
    }
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
        struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = qp[1 - i]->qp_num,
            .rq_psn = 7, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
            .ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                         .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 1 } } };
        struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7,
            .rnr_retry = 7, .max_rd_atomic = 1 };
        if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ||
            ibv_modify_qp(qp[i], &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) ||
            ibv_modify_qp(qp[i], &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
            return -1;
    }
    return 0;
}

/* RDMA WRITE of len bytes from (src, lkey) to (dst, rkey) on qp[0], waited for. */
static int rdma_write(void *src, uint32_t lkey, void *dst, uint32_t rkey, uint32_t len) {
    struct ibv_sge sg = { .addr = (uintptr_t)src, .length = len, .lkey = lkey };
    struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED }, *bad;
    wr.wr.rdma.remote_addr = (uintptr_t)dst;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp[0], &wr, &bad)) return -1;
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq[0], 1, &wc)) == 0) {}
    if (n != 1 || wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "RDMA WRITE: %s\n", n == 1 ? ibv_wc_status_str(wc.status) : "poll failed");
        return -1;
    }
    return 0;
}

static int first_diff(const unsigned char *a, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (int)i;
    return -1;
}

static int hip_offset(size_t off, size_t len) {
    if (off + len > ALLOC) { fprintf(stderr, "OFF + LEN > 1 MiB\n"); return 2; }
    unsigned char *pattern = malloc(ALLOC);
    for (size_t i = 0; i < ALLOC; i++) pattern[i] = (unsigned char)(i * 7 + i / 4096);
    unsigned char *dev = hip_alloc(pattern);
    open_nic();
    if (connect_pair()) { fprintf(stderr, "QP setup failed: %d\n", errno); return 3; }
    unsigned char *host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(host, 0, len);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dev + off, len, ACCESS);
    struct ibv_mr *hmr = ibv_reg_mr(pd, host, len, ACCESS);
    if (!dmr || !hmr) { fprintf(stderr, "ibv_reg_mr: %s\n", strerror(errno)); return 1; }
    /* device (at OFF) -> host */
    if (rdma_write(dev + off, dmr->lkey, host, hmr->rkey, len)) return 1;
    int d = first_diff(host, pattern + off, len);
    if (d >= 0) { fprintf(stderr, "device->host: byte %d is %u, want %u\n", d, host[d], pattern[off + d]); return 1; }
    /* host -> device (at OFF), read back through the runtime */
    for (size_t i = 0; i < len; i++) host[i] = (unsigned char)~host[i];
    if (rdma_write(host, hmr->lkey, dev + off, dmr->rkey, len)) return 1;
    unsigned char *back = malloc(ALLOC);
    if (hip_memcpy_dtoh(back, dev, ALLOC)) { fprintf(stderr, "hipMemcpyDtoH failed\n"); return 1; }
    d = first_diff(back + off, host, len);
    if (d >= 0) { fprintf(stderr, "host->device: byte %d is %u, want %u\n", d, back[off + d], host[d]); return 1; }
    /* nothing around the registered range changed */
    if (first_diff(back, pattern, off) >= 0 || first_diff(back + off + len, pattern + off + len, ALLOC - off - len) >= 0) {
        fprintf(stderr, "bytes outside the registered range changed\n");
        return 1;
    }
    if (ibv_dereg_mr(dmr) || ibv_dereg_mr(hmr)) { perror("ibv_dereg_mr"); return 1; }
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "two-runtimes")) return two_runtimes(atoi(argv[2]));
    if (argc > 3 && !strcmp(argv[1], "hip-offset")) return hip_offset(strtoul(argv[2], NULL, 0), strtoul(argv[3], NULL, 0));
    fprintf(stderr, "usage: gpu_mix two-runtimes ROUNDS | hip-offset OFF LEN\n");
    return 2;
}
