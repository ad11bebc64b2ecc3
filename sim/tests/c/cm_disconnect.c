/* A disconnect keeps its place among the packets between two ports. An RC connection through
 * rdma_cm between the two simulated devices of one process (mlx5_1 active, mlx5_0 passive, one
 * event channel each): the active side sends, the passive side sees the receive complete and
 * disconnects at once; the active side polls its CQ and, when it is empty, its event channel,
 * as ofi_rxm does: the ACK the passive NIC sent before the DREQ has been handled before the
 * DISCONNECTED event can be seen, so the send completes first, and as a success (fi_pingpong
 * over ofi_rxm tore its connection down on DISCONNECTED, which drops the completions not polled
 * yet, and saw its last send flushed). Prints one line per step. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev)) { perror("rdma_get_cm_event"); exit(1); }
    if (ev->event != type) {
        fprintf(stderr, "got %s (%d), wanted %s\n", rdma_event_str(ev->event), ev->status, rdma_event_str(type));
        exit(1);
    }
    return ev;
}

static void addr(struct sockaddr_in *a, const char *ip, int port) {
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, ip, &a->sin_addr);
}

int main(void) {
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    struct rdma_event_channel *pch = rdma_create_event_channel(), *ach = rdma_create_event_channel();
    struct rdma_cm_id *listen, *active;
    if (!pch || !ach || rdma_create_id(pch, &listen, NULL, RDMA_PS_TCP) || rdma_create_id(ach, &active, NULL, RDMA_PS_TCP)) {
        perror("rdma_create_id");
        return 1;
    }
    struct sockaddr_in src, dst;
    addr(&dst, "192.0.2.10", 7471);
    addr(&src, "192.0.2.11", 0);
    if (rdma_bind_addr(listen, (struct sockaddr *)&dst) || rdma_listen(listen, 1)) { perror("listen"); return 1; }
    if (rdma_resolve_addr(active, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000)) { perror("resolve_addr"); return 1; }
    rdma_ack_cm_event(expect(ach, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(active, 2000)) { perror("resolve_route"); return 1; }
    rdma_ack_cm_event(expect(ach, RDMA_CM_EVENT_ROUTE_RESOLVED));
    if (rdma_create_qp(active, NULL, &qa)) { perror("create_qp active"); return 1; }
    struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(active, &cp)) { perror("connect"); return 1; }
    struct rdma_cm_event *req = expect(pch, RDMA_CM_EVENT_CONNECT_REQUEST);
    struct rdma_cm_id *passive = req->id;
    rdma_ack_cm_event(req);
    if (rdma_create_qp(passive, NULL, &qa)) { perror("create_qp passive"); return 1; }
    printf("two_devices %d\n", passive->verbs != active->verbs);

    static char rbuf[64], sbuf[64] = "last message before the disconnect";
    struct ibv_mr *rmr = ibv_reg_mr(passive->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *smr = ibv_reg_mr(active->pd, sbuf, sizeof sbuf, 0);
    if (!rmr || !smr) { perror("ibv_reg_mr"); return 1; }
    struct ibv_sge rsge = {.addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = rmr->lkey};
    struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &rsge, .num_sge = 1}, *bad_r;
    if (ibv_post_recv(passive->qp, &rwr, &bad_r)) { perror("post_recv"); return 1; }
    if (rdma_accept(passive, &cp)) { perror("accept"); return 1; }
    rdma_ack_cm_event(expect(ach, RDMA_CM_EVENT_ESTABLISHED));
    rdma_ack_cm_event(expect(pch, RDMA_CM_EVENT_ESTABLISHED));

    struct ibv_sge ssge = {.addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey};
    struct ibv_send_wr swr = {.wr_id = 42, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad_s;
    if (ibv_post_send(active->qp, &swr, &bad_s)) { perror("post_send"); return 1; }

    /* The passive side: the receive completes, then it disconnects at once. */
    struct ibv_wc wc;
    int n;
    time_t until = time(NULL) + 30;
    while ((n = ibv_poll_cq(passive->qp->recv_cq, 1, &wc)) == 0 && time(NULL) < until)
        ;
    if (n != 1) { fprintf(stderr, "no receive completion\n"); return 1; }
    printf("recv %s wr_id=%llu data_equal=%d\n", ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id,
           !strcmp(rbuf, sbuf));
    if (rdma_disconnect(passive)) { perror("rdma_disconnect"); return 1; }

    /* The active side, as ofi_rxm progresses: poll the CQ; when it is empty, look at the
     * (non-blocking) event channel. The send's completion must come first. */
    fcntl(ach->fd, F_SETFL, fcntl(ach->fd, F_GETFL) | O_NONBLOCK);
    int sent = 0;
    struct rdma_cm_event *ev = NULL;
    until = time(NULL) + 30;
    while (time(NULL) < until) {
        if (ibv_poll_cq(active->qp->send_cq, 1, &wc) == 1) {
            printf("send %s wr_id=%llu\n", ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
            sent = 1;
            continue;
        }
        if (rdma_get_cm_event(ach, &ev) == 0) break;
        if (errno != EAGAIN) { perror("rdma_get_cm_event"); return 1; }
    }
    if (!ev) { fprintf(stderr, "no DISCONNECTED\n"); return 1; }
    printf("%s %s\n", rdma_event_str(ev->event), sent ? "after the send completed" : "before the send completed");
    rdma_ack_cm_event(ev);
    rdma_ack_cm_event(expect(pch, RDMA_CM_EVENT_DISCONNECTED));
    return 0;
}
