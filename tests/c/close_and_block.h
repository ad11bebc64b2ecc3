/* dlclose a private library and take its old address range (PROT_NONE), so that a call through
 * a stale pointer into it faults instead of quietly reaching reused code. Shared by the reload
 * and two-copies tests. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <sys/mman.h>

static int close_and_block(void *h) {
    struct link_map *lm = NULL;
    dlinfo(h, RTLD_DI_LINKMAP, &lm);
    char *base = (char *)lm->l_addr;
    if (dlclose(h)) { fprintf(stderr, "%s\n", dlerror()); return -1; }
    for (size_t len = 1 << 20; len >= 4096; len /= 2)
        if (mmap(base, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != MAP_FAILED) break;
    return 0;
}
