/* A program as an auditwheel-repaired Python wheel ships it: linked against its own copy of
 * rdma-core renamed libibverbs-abc123.so.1 (SONAME too), found through the RPATH
 * $ORIGIN/../wheel.libs, and reaching it again by dlopen() of that name, as an extension
 * loading a plugin does. Prints the devices each path sees and registers 64 KiB on the first
 * device through the linked path: "linked: mlx5_0 mlx5_1", "dlopen: mlx5_0 mlx5_1", "reg ok". */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ibv_device **(*list_fn)(int *);
typedef const char *(*name_fn)(struct ibv_device *);

static void show(const char *what, list_fn list, name_fn name) {
    int n = 0;
    struct ibv_device **devs = list(&n);
    printf("%s:", what);
    for (int i = 0; devs && i < n; i++) printf(" %s", name(devs[i]));
    printf("\n");
}

int main(void) {
    show("linked", ibv_get_device_list, ibv_get_device_name);
    void *h = dlopen("libibverbs-abc123.so.1", RTLD_NOW);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    show("dlopen", (list_fn)dlsym(h, "ibv_get_device_list"), (name_fn)dlsym(h, "ibv_get_device_name"));
    int n = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);
    if (n == 0) return 2;
    struct ibv_context *ctx = ibv_open_device(devs[0]);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    static char buf[65536];
    struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
    printf("reg %s\n", mr ? "ok" : "failed");
    return mr ? 0 : 3;
}
