/* Registration latency and throughput on whatever libibverbs is loaded (the simulator in the
 * benchmark). Usage: bench_reg lat N | bench_reg thr THREADS N
 * lat: prints "median_reg_ns X median_dereg_ns Y" over N reg+dereg pairs of one 64 KiB buffer.
 * thr: THREADS threads each do N reg+dereg pairs; prints "calls C seconds S".
 * rescue: N ibv_reg_mr_iova2 + ibv_dereg_mr pairs, with RELAXED_ORDERING if RELAXED is 1, each
 * pair timed (failures allowed: the retry benchmark rescues them); prints
 * "median_ns X failures F".
 * write: N write(2)s of a BYTES-byte line to PATH opened O_APPEND (the floor of one record on
 * that file system); prints "median_write_ns X". Needs no device. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
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

static int write_floor(long iters, const char *path, size_t bytes) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) { perror(path); return 2; }
    char *line = malloc(bytes);
    memset(line, 'x', bytes);
    line[bytes - 1] = '\n';
    uint64_t *t = malloc(iters * sizeof *t);
    for (long i = 0; i < iters; i++) {
        uint64_t t0 = now();
        if (write(fd, line, bytes) != (ssize_t)bytes) { perror("write"); return 3; }
        t[i] = now() - t0;
    }
    close(fd);
    unlink(path);
    qsort(t, iters, sizeof *t, cmp);
    printf("median_write_ns %llu\n", (unsigned long long)t[iters / 2]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: bench_reg lat N | thr THREADS N | rescue N RELAXED | write N PATH BYTES\n"); return 2; }
    if (!strcmp(argv[1], "write") && argc > 4) return write_floor(atol(argv[2]), argv[3], (size_t)atol(argv[4]));
    /* the fake library of the hook tests has no device: it hands out a pd directly */
    struct ibv_pd *(*fake_pd)(void) = (struct ibv_pd *(*)(void))dlsym(RTLD_DEFAULT, "fake_alloc_pd");
    if (fake_pd) {
        pd = fake_pd();
    } else {
        /* looked up, not linked: the fake library has no device functions to link against */
        struct ibv_device **(*get_list)(int *) = (struct ibv_device **(*)(int *))dlsym(RTLD_DEFAULT, "ibv_get_device_list");
        struct ibv_context *(*open_dev)(struct ibv_device *) = (struct ibv_context *(*)(struct ibv_device *))dlsym(RTLD_DEFAULT, "ibv_open_device");
        struct ibv_pd *(*alloc_pd)(struct ibv_context *) = (struct ibv_pd *(*)(struct ibv_context *))dlsym(RTLD_DEFAULT, "ibv_alloc_pd");
        if (!get_list || !open_dev || !alloc_pd) { fprintf(stderr, "no device functions\n"); return 2; }
        int n = 0;
        struct ibv_device **devs = get_list(&n);
        if (!devs || !n) { fprintf(stderr, "no device\n"); return 2; }
        struct ibv_context *ctx = open_dev(devs[0]);
        pd = ctx ? alloc_pd(ctx) : NULL;
    }
    if (!pd) { perror("pd"); return 2; }
    if (!strcmp(argv[1], "rescue")) {
        long iters = atol(argv[2]);
        unsigned access = 0xf | (argc > 3 && atoi(argv[3]) ? IBV_ACCESS_RELAXED_ORDERING : 0);
        uint64_t *t = malloc(iters * sizeof *t);
        char *buf = aligned_alloc(4096, 65536);
        int fails = 0;
        for (long i = 0; i < iters; i++) {
            uint64_t t0 = now();
            struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, 65536, (uintptr_t)buf, access);
            if (mr) ibv_dereg_mr(mr); else fails++;
            t[i] = now() - t0;
        }
        qsort(t, iters, sizeof *t, cmp);
        printf("median_ns %llu failures %d\n", (unsigned long long)t[iters / 2], fails);
    } else if (!strcmp(argv[1], "lat")) {
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
