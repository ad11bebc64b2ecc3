/* Loads verbs the way NCCL/MCCL/RCCL do: never linked; dlopen("libibverbs.so") with fallback
 * "libibverbs.so.1", then dlvsym(handle, name, version). Prints which object each function came
 * from. Works against the fake library (fake_alloc_pd) and against a real/simulated device. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#undef ibv_reg_mr

static void *h;
static void *sym(const char *name, const char *ver) {
    void *p = dlvsym(h, name, ver);
    Dl_info info;
    const char *from = "none";
    if (p && dladdr(p, &info) && info.dli_fname) {
        from = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
    }
    printf("%s@%s from %s\n", name, ver, from);
    return p;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    h = dlopen("libibverbs.so", RTLD_NOW);
    if (!h) h = dlopen("libibverbs.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int) = sym("ibv_reg_mr", "IBVERBS_1.1");
    struct ibv_mr *(*iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned) = sym("ibv_reg_mr_iova2", "IBVERBS_1.8");
    struct ibv_mr *(*dmabuf)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int) = sym("ibv_reg_dmabuf_mr", "IBVERBS_1.12");
    int (*dereg)(struct ibv_mr *) = sym("ibv_dereg_mr", "IBVERBS_1.1");
    struct ibv_pd *pd = NULL;
    struct ibv_pd *(*fake_pd)(void) = dlsym(h, "fake_alloc_pd");
    if (fake_pd) {
        pd = fake_pd();
    } else {
        struct ibv_device **(*list)(int *) = sym("ibv_get_device_list", "IBVERBS_1.1");
        struct ibv_context *(*open)(struct ibv_device *) = sym("ibv_open_device", "IBVERBS_1.1");
        struct ibv_pd *(*alloc_pd)(struct ibv_context *) = sym("ibv_alloc_pd", "IBVERBS_1.1");
        int n = 0;
        struct ibv_device **devs = list(&n);
        if (!devs || n == 0) { fprintf(stderr, "no devices\n"); return 2; }
        struct ibv_context *ctx = open(devs[0]);
        if (!ctx) { perror("open"); return 2; }
        pd = alloc_pd(ctx);
        if (!pd) { perror("alloc_pd"); return 2; }
    }
    size_t len = 1 << 20;
    char *buf = aligned_alloc(4096, len);
    memset(buf, 0, len);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    /* NCCL's dmabuf probe */
    errno = 0;
    struct ibv_mr *p = dmabuf ? dmabuf(pd, 0, 0, 0, -1, 0) : NULL;
    printf("probe %s errno=%d\n", p ? "ok" : "failed", errno);
    struct ibv_mr *a = reg_mr(pd, buf, len, access);
    if (a) printf("reg_mr ok lkey=%u rkey=%u\n", a->lkey, a->rkey);
    else printf("reg_mr failed errno=%d\n", errno);
    errno = 0;
    struct ibv_mr *b = iova2 ? iova2(pd, buf, len, (uintptr_t)buf, access | IBV_ACCESS_RELAXED_ORDERING) : NULL;
    if (b) printf("iova2 ok lkey=%u rkey=%u\n", b->lkey, b->rkey);
    else printf("iova2 failed errno=%d\n", errno);
    if (!strcmp(mode, "compat10")) {
        struct ibv_mr *(*reg10)(void *, void *, size_t, int) = sym("ibv_reg_mr", "IBVERBS_1.0");
        int (*dereg10)(void *) = sym("ibv_dereg_mr", "IBVERBS_1.0");
        struct ibv_mr *c = reg10 ? reg10(pd, buf, 4096, 1) : NULL;
        printf("reg_mr@1.0 %s\n", c ? "ok" : "failed");
        if (c && dereg10) printf("dereg@1.0 rc=%d\n", dereg10(c));
    }
    if (b) dereg(b);
    if (a) printf("dereg rc=%d\n", dereg(a));
    return 0;
}
