/* Simulated GPU memory through the simulated verbs device: dmabuf export and
 * ibv_reg_dmabuf_mr, ibv_reg_mr on the device pointer (refused unless peer memory is on), and
 * RDMA WRITE/READ between host memory and device memory checked through cuMemcpy.
 * Linked with -libverbs (the simulator via LD_LIBRARY_PATH); libcuda is dlopen'ed.
 * Prints "ok"/"FAIL" lines and "info reg_mr=ok|errno=N"; exit status = failures. */
#include "cuda_api.h"
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#define FULL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define N (1 << 20)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_port_attr port;
struct end { struct ibv_cq *cq; struct ibv_qp *qp; };

static void open_dev(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) { fprintf(stderr, "no verbs devices (errno %d)\n", errno); exit(3); }
    ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) { perror("open/pd"); exit(3); }
    ibv_query_port(ctx, 1, &port);
}

static void mkend(struct end *e) {
    e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = { .send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
    e->qp = e->cq ? ibv_create_qp(pd, &ia) : NULL;
    if (!e->qp) { fprintf(stderr, "qp: %d\n", errno); exit(4); }
}

static void connect_pair(struct end *a, struct end *b) {
    struct end *e[2] = { a, b };
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 3, &gid);
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr x = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = FULL };
        if (ibv_modify_qp(e[i]->qp, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) exit(4);
    }
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr x = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = e[1 - i]->qp->qp_num,
            .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
            .ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                         .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 1 } } };
        if (ibv_modify_qp(e[i]->qp, &x, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) exit(4);
    }
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr x = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
        if (ibv_modify_qp(e[i]->qp, &x, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) exit(4);
    }
}

/* One signalled RDMA op from [laddr, laddr+len) (lkey) to raddr (rkey); returns the wc status. */
static int rdma(struct end *e, enum ibv_wr_opcode op, uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey) {
    struct ibv_sge s = { .addr = laddr, .length = len, .lkey = lkey };
    struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(e->qp, &wr, &bad)) return -1;
    struct ibv_wc wc;
    for (long spins = 0;; spins++) {
        int k = ibv_poll_cq(e->cq, 1, &wc);
        if (k == 1) return wc.status;
        if (k < 0 || spins > 100000000L) return -2;
        if (spins % 1000 == 0) usleep(50);
    }
}

/* RDMA WRITE host → device region and READ device region → host, checked through cuMemcpy. */
static void traffic(const char *name, struct end *a, CUdeviceptr dptr, uint32_t rkey, struct ibv_mr *hmr, unsigned char *host) {
    char n[96];
    unsigned char *back = malloc(N);
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 37 + 11);
    snprintf(n, sizeof n, "%s_write_status", name);
    EXPECT(n, rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)host, 200000, hmr->lkey, dptr + 5000, rkey), IBV_WC_SUCCESS);
    memset(back, 0, N);
    MUST(cuMemcpyDtoH_v2(back, dptr + 5000, 200000));
    snprintf(n, sizeof n, "%s_write_visible_via_dtoh", name);
    CHECK(n, !memcmp(back, host, 200000));

    for (int i = 0; i < 300000; i++) back[i] = (unsigned char)(i * 5 + 1);
    MUST(cuMemcpyHtoD_v2(dptr + 100, back, 300000));
    memset(host, 0, N);
    snprintf(n, sizeof n, "%s_read_status", name);
    EXPECT(n, rdma(a, IBV_WR_RDMA_READ, (uintptr_t)host, 300000, hmr->lkey, dptr + 100, rkey), IBV_WC_SUCCESS);
    snprintf(n, sizeof n, "%s_read_sees_htod", name);
    CHECK(n, !memcmp(back, host, 300000));
    free(back);
}

int main(void) {
    cu_load();
    MUST(cuInit(0));
    CUcontext c;
    MUST(cuCtxCreate_v2(&c, 0, 0));
    CUdeviceptr dptr;
    MUST(cuMemAlloc_v2(&dptr, N));
    open_dev();

    /* dmabuf export */
    int fd = -1, fd2 = -1;
    void *heap = malloc(N);
    EXPECT("export", cuMemGetHandleForAddressRange(&fd, dptr, N, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_SUCCESS);
    char path[64], link[256] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t ll = readlink(path, link, sizeof link - 1);
    if (ll > 0) link[ll] = 0;
    printf("info fd_link=%s\n", link);
    CHECK("export_is_gpu_memfd", !strncmp(link, "/memfd:mrshim-gpu", 17));
    CHECK("export_cloexec", fcntl(fd, F_GETFD) & FD_CLOEXEC);
    EXPECT("export_prefix", cuMemGetHandleForAddressRange(&fd2, dptr, 4096, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_SUCCESS);
    CHECK("export_new_fd_each_time", fd2 >= 0 && fd2 != fd);
    close(fd2);
    EXPECT("export_interior_start", cuMemGetHandleForAddressRange(&fd2, dptr + 4096, 4096, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_too_long", cuMemGetHandleForAddressRange(&fd2, dptr, N + 4096, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_unaligned_size", cuMemGetHandleForAddressRange(&fd2, dptr, 1000, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_zero_size", cuMemGetHandleForAddressRange(&fd2, dptr, 0, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_bad_type", cuMemGetHandleForAddressRange(&fd2, dptr, N, 2, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_bad_flags", cuMemGetHandleForAddressRange(&fd2, dptr, N, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_null_handle", cuMemGetHandleForAddressRange(NULL, dptr, N, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("export_host_memory", cuMemGetHandleForAddressRange(&fd2, (CUdeviceptr)(uintptr_t)heap, 4096, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_ERROR_INVALID_VALUE);

    unsigned char *host = aligned_alloc(4096, N);
    memset(host, 0, N);
    struct ibv_mr *hmr = ibv_reg_mr(pd, host, N, FULL);
    if (!hmr) { fprintf(stderr, "host reg: %d\n", errno); return 20; }
    struct end a, b;
    mkend(&a);
    mkend(&b);
    connect_pair(&a, &b);

    /* NCCL's dmabuf registration: offset 0 of the fd, iova = the device address. */
    errno = 0;
    struct ibv_mr *dmr = ibv_reg_dmabuf_mr(pd, 0, N, dptr, fd, FULL);
    printf("info reg_dmabuf_mr=%s\n", dmr ? "ok" : strerror(errno));
    fflush(stdout);
    if (dmr) {
        traffic("dmabuf", &a, dptr, dmr->rkey, hmr, host);
        EXPECT("dereg_dmabuf", ibv_dereg_mr(dmr), 0);
    }
    close(fd);

    /* Peer memory: ibv_reg_mr on the device pointer itself. */
    errno = 0;
    struct ibv_mr *pmr = ibv_reg_mr(pd, (void *)(uintptr_t)dptr, N, FULL);
    if (pmr) printf("info reg_mr=ok\n");
    else printf("info reg_mr=errno=%d\n", errno);
    fflush(stdout);
    if (pmr) {
        traffic("peer", &a, dptr, pmr->rkey, hmr, host);
        EXPECT("dereg_peer", ibv_dereg_mr(pmr), 0);
    }
    MUST(cuMemFree_v2(dptr));
    return fails;
}
