/* A tiny stand-in for libibverbs.so.1 with rdma-core's symbol versions, for the hook-layer tests.
 * Like rdma-core, its ibv_reg_mr calls ibv_reg_mr_iova2 through the PLT. Every call that reaches
 * it is appended to $FAKE_LOG ("what the library really received"), one line per call. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static unsigned next_key = 100;

static void flog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void flog(const char *fmt, ...) {
    const char *p = getenv("FAKE_LOG");
    if (!p) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    buf[n++] = '\n';
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { write(fd, buf, n); close(fd); }
}

struct ibv_pd *fake_alloc_pd(void) {
    struct ibv_device *dev = calloc(1, sizeof *dev);
    strcpy(dev->name, "fake0");
    struct ibv_context *ctx = calloc(1, sizeof *ctx);
    ctx->device = dev;
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    pd->context = ctx;
    return pd;
}

static struct ibv_mr *mk(struct ibv_pd *pd, void *addr, size_t len) {
    struct ibv_mr *mr = calloc(1, sizeof *mr);
    mr->pd = pd;
    mr->context = pd ? pd->context : NULL;
    mr->addr = addr;
    mr->length = len;
    mr->lkey = __atomic_fetch_add(&next_key, 1, __ATOMIC_RELAXED);
    mr->rkey = mr->lkey + 1000;
    return mr;
}

struct ibv_mr *fake_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access) {
    flog("ibv_reg_mr_iova2 addr=%p len=%zu iova=0x%llx access=0x%x", addr, length, (unsigned long long)iova, access);
    if ((access & IBV_ACCESS_RELAXED_ORDERING) && getenv("FAKE_FAIL_RELAXED")) { errno = EINVAL; return NULL; }
    if (getenv("FAKE_FAIL_ALL")) { errno = ENOMEM; return NULL; }
    return mk(pd, addr, length);
}
__asm__(".symver fake_reg_mr_iova2, ibv_reg_mr_iova2@@IBVERBS_1.8");

struct ibv_mr *fake_reg_mr_1_1(struct ibv_pd *pd, void *addr, size_t length, int access) {
    flog("ibv_reg_mr addr=%p len=%zu access=0x%x", addr, length, access);
    /* through the PLT, as rdma-core does */
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}
__asm__(".symver fake_reg_mr_1_1, ibv_reg_mr@@IBVERBS_1.1");

struct ibv_mr *fake_reg_mr_1_0(void *pd10, void *addr, size_t length, int access) {
    flog("ibv_reg_mr@1.0 addr=%p len=%zu access=0x%x", addr, length, access);
    return mk(NULL, addr, length);
}
__asm__(".symver fake_reg_mr_1_0, ibv_reg_mr@IBVERBS_1.0");

struct ibv_mr *fake_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access) {
    flog("ibv_reg_mr_iova addr=%p len=%zu iova=0x%llx access=0x%x", addr, length, (unsigned long long)iova, access);
    return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}
__asm__(".symver fake_reg_mr_iova, ibv_reg_mr_iova@@IBVERBS_1.7");

struct ibv_mr *fake_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
    flog("ibv_reg_dmabuf_mr offset=%llu len=%zu iova=0x%llx fd=%d access=0x%x", (unsigned long long)offset, length,
         (unsigned long long)iova, fd, access);
    if (fd < 0) { errno = EOPNOTSUPP; return NULL; }
    struct ibv_mr *mr = mk(pd, (void *)(uintptr_t)offset, length);
    return mr;
}
__asm__(".symver fake_reg_dmabuf_mr, ibv_reg_dmabuf_mr@@IBVERBS_1.12");

int fake_dereg_mr_1_1(struct ibv_mr *mr) {
    flog("ibv_dereg_mr lkey=%u", mr->lkey);
    free(mr);
    return 0;
}
__asm__(".symver fake_dereg_mr_1_1, ibv_dereg_mr@@IBVERBS_1.1");

int fake_dereg_mr_1_0(struct ibv_mr *mr) {
    flog("ibv_dereg_mr@1.0 lkey=%u", mr->lkey);
    free(mr);
    return 0;
}
__asm__(".symver fake_dereg_mr_1_0, ibv_dereg_mr@IBVERBS_1.0");
