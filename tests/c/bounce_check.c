/* The generative differential checker of the bounce layer (issue 28 item 6; driven by
 * tests/bounce_checker.rs and scripts/bounce-soak).
 *
 *   bounce_check SEED NTXN FEATURES [SKIP]
 *
 * Two processes (this one, "A", and a child it execs, "B", talking over a socketpair) derive the
 * same random program of NTXN transactions from SEED and run it on RC QPs between them: SEND/RECV
 * (own receive queues, an SRQ, two-SGE receives, repeated wr_ids), RDMA WRITE announced by a SEND
 * or by WRITE_WITH_IMM (with or without a receive buffer), RDMA READ announced by a SEND,
 * application refills, deregistration while a completion is pending, re-registration (same or a
 * new buffer), QP destruction with receives posted, a post refused with the send queue full, two
 * threads per process at once, and — labelled as contract exclusions — peer writes nothing
 * announces and reads of data written after the owner's last SEND. Each transaction's choices
 * come from (SEED, its index) alone, so dropping transactions (SKIP: comma-separated indices,
 * for shrinking) leaves the others as they were; what a transaction needs that a dropped one
 * would have provided is resolved against the current state.
 *
 * Output (stdout of A, A's lines then B's): one `T` line describing each transaction, one `X`
 * line per contract exclusion exercised (and the slot it taints), and after every completion a
 * line with the completion's fields and a 64-bit digest of every application-visible slot the
 * process owns at that moment (slots a pending operation may write are left out); a trailing `*`
 * marks a slot whose bytes a contract exclusion may have made differ, followed by `w` and/or `r`:
 * which kind (an unannounced write into it, an unannounced read of it) its taint came from, and
 * `:W:O`, the digests of the bytes the write may have changed and of those no exclusion may have.
 * The same program run with and without bounce must print the same lines but for starred slots. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NREG 4   /* regions per process: 0, 1 bounce (remote access per seed), 2 bounce local-only, 3 plain MR */
#define NSLOT 4  /* slots per region */
#define NQP 3    /* QP 2 receives from the SRQ when the feature is on */
#define QSRQ 2
#define MAXK 4

enum {
    F_WRITE = 1 << 0, F_IMM = 1 << 1, F_IMMBUF = 1 << 2, F_READ = 1 << 3, F_SRQ = 1 << 4, F_DUPID = 1 << 5,
    F_THREADS = 1 << 6, F_DEREG = 1 << 7, F_MSGE = 1 << 8, F_REFUSE = 1 << 9, F_DESTROY = 1 << 10,
    F_REREG = 1 << 11, F_UNANN = 1 << 12, F_UNANN_READ = 1 << 13, F_FILL = 1 << 14,
};
static const struct { const char *name; unsigned bit; } FEATURES[] = {
    {"write", F_WRITE}, {"imm", F_IMM}, {"immbuf", F_IMMBUF}, {"read", F_READ}, {"srq", F_SRQ},
    {"dupid", F_DUPID}, {"threads", F_THREADS}, {"dereg", F_DEREG}, {"msge", F_MSGE}, {"refuse", F_REFUSE},
    {"destroy", F_DESTROY}, {"rereg", F_REREG}, {"unannounced", F_UNANN}, {"unannounced-read", F_UNANN_READ},
    {"fill", F_FILL},
};

/* access of each region, per side (derived from the seed) */
#define RW (IBV_ACCESS_REMOTE_WRITE)
#define RR (IBV_ACCESS_REMOTE_READ)

static int me;          /* 0 = A, 1 = B */
static int sock = -1;
static uint64_t seed;
static int ntxn;
static unsigned feat;
static unsigned char *skip;

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq[NQP];
static struct ibv_qp *qp[NQP];
static struct ibv_srq *srq;
static uint32_t peer_qpn[NQP];
static int max_send[NQP];

struct region { char *mem; char *buf; struct ibv_mr *mr; };
static struct region reg[NREG];
struct remote { uint64_t addr; uint32_t rkey; };
static struct remote peer[NREG];
static size_t slotsz[2][NREG];
static unsigned acc[2][NREG];

/* The model, the same in both processes: per slot of each side, whether its bytes may differ
 * (bit 1) and whether a shadow may still hold peer bytes the application has not seen (bit 2),
 * and which exclusions it came from (TW: an unannounced write, TR: an unannounced read);
 * for each kind, the bytes [lo, hi) of the slot it may have made differ (meaningful while its bit
 * is set); whether the application wrote it since its last SEND (a read of it is then
 * unannounced). */
static unsigned char taint[2][NREG][NSLOT], dirty_rd[2][NREG][NSLOT];
static size_t span_w[2][NREG][NSLOT][2], span_r[2][NREG][NSLOT][2];
/* The unannounced write that made a slot's write span (none once anything else changed it): its
 * window, the digest of the bytes it carried (the writer's, passed over the socket for the trace
 * only) and the kinds those bytes carried. */
static size_t wlast[2][NREG][NSLOT][2];
static uint64_t wlast_digest[2][NREG][NSLOT];
static unsigned char wlast_kinds[2][NREG][NSLOT];
#define TW 4
#define TR 8
#define TAINTS (1 | TW | TR)
/* own slots a pending operation may write (left out of digests) */
static unsigned char inflight[NREG][NSLOT];
static long nops, ncompl;

static FILE *tr;        /* this process's trace */
static char *trbuf;
static size_t trlen;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bounce_check %c: ", "AB"[me]);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (errno %d)\n", errno);
    va_end(ap);
    exit(3);
}

/* ------------------------------------------------------------------ random */

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t rs;
static uint64_t rnd(void) { return rs = mix(rs); }
static unsigned below(unsigned n) { return n ? (unsigned)(rnd() % n) : 0; }
static int coin(void) { return rnd() & 1; }

/* Fills with a pattern of its own: random bytes, a small alphabet (many bytes equal to what
 * was there before), or one value. */
static void pattern(char *p, size_t n, uint64_t k) {
    uint64_t s = mix(k);
    int mode = (int)(s % 3);
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) s = mix(s);
        unsigned char b = (unsigned char)(s >> (8 * (i % 8)));
        p[i] = (char)(mode == 0 ? b : mode == 1 ? (b & 3) : (unsigned char)(k & 0xff));
    }
}

/* ------------------------------------------------------------------ socket to the peer */

static void xwrite(const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(sock, c, n);
        if (w <= 0) die("peer socket write");
        c += w;
        n -= (size_t)w;
    }
}
static void xread(void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(sock, c, n);
        if (r <= 0) die("peer socket read (peer gone)");
        c += r;
        n -= (size_t)r;
    }
}
/* Both at the same point of the program (ordering only: never how a process learns of data). */
static void barrier(void) {
    char b = 1;
    xwrite(&b, 1);
    xread(&b, 1);
}
static void xchg(const void *mine, void *theirs, size_t n) {
    xwrite(mine, n);
    xread(theirs, n);
}

/* ------------------------------------------------------------------ trace */

static uint64_t fnv(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}
static char *slot_ptr(int r, int s) { return reg[r].buf + (size_t)s * slotsz[me][r]; }

/* One line: what happened, then the digest of the slots in `mask` (bit r*NSLOT+s) that no pending
 * operation may write. */
static void line_to(FILE *f, unsigned mask, const char *fmt, ...) {
    va_list ap;
    fputc("AB"[me], f);
    fputc(' ', f);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputs(" |", f);
    for (int r = 0; r < NREG; r++)
        for (int s = 0; s < NSLOT; s++) {
            if (!(mask >> (r * NSLOT + s) & 1) || inflight[r][s]) continue;
            unsigned t = taint[me][r][s];
            fprintf(f, " %d.%d=%016llx%s%s%s", r, s, (unsigned long long)fnv(slot_ptr(r, s), slotsz[me][r]),
                    t & 1 ? "*" : "", t & 1 && t & TW ? "w" : "", t & 1 && t & TR ? "r" : "");
            /* which bytes differ tells which exclusion is the reason (the oracle's compare_detail):
             * `:W:O`, the digests of the bytes an unannounced write may have made differ and of
             * those no exclusion may have */
            if (t & 1) {
                const size_t *w = span_w[me][r][s], *rd = span_r[me][r][s];
                const char *p = slot_ptr(r, s);
                uint64_t hw = 0xcbf29ce484222325ull, ho = hw;
                for (size_t b = 0; b < slotsz[me][r]; b++) {
                    int in_w = (t & TW) && b >= w[0] && b < w[1], in_r = (t & TR) && b >= rd[0] && b < rd[1];
                    if (in_w) hw = (hw ^ (unsigned char)p[b]) * 0x100000001b3ull;
                    else if (!in_r) ho = (ho ^ (unsigned char)p[b]) * 0x100000001b3ull;
                }
                fprintf(f, ":%016llx:%016llx", (unsigned long long)hw, (unsigned long long)ho);
                /* `:1K`/`:0K`: whether the write's window holds what the write carried (it
                 * arrived) and the kinds its bytes carried (`-`: none) */
                const size_t *wl = wlast[me][r][s];
                if ((t & TW) && wl[1] > wl[0] && wl[0] == w[0] && wl[1] == w[1]) {
                    unsigned k = wlast_kinds[me][r][s];
                    fprintf(f, ":%d%s%s%s", fnv(p + wl[0], wl[1] - wl[0]) == wlast_digest[me][r][s],
                            k & TW ? "w" : "", k & TR ? "r" : "", k ? "" : "-");
                }
            }
        }
    fputc('\n', f);
}
#define ALL 0xffffffffu

static const char *opname(enum ibv_wc_opcode o) {
    switch (o) {
    case IBV_WC_SEND: return "SEND";
    case IBV_WC_RDMA_WRITE: return "WRITE";
    case IBV_WC_RDMA_READ: return "READ";
    case IBV_WC_RECV: return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_IMM";
    default: return "OTHER";
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* The next completion of CQ q (one at a time: which completions a step consumes does not depend on timing). */
static struct ibv_wc wait_wc(int q) {
    struct ibv_wc wc;
    double t0 = now_s();
    for (long spins = 0;; spins++) {
        int n = ibv_poll_cq(cq[q], 1, &wc);
        if (n < 0) die("poll_cq %d", n);
        if (n == 1) {
            __atomic_fetch_add(&ncompl, 1, __ATOMIC_RELAXED);
            return wc;
        }
        if (spins % 4096 == 4095) {
            if (now_s() - t0 > 30) die("no completion on QP %d within 30 s", q);
            sched_yield();
        }
    }
}
/* Waits for the next completion of QP q and traces it with the digest of `mask`. */
static struct ibv_wc step(FILE *f, int q, unsigned mask, const char *tag, int i, int j) {
    struct ibv_wc wc = wait_wc(q);
    int recv = !wc.status && (wc.opcode & IBV_WC_RECV);
    line_to(f, mask, "%d%s.%d %s st=%d len=%u id=%llu imm=%u", i, tag, j, wc.status ? "ERR" : opname(wc.opcode),
            wc.status, recv ? wc.byte_len : 0, (unsigned long long)wc.wr_id,
            wc.wc_flags & IBV_WC_WITH_IMM ? wc.imm_data : 0);
    return wc;
}

/* ------------------------------------------------------------------ verbs */

static struct ibv_sge sge(int r, int s, size_t off, size_t len) {
    struct ibv_sge g = { .addr = (uintptr_t)(slot_ptr(r, s) + off), .length = (uint32_t)len, .lkey = reg[r].mr->lkey };
    return g;
}
static uint64_t raddr(int r, int s) { return peer[r].addr + (uint64_t)s * slotsz[!me][r]; }

static int post_send(int q, enum ibv_wr_opcode op, struct ibv_sge *sg, int n, uint64_t ra, uint32_t rkey, uint64_t id,
                     uint32_t imm) {
    struct ibv_send_wr wr = { .wr_id = id, .sg_list = sg, .num_sge = n, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
                              .imm_data = imm }, *bad = NULL;
    wr.wr.rdma.remote_addr = ra;
    wr.wr.rdma.rkey = rkey;
    __atomic_fetch_add(&nops, 1, __ATOMIC_RELAXED);
    return ibv_post_send(qp[q], &wr, &bad);
}
static void must_send(int q, enum ibv_wr_opcode op, struct ibv_sge *sg, int n, uint64_t ra, uint32_t rkey, uint64_t id,
                      uint32_t imm) {
    int rc = post_send(q, op, sg, n, ra, rkey, id, imm);
    if (rc) { errno = rc; die("post_send op %d on QP %d", op, q); }
}
static void must_recv(int q, struct ibv_sge *sg, int n, uint64_t id) {
    struct ibv_recv_wr wr = { .wr_id = id, .sg_list = sg, .num_sge = n }, *bad = NULL;
    __atomic_fetch_add(&nops, 1, __ATOMIC_RELAXED);
    int rc = q == QSRQ && srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp[q], &wr, &bad);
    if (rc) { errno = rc; die("post_recv on QP %d", q); }
}

static void qp_create(int q) {
    struct ibv_qp_init_attr a = { .send_cq = cq[q], .recv_cq = cq[q], .qp_type = IBV_QPT_RC,
        .srq = q == QSRQ ? srq : NULL,
        .cap = { .max_send_wr = 8, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2 } };
    qp[q] = ibv_create_qp(pd, &a);
    if (!qp[q]) die("create_qp");
    max_send[q] = (int)a.cap.max_send_wr;
}
static void qp_connect(int q) {
    struct ibv_port_attr port;
    union ibv_gid gid;
    /* the GID index: 3 on the simulated mlx5 (RoCE v2, IPv4), BOUNCE_CHECK_GID elsewhere (0 on rxe0) */
    const char *g = getenv("BOUNCE_CHECK_GID");
    int gidx = g && *g ? atoi(g) : 3;
    if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gidx, &gid)) die("query port");
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    if (ibv_modify_qp(qp[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
    struct ibv_qp_attr r = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = peer_qpn[q], .rq_psn = 7,
        .max_dest_rd_atomic = 16, .min_rnr_timer = 1,
        .ah_attr = { .is_global = port.link_layer == IBV_LINK_LAYER_ETHERNET, .dlid = port.lid, .port_num = 1,
                     .grh = { .dgid = gid, .sgid_index = (uint8_t)gidx, .hop_limit = 1 } } };
    if (ibv_modify_qp(qp[q], &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) die("RTR");
    struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
        .max_rd_atomic = 16 };
    if (ibv_modify_qp(qp[q], &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC)) die("RTS");
}
/* Both sides: (re)create QP q and connect it to the peer's. */
static void qp_pair(int q) {
    qp_create(q);
    xchg(&qp[q]->qp_num, &peer_qpn[q], sizeof(uint32_t));
    qp_connect(q);
}

static size_t reg_len(int r) { return slotsz[me][r] * NSLOT; }
/* Region r is registered as the program asks: bounce regions with RELAXED_ORDERING (the device
 * refuses those when the bounce run injects reg:EFAULT:relaxed), region 3 without (a plain MR). */
static void reg_mr(int r) {
    unsigned a = IBV_ACCESS_LOCAL_WRITE | acc[me][r] | (r == 3 ? 0 : IBV_ACCESS_RELAXED_ORDERING);
    reg[r].mr = ibv_reg_mr_iova2(pd, reg[r].buf, reg_len(r), (uintptr_t)reg[r].buf, a);
    if (!reg[r].mr) die("reg_mr region %d (%zu bytes, access %#x)", r, reg_len(r), a);
}
static void new_buf(int r, uint64_t k) {
    size_t off = (size_t)(mix(k) % 64);
    reg[r].mem = malloc(reg_len(r) + 64);
    if (!reg[r].mem) die("malloc");
    reg[r].buf = reg[r].mem + off;
    for (int s = 0; s < NSLOT; s++) pattern(slot_ptr(r, s), slotsz[me][r], k * 16 + s);
}
/* Both sides: the addresses and rkeys of each other's regions. */
static void xchg_regions(void) {
    struct remote mine[NREG];
    for (int r = 0; r < NREG; r++) mine[r] = (struct remote){ (uintptr_t)reg[r].buf, reg[r].mr->rkey };
    xchg(mine, peer, sizeof mine);
}

static void setup(void) {
    /* sizes and access per region: the same in both processes */
    static const size_t sizes[] = { 64, 1000, 4096, 4099, 12000, 20000, 70000 };
    rs = mix(seed);
    for (int side = 0; side < 2; side++)
        for (int r = 0; r < NREG; r++) {
            slotsz[side][r] = sizes[below(rnd() % 4 == 0 ? 7 : 5)];
            static const unsigned remote[] = { RW | RR, RW | RR, RW, RR };
            acc[side][r] = r == 2 ? 0 : r == 0 || r == 3 ? RW | RR : remote[below(4)];
        }
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0) die("no device");
    ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    if (!ctx || !(pd = ibv_alloc_pd(ctx))) die("open device");
    if (feat & F_SRQ) {
        struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 2 } };
        if (!(srq = ibv_create_srq(pd, &sa))) die("create_srq");
    }
    for (int q = 0; q < NQP; q++) {
        if (!(cq[q] = ibv_create_cq(ctx, 256, NULL, NULL, 0))) die("create_cq");
        qp_pair(q);
    }
    /* the plain MR first: a shim that learns from one rescue to send every later registration to
     * bounce would otherwise make it a bounce region too */
    for (int r = NREG - 1; r >= 0; r--) {
        new_buf(r, seed * 131 + me * 17 + r);
        reg_mr(r);
        for (int s = 0; s < NSLOT; s++) dirty_rd[0][r][s] = dirty_rd[1][r][s] = 1;
    }
    xchg_regions();
}

/* ------------------------------------------------------------------ the model */

/* A slot of `side` with at least access `need` (0: any) in a region that is not `not_r`; -1 if none. */
static int pick(int side, unsigned need, int bounce_only, int *r, int *s) {
    int cand[NREG], n = 0;
    for (int x = 0; x < NREG; x++)
        if ((acc[side][x] & need) == need && !(bounce_only && x == 3)) cand[n++] = x;
    if (!n) return -1;
    *r = cand[below((unsigned)n)];
    *s = (int)below(NSLOT);
    return 0;
}
static size_t rand_len(size_t max) {
    switch (below(4)) {
    case 0: return max;
    case 1: return 1 + below((unsigned)max);
    case 2: return max > 64 ? max - below(64) : max;
    default: return below((unsigned)(max < 4096 ? max : 4096)) + 1;
    }
}
/* The application fills its slot: its bytes are its own again unless a shadow still holds peer bytes. */
static void model_fill(int side, int r, int s) {
    if (!(taint[side][r][s] & 2)) taint[side][r][s] = 0;
    dirty_rd[side][r][s] = 1;
}
static void fill(int side, int r, int s, uint64_t k) {
    if (me == side) pattern(slot_ptr(r, s), slotsz[me][r], k);
    model_fill(side, r, s);
}
/* A SEND posted by `side`: every region peers may read has been folded. */
static void model_send(int side) {
    for (int r = 0; r < NREG; r++)
        if (acc[side][r] & RR) memset(dirty_rd[side][r], 0, NSLOT);
}
/* Adds [lo, hi) to a kind's span (a fresh one if the kind was not there). */
static void span_add(size_t *sp, int had, size_t lo, size_t hi) {
    if (!had) sp[0] = lo, sp[1] = hi;
    if (lo < sp[0]) sp[0] = lo;
    if (hi > sp[1]) sp[1] = hi;
}
/* Takes [lo, hi) out of a span where it covers one end or all of it; whether any of it is left. */
static int span_cut(size_t *sp, size_t lo, size_t hi) {
    if (lo <= sp[0] && hi >= sp[1]) return 0;
    if (lo <= sp[0] && hi > sp[0]) sp[0] = hi;
    else if (hi >= sp[1] && lo < sp[1]) sp[1] = lo;
    return 1;
}
/* Bytes [lo, hi) of a slot may differ, for the reasons in `t` (bit 2 too: a shadow may hold them). */
static void taint_add(int side, int r, int s, unsigned t, size_t lo, size_t hi) {
    if (!(t & 1) || lo >= hi) return;
    unsigned char *d = &taint[side][r][s];
    wlast[side][r][s][1] = 0;
    if (t & TW) span_add(span_w[side][r][s], (*d & 1) && (*d & TW), lo, hi);
    if (t & TR) span_add(span_r[side][r][s], (*d & 1) && (*d & TR), lo, hi);
    *d |= (unsigned char)t;
}
/* Bytes [off, off + len) of a slot replaced (by the NIC: in the shadow too) with bytes whose
 * taint is `t`. The last operation that determined the bytes decides why they may differ: an
 * earlier kind keeps only the bytes the new ones did not replace (seeds 9002013, 9003006,
 * 9005890, 9009608, 12001170, 12002472: bytes an unannounced write had tainted, replaced by an
 * unannounced READ, were counted as the write's). */
static void model_put(int side, int r, int s, size_t off, size_t len, unsigned t) {
    if (!len) return;
    unsigned char *d = &taint[side][r][s];
    wlast[side][r][s][1] = 0;
    if ((*d & 1) && (*d & TW) && !span_cut(span_w[side][r][s], off, off + len)) *d &= (unsigned char)~TW;
    if ((*d & 1) && (*d & TR) && !span_cut(span_r[side][r][s], off, off + len)) *d &= (unsigned char)~TR;
    if (!(*d & (TW | TR))) *d &= 2;
    taint_add(side, r, s, t & TAINTS, off, off + len);
}
/* Bytes [off, off + len) of a slot of dside from a slot of sside: they may differ if the source may. */
static void model_copy(int dside, int dr, int ds, size_t off, int sside, int sr, int ss, size_t len) {
    model_put(dside, dr, ds, off, len, taint[sside][sr][ss]);
}
/* A contract exclusion that may make bytes [off, off + len) of a slot differ. */
static void exclusion(const char *label, int side, int r, int s, size_t off, size_t len) {
    taint_add(side, r, s, 3 | (strstr(label, "read") ? TR : TW), off, off + len);
    if (me == 0) fprintf(tr, "X %s %c.%d.%d\n", label, "AB"[side], r, s);
}
#define T(...) do { if (me == 0) { fprintf(tr, "T " __VA_ARGS__); fputc('\n', tr); } } while (0)

/* ------------------------------------------------------------------ transactions */

static void t_fill(int i) {
    int x = coin(), r = (int)below(NREG), s = (int)below(NSLOT), all = coin();
    T("%d fill %c.%d.%s", i, "AB"[x], r, all ? "*" : (char[]){ (char)('0' + s), 0 });
    for (int k = 0; k < NSLOT; k++)
        if (all || k == s) fill(x, r, k, seed ^ mix((uint64_t)i * 64 + k));
}

/* SEND/RECV: k messages x -> y, each into its own slot; optionally through the SRQ, with one
 * wr_id for all receives, with a two-SGE receive (header in the plain MR), refilling the source. */
static void t_send(int i) {
    int x = coin(), y = !x;
    int k = (feat & F_DUPID) && coin() ? 2 + (int)below(MAXK - 1) : 1;
    int dup = k > 1;
    int q = (feat & F_SRQ) && coin() ? QSRQ : (int)below(2);
    int msge = (feat & F_MSGE) && k == 1 && coin();
    int sr[MAXK], ss[MAXK], dr[MAXK], ds[MAXK], refill[MAXK];
    size_t len[MAXK];
    int hs = (int)below(NSLOT);
    size_t hlen = slotsz[y][3] < 64 ? slotsz[y][3] : 64;
    for (int j = 0; j < k; j++) {
        pick(x, 0, 0, &sr[j], &ss[j]);
        for (int tries = 0;; tries++) {
            pick(y, 0, msge, &dr[j], &ds[j]);
            int clash = 0;
            for (int m = 0; m < j; m++) clash |= dr[m] == dr[j] && ds[m] == ds[j];
            if (!clash || tries > 50) break;
        }
        size_t room = slotsz[y][dr[j]] + (msge ? hlen : 0);
        len[j] = rand_len(slotsz[x][sr[j]] < room ? slotsz[x][sr[j]] : room);
        refill[j] = (feat & F_FILL) && below(3) == 0;
    }
    for (int j = 0; j < k; j++)
        T("%d send %c.%d.%d -> %c.%d.%d len %zu qp %d%s%s%s", i, "AB"[x], sr[j], ss[j], "AB"[y], dr[j], ds[j], len[j],
          q, q == QSRQ && srq ? " srq" : "", dup ? " same-wr_id" : "", msge ? " two-sge header 3." : "");
    uint64_t id = dup ? 0x5151 : 0;
    if (me == y) {
        for (int j = 0; j < k; j++) {
            struct ibv_sge g[2];
            int n = 0;
            if (msge) g[n++] = sge(3, hs, 0, hlen), inflight[3][hs] = 1;
            g[n++] = sge(dr[j], ds[j], 0, slotsz[y][dr[j]]);
            inflight[dr[j]][ds[j]] = 1;
            must_recv(q, g, n, dup ? id : (uint64_t)i * 16 + j);
        }
    }
    barrier();
    for (int j = 0; j < k; j++) {
        if (refill[j]) fill(x, sr[j], ss[j], seed ^ mix((uint64_t)i * 64 + 32 + j));
        if (me == x) {
            struct ibv_sge g = sge(sr[j], ss[j], 0, len[j]);
            must_send(q, IBV_WR_SEND, &g, 1, 0, 0, (uint64_t)i * 16 + j, 0);
            step(tr, q, ALL, "", i, j);
        }
        model_send(x);
        /* message j carries its source's bytes as they were at its SEND: a later refill of that
         * slot (for message j+1) must not clear the taint it takes along (seed 1001545) */
        if (msge) {
            model_copy(y, 3, hs, 0, x, sr[j], ss[j], len[j] < hlen ? len[j] : hlen);
            model_copy(y, dr[j], ds[j], 0, x, sr[j], ss[j], len[j] > hlen ? len[j] - hlen : 0);
        } else
            model_copy(y, dr[j], ds[j], 0, x, sr[j], ss[j], len[j]);
    }
    for (int j = 0; j < k; j++) {
        if (me == y) {
            inflight[dr[j]][ds[j]] = 0;
            if (msge) inflight[3][hs] = 0;
            step(tr, q, ALL, "r", i, j);
        }
    }
    barrier();
}

/* RDMA WRITE x -> y, announced by a SEND after it, by WRITE_WITH_IMM (with or without a receive
 * buffer), or by nothing (a contract exclusion). */
static void t_write(int i) {
    int x = coin(), y = !x, dr, ds, sr, ss, br = -1, bs = -1;
    if (pick(y, RW, 0, &dr, &ds)) return;
    pick(x, 0, 0, &sr, &ss);
    int ann; /* 0 none, 1 SEND, 2 IMM */
    int opts[3], n = 0;
    if (feat & F_WRITE) opts[n++] = 1;
    if (feat & F_IMM) opts[n++] = 2;
    if ((feat & F_UNANN) && below(3) == 0) opts[n++] = 0;
    if (!n) return;
    ann = opts[below((unsigned)n)];
    int q = ann == 2 && (feat & F_SRQ) && coin() ? QSRQ : (int)below(2);
    if (ann == 2 && (feat & F_IMMBUF) && coin()) {
        pick(y, 0, 0, &br, &bs);
        if (br == dr && bs == ds) br = -1;
    }
    size_t len = rand_len(slotsz[x][sr] < slotsz[y][dr] ? slotsz[x][sr] : slotsz[y][dr]);
    size_t off = below((unsigned)(slotsz[y][dr] - len + 1));
    T("%d write %c.%d.%d -> %c.%d.%d+%zu len %zu qp %d announced by %s%s", i, "AB"[x], sr, ss, "AB"[y], dr, ds, off, len,
      q, ann == 0 ? "nothing" : ann == 1 ? "SEND" : "WRITE_WITH_IMM", br >= 0 ? " receive buffer" : "");
    if (me == y && ann) {
        struct ibv_sge g[1];
        int m = 0;
        if (br >= 0) g[m++] = sge(br, bs, 0, slotsz[y][br]), inflight[br][bs] = 1;
        inflight[dr][ds] = 1;
        must_recv(q, g, m, (uint64_t)i * 16);
    }
    barrier();
    if (me == x) {
        struct ibv_sge g = sge(sr, ss, 0, len);
        if (ann == 2) {
            must_send(q, IBV_WR_RDMA_WRITE_WITH_IMM, &g, 1, raddr(dr, ds) + off, peer[dr].rkey, (uint64_t)i * 16, (uint32_t)i);
        } else {
            must_send(q, IBV_WR_RDMA_WRITE, &g, 1, raddr(dr, ds) + off, peer[dr].rkey, (uint64_t)i * 16, 0);
            if (ann == 1) must_send(q, IBV_WR_SEND, NULL, 0, 0, 0, (uint64_t)i * 16 + 1, 0);
        }
        step(tr, q, ALL, "", i, 0);
        if (ann == 1) step(tr, q, ALL, "", i, 1);
    }
    if (ann == 1) model_send(x);
    model_copy(y, dr, ds, off, x, sr, ss, len);
    /* region 3 is a plain MR: the peer's write lands in the application's memory in both runs */
    if (ann == 0 && dr != 3) {
        uint64_t mine = me == x ? fnv(slot_ptr(sr, ss), len) : 0, theirs = 0;
        xchg(&mine, &theirs, sizeof mine);
        exclusion("unannounced-write", y, dr, ds, off, len);
        wlast[y][dr][ds][0] = off, wlast[y][dr][ds][1] = off + len;
        wlast_digest[y][dr][ds] = me == x ? mine : theirs;
        wlast_kinds[y][dr][ds] = taint[x][sr][ss] & 1 ? taint[x][sr][ss] & (TW | TR) : 0;
    }
    if (me == y && ann) {
        inflight[dr][ds] = 0;
        if (br >= 0) inflight[br][bs] = 0;
        step(tr, q, ALL, "r", i, 0);
    }
    barrier();
}

/* RDMA READ by x of y's slot, announced by a SEND of y before it (or, as a contract exclusion,
 * not announced after y changed the slot). */
static void t_read(int i) {
    int x = coin(), y = !x, sr, ss, dr, ds;
    if (pick(y, RR, 0, &sr, &ss)) return;
    pick(x, 0, 0, &dr, &ds);
    int ann = (feat & F_READ) && (!(feat & F_UNANN_READ) || below(3));
    if (!ann && !(feat & F_UNANN_READ)) return;
    int q = (int)below(2);
    size_t len = rand_len(slotsz[y][sr] < slotsz[x][dr] ? slotsz[y][sr] : slotsz[x][dr]);
    size_t off = below((unsigned)(slotsz[y][sr] - len + 1));
    T("%d read %c.%d.%d <- %c.%d.%d+%zu len %zu qp %d%s", i, "AB"[x], dr, ds, "AB"[y], sr, ss, off, len, q,
      ann ? " announced by SEND" : " unannounced");
    if (ann) {
        if (me == x) must_recv(q, NULL, 0, (uint64_t)i * 16);
        barrier();
        if (me == y) {
            must_send(q, IBV_WR_SEND, NULL, 0, 0, 0, (uint64_t)i * 16, 0);
            step(tr, q, ALL, "", i, 0);
        }
        model_send(y);
        if (me == x) step(tr, q, ALL, "r", i, 0);
    } else {
        barrier();
    }
    int excluded = !ann && dirty_rd[y][sr][ss];
    if (me == x) {
        struct ibv_sge g = sge(dr, ds, 0, len);
        must_send(q, IBV_WR_RDMA_READ, &g, 1, raddr(sr, ss) + off, peer[sr].rkey, (uint64_t)i * 16 + 1, 0);
    }
    /* An unannounced READ gets what y's shadow holds: y's bytes as of its last SEND (and peer
     * bytes written there since, which y's application may have had or overwritten). Where those
     * differ from y's bytes now, the unannounced read is the reason, whatever wrote them. */
    if (excluded) {
        model_put(x, dr, ds, 0, len, 0);
        exclusion("unannounced-read", x, dr, ds, 0, len);
    } else
        model_copy(x, dr, ds, 0, y, sr, ss, len);
    if (me == x) step(tr, q, ALL, "", i, 1);
    barrier();
}

/* A receive completes at the NIC; the application deregisters the region, reuses the slot, then
 * polls the completion; the region is registered again. */
static void t_dereg(int i) {
    int x = coin(), y = !x, dr, ds, sr, ss;
    pick(x, 0, 1, &dr, &ds);
    pick(y, 0, 0, &sr, &ss);
    int q = (int)below(2);
    size_t len = rand_len(slotsz[x][dr] < slotsz[y][sr] ? slotsz[x][dr] : slotsz[y][sr]);
    T("%d dereg-pending %c.%d.%d <- %c.%d.%d len %zu qp %d, then reuse", i, "AB"[x], dr, ds, "AB"[y], sr, ss, len, q);
    if (me == x) {
        struct ibv_sge g = sge(dr, ds, 0, slotsz[x][dr]);
        inflight[dr][ds] = 1;
        must_recv(q, &g, 1, (uint64_t)i * 16);
    }
    barrier();
    if (me == y) {
        struct ibv_sge g = sge(sr, ss, 0, len);
        must_send(q, IBV_WR_SEND, &g, 1, 0, 0, (uint64_t)i * 16, 0);
        step(tr, q, ALL, "", i, 0);
    }
    model_send(y);
    barrier(); /* the SEND completed: its data is in x's receive buffer */
    if (me == x) {
        if (ibv_dereg_mr(reg[dr].mr)) die("dereg_mr");
        reg[dr].mr = NULL;
    }
    for (int s = 0; s < NSLOT; s++) taint[x][dr][s] &= TAINTS;
    model_copy(x, dr, ds, 0, y, sr, ss, len);
    fill(x, dr, ds, seed ^ mix((uint64_t)i * 64 + 7));
    if (me == x) {
        inflight[dr][ds] = 0;
        step(tr, q, ALL, "r", i, 0);
        reg_mr(dr);
    }
    xchg_regions();
}

/* Buffer reuse: a region deregistered and registered again, on the same buffer (maybe refilled)
 * or a new one. */
static void t_rereg(int i) {
    int x = coin(), r = (int)below(NREG), fresh = coin(), refill = coin();
    T("%d rereg %c.%d %s", i, "AB"[x], r, fresh ? "new buffer" : refill ? "same buffer refilled" : "same buffer");
    if (me == x) {
        if (ibv_dereg_mr(reg[r].mr)) die("dereg_mr");
        if (fresh) {
            char *old = reg[r].mem;
            new_buf(r, seed ^ mix((uint64_t)i * 64 + 9));
            free(old);
        }
    }
    for (int s = 0; s < NSLOT; s++) {
        taint[x][r][s] &= TAINTS;
        if (fresh) taint[x][r][s] = 0, dirty_rd[x][r][s] = 1;
        else if (refill) fill(x, r, s, seed ^ mix((uint64_t)i * 64 + s));
    }
    if (me == x) reg_mr(r);
    xchg_regions();
}

/* A QP destroyed (after moving to the error state, or not) with receives posted; both sides make
 * a new one and the slots go back to the application. */
static void t_destroy(int i) {
    int x = coin(), q = (int)below(2), k = 1 + (int)below(3), err = coin();
    int r[MAXK], s[MAXK];
    for (int j = 0; j < k; j++) pick(x, 0, 0, &r[j], &s[j]);
    char where[64] = "";
    for (int j = 0; j < k; j++)
        snprintf(where + strlen(where), sizeof where - strlen(where), " %c.%d.%d", "AB"[x], r[j], s[j]);
    T("%d destroy qp %d with receives posted into%s%s; the application refills them", i, q, where,
      err ? ", flushed first" : "");
    if (me == x)
        for (int j = 0; j < k; j++) {
            struct ibv_sge g = sge(r[j], s[j], 0, slotsz[x][r[j]]);
            inflight[r[j]][s[j]] = 1;
            must_recv(q, &g, 1, (uint64_t)i * 16 + j);
        }
    barrier();
    if (me == x && err) {
        struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
        if (ibv_modify_qp(qp[q], &a, IBV_QP_STATE)) die("modify to ERR");
        for (int j = 0; j < k; j++) step(tr, q, ALL, "f", i, j);
    }
    if (ibv_destroy_qp(qp[q])) die("destroy_qp");
    if (me == x)
        for (int j = 0; j < k; j++) inflight[r[j]][s[j]] = 0;
    for (int j = 0; j < k; j++) fill(x, r[j], s[j], seed ^ mix((uint64_t)i * 64 + j));
    /* a completion a flush left behind on the peer's CQ: none (nothing was posted there) */
    qp_pair(q);
    barrier();
}

/* A post the provider refuses, with an RDMA READ into a slot in it: the READ at the end of one
 * list longer than the (empty) send queue (ENOMEM: the WRs before it are posted and complete; a
 * provider with a deeper queue than it reports takes the READ as well), or
 * a READ with more SGEs than the QP allows (EINVAL: nothing is posted). The slot keeps what the
 * application put there. */
static void t_refuse(int i) {
    int x = coin(), y = !x, q = (int)below(2), dr, ds, sr, ss, full = coin();
    pick(x, 0, 0, &dr, &ds);
    if (pick(y, RR, 0, &sr, &ss)) return;
    int w = full ? max_send[q] : 0;
    if (w > 64) w = 64;
    size_t len = rand_len(slotsz[y][sr] < slotsz[x][dr] ? slotsz[y][sr] : slotsz[x][dr]);
    if (!full && len < 3) len = 3;
    T("%d refused read %c.%d.%d <- %c.%d.%d len %zu qp %d, %s", i, "AB"[x], dr, ds, "AB"[y], sr, ss, len, q,
      full ? "send queue full" : "three SGEs");
    fill(x, dr, ds, seed ^ mix((uint64_t)i * 64 + 3));
    if (me == x) {
        struct ibv_send_wr wr[65], *bad = NULL;
        struct ibv_sge g[3] = { sge(dr, ds, 0, len / 3), sge(dr, ds, len / 3, len / 3), sge(dr, ds, 2 * (len / 3), len - 2 * (len / 3)) };
        memset(wr, 0, sizeof wr);
        for (int j = 0; j <= w; j++) {
            wr[j].wr_id = (uint64_t)i * 128 + j;
            wr[j].send_flags = IBV_SEND_SIGNALED;
            wr[j].next = j < w ? &wr[j + 1] : NULL;
            if (j < w) {
                wr[j].opcode = IBV_WR_RDMA_WRITE; /* zero length */
                wr[j].wr.rdma.remote_addr = raddr(0, 0);
                wr[j].wr.rdma.rkey = peer[0].rkey;
            } else {
                wr[j].opcode = IBV_WR_RDMA_READ;
                wr[j].sg_list = full ? &g[0] : g;
                wr[j].num_sge = full ? 1 : 3;
                if (full) g[0] = sge(dr, ds, 0, len);
                wr[j].wr.rdma.remote_addr = raddr(sr, ss);
                wr[j].wr.rdma.rkey = peer[sr].rkey;
            }
        }
        __atomic_fetch_add(&nops, w + 1, __ATOMIC_RELAXED);
        int rc = ibv_post_send(qp[q], wr, &bad);
        int posted = bad ? (int)(bad - wr) : w + 1;
        fprintf(tr, "%c %d refused rc=%d posted=%d\n", "AB"[me], i, rc, posted);
        /* A provider whose send queue is deeper than the max_send_wr it reports (rxe: its ring
         * holds a power of two of slots) takes the READ too: until its completion is polled the
         * slot is written by a pending operation, whose bytes no trace may show. */
        int took = full && posted == w + 1;
        if (took) inflight[dr][ds] = 1;
        for (int j = 0; j < posted; j++) step(tr, q, ALL, "", i, j);
        if (took) inflight[dr][ds] = 0;
    }
    barrier();
}

/* Two threads per process at once: x's thread 0 refills a slot and SENDs it to y, w times, while
 * its thread 1 receives y's SENDs into a slot of the same region (and the mirror in y). */
struct lane { int send, q, n, r, s, pr, ps, i; size_t len[32]; FILE *f; char *buf; size_t blen; };
static void *lane_run(void *p) {
    struct lane *l = p;
    for (int j = 0; j < l->n; j++) {
        if (l->send) {
            pattern(slot_ptr(l->r, l->s), slotsz[me][l->r], seed ^ mix((uint64_t)l->i * 4096 + (uint64_t)l->q * 64 + j));
            struct ibv_sge g = sge(l->r, l->s, 0, l->len[j]);
            must_send(l->q, IBV_WR_SEND, &g, 1, 0, 0, (uint64_t)l->i * 16 + j, 0);
            step(l->f, l->q, 1u << (l->r * NSLOT + l->s), l->q ? ".t1" : ".t0", l->i, j);
        } else {
            struct ibv_sge g = sge(l->r, l->s, 0, slotsz[me][l->r]);
            must_recv(l->q, &g, 1, (uint64_t)l->i * 16 + j);
            step(l->f, l->q, 1u << (l->r * NSLOT + l->s), l->q ? ".t1" : ".t0", l->i, j);
        }
    }
    return NULL;
}
static void t_threads(int i) {
    /* lane q: side q sends on QP q from (r[q], s[q]) into the other side's (r2[q], s2[q]) */
    int r[2], s[2], d[2], ds[2], n = 4 + (int)below(29);
    size_t len[2][32];
    for (int q = 0; q < 2; q++) pick(q, RW, 1, &r[q], &s[q]); /* region 0 always qualifies */
    for (int q = 0; q < 2; q++) {
        /* the receiving side receives into the region its own lane sends from (what N3 needs) */
        d[q] = r[!q];
        ds[q] = (s[!q] + 1 + (int)below(NSLOT - 1)) % NSLOT;
    }
    size_t maxlen[2] = { 0, 0 };
    for (int q = 0; q < 2; q++)
        for (int j = 0; j < n; j++) {
            len[q][j] = rand_len(slotsz[q][r[q]] < slotsz[!q][d[q]] ? slotsz[q][r[q]] : slotsz[!q][d[q]]);
            if (len[q][j] > maxlen[q]) maxlen[q] = len[q][j];
        }
    T("%d threads: A.%d.%d -> B.%d.%d on qp 0 and B.%d.%d -> A.%d.%d on qp 1, %d messages each", i, r[0], s[0], d[0], ds[0],
      r[1], s[1], d[1], ds[1], n);
    /* A sending slot whose shadow may hold peer bytes the application has not seen keeps its
     * taint through the lane's refills (model_fill), and each message carries it: the receiving
     * slot's digests during the lanes are excluded as its end digest is (model_copy below). */
    for (int q = 0; q < 2; q++)
        if (taint[q][r[q]][s[q]] & 2) taint_add(!q, d[q], ds[q], taint[q][r[q]][s[q]] & TAINTS, 0, maxlen[q]);
    struct lane l[2];
    for (int q = 0; q < 2; q++) {
        int send = q == me;
        l[q] = (struct lane){ .send = send, .q = q, .n = n, .r = send ? r[q] : d[q], .s = send ? s[q] : ds[q], .i = i };
        memcpy(l[q].len, len[q], sizeof len[q]);
        l[q].f = open_memstream(&l[q].buf, &l[q].blen);
    }
    barrier();
    pthread_t t[2];
    for (int q = 0; q < 2; q++)
        if (pthread_create(&t[q], NULL, lane_run, &l[q])) die("pthread_create");
    for (int q = 0; q < 2; q++) pthread_join(t[q], NULL);
    for (int q = 0; q < 2; q++) {
        fclose(l[q].f);
        fputs(l[q].buf, tr);
        free(l[q].buf);
    }
    for (int q = 0; q < 2; q++) {
        model_fill(q, r[q], s[q]);
        model_send(q);
        model_copy(!q, d[q], ds[q], 0, q, r[q], s[q], maxlen[q]);
    }
    barrier();
}

enum { K_FILL, K_SEND, K_WRITE, K_READ, K_DEREG, K_REREG, K_DESTROY, K_REFUSE, K_THREADS, K_N };
static void txn(int i) {
    rs = mix(seed ^ mix((uint64_t)i + 1));
    unsigned w[K_N] = { 0 };
    w[K_FILL] = feat & F_FILL ? 3 : 0;
    w[K_SEND] = 6;
    w[K_WRITE] = feat & (F_WRITE | F_IMM | F_UNANN) ? 5 : 0;
    w[K_READ] = feat & (F_READ | F_UNANN_READ) ? 4 : 0;
    w[K_DEREG] = feat & F_DEREG ? 1 : 0;
    w[K_REREG] = feat & F_REREG ? 1 : 0;
    w[K_DESTROY] = feat & F_DESTROY ? 1 : 0;
    w[K_REFUSE] = feat & F_REFUSE ? 1 : 0;
    w[K_THREADS] = feat & F_THREADS ? 2 : 0;
    unsigned tot = 0;
    for (int k = 0; k < K_N; k++) tot += w[k];
    unsigned x = below(tot);
    int k = 0;
    while (x >= w[k]) x -= w[k++];
    switch (k) {
    case K_FILL: t_fill(i); break;
    case K_SEND: t_send(i); break;
    case K_WRITE: t_write(i); break;
    case K_READ: t_read(i); break;
    case K_DEREG: t_dereg(i); break;
    case K_REREG: t_rereg(i); break;
    case K_DESTROY: t_destroy(i); break;
    case K_REFUSE: t_refuse(i); break;
    case K_THREADS: t_threads(i); break;
    }
}

static unsigned parse_features(const char *s) {
    unsigned f = 0;
    if (!strcmp(s, "all")) return ~0u;
    char *d = strdup(s), *save = NULL;
    for (char *t = strtok_r(d, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t n;
        for (n = 0; n < sizeof FEATURES / sizeof *FEATURES; n++)
            if (!strcmp(t, FEATURES[n].name)) break;
        if (n == sizeof FEATURES / sizeof *FEATURES && strcmp(t, "send")) {
            fprintf(stderr, "bounce_check: unknown feature %s\n", t);
            exit(2);
        }
        if (n < sizeof FEATURES / sizeof *FEATURES) f |= FEATURES[n].bit;
    }
    free(d);
    return f;
}

int main(int argc, char **argv) {
    int argi = 1;
    if (argc > 2 && !strcmp(argv[1], "--peer")) {
        me = 1;
        sock = atoi(argv[2]);
        argi = 3;
    }
    if (argc - argi < 3) {
        fprintf(stderr, "usage: bounce_check SEED NTXN FEATURES [SKIP]\nfeatures: send");
        for (size_t n = 0; n < sizeof FEATURES / sizeof *FEATURES; n++) fprintf(stderr, ",%s", FEATURES[n].name);
        fprintf(stderr, " or all\n");
        return 2;
    }
    seed = strtoull(argv[argi], NULL, 0);
    ntxn = atoi(argv[argi + 1]);
    feat = parse_features(argv[argi + 2]);
    const char *skips = argc - argi > 3 ? argv[argi + 3] : "";
    skip = calloc((size_t)ntxn + 1, 1);
    for (const char *p = skips; *p;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) break;
        if (v >= 0 && v < ntxn) skip[v] = 1;
        p = *e ? e + 1 : e;
    }
    pid_t child = -1;
    if (me == 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair");
        fflush(NULL);
        child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            close(sv[0]);
            char fd[16];
            snprintf(fd, sizeof fd, "%d", sv[1]);
            char *args[] = { "bounce_check", "--peer", fd, argv[1], argv[2], argv[3], (char *)skips, NULL };
            execv("/proc/self/exe", args);
            _exit(127);
        }
        close(sv[1]);
        sock = sv[0];
    }
    tr = open_memstream(&trbuf, &trlen);
    setup();
    /* BOUNCE_CHECK_CORRUPT=I[:R.S[+OFF]] (the checker's own test): after transaction I, A flips
     * byte OFF (0) of its slot R.S (0.0) behind the model's back — a difference the comparison
     * must report and the shrinking must bring down to that transaction; in a slot the model
     * marks, what a shim changing bytes without a word looks like. */
    const char *corrupt = getenv("BOUNCE_CHECK_CORRUPT");
    int corrupt_at = corrupt && *corrupt ? atoi(corrupt) : -1, corrupt_r = 0, corrupt_s = 0;
    size_t corrupt_off = 0;
    if (corrupt_at >= 0 && strchr(corrupt, ':'))
        sscanf(strchr(corrupt, ':') + 1, "%d.%d+%zu", &corrupt_r, &corrupt_s, &corrupt_off);
    if (corrupt_r < 0 || corrupt_r >= NREG || corrupt_s < 0 || corrupt_s >= NSLOT) corrupt_r = corrupt_s = 0;
    if (corrupt_off >= slotsz[me][corrupt_r]) corrupt_off = 0;
    for (int i = 0; i < ntxn; i++)
        if (!skip[i]) {
            txn(i);
            if (i == corrupt_at && me == 0) slot_ptr(corrupt_r, corrupt_s)[corrupt_off] ^= 0x5a;
        }
    barrier();
    line_to(tr, ALL, "end");
    fclose(tr);
    long counts[2] = { nops, ncompl }, peer_counts[2];
    xchg(counts, peer_counts, sizeof counts);
    if (me == 1) {
        uint64_t n = trlen;
        xwrite(&n, sizeof n);
        xwrite(trbuf, trlen);
        char b;
        xread(&b, 1);
        return 0;
    }
    uint64_t n;
    xread(&n, sizeof n);
    char *peer_tr = malloc(n + 1);
    xread(peer_tr, n);
    fwrite(trbuf, 1, trlen, stdout);
    fwrite(peer_tr, 1, n, stdout);
    printf("S transactions=%d posts=%ld completions=%ld\n", ntxn, nops + peer_counts[0], ncompl + peer_counts[1]);
    fflush(stdout);
    char b = 0;
    xwrite(&b, 1);
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bounce_check: peer B failed (status %#x)\n", st);
        return 4;
    }
    return 0;
}
