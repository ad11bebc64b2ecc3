/* Registration latency for the retry benchmark: N pairs of ibv_reg_mr_iova2 + ibv_dereg_mr of a
 * 64 KiB buffer, with or without IBV_ACCESS_RELAXED_ORDERING; prints "median_ns X failures F".
 * Usage: bench_rescue N RELAXED(0|1) */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int n = atoi(argv[1]);
    unsigned access = 0xf | (atoi(argv[2]) ? IBV_ACCESS_RELAXED_ORDERING : 0);
    struct ibv_device **l = ibv_get_device_list(NULL);
    struct ibv_context *ctx = l ? ibv_open_device(l[0]) : NULL;
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) return 3;
    char *buf = aligned_alloc(4096, 65536);
    uint64_t *t = calloc(n, sizeof *t);
    int fails = 0;
    for (int i = 0; i < n; i++) {
        uint64_t a = now();
        struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, 65536, (uintptr_t)buf, access);
        if (mr) ibv_dereg_mr(mr); else fails++;
        t[i] = now() - a;
    }
    qsort(t, n, sizeof *t, cmp);
    printf("median_ns %llu failures %d\n", (unsigned long long)t[n / 2], fails);
    return 0;
}
