/* A second LD_PRELOAD library that, like many tools, finds the next definition with
 * dlsym(RTLD_NEXT, ...). mrshim must not change what "next" means for it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct ibv_mr;
struct ibv_pd;

/* Like many preloads, look things up in a constructor: with LD_PRELOAD="libmrshim.so
 * libother.so" this runs before mrshim's own constructor, so mrshim's dlsym must already work.
 * Reported only when OTHER_CTOR_REPORT is set. */
__attribute__((constructor)) static void other_init(void) {
    void *next_rand = dlsym(RTLD_NEXT, "rand");
    void *pid = dlvsym(RTLD_DEFAULT, "getpid", "GLIBC_2.2.5");
    Dl_info i;
    const char *where = next_rand && dladdr(next_rand, &i) ? i.dli_fname : "none";
    if (getenv("OTHER_CTOR_REPORT")) fprintf(stderr, "other: ctor next rand in %s, getpid %s\n", where, pid == (void *)getpid ? "ok" : "wrong");
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
    static struct ibv_mr *(*next)(struct ibv_pd *, void *, size_t, int);
    static int depth;
    if (!next) next = dlsym(RTLD_NEXT, "ibv_reg_mr");
    if (++depth > 3) { fprintf(stderr, "other: recursion\n"); _exit(42); }
    Dl_info info;
    dladdr((void *)next, &info);
    fprintf(stderr, "other: ibv_reg_mr next=%s\n", info.dli_fname);
    struct ibv_mr *r = next(pd, addr, len, access);
    depth--;
    return r;
}

int rand(void) {
    static int (*next)(void);
    static int depth;
    if (!next) next = dlsym(RTLD_NEXT, "rand");
    if (!next) { fprintf(stderr, "other: no next rand\n"); _exit(43); }
    if (++depth > 3) { fprintf(stderr, "other: rand recursion\n"); _exit(42); }
    int r = next();
    depth--;
    return r;
}
