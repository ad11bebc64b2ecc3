/* Bounce defects of issue 28 item 4, one mode per defect, each in one process on a loopback RC
 * QP pair (rc_pair.h). Run on the simulator with MRSHIM_SIM_FAULTS=reg:EFAULT:relaxed,
 * MRSHIM_RETRY=bounce and MRSHIM_BOUNCE_REMOTE=announced: every registration below asks for
 * relaxed ordering, the device refuses it, the shim makes it a bounce region.
 *
 *   guard  N8: a REMOTE_WRITE region whose third page the application made PROT_NONE after
 *          registering it. A receive into its first page (ibv_post_recv folds the region), a
 *          SEND into it, and a WRITE_WITH_IMM into the guard page (its completion syncs the
 *          region). Prints "guard: ok" when the received bytes are right and the process is
 *          alive; the shim must not touch the guard page.
 *   cqex   extended CQs: the receiver's CQ is made with ibv_create_cq_ex and polled with
 *          ibv_start_poll/ibv_next_poll/ibv_end_poll; a WRITE_WITH_IMM and a SEND into a bounce
 *          region, checked byte for byte after each completion.
 *   cqex-early  the same with the extended CQ made before the context's first bounce region.
 *   uffd   N14: a 64 KiB REMOTE_READ region SENT from (the fold before the SEND starts the
 *          shim's write tracking of it), then the application's own userfaultfd registers the
 *          buffer. Prints "uffd: register errno=N (name)" (0 on success) and the bytes it SENT
 *          again after a refill ("uffd: ok" when they arrived exact).
 *   uring  N4: io_uring IORING_OP_READ_FIXED from a file into a registered (fixed) bounce
 *          buffer, then the application SENDs (announcing the read), and the peer RDMA-READs the
 *          buffer: the peer must read the file's bytes.
 *   conflict  a peer RDMA-WRITEs [40, 50) and [60, 70) of a REMOTE_WRITE|REMOTE_READ region,
 *          announced by nothing yet (the process sleeps: no poll, no post); the application then
 *          writes [0, 60) and [70, 80) and SENDs (the fold before it meets both writes). The
 *          application's [40, 50) stays (both wrote there: the shim must report it), the peer's
 *          [60, 70), which the application left alone, reaches the application at the next
 *          RECV completion (a SEND from the peer). Prints "conflict: ok" when both hold.
 *
 *   readwrite  an unsignalled RDMA READ into a bounce region, then a signalled WRITE from memory
 *          outside every bounce region on the same QP; only the WRITE's completion is polled
 *          (an RC send queue completes in order, so it also completes the READ). The READ's
 *          bytes must be in the application's buffer when the WRITE's completion returns.
 *
 * Exit 0 and "<mode>: ok"; 1 and "<mode>: stale ..." for wrong bytes; 2 for a failed call;
 * 3 for "not available here" (printed in one line). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/io_uring.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>

#include "rc_pair.h"

#define PAGE 4096
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING)

static void die(const char *what) {
    printf("%s failed: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(2);
}

static unsigned char *pages(int n) {
    void *b = mmap(NULL, (size_t)n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) die("mmap");
    return b;
}

static void wait_one(struct ibv_cq *cq, struct ibv_wc *wc) {
    int n;
    while ((n = ibv_poll_cq(cq, 1, wc)) == 0) {}
    if (n < 0 || wc->status != IBV_WC_SUCCESS) { errno = EIO; die("completion"); }
}

static void post_recv(struct ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey, uint64_t id) {
    struct ibv_sge s = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
    struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = len ? 1 : 0 }, *bad;
    if ((errno = ibv_post_recv(qp, &w, &bad))) die("ibv_post_recv");
}

static void post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, void *addr, uint32_t len, uint32_t lkey,
                      uint64_t raddr, uint32_t rkey) {
    struct ibv_sge s = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
    struct ibv_send_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op,
        .send_flags = IBV_SEND_SIGNALED, .imm_data = 9 }, *bad;
    w.wr.rdma.remote_addr = raddr;
    w.wr.rdma.rkey = rkey;
    if ((errno = ibv_post_send(qp, &w, &bad))) die("ibv_post_send");
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed * 131 + i * 7 + 1);
}

static long differing(const unsigned char *b, size_t n, unsigned seed) {
    long d = 0;
    for (size_t i = 0; i < n; i++) d += b[i] != (unsigned char)(seed * 131 + i * 7 + 1);
    return d;
}

static int guard(void) {
    struct pair p;
    if (open_pair(&p)) die("open_pair");
    unsigned char *src = pages(4), *dst = pages(4);
    struct ibv_mr *s = ibv_reg_mr(p.pd, src, 4 * PAGE, ACCESS), *d = ibv_reg_mr(p.pd, dst, 4 * PAGE, ACCESS);
    if (!s || !d) die("ibv_reg_mr");
    /* a guard page made after the registration (the NIC keeps its pages pinned) */
    if (mprotect(dst + 2 * PAGE, PAGE, PROT_NONE)) die("mprotect");
    fill(src, PAGE, 1);
    post_recv(p.qp[1], dst, PAGE, d->lkey, 1);
    post_send(p.qp[0], IBV_WR_SEND, src, PAGE, s->lkey, 0, 0);
    struct ibv_wc wc;
    wait_one(p.cq[0], &wc);
    wait_one(p.cq[1], &wc);
    long bad = differing(dst, PAGE, 1);
    if (bad) { printf("guard: stale: %ld bytes of the SEND\n", bad); return 1; }
    /* a peer's write into the guard page, announced by its immediate */
    fill(src + PAGE, PAGE, 2);
    post_recv(p.qp[1], NULL, 0, 0, 2);
    post_send(p.qp[0], IBV_WR_RDMA_WRITE_WITH_IMM, src + PAGE, PAGE, s->lkey, (uintptr_t)dst + 2 * PAGE, d->rkey);
    wait_one(p.cq[0], &wc);
    wait_one(p.cq[1], &wc);
    if (mprotect(dst + 2 * PAGE, PAGE, PROT_READ | PROT_WRITE)) die("mprotect");
    if (ibv_dereg_mr(s) || ibv_dereg_mr(d)) die("ibv_dereg_mr");
    printf("guard: ok\n");
    return 0;
}

/* Polls one completion from an extended CQ; 0 when it succeeded, with its opcode and byte_len. */
static void poll_ex(struct ibv_cq_ex *cq, enum ibv_wc_opcode *op, uint32_t *len) {
    struct ibv_poll_cq_attr a = { 0 };
    int rc;
    while ((rc = ibv_start_poll(cq, &a)) == ENOENT) {}
    if (rc) { errno = rc; die("ibv_start_poll"); }
    if (cq->status != IBV_WC_SUCCESS) { errno = EIO; die("extended completion"); }
    *op = ibv_wc_read_opcode(cq);
    *len = ibv_wc_read_byte_len(cq);
    ibv_end_poll(cq);
}

static int cqex(int early) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || !n) die("ibv_get_device_list");
    struct pair p = { .ctx = ibv_open_device(l[0]) };
    if (!p.ctx || !(p.pd = ibv_alloc_pd(p.ctx))) die("ibv_open_device");
    /* the CQ made before the context has a bounce region (`early`: UCX's and NCCL's order), or
     * after its first ones */
    struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
    struct ibv_cq_ex *x = early ? ibv_create_cq_ex(p.ctx, &ca) : NULL;
    unsigned char *src = pages(4), *dst = pages(4);
    struct ibv_mr *s = ibv_reg_mr(p.pd, src, 4 * PAGE, ACCESS), *d = ibv_reg_mr(p.pd, dst, 4 * PAGE, ACCESS);
    if (!s || !d) die("ibv_reg_mr");
    if (!early) x = ibv_create_cq_ex(p.ctx, &ca);
    if (!x) {
        if (errno == EOPNOTSUPP) { printf("cqex: extended CQs not available here\n"); return 3; }
        die("ibv_create_cq_ex");
    }
    p.cq[0] = ibv_create_cq(p.ctx, 16, NULL, NULL, 0);
    p.cq[1] = ibv_cq_ex_to_cq(x);
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_init_attr a = { .send_cq = p.cq[i], .recv_cq = p.cq[i], .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
        if (!p.cq[i] || !(p.qp[i] = ibv_create_qp(p.pd, &a))) die("ibv_create_qp");
    }
    if (modify(p.ctx, p.qp[0], p.qp[1]->qp_num) || modify(p.ctx, p.qp[1], p.qp[0]->qp_num)) die("ibv_modify_qp");
    struct ibv_wc wc;
    enum ibv_wc_opcode op;
    uint32_t len;
    for (unsigned round = 1; round <= 3; round++) {
        /* a SEND into the first page */
        fill(src, PAGE, round);
        post_recv(p.qp[1], dst, PAGE, d->lkey, round);
        post_send(p.qp[0], IBV_WR_SEND, src, PAGE, s->lkey, 0, 0);
        wait_one(p.cq[0], &wc);
        poll_ex(x, &op, &len);
        long bad = differing(dst, PAGE, round);
        if (op != IBV_WC_RECV || len != PAGE || bad) {
            printf("cqex: stale: round %u: %ld bytes of the SEND (opcode %d, byte_len %u)\n", round, bad, op, len);
            return 1;
        }
        /* a WRITE_WITH_IMM into the second page, announced by its completion */
        fill(src + PAGE, PAGE, round + 10);
        post_recv(p.qp[1], NULL, 0, 0, round);
        post_send(p.qp[0], IBV_WR_RDMA_WRITE_WITH_IMM, src + PAGE, PAGE, s->lkey, (uintptr_t)dst + PAGE, d->rkey);
        wait_one(p.cq[0], &wc);
        poll_ex(x, &op, &len);
        bad = differing(dst + PAGE, PAGE, round + 10);
        if (op != IBV_WC_RECV_RDMA_WITH_IMM || bad) {
            printf("cqex: stale: round %u: %ld bytes of the WRITE_WITH_IMM (opcode %d)\n", round, bad, op);
            return 1;
        }
    }
    if (ibv_destroy_qp(p.qp[0]) || ibv_destroy_qp(p.qp[1]) || ibv_destroy_cq(p.cq[1]) || ibv_dereg_mr(s) ||
        ibv_dereg_mr(d))
        die("teardown");
    printf("cqex: ok\n");
    return 0;
}

static int uffd(void) {
    struct pair p;
    if (open_pair(&p)) die("open_pair");
    size_t len = 16 * PAGE;
    unsigned char *src = pages(16), *dst = pages(16);
    struct ibv_mr *s = ibv_reg_mr(p.pd, src, len, ACCESS), *d = ibv_reg_mr(p.pd, dst, len, ACCESS);
    if (!s || !d) die("ibv_reg_mr");
    struct ibv_wc wc;
    for (unsigned round = 1; round <= 2; round++) {
        fill(src, PAGE, round);
        post_recv(p.qp[1], dst, PAGE, d->lkey, round);
        post_send(p.qp[0], IBV_WR_SEND, src, PAGE, s->lkey, 0, 0);
        wait_one(p.cq[0], &wc);
        wait_one(p.cq[1], &wc);
        long bad = differing(dst, PAGE, round);
        if (bad) { printf("uffd: stale: round %u: %ld bytes of the SEND\n", round, bad); return 1; }
        if (round == 2) break;
        /* the application's own userfaultfd on the buffer it sends from */
        int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) { printf("uffd: userfaultfd not available here: %s\n", strerror(errno)); return 3; }
        struct uffdio_api api = { .api = UFFD_API };
        if (ioctl(fd, UFFDIO_API, &api)) { printf("uffd: UFFDIO_API not available here: %s\n", strerror(errno)); return 3; }
        struct uffdio_register r = { .range = { .start = (uintptr_t)src, .len = len }, .mode = UFFDIO_REGISTER_MODE_MISSING };
        int e = ioctl(fd, UFFDIO_REGISTER, &r) ? errno : 0;
        printf("uffd: register errno=%d (%s)\n", e, e ? strerror(e) : "registered");
        if (!e) {
            struct uffdio_range u = { .start = (uintptr_t)src, .len = len };
            if (ioctl(fd, UFFDIO_UNREGISTER, &u)) die("UFFDIO_UNREGISTER");
        }
        close(fd);
    }
    if (ibv_dereg_mr(s) || ibv_dereg_mr(d)) die("ibv_dereg_mr");
    printf("uffd: ok\n");
    return 0;
}

/* io_uring by raw system calls (as liburing makes them): one READ_FIXED of `len` bytes of `fd`
 * into `buf`, registered as fixed buffer 0 beforehand. 0, or -errno; 1 when io_uring is not
 * available here. */
static int ring_fd = -1;
static struct io_uring_params rp;
static unsigned char *sq_ring, *cq_ring;
static struct io_uring_sqe *sqes;

static int ring_setup(void *buf, size_t len) {
    memset(&rp, 0, sizeof rp);
    ring_fd = (int)syscall(__NR_io_uring_setup, 4, &rp);
    if (ring_fd < 0) return 1;
    sq_ring = mmap(NULL, rp.sq_off.array + rp.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE, MAP_SHARED,
                   ring_fd, IORING_OFF_SQ_RING);
    cq_ring = mmap(NULL, rp.cq_off.cqes + rp.cq_entries * sizeof(struct io_uring_cqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED, ring_fd, IORING_OFF_CQ_RING);
    sqes = mmap(NULL, rp.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE, MAP_SHARED, ring_fd,
                IORING_OFF_SQES);
    if (sq_ring == MAP_FAILED || cq_ring == MAP_FAILED || sqes == MAP_FAILED) die("io_uring mmap");
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    if (syscall(__NR_io_uring_register, ring_fd, IORING_REGISTER_BUFFERS, &iov, 1)) die("IORING_REGISTER_BUFFERS");
    return 0;
}

static int read_fixed(int fd, void *buf, unsigned len) {
    unsigned *tail = (unsigned *)(sq_ring + rp.sq_off.tail), mask = *(unsigned *)(sq_ring + rp.sq_off.ring_mask);
    unsigned t = *tail, i = t & mask;
    struct io_uring_sqe *e = &sqes[i];
    memset(e, 0, sizeof *e);
    e->opcode = IORING_OP_READ_FIXED;
    e->fd = fd;
    e->addr = (uintptr_t)buf;
    e->len = len;
    e->off = 0;
    e->buf_index = 0;
    ((unsigned *)(sq_ring + rp.sq_off.array))[i] = i;
    __atomic_store_n(tail, t + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring_fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) die("io_uring_enter");
    unsigned *head = (unsigned *)(cq_ring + rp.cq_off.head);
    unsigned h = *head;
    if (h == __atomic_load_n((unsigned *)(cq_ring + rp.cq_off.tail), __ATOMIC_ACQUIRE)) { errno = EIO; die("no CQE"); }
    struct io_uring_cqe *c = &((struct io_uring_cqe *)(cq_ring + rp.cq_off.cqes))[h & *(unsigned *)(cq_ring + rp.cq_off.ring_mask)];
    int res = c->res;
    __atomic_store_n(head, h + 1, __ATOMIC_RELEASE);
    return res;
}

#define URING_LEN (64 * 1024)

/* N4: a buffer the kernel writes through io_uring's fixed-buffer pin (no page fault), then a
 * SEND that announces it, then the peer's RDMA READ of it. */
static int uring(const char *dir) {
    struct pair p;
    if (open_pair(&p)) die("open_pair");
    struct ibv_qp_attr ra = { .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    if (ibv_modify_qp(p.qp[0], &ra, IBV_QP_ACCESS_FLAGS)) die("ibv_modify_qp (remote read)");
    unsigned char *buf = pages(URING_LEN / PAGE), *got = pages(URING_LEN / PAGE), *msg = pages(1);
    struct ibv_mr *b = ibv_reg_mr(p.pd, buf, URING_LEN, ACCESS), *g = ibv_reg_mr(p.pd, got, URING_LEN, ACCESS);
    struct ibv_mr *m = ibv_reg_mr(p.pd, msg, PAGE, ACCESS);
    if (!b || !g || !m) die("ibv_reg_mr");
    char path[4096];
    snprintf(path, sizeof path, "%s/uring-data", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die("open");
    fill(got, URING_LEN, 5); /* the file's bytes */
    if (write(fd, got, URING_LEN) != URING_LEN) die("write");
    memset(got, 0, URING_LEN);
    fill(buf, URING_LEN, 4);
    struct ibv_wc wc;
    /* SENDs: every one folds the application's writes into the shadow first (tracking starts) */
    for (int i = 0; i < 2; i++) {
        post_recv(p.qp[1], msg, PAGE, m->lkey, 1);
        post_send(p.qp[0], IBV_WR_SEND, msg, 8, m->lkey, 0, 0);
        wait_one(p.cq[0], &wc);
        wait_one(p.cq[1], &wc);
    }
    if (ring_setup(buf, URING_LEN)) {
        printf("uring: io_uring not available here (%s): kernel.io_uring_disabled?\n", strerror(errno));
        return 3;
    }
    for (int i = 0; i < 2; i++) {
        post_recv(p.qp[1], msg, PAGE, m->lkey, 1);
        post_send(p.qp[0], IBV_WR_SEND, msg, 8, m->lkey, 0, 0);
        wait_one(p.cq[0], &wc);
        wait_one(p.cq[1], &wc);
    }
    int r = read_fixed(fd, buf, URING_LEN);
    if (r != URING_LEN) { errno = r < 0 ? -r : EIO; die("IORING_OP_READ_FIXED"); }
    if (differing(buf, URING_LEN, 5)) { printf("uring: the read did not land\n"); return 2; }
    /* the SEND that tells the peer to read (after a pause: a tracked buffer is checked by a
     * whole compare at most once a second after its first folds), then the peer's READ */
    usleep(1200 * 1000);
    post_recv(p.qp[1], msg, PAGE, m->lkey, 1);
    post_send(p.qp[0], IBV_WR_SEND, msg, 8, m->lkey, 0, 0);
    wait_one(p.cq[0], &wc);
    wait_one(p.cq[1], &wc);
    post_send(p.qp[1], IBV_WR_RDMA_READ, got, URING_LEN, g->lkey, (uintptr_t)buf, b->rkey);
    wait_one(p.cq[1], &wc);
    long bad = differing(got, URING_LEN, 5);
    if (bad) { printf("uring: stale: the peer read %ld of %d bytes stale\n", bad, URING_LEN); return 1; }
    printf("uring: ok\n");
    return 0;
}

static int conflict(void) {
    struct pair p;
    if (open_pair(&p)) die("open_pair");
    unsigned char *src = pages(1), *dst = pages(1), *msg = pages(1);
    fill(dst, PAGE, 1);
    fill(src, PAGE, 3);
    struct ibv_mr *s = ibv_reg_mr(p.pd, src, PAGE, ACCESS), *d = ibv_reg_mr(p.pd, dst, PAGE, ACCESS),
                  *m = ibv_reg_mr(p.pd, msg, PAGE, ACCESS);
    if (!s || !d || !m) die("ibv_reg_mr");
    /* the peer's writes, which nothing announces; no poll while they land (an idle pass would
     * bring them over first) */
    post_send(p.qp[0], IBV_WR_RDMA_WRITE, src + 40, 10, s->lkey, (uintptr_t)dst + 40, d->rkey);
    post_send(p.qp[0], IBV_WR_RDMA_WRITE, src + 60, 10, s->lkey, (uintptr_t)dst + 60, d->rkey);
    usleep(300 * 1000);
    /* the application's, over the first of them and around the second */
    unsigned char mine[PAGE];
    fill(mine, PAGE, 2);
    memcpy(dst, mine, 60);
    memcpy(dst + 70, mine + 70, 10);
    /* a SEND: the fold before it sees both */
    post_recv(p.qp[0], msg, 64, m->lkey, 1);
    post_send(p.qp[1], IBV_WR_SEND, msg + 64, 64, m->lkey, 0, 0);
    struct ibv_wc wc;
    for (int i = 0; i < 4; i++) wait_one(i < 3 ? p.cq[0] : p.cq[1], &wc); /* two WRITEs, a RECV; a SEND */
    /* the peer's SEND: its RECV completion brings over what the peer wrote */
    post_recv(p.qp[1], msg + 128, 64, m->lkey, 2);
    post_send(p.qp[0], IBV_WR_SEND, msg + 192, 64, m->lkey, 0, 0);
    wait_one(p.cq[0], &wc);
    wait_one(p.cq[1], &wc);
    long mine_lost = 0, theirs_lost = 0;
    for (int i = 0; i < 80; i++) {
        if (i >= 60 && i < 70) theirs_lost += dst[i] != src[i];
        else mine_lost += dst[i] != mine[i];
    }
    if (mine_lost || theirs_lost) {
        printf("conflict: stale: %ld of the application's 70 bytes, %ld of the peer's 10 around them\n", mine_lost,
               theirs_lost);
        return 1;
    }
    if (ibv_dereg_mr(s) || ibv_dereg_mr(d) || ibv_dereg_mr(m)) die("ibv_dereg_mr");
    printf("conflict: ok\n");
    return 0;
}

static int readwrite(void) {
    struct pair p;
    if (open_pair(&p)) die("open_pair");
    unsigned char *src = pages(1), *dst = pages(1), *out = pages(1), *in = pages(1);
    fill(src, PAGE, 4);
    /* src and dst ask for relaxed ordering: bounce regions; out and in do not: plain MRs */
    int plain = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    struct ibv_mr *s = ibv_reg_mr(p.pd, src, PAGE, ACCESS), *d = ibv_reg_mr(p.pd, dst, PAGE, ACCESS),
                  *o = ibv_reg_mr(p.pd, out, PAGE, plain), *i = ibv_reg_mr(p.pd, in, PAGE, plain);
    if (!s || !d || !o || !i) die("ibv_reg_mr");
    struct ibv_qp_attr ra = { .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    if (ibv_modify_qp(p.qp[1], &ra, IBV_QP_ACCESS_FLAGS)) die("ibv_modify_qp");
    struct ibv_sge rs = { .addr = (uintptr_t)dst, .length = PAGE, .lkey = d->lkey };
    struct ibv_send_wr r = { .wr_id = 1, .sg_list = &rs, .num_sge = 1, .opcode = IBV_WR_RDMA_READ }, *bad;
    r.wr.rdma.remote_addr = (uintptr_t)src;
    r.wr.rdma.rkey = s->rkey;
    if ((errno = ibv_post_send(p.qp[0], &r, &bad))) die("ibv_post_send READ");
    fill(out, 64, 5);
    post_send(p.qp[0], IBV_WR_RDMA_WRITE, out, 64, o->lkey, (uintptr_t)in, i->rkey);
    struct ibv_wc wc;
    wait_one(p.cq[0], &wc);
    long stale = differing(dst, PAGE, 4);
    if (stale) {
        printf("readwrite: stale: %ld of the READ's %d bytes after the WRITE's completion\n", stale, PAGE);
        return 1;
    }
    if (ibv_dereg_mr(s) || ibv_dereg_mr(d) || ibv_dereg_mr(o) || ibv_dereg_mr(i)) die("ibv_dereg_mr");
    printf("readwrite: ok\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "guard")) return guard();
    if (!strcmp(mode, "cqex")) return cqex(0);
    if (!strcmp(mode, "cqex-early")) return cqex(1);
    if (!strcmp(mode, "uffd")) return uffd();
    if (!strcmp(mode, "uring") && argc > 2) return uring(argv[2]);
    if (!strcmp(mode, "conflict")) return conflict();
    if (!strcmp(mode, "readwrite")) return readwrite();
    fprintf(stderr, "usage: bounce_defects guard|cqex|cqex-early|uffd|uring DIR|conflict|readwrite\n");
    return 2;
}
