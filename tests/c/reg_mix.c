/* Registrations of which only some fail, and requests invalid by the verbs specification.
 *
 *   reg_mix mix N        N host buffers of 64 KiB registered with LOCAL_WRITE (a send/receive
 *                        buffer), every 4th also with RELAXED_ORDERING (UCX registers both
 *                        ways); all stay registered. Prints "mix N ok=K failed=F".
 *   reg_mix bad-flags    pyverbs' test_reg_mr_bad_flags: ibv_reg_mr with REMOTE_WRITE or
 *                        REMOTE_ATOMIC but no LOCAL_WRITE (with and without REMOTE_READ and
 *                        RELAXED_ORDERING), and an undefined access bit; one line per request
 *                        with "ok" or the errno's name.
 * Exit 0 unless the device could not be opened (3). */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ibv_pd *open_pd(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) { fprintf(stderr, "no devices\n"); exit(3); }
    struct ibv_context *ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) { fprintf(stderr, "no pd\n"); exit(3); }
    return pd;
}

/* Not a compile-time constant: rdma-core's ibv_reg_mr macro then goes to __ibv_reg_mr, as
 * pyverbs' and most libraries' calls do. */
static volatile int access_of;

static int mix(int n) {
    struct ibv_pd *pd = open_pd();
    int ok = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        void *buf = aligned_alloc(4096, 65536);
        memset(buf, i, 65536);
        access_of = IBV_ACCESS_LOCAL_WRITE | (i % 4 == 0 ? IBV_ACCESS_RELAXED_ORDERING : 0);
        if (ibv_reg_mr(pd, buf, 65536, access_of)) ok++;
        else failed++;
    }
    printf("mix %d ok=%d failed=%d\n", n, ok, failed);
    return 0;
}

static int bad_flags(void) {
    struct ibv_pd *pd = open_pd();
    static char buf[1 << 16] __attribute__((aligned(4096)));
    const int cases[] = {
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING,
        IBV_ACCESS_LOCAL_WRITE | 0x400,
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        access_of = cases[i];
        errno = 0;
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, access_of);
        if (mr) {
            printf("access %#x ok\n", cases[i]);
            ibv_dereg_mr(mr);
        } else {
            printf("access %#x %s\n", cases[i], strerrorname_np(errno));
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "mix")) return mix(atoi(argv[2]));
    if (argc == 2 && !strcmp(argv[1], "bad-flags")) return bad_flags();
    fprintf(stderr, "usage: reg_mix mix N | reg_mix bad-flags\n");
    return 3;
}
