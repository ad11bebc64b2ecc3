/* RDMA_OPTION_ID_ACK_TIMEOUT, as rdma-core's test_rdmacm_async_traffic uses it: set on both
 * sides of an RC connection made in one process (one event channel), the QPs' timeout at RTS
 * is the value set; on a UD id the option is EINVAL. Prints "name value" lines. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static struct rdma_event_channel *ch;

static struct rdma_cm_event *expect(enum rdma_cm_event_type type) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev)) { perror("rdma_get_cm_event"); exit(1); }
    if (ev->event != type) { fprintf(stderr, "got %s, wanted %s\n", rdma_event_str(ev->event), rdma_event_str(type)); exit(1); }
    return ev;
}

static void set_timeout(struct rdma_cm_id *id, uint8_t t) {
    if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t)) { perror("set_option"); exit(1); }
}

static int qp_timeout(struct rdma_cm_id *id) {
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    return ibv_query_qp(id->qp, &a, IBV_QP_TIMEOUT, &ia) ? -1 : a.timeout;
}

int main(void) {
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    struct rdma_cm_id *ud, *listen, *active;
    ch = rdma_create_event_channel();
    if (!ch || rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) || rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) ||
        rdma_create_id(ch, &active, NULL, RDMA_PS_TCP)) { perror("rdma_create_id"); return 1; }
    uint8_t t = 21;
    int rc = rdma_set_option(ud, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t);
    printf("ud_ack_timeout %d\n", rc ? errno : 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(7471)};
    inet_pton(AF_INET, "192.0.2.10", &addr.sin_addr);
    if (rdma_bind_addr(listen, (struct sockaddr *)&addr) || rdma_listen(listen, 1)) { perror("listen"); return 1; }
    if (rdma_resolve_addr(active, NULL, (struct sockaddr *)&addr, 2000)) { perror("resolve_addr"); return 1; }
    rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(active, 2000)) { perror("resolve_route"); return 1; }
    rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
    if (rdma_create_qp(active, NULL, &qa)) { perror("create_qp active"); return 1; }
    set_timeout(active, 21);
    struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(active, &cp)) { perror("connect"); return 1; }
    struct rdma_cm_event *req = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
    struct rdma_cm_id *child = req->id;
    rdma_ack_cm_event(req);
    if (rdma_create_qp(child, NULL, &qa)) { perror("create_qp child"); return 1; }
    set_timeout(child, 19);
    if (rdma_accept(child, &cp)) { perror("accept"); return 1; }
    /* Both sides' ESTABLISHED events arrive on the one channel, in either order. */
    rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
    rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
    printf("active_qp_timeout %d\npassive_qp_timeout %d\n", qp_timeout(active), qp_timeout(child));
    return 0;
}
