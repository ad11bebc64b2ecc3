/* A plugin loaded RTLD_LOCAL whose libibverbs is private to it (its own DT_NEEDED, not in the
 * global scope), looking the verbs up with dlvsym(RTLD_DEFAULT, ...) - the scope glibc searches
 * for it is its own. Built twice: with -DPLUGIN the plugin (linked against the fake libibverbs),
 * without it the loader: `local_plugin PLUGIN.so` dlopens it RTLD_LOCAL and runs it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef PLUGIN
#include <infiniband/verbs.h>
#undef ibv_reg_mr
struct ibv_pd *fake_alloc_pd(void);
static char buf[8192] __attribute__((aligned(4096)));

int plugin_run(void) {
    struct ibv_mr *(*reg)(struct ibv_pd *, void *, size_t, int) = dlvsym(RTLD_DEFAULT, "ibv_reg_mr", "IBVERBS_1.1");
    int (*dereg)(struct ibv_mr *) = dlvsym(RTLD_DEFAULT, "ibv_dereg_mr", "IBVERBS_1.1");
    if (!reg || !dereg) { fprintf(stderr, "plugin: lookup failed: %s\n", dlerror()); return 2; }
    struct ibv_mr *mr = reg(fake_alloc_pd(), buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) { perror("plugin: ibv_reg_mr"); return 3; }
    printf("plugin lkey=%u\n", mr->lkey);
    return dereg(mr);
}
#else
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    if (dlsym(RTLD_DEFAULT, "fake_alloc_pd")) { fprintf(stderr, "libibverbs leaked into the global scope\n"); return 4; }
    int (*run)(void) = (int (*)(void))dlsym(h, "plugin_run");
    return run ? run() : 2;
}
#endif
