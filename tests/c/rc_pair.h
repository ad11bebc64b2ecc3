/* A fresh verbs context with two RC QPs connected to each other (loopback on port 1, GID index 3):
 * what the single-process data tests need. Shared by fork_bounce.c and rereg.c. */
#include <infiniband/verbs.h>
#include <stdint.h>

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

/* Opens the first device and connects two RC QPs to each other (each process its own: a child
 * never touches its parent's verbs objects). 0 on success. */
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
