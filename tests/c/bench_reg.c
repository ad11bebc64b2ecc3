/* Registration latency and throughput on whatever libibverbs is loaded (the simulator in the
 * benchmark). Usage: bench_reg lat N | bench_reg thr THREADS N
 * lat: prints "median_reg_ns X median_dereg_ns Y" over N reg+dereg pairs of one 64 KiB buffer.
 * thr: THREADS threads each do N reg+dereg pairs; prints "calls C seconds S". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#undef ibv_reg_mr

static struct ibv_pd *pd;

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static long per_thread;
static void *worker(void *arg) {
    (void)arg;
    char *buf = aligned_alloc(4096, 65536);
    memset(buf, 1, 65536);
    for (long i = 0; i < per_thread; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!mr) { perror("ibv_reg_mr"); exit(3); }
        ibv_dereg_mr(mr);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: bench_reg lat N | thr THREADS N\n"); return 2; }
    /* the fake library of the hook tests has no device: it hands out a pd directly */
    struct ibv_pd *(*fake_pd)(void) = (struct ibv_pd *(*)(void))dlsym(RTLD_DEFAULT, "fake_alloc_pd");
    if (fake_pd) {
        pd = fake_pd();
    } else {
        int n = 0;
        struct ibv_device **devs = ibv_get_device_list(&n);
        if (!devs || !n) { fprintf(stderr, "no device\n"); return 2; }
        struct ibv_context *ctx = ibv_open_device(devs[0]);
        pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    }
    if (!pd) { perror("pd"); return 2; }
    if (!strcmp(argv[1], "lat")) {
        long iters = atol(argv[2]);
        uint64_t *r = malloc(iters * sizeof *r), *d = malloc(iters * sizeof *d);
        char *buf = aligned_alloc(4096, 65536);
        memset(buf, 1, 65536);
        for (long i = 0; i < iters; i++) {
            uint64_t t0 = now();
            struct ibv_mr *mr = ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
            uint64_t t1 = now();
            if (!mr) { perror("ibv_reg_mr"); return 3; }
            ibv_dereg_mr(mr);
            uint64_t t2 = now();
            r[i] = t1 - t0;
            d[i] = t2 - t1;
        }
        qsort(r, iters, sizeof *r, cmp);
        qsort(d, iters, sizeof *d, cmp);
        printf("median_reg_ns %llu median_dereg_ns %llu\n", (unsigned long long)r[iters / 2], (unsigned long long)d[iters / 2]);
    } else {
        int threads = atoi(argv[2]);
        per_thread = argc > 3 ? atol(argv[3]) : 10000;
        pthread_t t[64];
        uint64_t t0 = now();
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        double s = (now() - t0) / 1e9;
        printf("calls %ld seconds %.6f\n", 2 * per_thread * threads, s);
    }
    return 0;
}
