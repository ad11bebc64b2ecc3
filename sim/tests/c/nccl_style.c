/* A verbs consumer that reaches libibverbs exactly the way NCCL/MCCL/RCCL's net_ib does:
 * dlopen("libibverbs.so") with a fallback to "libibverbs.so.1", then dlvsym() of every function
 * with its rdma-core version (IBVERBS_1.1; ibv_reg_mr_iova2 IBVERBS_1.8; ibv_reg_dmabuf_mr
 * IBVERBS_1.12), a dmabuf probe with fd -1, and NCCL's registration shape: page-aligned base,
 * length rounded up to pages, LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC, plus
 * RELAXED_ORDERING through ibv_reg_mr_iova2 when enabled (NCCL_IB_PCI_RELAXED_ORDERING).
 *
 * Two processes (fork), connected by a socketpair for the out-of-band exchange; each RDMA
 * WRITE_WITH_IMMs a pattern into the other's buffer and verifies what it received, byte by byte.
 * Not linked against libibverbs. Usage: nccl_style [--size BYTES] [--relaxed] [--iters N] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static struct ibv_device **(*p_get_device_list)(int *);
static struct ibv_context *(*p_open_device)(struct ibv_device *);
static struct ibv_pd *(*p_alloc_pd)(struct ibv_context *);
static struct ibv_mr *(*p_reg_mr)(struct ibv_pd *, void *, size_t, int);
static struct ibv_mr *(*p_reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
static struct ibv_mr *(*p_reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
static int (*p_dereg_mr)(struct ibv_mr *);
static struct ibv_cq *(*p_create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
static struct ibv_qp *(*p_create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static int (*p_modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
static int (*p_query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
static int (*p_query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
static const char *(*p_wc_status_str)(enum ibv_wc_status);

static int rank;

static void *sym(void *h, const char *name, const char *ver, int required) {
    void *p = dlvsym(h, name, ver);
    if (!p && required) {
        fprintf(stderr, "[%d] NCCL WARN NET/IB : dlvsym(%s, %s) failed: %s\n", rank, name, ver, dlerror());
        exit(3);
    }
    return p;
}

static void load(void) {
    void *h = dlopen("libibverbs.so", RTLD_NOW);
    if (!h) h = dlopen("libibverbs.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "[%d] NCCL WARN Failed to open libibverbs.so[.1]\n", rank); exit(3); }
    p_get_device_list = sym(h, "ibv_get_device_list", "IBVERBS_1.1", 1);
    p_open_device = sym(h, "ibv_open_device", "IBVERBS_1.1", 1);
    p_alloc_pd = sym(h, "ibv_alloc_pd", "IBVERBS_1.1", 1);
    p_reg_mr = sym(h, "ibv_reg_mr", "IBVERBS_1.1", 1);
    p_reg_mr_iova2 = sym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8", 0);
    p_reg_dmabuf_mr = sym(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", 0);
    p_dereg_mr = sym(h, "ibv_dereg_mr", "IBVERBS_1.1", 1);
    p_create_cq = sym(h, "ibv_create_cq", "IBVERBS_1.1", 1);
    p_create_qp = sym(h, "ibv_create_qp", "IBVERBS_1.1", 1);
    p_modify_qp = sym(h, "ibv_modify_qp", "IBVERBS_1.1", 1);
    p_query_port = sym(h, "ibv_query_port", "IBVERBS_1.1", 1);
    p_query_gid = sym(h, "ibv_query_gid", "IBVERBS_1.1", 1);
    p_wc_status_str = sym(h, "ibv_wc_status_str", "IBVERBS_1.1", 1);
}

struct info { uint32_t qpn; uint32_t rkey; uint64_t addr; union ibv_gid gid; uint16_t lid; };

static void xchg(int fd, struct info *mine, struct info *theirs) {
    if (write(fd, mine, sizeof *mine) != sizeof *mine || read(fd, theirs, sizeof *theirs) != sizeof *theirs) {
        fprintf(stderr, "[%d] oob exchange failed\n", rank); exit(4);
    }
}

static int run(int fd, size_t size, int relaxed, int iters) {
    load();
    int n;
    struct ibv_device **devs = p_get_device_list(&n);
    if (!devs || n < 1) { fprintf(stderr, "[%d] NCCL WARN NET/IB : No device found.\n", rank); return 3; }
    struct ibv_context *ctx = p_open_device(devs[0]);
    struct ibv_pd *pd = ctx ? p_alloc_pd(ctx) : NULL;
    if (!pd) { fprintf(stderr, "[%d] NCCL WARN open/alloc_pd failed: %s\n", rank, strerror(errno)); return 3; }

    /* The dmabuf support probe NCCL and UCX run: fd -1 must fail, errno tells whether the
     * kernel knows the verb (EOPNOTSUPP/EPROTONOSUPPORT mean "no dmabuf"). */
    if (p_reg_dmabuf_mr) {
        struct ibv_mr *pm = p_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0);
        printf("[%d] dmabuf probe: %s\n", rank, pm ? "unexpected success" : (errno == EOPNOTSUPP || errno == EPROTONOSUPPORT) ? "unsupported" : "supported");
    }

    long pg = sysconf(_SC_PAGESIZE);
    size_t reglen = (size + pg - 1) / pg * pg;
    char *buf = aligned_alloc(pg, reglen * 2); /* [0, reglen): send data, [reglen, 2*reglen): landing zone */
    memset(buf, 0, reglen * 2);
    for (size_t i = 0; i < size; i++) buf[i] = (char)((i * 131 + rank * 17 + 3) & 0xff);
    unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    struct ibv_mr *mr;
    if (relaxed && p_reg_mr_iova2) {
        mr = p_reg_mr_iova2(pd, buf, reglen * 2, (uintptr_t)buf, access | IBV_ACCESS_RELAXED_ORDERING);
        if (!mr) { fprintf(stderr, "[%d] NCCL WARN Call to ibv_reg_mr_iova2 failed with error %s\n", rank, strerror(errno)); return 1; }
    } else {
        mr = p_reg_mr(pd, buf, reglen * 2, access);
        if (!mr) { fprintf(stderr, "[%d] NCCL WARN Call to ibv_reg_mr failed with error %s\n", rank, strerror(errno)); return 1; }
    }

    struct ibv_cq *cq = p_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 } };
    struct ibv_qp *qp = cq ? p_create_qp(pd, &ia) : NULL;
    if (!qp) { fprintf(stderr, "[%d] NCCL WARN create_qp failed: %s\n", rank, strerror(errno)); return 3; }
    struct ibv_port_attr port;
    memset(&port, 0, sizeof port);
    p_query_port(ctx, 1, &port);
    int roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;

    struct info me = { .qpn = qp->qp_num, .rkey = mr->rkey, .addr = (uintptr_t)buf + reglen, .lid = port.lid }, peer;
    p_query_gid(ctx, 1, roce ? 3 : 0, &me.gid);
    xchg(fd, &me, &peer);

    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    if (p_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) { fprintf(stderr, "[%d] init: %s\n", rank, strerror(errno)); return 5; }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = port.active_mtu; a.dest_qp_num = peer.qpn; a.rq_psn = 0;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12; a.ah_attr.port_num = 1; a.ah_attr.dlid = peer.lid;
    if (roce) { a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = peer.gid; a.ah_attr.grh.sgid_index = 3; a.ah_attr.grh.hop_limit = 255; }
    if (p_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) { fprintf(stderr, "[%d] rtr: %s\n", rank, strerror(errno)); return 5; }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 20; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 0; a.max_rd_atomic = 1;
    if (p_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) { fprintf(stderr, "[%d] rts: %s\n", rank, strerror(errno)); return 5; }

    int bad = 0;
    for (int it = 0; it < iters; it++) {
        struct ibv_recv_wr rwr = { .wr_id = 1000 + it }, *rbad;
        if (ibv_post_recv(qp, &rwr, &rbad)) return 6;
        char go = 1, peer_go;
        if (write(fd, &go, 1) != 1 || read(fd, &peer_go, 1) != 1) return 4; /* both receives posted */
        struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)size, .lkey = mr->lkey };
        struct ibv_send_wr wr = { .wr_id = it, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
            .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xabc000 + it) }, *sbad;
        wr.wr.rdma.remote_addr = peer.addr;
        wr.wr.rdma.rkey = peer.rkey;
        if (ibv_post_send(qp, &wr, &sbad)) { fprintf(stderr, "[%d] post_send failed\n", rank); return 6; }
        int got_send = 0, got_recv = 0;
        while (!got_send || !got_recv) {
            struct ibv_wc wc;
            int k = ibv_poll_cq(cq, 1, &wc);
            if (k < 0) return 7;
            if (k == 0) continue;
            if (wc.status != IBV_WC_SUCCESS) { fprintf(stderr, "[%d] NCCL WARN NET/IB : Got completion with error %s, opcode %d\n", rank, p_wc_status_str(wc.status), wc.opcode); return 7; }
            if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                got_recv = 1;
                if (be32toh(wc.imm_data) != 0xabc000u + it || wc.byte_len != size) bad++;
            } else got_send = 1;
        }
        for (size_t i = 0; i < size; i++)
            if (buf[reglen + i] != (char)((i * 131 + (1 - rank) * 17 + 3) & 0xff)) { bad++; break; }
    }
    printf("[%d] %s %zu bytes x %d: %s\n", rank, relaxed ? "ibv_reg_mr_iova2+RO" : "ibv_reg_mr", size, iters, bad ? "DATA MISMATCH" : "verified");
    p_dereg_mr(mr);
    return bad ? 8 : 0;
}

int main(int argc, char **argv) {
    size_t size = 1 << 20;
    int relaxed = 0, iters = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--relaxed")) relaxed = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [--size BYTES] [--relaxed] [--iters N]\n", argv[0]); return 2; }
    }
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        rank = 1;
        close(sv[0]);
        int r = run(sv[1], size, relaxed, iters);
        fflush(stdout);
        _exit(r);
    }
    close(sv[1]);
    int rc = run(sv[0], size, relaxed, iters);
    if (rc) shutdown(sv[0], SHUT_RDWR);
    int st;
    waitpid(child, &st, 0);
    int crc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return rc ? rc : crc;
}
