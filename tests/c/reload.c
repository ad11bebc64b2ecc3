/* Unloads and reloads a libibverbs, as a program that opens its network plugin per job step does:
 * each cycle dlopens LIB (RTLD_LOCAL), looks ibv_reg_mr / ibv_dereg_mr up with dlvsym, registers
 * and deregisters, dlcloses it, and then occupies the address range the library had (so the next
 * load lands elsewhere and nothing of the old copy is callable any more). Usage: reload LIB CYCLES */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "close_and_block.h"

typedef void *(*alloc_pd_fn)(void);
typedef void *(*reg_fn)(void *, void *, size_t, int);
typedef int (*dereg_fn)(void *);
static char buf[8192] __attribute__((aligned(4096)));

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: reload LIB CYCLES\n"); return 2; }
    int cycles = atoi(argv[2]);
    for (int i = 1; i <= cycles; i++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        alloc_pd_fn alloc_pd = (alloc_pd_fn)dlsym(h, "fake_alloc_pd");
        reg_fn reg = (reg_fn)dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1");
        dereg_fn dereg = (dereg_fn)dlvsym(h, "ibv_dereg_mr", "IBVERBS_1.1");
        if (!alloc_pd || !reg || !dereg) { fprintf(stderr, "lookup failed\n"); return 1; }
        void *mr = reg(alloc_pd(), buf, 4096, 1);
        if (!mr || dereg(mr)) { perror("ibv_reg_mr"); return 1; }
        if (close_and_block(h)) return 1;
        printf("cycle %d ok\n", i);
        fflush(stdout);
    }
    return 0;
}
