/* Linked against (the fake) libibverbs.so.1.
 * Usage: fake_linked [basic|kill|fork|threads N|fork-busy FORKS|fork-in-loader|v10|fork-opening DIR]
 * v10: calls ibv_reg_mr / ibv_dereg_mr through references bound to their IBVERBS_1.0 versions,
 * as a binary linked against libibverbs < 1.1 does.
 * fork-busy: four threads register and deregister (some with RELAXED_ORDERING, which fails
 * when FAKE_FAIL_RELAXED is set) while the main thread forks FORKS children; each child
 * registers, deregisters, fails one registration and exit()s (so the shim's exit summary runs).
 * A child that hangs (on a lock a parent thread held at the fork) is killed by its alarm.
 * fork-in-loader: the main thread forks while another thread is inside dl_iterate_phdr; the
 * child registers (see fork_in_loader).
 * fork-opening DIR: the process's log (MRSHIM_LOG=DIR/log-%p.jsonl) is made a FIFO before a thread's
 * first registration (this used to block inside the shim, holding the log's lock); the main thread
 * forks then: the child must record into its own file, and nothing goes into the FIFO. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <sys/stat.h>
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

struct ibv_pd *fake_alloc_pd(void);
static struct ibv_pd *pd;
static char buf[1 << 16] __attribute__((aligned(4096)));

static void *worker(void *arg) {
    long n = (long)arg;
    char *b = malloc(4096);
    for (long i = 0; i < n; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, b, 4096, IBV_ACCESS_LOCAL_WRITE);
        if (!mr) { perror("reg"); exit(3); }
        ibv_dereg_mr(mr);
    }
    free(b);
    return NULL;
}

/* references to the 1.0 ABI, as an old binary has them */
struct ibv_mr *reg_mr_v10(void *pd10, void *addr, size_t len, int access);
int dereg_mr_v10(struct ibv_mr *mr);
__asm__(".symver reg_mr_v10, ibv_reg_mr@IBVERBS_1.0");
__asm__(".symver dereg_mr_v10, ibv_dereg_mr@IBVERBS_1.0");

static int v10(void) {
    struct ibv_mr *mr = reg_mr_v10(NULL, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) { perror("ibv_reg_mr@IBVERBS_1.0"); return 1; }
    printf("v10 lkey=%u\n", mr->lkey);
    return dereg_mr_v10(mr);
}

static atomic_int stop;
static void *busy(void *arg) {
    char *b = malloc(8192);
    unsigned ro = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
    for (long i = 0; !atomic_load(&stop); i++) {
        struct ibv_mr *mr = ibv_reg_mr_iova2(pd, b + (long)arg * 64, 4096, (uintptr_t)b, i % 4 ? IBV_ACCESS_LOCAL_WRITE : ro);
        if (mr) ibv_dereg_mr(mr);
    }
    free(b);
    return NULL;
}

static int fork_busy(int forks) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, busy, (void *)i);
    int hung = 0, failed = 0;
    for (int i = 0; i < forks; i++) {
        pid_t c = fork();
        if (c == 0) {
            alarm(10);
            struct ibv_mr *m = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
            if (m) ibv_dereg_mr(m);
            ibv_reg_mr_iova2(pd, buf, 4096, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
            exit(m ? 0 : 1);
        }
        int st;
        waitpid(c, &st, 0);
        if (WIFSIGNALED(st)) {
            /* SIGALRM: the child hung past its alarm; any other signal: it crashed */
            fprintf(stderr, "fork-busy: child %d of %d ended by signal %d (%s)\n", i, forks, WTERMSIG(st), strsignal(WTERMSIG(st)));
            hung++;
        }
        else if (WEXITSTATUS(st)) failed++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("forks %d hung %d failed %d\n", forks, hung, failed);
    return hung || failed;
}

static void *one_reg(void *arg) {
    (void)arg;
    struct ibv_mr *m = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (m) ibv_dereg_mr(m);
    return NULL;
}

/* fork-in-loader: a thread is inside dl_iterate_phdr (glibc holds its loader-list lock, which
 * a forked child of glibc 2.36 does not get back) while the main thread forks; the child
 * registers, which must not wait for that lock. */
static atomic_int in_loader;
static int slow_phdr(struct dl_phdr_info *info, size_t size, void *data) {
    (void)info; (void)size; (void)data;
    atomic_store(&in_loader, 1);
    usleep(500000);
    return 1;
}
static void *iterate(void *arg) { (void)arg; dl_iterate_phdr(slow_phdr, NULL); return NULL; }
static int fork_in_loader(void) {
    pthread_t t;
    pthread_create(&t, NULL, iterate, NULL);
    while (!atomic_load(&in_loader)) usleep(1000);
    pid_t c = fork();
    if (c == 0) {
        alarm(10);
        struct ibv_mr *m = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
        if (m) ibv_dereg_mr(m);
        _exit(m ? 0 : 1);
    }
    int st;
    waitpid(c, &st, 0);
    pthread_join(t, NULL);
    if (WIFSIGNALED(st)) printf("child ended by signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else printf("child exit %d\n", WEXITSTATUS(st));
    return !WIFEXITED(st) || WEXITSTATUS(st);
}

static int fork_opening(const char *dir) {
    char fifo[4096];
    snprintf(fifo, sizeof fifo, "%s/log-p%d.jsonl", dir, (int)getpid());
    if (mkfifo(fifo, 0600)) { perror("mkfifo"); return 2; }
    pthread_t t;
    pthread_create(&t, NULL, one_reg, NULL);
    usleep(300000); /* the thread's registration went through the shim (it used to block there) */
    pid_t c = fork();
    if (c == 0) {
        alarm(10);
        struct ibv_mr *m = ibv_reg_mr(pd, buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
        if (m) ibv_dereg_mr(m);
        exit(m ? 0 : 1);
    }
    int st;
    waitpid(c, &st, 0);
    pthread_join(t, NULL);
    int r = open(fifo, O_RDONLY | O_NONBLOCK);
    char sink[65536];
    int n = (int)read(r, sink, sizeof sink);
    unlink(fifo);
    printf("child %s, parent wrote %s\n", WIFSIGNALED(st) ? "hung" : WEXITSTATUS(st) ? "failed" : "ok", n > 0 ? "its records" : "nothing");
    return WIFSIGNALED(st) || WEXITSTATUS(st);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    pd = fake_alloc_pd();
    if (!strcmp(mode, "fork-in-loader")) return fork_in_loader();
    if (!strcmp(mode, "fork-busy")) return fork_busy(argc > 2 ? atoi(argv[2]) : 100);
    if (!strcmp(mode, "fork-opening") && argc > 2) return fork_opening(argv[2]);
    if (!strcmp(mode, "v10")) return v10();
    if (!strcmp(mode, "threads")) {
        long n = argc > 2 ? atol(argv[2]) : 1000;
        pthread_t t[8];
        for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, worker, (void *)n);
        for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
        printf("threads done\n");
        return 0;
    }
    struct ibv_mr *a = ibv_reg_mr(pd, buf + 0x10, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!a) { perror("ibv_reg_mr"); return 1; }
    printf("reg_mr lkey=%u rkey=%u\n", a->lkey, a->rkey);
    fflush(stdout);
    if (!strcmp(mode, "kill")) raise(SIGKILL);
    if (!strcmp(mode, "_exit")) _exit(0);
    if (!strcmp(mode, "_Exit")) _Exit(0);
    if (!strcmp(mode, "vfork")) {
        /* the child shares the parent's memory (and its mapped log) until it _exits */
        pid_t c = vfork();
        if (c == 0) _exit(0);
        int st;
        waitpid(c, &st, 0);
        struct ibv_mr *m = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
        printf("after vfork lkey=%u\n", m ? m->lkey : 0);
        return m ? 0 : 1;
    }
    if (!strcmp(mode, "fork")) {
        pid_t c = fork();
        if (c == 0) {
            struct ibv_mr *m = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
            printf("child lkey=%u\n", m ? m->lkey : 0);
            return m ? 0 : 1;
        }
        int st;
        waitpid(c, &st, 0);
        ibv_dereg_mr(a);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 9;
    }
    struct ibv_mr *b = ibv_reg_mr_iova(pd, buf, 4096, 0x10000, IBV_ACCESS_LOCAL_WRITE);
    printf("reg_mr_iova lkey=%u\n", b ? b->lkey : 0);
    unsigned ro = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING;
    errno = 0;
    struct ibv_mr *c = ibv_reg_mr_iova2(pd, buf + 4096, 4096, (uintptr_t)(buf + 4096), ro);
    if (c) printf("reg_mr_iova2 lkey=%u\n", c->lkey);
    else printf("reg_mr_iova2 failed errno=%d\n", errno);
    errno = 0;
    struct ibv_mr *p = ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0);
    printf("probe %s errno=%d\n", p ? "ok" : "failed", errno);
    struct ibv_mr *d = ibv_reg_dmabuf_mr(pd, 4096, 65536, 0x7e0000000000ULL, 5, IBV_ACCESS_LOCAL_WRITE);
    printf("dmabuf lkey=%u\n", d ? d->lkey : 0);
    if (d) ibv_dereg_mr(d);
    if (c) ibv_dereg_mr(c);
    if (b) ibv_dereg_mr(b);
    printf("dereg rc=%d\n", ibv_dereg_mr(a));
    return 0;
}
