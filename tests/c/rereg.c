/* ibv_rereg_mr under the shim, on the simulator (tests/shim_rereg.rs). A loopback pair of RC QPs;
 * the receiving buffer's MR is rereg'ed to a new, larger buffer (CHANGE_TRANSLATION), then a
 * pattern goes through RDMA WRITE_WITH_IMM to the new address with the MR's rkey after the call,
 * and the bytes that arrived are checked; the old buffer must stay untouched. Without the rereg
 * taking effect the write lands outside the MR (a remote access error) or in the old buffer.
 *   rereg plain   plain MRs: the rereg must succeed
 *   rereg bounce  MRs that ask for RELAXED_ORDERING (run with MRSHIM_SIM_FAULTS=reg:EFAULT:relaxed
 *                 and MRSHIM_RETRY=bounce: bounce regions); a refused rereg (IBV_REREG_MR_ERR_CMD)
 *                 falls back to ibv_dereg_mr + ibv_reg_mr, as UCX and Open MPI do
 * Prints "old ADDR new ADDR", "rereg ret R errno E", "fallback dereg+reg" when it fell back,
 * "data equal" or "data differ at I", "old untouched" or "old written"; exits 0 when every call it
 * needed worked (whatever the data), 1 otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define OLD_LEN 65536
#define NEW_LEN 131072

struct pair { struct ibv_context *ctx; struct ibv_pd *pd; struct ibv_cq *cq[2]; struct ibv_qp *qp[2]; };

static int modify(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t dest) {
    struct ibv_port_attr port;
    union ibv_gid gid;
    if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 3, &gid)) return -1;
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dest, .rq_psn = 7,
        .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
        .ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                     .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 1 } } };
    if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return -1;
    struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
        .max_rd_atomic = 1 };
    return ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int open_pair(struct pair *p) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) return -1;
    p->ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    if (!p->ctx || !(p->pd = ibv_alloc_pd(p->ctx))) return -1;
    for (int i = 0; i < 2; i++) {
        p->cq[i] = ibv_create_cq(p->ctx, 16, NULL, NULL, 0);
        struct ibv_qp_init_attr a = { .send_cq = p->cq[i], .recv_cq = p->cq[i], .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
        if (!p->cq[i] || !(p->qp[i] = ibv_create_qp(p->pd, &a))) return -1;
    }
    return modify(p->ctx, p->qp[0], p->qp[1]->qp_num) || modify(p->ctx, p->qp[1], p->qp[0]->qp_num) ? -1 : 0;
}

static unsigned char *buf(size_t n) {
    void *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) { perror("mmap"); exit(2); }
    return b;
}

/* One WRITE_WITH_IMM of n bytes from src (MR s) to dst (rkey): 0 when both completions succeed. */
static int write_imm(struct pair *p, struct ibv_mr *s, void *src, void *dst, uint32_t rkey, uint32_t n) {
    struct ibv_recv_wr rw = { .wr_id = 1 }, *rbad;
    struct ibv_sge sg = { .addr = (uintptr_t)src, .length = n, .lkey = s->lkey };
    struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED, .imm_data = 7 }, *bad;
    wr.wr.rdma.remote_addr = (uintptr_t)dst;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_recv(p->qp[1], &rw, &rbad) || ibv_post_send(p->qp[0], &wr, &bad)) return -1;
    struct ibv_wc ws, wc;
    int a, b;
    while ((a = ibv_poll_cq(p->cq[0], 1, &ws)) == 0) {}
    while ((b = ibv_poll_cq(p->cq[1], 1, &wc)) == 0) {}
    if (a != 1 || b != 1 || ws.status != IBV_WC_SUCCESS || wc.status != IBV_WC_SUCCESS) {
        printf("completion status send %d recv %d\n", ws.status, wc.status);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: rereg plain|bounce\n"); return 2; }
    int bounce = strcmp(argv[1], "bounce") == 0;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | (bounce ? IBV_ACCESS_RELAXED_ORDERING : 0);
    struct pair p;
    if (open_pair(&p)) { fprintf(stderr, "setup failed: %d\n", errno); return 1; }
    unsigned char *src = buf(NEW_LEN), *old = buf(OLD_LEN), *new = buf(NEW_LEN);
    struct ibv_mr *s = ibv_reg_mr(p.pd, src, NEW_LEN, access);
    struct ibv_mr *d = ibv_reg_mr(p.pd, old, OLD_LEN, access);
    if (!s || !d) { fprintf(stderr, "reg failed: %d\n", errno); return 1; }
    printf("old %p new %p\n", (void *)old, (void *)new);
    errno = 0;
    int ret = ibv_rereg_mr(d, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, new, NEW_LEN, 0);
    printf("rereg ret %d errno %d\n", ret, ret ? errno : 0);
    if (ret) {
        /* IBV_REREG_MR_ERR_CMD: the MR must not be used any more, only deregistered */
        if (ibv_dereg_mr(d)) { fprintf(stderr, "dereg after rereg failed: %d\n", errno); return 1; }
        d = ibv_reg_mr(p.pd, new, NEW_LEN, access);
        if (!d) { fprintf(stderr, "reg after rereg failed: %d\n", errno); return 1; }
        printf("fallback dereg+reg\n");
    }
    for (int i = 0; i < NEW_LEN; i++) src[i] = (unsigned char)(i * 7 + 3);
    if (write_imm(&p, s, src, new, d->rkey, NEW_LEN)) { fprintf(stderr, "write failed\n"); return 1; }
    int bad = -1;
    for (int i = 0; i < NEW_LEN && bad < 0; i++)
        if (new[i] != (unsigned char)(i * 7 + 3)) bad = i;
    if (bad < 0) printf("data equal\n"); else printf("data differ at %d\n", bad);
    int touched = 0;
    for (int i = 0; i < OLD_LEN; i++) touched |= old[i];
    printf("old %s\n", touched ? "written" : "untouched");
    if (ibv_dereg_mr(d) || ibv_dereg_mr(s)) { fprintf(stderr, "dereg failed: %d\n", errno); return 1; }
    return 0;
}
