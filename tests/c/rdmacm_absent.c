/* Links librdmacm's multicast and ECE calls, as pyverbs does, and prints what each returns on
 * the simulated librdmacm: "name ret errno" per line (errno 0 when the call succeeded); and
 * the id's context and PD once bound. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static void show(const char *name, int ret) {
    printf("%s %d %d\n", name, ret, ret ? errno : 0);
}

int main(void) {
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id;
    if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_UDP)) {
        perror("rdma_create_id");
        return 1;
    }
    /* Bound to a port's address, the id has its device's context and PD, as rdma-core's. */
    struct sockaddr_in local = {.sin_family = AF_INET};
    inet_pton(AF_INET, "192.0.2.10", &local.sin_addr);
    show("bind", rdma_bind_addr(id, (struct sockaddr *)&local));
    printf("verbs=%d pd=%d pd_on_verbs=%d\n", id->verbs != NULL, id->pd != NULL, id->pd && id->pd->context == id->verbs);
    struct sockaddr_in mc = {.sin_family = AF_INET};
    inet_pton(AF_INET, "239.1.1.1", &mc.sin_addr);
    show("join", rdma_join_multicast(id, (struct sockaddr *)&mc, NULL));
    show("join_null", rdma_join_multicast(id, NULL, NULL));
    struct rdma_cm_join_mc_attr_ex attr = {
        .comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        .join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
        .addr = (struct sockaddr *)&mc,
    };
    show("join_ex", rdma_join_multicast_ex(id, &attr, NULL));
    attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
    show("join_ex_no_flags", rdma_join_multicast_ex(id, &attr, NULL));
    attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
    show("join_ex_reserved", rdma_join_multicast_ex(id, &attr, NULL));
    show("leave", rdma_leave_multicast(id, (struct sockaddr *)&mc));
    struct ibv_ece ece = {.vendor_id = 0x15b3};
    show("set_local_ece", rdma_set_local_ece(id, &ece));
    ece.vendor_id = 0;
    show("set_local_ece_no_vendor", rdma_set_local_ece(id, &ece));
    memset(&ece, 0xff, sizeof ece);
    show("get_remote_ece", rdma_get_remote_ece(id, &ece));
    printf("remote_ece %#x %#x %#x\n", ece.vendor_id, ece.options, ece.comp_mask);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return 0;
}
