/* A preload that registers memory where a shim is most fragile:
 * - REG_PRELOAD_CTOR: from its constructor, during start-up. Listed after libmrshim.so, it runs
 *   before mrshim's own constructor (independent preloads initialise last-listed first), so the
 *   shim is entered before it ever initialised anything.
 * - REG_PRELOAD_MALLOC=N: from inside malloc, like allocators that register what they hand out
 *   (the first N mallocs made while the pd exists). The shim's own allocations reach this
 *   malloc too, so those registrations arrive while the shim is inside a hook.
 * It reports what it did on stderr ("reg_preload: ...") at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

struct ibv_mr;
struct ibv_pd;
void *__libc_malloc(size_t);

typedef struct ibv_mr *(*reg_fn)(struct ibv_pd *, void *, size_t, int);
typedef int (*dereg_fn)(struct ibv_mr *);

static struct ibv_pd *pd;
static reg_fn reg;
static dereg_fn dereg;
static char buf[8192];
static __thread int inside;
static long budget, made, failed;

static int lookup(void) {
    struct ibv_pd *(*alloc)(void) = (struct ibv_pd *(*)(void))dlsym(RTLD_DEFAULT, "fake_alloc_pd");
    reg = (reg_fn)dlvsym(RTLD_DEFAULT, "ibv_reg_mr", "IBVERBS_1.1");
    dereg = (dereg_fn)dlsym(RTLD_DEFAULT, "ibv_dereg_mr");
    if (!alloc || !reg || !dereg) return -1;
    pd = alloc();
    return pd ? 0 : -1;
}

static void reg_once(void) {
    struct ibv_mr *mr = reg(pd, buf, 4096, 1);
    if (mr && dereg(mr) == 0) made++; else failed++;
}

static void report(void) {
    fprintf(stderr, "reg_preload: %ld registered and deregistered, %ld failed\n", made, failed);
}

__attribute__((constructor)) static void init(void) {
    if (getenv("REG_PRELOAD_MALLOC")) budget = atol(getenv("REG_PRELOAD_MALLOC"));
    if (!getenv("REG_PRELOAD_CTOR") && !budget) return;
    inside = 1;
    if (lookup()) { fprintf(stderr, "reg_preload: lookup failed\n"); exit(9); }
    if (getenv("REG_PRELOAD_CTOR")) reg_once();
    atexit(report);
    inside = 0;
}

void *malloc(size_t n) {
    if (budget > 0 && pd && !inside) {
        inside = 1;
        budget--;
        reg_once();
        inside = 0;
    }
    return __libc_malloc(n);
}
