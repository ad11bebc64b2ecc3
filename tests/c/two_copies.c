/* Two different libibverbs in one process, as with a vendored plugin: this program is linked
 * against one (-libverbs: the simulated NIC) and dlopens another, private copy (RTLD_LOCAL: the
 * fake libibverbs, whose ibv_reg_mr calls ibv_reg_mr_iova2 through its PLT like rdma-core's),
 * looks its ibv_reg_mr / ibv_dereg_mr up and uses both copies interleaved, then dlcloses the
 * private one (occupying its old address range, so a stale call faults) and registers through the
 * linked one again. Each copy tells what it received in its own log (MRSHIM_SIM_LOG, FAKE_LOG);
 * the private copy's MRs carry its key pattern (rkey = lkey + 1000). Usage: two_copies LIB */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "close_and_block.h"

typedef void *(*alloc_pd_fn)(void);
typedef struct ibv_mr *(*reg_fn)(void *, void *, size_t, int);
typedef int (*dereg_fn)(struct ibv_mr *);
static char buf[4][8192] __attribute__((aligned(4096)));

static struct ibv_pd *linked_pd(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) { fprintf(stderr, "no devices (errno %d)\n", errno); exit(3); }
    struct ibv_context *ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) { perror("linked pd"); exit(3); }
    return pd;
}

static struct ibv_mr *linked_reg(struct ibv_pd *pd, int i) {
    struct ibv_mr *mr = ibv_reg_mr(pd, buf[i], 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) { perror("linked ibv_reg_mr"); exit(1); }
    if (mr->pd != pd || mr->rkey == mr->lkey + 1000) { fprintf(stderr, "linked MR made by the private copy\n"); exit(1); }
    return mr;
}

static void linked_dereg(struct ibv_mr *mr) {
    if (ibv_dereg_mr(mr)) { perror("linked ibv_dereg_mr"); exit(1); }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: two_copies LIB\n"); return 2; }
    struct ibv_pd *pd = linked_pd();
    struct ibv_mr *a = linked_reg(pd, 0);

    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    alloc_pd_fn alloc_pd = (alloc_pd_fn)dlsym(h, "fake_alloc_pd");
    reg_fn reg = (reg_fn)dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1");
    reg_fn reg_default = (reg_fn)dlsym(h, "ibv_reg_mr");
    dereg_fn dereg = (dereg_fn)dlvsym(h, "ibv_dereg_mr", "IBVERBS_1.1");
    if (!alloc_pd || !reg || !reg_default || !dereg) { fprintf(stderr, "lookup failed\n"); return 1; }
    void *ppd = alloc_pd();

    struct ibv_mr *p1 = reg(ppd, buf[1], 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!p1) { perror("private ibv_reg_mr"); return 1; }
    struct ibv_mr *b = linked_reg(pd, 2);
    struct ibv_mr *p2 = reg_default(ppd, buf[3], 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!p2) { perror("private ibv_reg_mr (dlsym)"); return 1; }
    if (p1->rkey != p1->lkey + 1000 || p2->rkey != p2->lkey + 1000) {
        fprintf(stderr, "private MR not made by the private copy\n");
        return 1;
    }
    linked_dereg(a);
    if (dereg(p1) || dereg(p2)) { perror("private ibv_dereg_mr"); return 1; }
    linked_dereg(b);
    printf("both copies ok\n");

    if (close_and_block(h)) return 1;
    linked_dereg(linked_reg(pd, 0));
    printf("after dlclose ok\n");
    return 0;
}
