/* ibv_rereg_mr under the shim, on the simulator (tests/shim_rereg.rs). A loopback pair of RC QPs;
 * the receiving buffer's MR is rereg'ed to a new, larger buffer (CHANGE_TRANSLATION), then a
 * pattern goes through RDMA WRITE_WITH_IMM to the new address with the MR's rkey after the call,
 * and the bytes that arrived are checked; the old buffer must stay untouched. Without the rereg
 * taking effect the write lands outside the MR (a remote access error) or in the old buffer.
 *   rereg plain   plain MRs: the rereg must succeed
 *   rereg bounce  MRs that ask for RELAXED_ORDERING (run with MRSHIM_SIM_FAULTS=reg:EFAULT:relaxed
 *                 and MRSHIM_RETRY=bounce: bounce regions); a refused rereg (IBV_REREG_MR_ERR_CMD)
 *                 falls back to ibv_dereg_mr + ibv_reg_mr, as UCX and Open MPI do
 * First a rereg with input libibverbs rejects (no address: "bad input ret -1 errno 22" expected).
 * Prints "old ADDR new ADDR", "bad input ret R errno E", "rereg ret R errno E", "fallback dereg+reg" when it fell back,
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

#include "rc_pair.h"

#define OLD_LEN 65536
#define NEW_LEN 131072

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
    /* input libibverbs rejects itself (a translation without an address): IBV_REREG_MR_ERR_INPUT,
     * EINVAL, the MR unchanged, whatever the MR is */
    int in = ibv_rereg_mr(d, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, NEW_LEN, 0);
    printf("bad input ret %d errno %d\n", in, in ? errno : 0);
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
