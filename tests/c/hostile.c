/* A program that treats its environment as hostile programs do; linked against (the fake)
 * libibverbs.so.1. Usage:
 *   hostile loop N          N registrations and deregistrations, then "done N"
 *   hostile closefds FILE   registers, closes every descriptor above 2 (as daemons do), opens FILE
 *                           and makes every number from 3 to 1023 a copy of it (as a program
 *                           that reuses numbers would), registers twice more, writes "app data"
 *                           into FILE and prints what it wrote
 *   hostile closerange FILE the same with closefrom(3) (close_range(2) underneath), and every
 *                           number up to 1023 taken by open(FILE) itself (no dup)
 * Exit status 0 when every registration succeeded. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#undef ibv_reg_mr

struct ibv_pd *fake_alloc_pd(void);
static struct ibv_pd *pd;
static char buf[1 << 14] __attribute__((aligned(4096)));

static int reg_dereg(void) {
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) { perror("ibv_reg_mr"); return 1; }
    return ibv_dereg_mr(mr) != 0;
}

static int closefds(const char *file, int range) {
    if (reg_dereg()) return 1;
    long max = sysconf(_SC_OPEN_MAX);
    if (range) closefrom(3);
    else for (long fd = 3; fd < max; fd++) close((int)fd);
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) { perror(file); return 1; }
    for (int i = 3; i < 1024 && i < max; i++)
        if (i != fd) {
            if (!range) dup2(fd, i);
            else if (open(file, O_WRONLY | O_APPEND) < 0) break;
        }
    if (reg_dereg() || reg_dereg()) return 1;
    const char data[] = "app data\n";
    if (write(fd, data, sizeof data - 1) != sizeof data - 1) { perror("write"); return 1; }
    printf("wrote app data at fd %d\n", fd);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    pd = fake_alloc_pd();
    if (!strcmp(mode, "loop") && argc > 2) {
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++)
            if (reg_dereg()) return 1;
        printf("done %ld\n", n);
        return 0;
    }
    if (!strcmp(mode, "closefds") && argc > 2) return closefds(argv[2], 0);
    if (!strcmp(mode, "closerange") && argc > 2) return closefds(argv[2], 1);
    fprintf(stderr, "usage: hostile loop N | closefds FILE | closerange FILE\n");
    return 2;
}
