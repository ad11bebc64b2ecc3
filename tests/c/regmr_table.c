/* regmr_table: what a verbs device answers to registration edge cases, one line per case:
 *
 *   case NAME ok|ERRNO_NAME
 *
 *   regmr_table [--device NAME] [--memlock-only]
 *
 * Run on the kernel's rxe (tests/kernel_tier.rs, inside scripts/rdma-vm) and on the simulator
 * (tests/regmr_table.rs); tests/fixtures/regmr_table.txt holds both columns and, where they
 * differ, why (docs/sim.md). Covers ibv_reg_mr / ibv_reg_mr_iova2 (access rules, unmapped,
 * read-only and PROT_NONE memory, iova offsets, wrapping and huge lengths, shared and file
 * mappings), ibv_reg_dmabuf_mr, ON_DEMAND, ibv_rereg_mr, deregistration and PD teardown with
 * live objects, queue size limits against the device's own ibv_query_device, and memlock as an
 * unprivileged user (a forked child drops to uid 65534 with RLIMIT_MEMLOCK 64 KiB).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define LW IBV_ACCESS_LOCAL_WRITE
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_device_attr dev;
static long pg;

static const char *name_of(int e) {
    static const struct { int e; const char *n; } t[] = {
        {EPERM, "EPERM"}, {ENOENT, "ENOENT"}, {EIO, "EIO"}, {EBADF, "EBADF"}, {ENOMEM, "ENOMEM"},
        {EACCES, "EACCES"}, {EFAULT, "EFAULT"}, {EBUSY, "EBUSY"}, {EINVAL, "EINVAL"},
        {ENOSPC, "ENOSPC"}, {EOPNOTSUPP, "EOPNOTSUPP"}, {EOVERFLOW, "EOVERFLOW"}, {ENOSYS, "ENOSYS"},
        {ENODEV, "ENODEV"}, {E2BIG, "E2BIG"}, {EPROTONOSUPPORT, "EPROTONOSUPPORT"}};
    static char other[32];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].e == e) return t[i].n;
    snprintf(other, sizeof other, "errno%d", e);
    return other;
}

static void line(const char *name, int ok, int err) {
    printf("case %s %s\n", name, ok ? "ok" : name_of(err));
    fflush(stdout);
}

/* One registration: prints its result and deregisters what succeeded. */
static void mr_case(const char *name, struct ibv_mr *mr) {
    int err = errno;
    line(name, mr != NULL, err);
    if (mr && ibv_dereg_mr(mr)) fprintf(stderr, "%s: dereg failed: %s\n", name, strerror(errno));
}

static void reg(const char *name, void *addr, size_t len, unsigned access) {
    errno = 0;
    mr_case(name, ibv_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, access));
}

static void reg_iova(const char *name, void *addr, size_t len, uint64_t iova, unsigned access) {
    errno = 0;
    mr_case(name, ibv_reg_mr_iova2(pd, addr, len, iova, access));
}

static char *map(size_t len, int prot, int flags) {
    void *p = mmap(NULL, len, prot, flags, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    return p;
}

static char *anon(size_t len) {
    char *p = map(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
    memset(p, 1, len);
    return p;
}

static void registration(void) {
    char *b = anon(4 * pg);
    reg("rw_4k", b, pg, RW);
    reg("unaligned_addr_and_len", b + 13, 5000, LW);
    reg("access_0", b, pg, 0);
    reg("remote_read_only", b, pg, IBV_ACCESS_REMOTE_READ);
    reg("remote_write_without_local_write", b, pg, IBV_ACCESS_REMOTE_WRITE);
    reg("remote_atomic_without_local_write", b, pg, IBV_ACCESS_REMOTE_ATOMIC);
    reg("relaxed_ordering", b, pg, RW | IBV_ACCESS_RELAXED_ORDERING);
    reg("optional_bit_29", b, pg, LW | (1u << 29));
    reg("undefined_bit_15", b, pg, LW | (1u << 15));
    reg("on_demand", b, pg, LW | IBV_ACCESS_ON_DEMAND);
    errno = 0;
    mr_case("on_demand_implicit", ibv_reg_mr_iova2(pd, NULL, SIZE_MAX, 0, LW | IBV_ACCESS_ON_DEMAND));
    reg("length_0", b, 0, LW);
    reg("length_wraps", b, SIZE_MAX - 100, LW);
    reg("length_1t_past_the_mapping", b, 1ul << 40, LW);
    reg_iova("iova_other_page_same_offset", b, 4 * pg, 0x10000000, RW);
    reg_iova("iova_0", b, 4 * pg, 0, RW);
    reg_iova("iova_offset_differs", b, 4 * pg, 0x10000123, RW);
    reg_iova("iova_offset_agrees", b + 0x123, 2 * pg, 0x10000123, RW);
    reg_iova("iova_wraps", b, 4 * pg, UINT64_MAX - pg, RW);
    reg("null_addr", NULL, pg, LW);
    reg("kernel_half_addr", (void *)0xffff888000000000ul, pg, LW);
    munmap(b + 2 * pg, 2 * pg);
    reg("partly_unmapped", b, 4 * pg, LW);
    munmap(b, 2 * pg);
    reg("unmapped", b, 2 * pg, LW);
    reg("unmapped_access_0", b, 2 * pg, 0);

    char *ro = map(2 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS);
    reg("read_only_local_write", ro, 2 * pg, LW);
    reg("read_only_access_0", ro, 2 * pg, 0);
    reg("read_only_remote_read", ro, 2 * pg, IBV_ACCESS_REMOTE_READ);
    munmap(ro, 2 * pg);
    char *none = map(2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
    reg("prot_none_access_0", none, 2 * pg, 0);
    reg("prot_none_remote_read", none, 2 * pg, IBV_ACCESS_REMOTE_READ);
    reg("prot_none_local_write", none, 2 * pg, LW);
    munmap(none, 2 * pg);

    size_t big = 256ul << 20;
    char *untouched = map(big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
    reg("untouched_256m_local_write", untouched, big, LW);
    reg("untouched_256m_access_0", untouched, big, 0);
    munmap(untouched, big);

    int mfd = memfd_create("regmr_table", MFD_CLOEXEC);
    if (ftruncate(mfd, 1 << 20)) perror("ftruncate");
    char *shared = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    reg("memfd_shared", shared, 1 << 20, RW);
    munmap(shared, 1 << 20);
    char *shared_ro = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, mfd, 0);
    reg("memfd_shared_read_only_local_write", shared_ro, 1 << 20, LW);
    munmap(shared_ro, 1 << 20);
    char *sa = map(1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
    reg("shared_anonymous", sa, 1 << 20, RW);
    munmap(sa, 1 << 20);

    /* dmabuf: NCCL's and UCX's probe (fd -1, length 0), and a descriptor that is no dma-buf */
    errno = 0;
    mr_case("dmabuf_probe_fd_-1", ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0));
    errno = 0;
    mr_case("dmabuf_memfd", ibv_reg_dmabuf_mr(pd, 0, pg, 0, mfd, LW));
    close(mfd);
}

static void rereg(void) {
    char *b = anon(4 * pg), *other = anon(4 * pg);
    struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
    struct {
        const char *name;
        int flags;
        struct ibv_pd *pd;
        void *addr;
        size_t len;
        int access;
    } t[] = {
        {"rereg_access", IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, RW},
        {"rereg_access_remote_write_without_local", IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
         IBV_ACCESS_REMOTE_WRITE},
        {"rereg_pd", IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0},
        {"rereg_translation", IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, 2 * pg, 0},
        {"rereg_no_flags", 0, NULL, NULL, 0, 0},
        {"rereg_unknown_flag", 1 << 6, NULL, NULL, 0, 0},
        {"rereg_access_undefined_bit_15", IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, LW | (1 << 15)},
        {"rereg_translation_length_0", IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, 0, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, b, 4 * pg, LW);
        if (!mr) { line(t[i].name, 0, errno); continue; }
        errno = 0;
        int rc = ibv_rereg_mr(mr, t[i].flags, t[i].pd, t[i].addr, t[i].len, t[i].access);
        line(t[i].name, rc == 0, errno ? errno : EIO);
        if (ibv_dereg_mr(mr))
            fprintf(stderr, "%s: dereg failed: %s\n", t[i].name, strerror(errno));
    }
    ibv_dealloc_pd(pd2);
}

static struct ibv_qp *rc_qp(struct ibv_pd *on, struct ibv_cq *cq, uint32_t wr, uint32_t sge) {
    struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                 .cap = {.max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = sge,
                                         .max_recv_sge = sge}};
    return ibv_create_qp(on, &a);
}

static void teardown_and_limits(void) {
    char *b = anon(pg);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_pd *p = ibv_alloc_pd(ctx);
    struct ibv_qp *qp = rc_qp(p, cq, 4, 1);
    struct ibv_mr *mr = ibv_reg_mr(p, b, pg, LW);
    errno = 0;
    int rc = ibv_dealloc_pd(p);
    line("dealloc_pd_with_live_mr_and_qp", rc == 0, rc);
    /* a receive WR that names the MR is still queued (QP in INIT) when the MR goes */
    struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = LW};
    if (qp && ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        fprintf(stderr, "modify_qp INIT: %s\n", strerror(errno));
    struct ibv_sge sge = {.addr = (uintptr_t)b, .length = (uint32_t)pg, .lkey = mr ? mr->lkey : 0};
    struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
    if (qp && (rc = ibv_post_recv(qp, &wr, &bad))) fprintf(stderr, "post_recv: %s\n", strerror(rc));
    errno = 0;
    rc = mr ? ibv_dereg_mr(mr) : ENOENT;
    line("dereg_with_live_qp_and_queued_recv", rc == 0, rc);
    rc = qp ? ibv_destroy_qp(qp) : ENOENT;
    line("destroy_qp", rc == 0, rc);
    rc = ibv_dealloc_pd(p);
    line("dealloc_pd_after_its_objects", rc == 0, rc);

    errno = 0;
    struct ibv_qp *q = rc_qp(pd, cq, (uint32_t)dev.max_qp_wr + 1, 1);
    line("create_qp_max_qp_wr_plus_1", q != NULL, errno);
    if (q) ibv_destroy_qp(q);
    errno = 0;
    q = rc_qp(pd, cq, 4, (uint32_t)dev.max_sge + 1);
    line("create_qp_max_sge_plus_1", q != NULL, errno);
    if (q) ibv_destroy_qp(q);
    errno = 0;
    struct ibv_cq *c = ibv_create_cq(ctx, dev.max_cqe + 1, NULL, NULL, 0);
    line("create_cq_max_cqe_plus_1", c != NULL, errno);
    if (c) ibv_destroy_cq(c);
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = (uint32_t)dev.max_srq_wr + 1, .max_sge = 1}};
    errno = 0;
    struct ibv_srq *s = dev.max_srq ? ibv_create_srq(pd, &sa) : NULL;
    line("create_srq_max_srq_wr_plus_1", s != NULL, dev.max_srq ? errno : EOPNOTSUPP);
    if (s) ibv_destroy_srq(s);
    struct ibv_srq_init_attr sg = {.attr = {.max_wr = 4, .max_sge = (uint32_t)dev.max_srq_sge + 1}};
    errno = 0;
    s = dev.max_srq ? ibv_create_srq(pd, &sg) : NULL;
    line("create_srq_max_srq_sge_plus_1", s != NULL, dev.max_srq ? errno : EOPNOTSUPP);
    if (s) ibv_destroy_srq(s);
    /* an SRQ's limit (the low-water mark) above its own size */
    struct ibv_srq_init_attr ok4 = {.attr = {.max_wr = 4, .max_sge = 1}};
    s = dev.max_srq ? ibv_create_srq(pd, &ok4) : NULL;
    struct ibv_srq_attr lim = {.srq_limit = 4096};
    rc = s ? ibv_modify_srq(s, &lim, IBV_SRQ_LIMIT) : EOPNOTSUPP;
    line("modify_srq_limit_above_its_size", rc == 0, rc);
    if (s) ibv_destroy_srq(s);
    ibv_destroy_cq(cq);
}

/* Forked: RLIMIT_MEMLOCK 64 KiB, then (as root) uid/gid 65534, which drops CAP_IPC_LOCK. */
static void memlock_case(const char *name, size_t len, int drop) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64 << 10, 64 << 10};
        if (setrlimit(RLIMIT_MEMLOCK, &rl)) perror("setrlimit");
        if (drop && getuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) _exit(3);
        reg(name, anon(len), len, LW);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) printf("case %s child-failed\n", name);
}

static void memlock(void) {
    memlock_case("memlock_64k_unprivileged_32k", 32 << 10, 1);
    memlock_case("memlock_64k_unprivileged_1m", 1 << 20, 1);
    if (getuid() == 0) memlock_case("memlock_64k_root_1m", 1 << 20, 0);
}

int main(int argc, char **argv) {
    const char *want = NULL;
    int memlock_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) want = argv[++i];
        else if (!strcmp(argv[i], "--memlock-only")) memlock_only = 1;
        else { fprintf(stderr, "usage: regmr_table [--device NAME] [--memlock-only]\n"); return 2; }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pg = sysconf(_SC_PAGESIZE);
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n && !ctx; i++)
        if (!want || !strcmp(ibv_get_device_name(list[i]), want)) ctx = ibv_open_device(list[i]);
    if (!ctx) { fprintf(stderr, "regmr_table: no device %s\n", want ? want : ""); return 1; }
    if (ibv_query_device(ctx, &dev)) { perror("ibv_query_device"); return 1; }
    pd = ibv_alloc_pd(ctx);
    if (!pd) { perror("ibv_alloc_pd"); return 1; }
    printf("device %s\n", ibv_get_device_name(ctx->device));
    if (!memlock_only) {
        registration();
        rereg();
        teardown_and_limits();
    }
    memlock();
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return 0;
}
