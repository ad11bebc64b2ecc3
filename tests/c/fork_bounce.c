/* fork while bounce regions are busy (issue 20 item 5). Run on the simulator with
 * MRSHIM_SIM_FAULTS=reg:EFAULT:relaxed and MRSHIM_RETRY=bounce: every registration below asks for
 * relaxed ordering, the device refuses it, the shim rescues it with a bounce region.
 * Two busy threads register bounce regions, post 64 RDMA WRITE_WITH_IMMs through each and
 * deregister them without pause, while the main thread forks FORKS children one after another
 * (at least one busy round between two forks); each child opens its own device, makes a
 * bounce-backed WRITE_WITH_IMM on a loopback QP pair, checks the bytes that arrived and exits.
 * A child that does not finish within 10 s counts as hung (and is killed), a wrong byte or a
 * failed call as failed. Prints "forks N hung H failed F busy_rounds R busy_failed B".
 * Usage: fork_bounce FORKS */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rc_pair.h"

#define LEN 65536
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING)

/* A pattern from src into dst through bounce regions, as `posts` RDMA WRITE_WITH_IMMs of
 * LEN / posts bytes each (every post and poll goes through the bounce layer's tables), checked
 * byte for byte. 0: ok, 1: a call failed, 2: wrong bytes. */
static int write_check(struct pair *p, unsigned char *src, unsigned char *dst, unsigned seed, int posts) {
    for (int i = 0; i < LEN; i++) src[i] = (unsigned char)(seed * 131 + i * 7);
    memset(dst, 0, LEN);
    struct ibv_mr *s = ibv_reg_mr(p->pd, src, LEN, ACCESS);
    struct ibv_mr *d = ibv_reg_mr(p->pd, dst, LEN, ACCESS);
    int rc = 1;
    if (s && d) {
        /* WRITE_WITH_IMM: its receive completion announces the data (docs/bounce.md's contract) */
        uint32_t chunk = LEN / posts;
        rc = 0;
        for (int j = 0; j < posts && !rc; j++) {
            struct ibv_recv_wr rw = { .wr_id = seed }, *rbad;
            struct ibv_sge sg = { .addr = (uintptr_t)src + j * chunk, .length = chunk, .lkey = s->lkey };
            struct ibv_send_wr wr = { .wr_id = seed, .sg_list = &sg, .num_sge = 1,
                .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED, .imm_data = seed }, *bad;
            wr.wr.rdma.remote_addr = (uintptr_t)dst + j * chunk;
            wr.wr.rdma.rkey = d->rkey;
            rc = 1;
            if (!ibv_post_recv(p->qp[1], &rw, &rbad) && !ibv_post_send(p->qp[0], &wr, &bad)) {
                struct ibv_wc ws, wc;
                int n, m;
                while ((n = ibv_poll_cq(p->cq[0], 1, &ws)) == 0) {}
                while ((m = ibv_poll_cq(p->cq[1], 1, &wc)) == 0) {}
                if (n == 1 && m == 1 && ws.status == IBV_WC_SUCCESS && wc.status == IBV_WC_SUCCESS) rc = 0;
            }
        }
        for (int i = 0; i < LEN && !rc; i++)
            if (dst[i] != (unsigned char)(seed * 131 + i * 7)) rc = 2;
    }
    if (s && ibv_dereg_mr(s)) rc = 1;
    if (d && ibv_dereg_mr(d)) rc = 1;
    return rc;
}

static void *buf(void) {
    void *b = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) { perror("mmap"); exit(2); }
    return b;
}

static volatile int stop;
static long busy_rounds, busy_failed;

#define BUSY 2
static void *busy(void *arg) {
    struct pair *p = arg;
    unsigned char *src = buf(), *dst = buf();
    for (unsigned i = 1; !stop; i++) {
        int rc = write_check(p, src, dst, i, 64);
        __atomic_fetch_add(&busy_rounds, 1, __ATOMIC_RELAXED);
        if (rc) __atomic_fetch_add(&busy_failed, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: fork_bounce FORKS\n"); return 2; }
    int forks = atoi(argv[1]), hung = 0, failed = 0;
    struct pair parent[BUSY];
    pthread_t t[BUSY];
    for (int i = 0; i < BUSY; i++) {
        if (open_pair(&parent[i])) { fprintf(stderr, "parent setup failed: %d\n", errno); return 3; }
        pthread_create(&t[i], NULL, busy, &parent[i]);
    }
    while (__atomic_load_n(&busy_rounds, __ATOMIC_RELAXED) < 3) usleep(1000);
    long last = 0;
    for (int i = 0; i < forks; i++) {
        /* at least one busy round between two forks: every fork lands amid the busy threads' work */
        while (__atomic_load_n(&busy_rounds, __ATOMIC_RELAXED) == last) usleep(100);
        last = __atomic_load_n(&busy_rounds, __ATOMIC_RELAXED);
        pid_t pid = fork();
        if (pid == 0) {
            struct pair p;
            if (open_pair(&p)) _exit(3);
            _exit(write_check(&p, buf(), buf(), 1000 + i, 1));
        }
        if (pid < 0) { perror("fork"); return 2; }
        int st = 0;
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            if (r == pid) break;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - t0.tv_sec >= 10) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                hung++;
                st = 0;
                break;
            }
            usleep(1000);
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child %d exited %d\n", i, WEXITSTATUS(st));
            failed++;
        } else if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL) {
            fprintf(stderr, "child %d killed by signal %d\n", i, WTERMSIG(st));
            failed++;
        }
    }
    stop = 1;
    for (int i = 0; i < BUSY; i++) pthread_join(t[i], NULL);
    printf("forks %d hung %d failed %d busy_rounds %ld busy_failed %ld\n", forks, hung, failed, busy_rounds, busy_failed);
    return 0;
}
