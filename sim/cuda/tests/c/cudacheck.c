/* Checks of the simulated libcuda.so.1 through the driver API, loaded with dlopen like NCCL.
 * Usage: cudacheck preinit|init|devices|contexts|memory|attrs|fault|streams|threads
 * Prints "ok NAME" / "FAIL NAME: ..." per check (plus a few "info" lines sim/cuda/tests/cuda.rs
 * asserts); the exit status is the number of failures. */
#include "cuda_api.h"
#include <signal.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static CUcontext setup(void) {
    CUdevice d;
    CUcontext c;
    MUST(cuInit(0));
    MUST(cuDeviceGet(&d, 0));
    MUST(cuCtxCreate_v2(&c, 0, d));
    return c;
}

static int preinit(void) {
    int v = 0, n = -1;
    CUdeviceptr p;
    const char *s = NULL;
    EXPECT("version_before_init", cuDriverGetVersion(&v), CUDA_SUCCESS);
    CHECK("version_is_12", v >= 12000 && v < 13000);
    EXPECT("version_null", cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT("count_before_init", cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT("alloc_before_init", cuMemAlloc_v2(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT("ctx_before_init", cuCtxGetCurrent((CUcontext *)&p), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT("error_name_before_init", cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
    CHECK("error_name_text", s && !strcmp(s, "CUDA_ERROR_INVALID_VALUE"));
    EXPECT("error_string", cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
    CHECK("error_string_text", s && !strcmp(s, "out of memory"));
    EXPECT("error_name_not_ready", cuGetErrorName(CUDA_ERROR_NOT_READY, &s), CUDA_SUCCESS);
    CHECK("error_name_not_ready_text", s && !strcmp(s, "CUDA_ERROR_NOT_READY"));
    EXPECT("error_name_unknown_code", cuGetErrorName(12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK("error_name_unknown_null", s == NULL);
    EXPECT("error_string_unknown_code", cuGetErrorString(12345, &s), CUDA_ERROR_INVALID_VALUE);
    EXPECT("init_bad_flags", cuInit(1), CUDA_ERROR_INVALID_VALUE);
    EXPECT("init", cuInit(0), CUDA_SUCCESS);
    EXPECT("init_again", cuInit(0), CUDA_SUCCESS);
    EXPECT("count_after_init", cuDeviceGetCount(&n), CUDA_SUCCESS);
    EXPECT("count_default_1", n, 1);
    return fails;
}

/* For the environment tests: print what cuInit and a follow-up call return. */
static int init_only(void) {
    int n = -1;
    printf("info init=%d\n", cuInit(0));
    printf("info init_again=%d\n", cuInit(0));
    printf("info count=%d\n", cuDeviceGetCount(&n));
    printf("info n=%d\n", n);
    return 0;
}

static int devices(void) {
    int n, v;
    char buf[64];
    size_t total;
    MUST(cuInit(0));
    MUST(cuDeviceGetCount(&n));
    printf("info count=%d\n", n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        MUST(cuDeviceGet(&d, i));
        MUST(cuDeviceGetName(buf, sizeof buf, d));
        printf("info name%d=%s\n", i, buf);
        MUST(cuDeviceGetPCIBusId(buf, sizeof buf, d));
        printf("info pci%d=%s\n", i, buf);
        MUST(cuDeviceTotalMem_v2(&total, d));
        printf("info total%d=%zu\n", i, total);
        MUST(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
        printf("info busattr%d=%02X\n", i, v);
    }
    CUdevice d;
    EXPECT("device_get_out_of_range", cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
    EXPECT("device_get_negative", cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    EXPECT("device_get_null", cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("name_bad_device", cuDeviceGetName(buf, sizeof buf, n), CUDA_ERROR_INVALID_DEVICE);
    EXPECT("name_truncated", cuDeviceGetName(buf, 7, 0), CUDA_SUCCESS);
    CHECK("name_truncated_text", !strcmp(buf, "NVIDIA"));
    EXPECT("name_zero_len", cuDeviceGetName(buf, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("attr_warp", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
    EXPECT("attr_warp_value", v, 32);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
    EXPECT("attr_cc_major", v, 9);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0);
    EXPECT("attr_uva", v, 1);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0);
    EXPECT("attr_dmabuf", v, 1);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0);
    EXPECT("attr_gdr", v, 1);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0);
    EXPECT("attr_domain", v, 0);
    EXPECT("attr_unknown", cuDeviceGetAttribute(&v, 9999, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("attr_bad_device", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 99), CUDA_ERROR_INVALID_DEVICE);
    return fails;
}

static int contexts(void) {
    CUcontext c = (CUcontext)1, c2, got, prim, prim2;
    CUdevice d = -1;
    CUdeviceptr p;
    MUST(cuInit(0));
    EXPECT("no_current_initially", cuCtxGetCurrent(&got), CUDA_SUCCESS);
    CHECK("no_current_is_null", got == NULL);
    EXPECT("get_device_without_ctx", cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("alloc_without_ctx", cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("sync_without_ctx", cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("create_bad_device", cuCtxCreate_v2(&c, 0, 5), CUDA_ERROR_INVALID_DEVICE);
    EXPECT("create", cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
    cuCtxGetCurrent(&got);
    CHECK("create_makes_current", got == c);
    EXPECT("get_device", cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT("get_device_value", d, 0);
    EXPECT("create_second", cuCtxCreate_v2(&c2, 0, 0), CUDA_SUCCESS);
    cuCtxGetCurrent(&got);
    CHECK("second_is_current", got == c2);
    EXPECT("pop", cuCtxPopCurrent_v2(&got), CUDA_SUCCESS);
    CHECK("pop_returns_second", got == c2);
    cuCtxGetCurrent(&got);
    CHECK("first_current_again", got == c);
    EXPECT("push", cuCtxPushCurrent_v2(c2), CUDA_SUCCESS);
    EXPECT("set_current", cuCtxSetCurrent(c), CUDA_SUCCESS);
    cuCtxGetCurrent(&got);
    CHECK("set_current_replaces_top", got == c);
    EXPECT("set_current_bogus", cuCtxSetCurrent((CUcontext)0x1234), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("synchronize", cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT("destroy_second", cuCtxDestroy_v2(c2), CUDA_SUCCESS);
    EXPECT("destroy_twice", cuCtxDestroy_v2(c2), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("destroy_bogus", cuCtxDestroy_v2((CUcontext)0x1234), CUDA_ERROR_INVALID_CONTEXT);
    /* Allocations die with their context. */
    MUST(cuMemAlloc_v2(&p, 4096));
    unsigned mt = 0;
    EXPECT("alloc_in_ctx", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_SUCCESS);
    EXPECT("destroy_current", cuCtxDestroy_v2(c), CUDA_SUCCESS);
    cuCtxGetCurrent(&got);
    CHECK("destroy_pops_current", got == NULL);
    EXPECT("alloc_gone_with_ctx", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_ERROR_INVALID_VALUE);
    /* Primary context: same handle each time, not current until set, not destroyable. */
    EXPECT("primary_retain", cuDevicePrimaryCtxRetain(&prim, 0), CUDA_SUCCESS);
    EXPECT("primary_retain_again", cuDevicePrimaryCtxRetain(&prim2, 0), CUDA_SUCCESS);
    CHECK("primary_same_handle", prim == prim2 && prim != NULL);
    cuCtxGetCurrent(&got);
    CHECK("primary_not_current", got == NULL);
    EXPECT("primary_set_current", cuCtxSetCurrent(prim), CUDA_SUCCESS);
    EXPECT("primary_alloc", cuMemAlloc_v2(&p, 100), CUDA_SUCCESS);
    EXPECT("primary_free", cuMemFree_v2(p), CUDA_SUCCESS);
    EXPECT("primary_destroy_refused", cuCtxDestroy_v2(prim), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("primary_retain_bad_device", cuDevicePrimaryCtxRetain(&prim2, 3), CUDA_ERROR_INVALID_DEVICE);
    EXPECT("primary_release", cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    EXPECT("primary_release_2", cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    EXPECT("primary_release_unbalanced", cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("unbind", cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    cuCtxGetCurrent(&got);
    CHECK("unbound", got == NULL);
    EXPECT("pop_empty", cuCtxPopCurrent_v2(&got), CUDA_ERROR_INVALID_CONTEXT);
    return fails;
}

static int memory(void) {
    setup();
    size_t fr, total, fr2;
    CUdeviceptr a, b, big;
    EXPECT("meminfo", cuMemGetInfo_v2(&fr, &total), CUDA_SUCCESS);
    printf("info total=%zu free=%zu\n", total, fr);
    EXPECT("alloc_zero", cuMemAlloc_v2(&a, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("alloc_null", cuMemAlloc_v2(NULL, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT("alloc_too_big", cuMemAlloc_v2(&big, total + 4096), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT("alloc_a", cuMemAlloc_v2(&a, 10000), CUDA_SUCCESS);
    CHECK("alloc_page_aligned", a % 4096 == 0);
    cuMemGetInfo_v2(&fr2, &total);
    EXPECT("meminfo_counts_pages", fr - fr2, 12288);
    EXPECT("alloc_b", cuMemAlloc_v2(&b, 1 << 20), CUDA_SUCCESS);

    size_t n = 1 << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 2654435761u >> 13);
    EXPECT("htod", cuMemcpyHtoD_v2(b, src, n), CUDA_SUCCESS);
    memset(dst, 0, n);
    EXPECT("dtoh", cuMemcpyDtoH_v2(dst, b, n), CUDA_SUCCESS);
    CHECK("roundtrip_exact", !memcmp(src, dst, n));
    /* Interior offsets and DtoD */
    EXPECT("dtod", cuMemcpyDtoD_v2(a + 100, b + 5000, 9000), CUDA_SUCCESS);
    memset(dst, 0, n);
    EXPECT("dtoh_interior", cuMemcpyDtoH_v2(dst, a + 100, 9000), CUDA_SUCCESS);
    CHECK("dtod_exact", !memcmp(dst, src + 5000, 9000));
    EXPECT("memset", cuMemsetD8_v2(a + 1, 0xAB, 3000), CUDA_SUCCESS);
    cuMemcpyDtoH_v2(dst, a, 3002);
    int good = dst[0] == 0 && dst[3001] == src[5000 + 3001 - 100];
    for (int i = 1; i <= 3000; i++) good &= dst[i] == 0xAB;
    CHECK("memset_exact", good);
    /* Bounds: the page-rounded size is the allocation's size. */
    EXPECT("htod_past_end", cuMemcpyHtoD_v2(a + 12288 - 10, src, 11), CUDA_ERROR_INVALID_VALUE);
    EXPECT("htod_to_end", cuMemcpyHtoD_v2(a + 12288 - 10, src, 10), CUDA_SUCCESS);
    EXPECT("dtoh_past_end", cuMemcpyDtoH_v2(dst, b + 1, n), CUDA_ERROR_INVALID_VALUE);
    EXPECT("htod_host_dst", cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)dst, src, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT("dtoh_device_as_host", cuMemcpyDtoH_v2((void *)(uintptr_t)a, b, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT("memset_past_end", cuMemsetD8_v2(a, 0, 12289), CUDA_ERROR_INVALID_VALUE);
    EXPECT("dtod_spanning", cuMemcpyDtoD_v2(a, b + n - 8, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT("free_interior", cuMemFree_v2(a + 4096), CUDA_ERROR_INVALID_VALUE);
    EXPECT("free_a", cuMemFree_v2(a), CUDA_SUCCESS);
    EXPECT("free_twice", cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
    EXPECT("htod_after_free", cuMemcpyHtoD_v2(a, src, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT("free_b", cuMemFree_v2(b), CUDA_SUCCESS);
    cuMemGetInfo_v2(&fr2, &total);
    EXPECT("meminfo_back", fr2, fr);
    /* A whole device's memory can be allocated (memfds are sparse), one byte more cannot. */
    EXPECT("alloc_all", cuMemAlloc_v2(&big, total), CUDA_SUCCESS);
    EXPECT("alloc_when_full", cuMemAlloc_v2(&a, 1), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT("free_all", cuMemFree_v2(big), CUDA_SUCCESS);
    return fails;
}

static int attrs(void) {
    CUcontext c = setup();
    CUdeviceptr a, b;
    MUST(cuMemAlloc_v2(&a, 3 * 4096));
    MUST(cuMemAlloc_v2(&b, 4096));
    unsigned mt = 0;
    for (int off = 0; off < 3 * 4096; off += 4095) {
        mt = 0;
        EXPECT("memory_type_inside", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + off), CUDA_SUCCESS);
        EXPECT("memory_type_device", mt, CU_MEMORYTYPE_DEVICE);
    }
    static char host[64];
    int stack_var;
    void *heap = malloc(100);
    EXPECT("memory_type_static_host", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE);
    EXPECT("memory_type_stack", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&stack_var), CUDA_ERROR_INVALID_VALUE);
    EXPECT("memory_type_heap", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)heap), CUDA_ERROR_INVALID_VALUE);
    EXPECT("memory_type_past_end", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 3 * 4096 == b ? 0 : a + 3 * 4096), CUDA_ERROR_INVALID_VALUE);
    EXPECT("memory_type_null", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT("data_null", cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a), CUDA_ERROR_INVALID_VALUE);

    CUcontext pc = NULL;
    EXPECT("context", cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, a + 5), CUDA_SUCCESS);
    CHECK("context_value", pc == c);
    CUdeviceptr dp = 0, start = 0;
    EXPECT("device_pointer", cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a + 5), CUDA_SUCCESS);
    CHECK("device_pointer_value", dp == a + 5);
    EXPECT("range_start", cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 8000), CUDA_SUCCESS);
    CHECK("range_start_value", start == a);
    size_t size = 0;
    EXPECT("range_size", cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 8000), CUDA_SUCCESS);
    EXPECT("range_size_value", size, 3 * 4096);
    int ord = -1, managed = -1, mapped = -1;
    EXPECT("ordinal", cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a), CUDA_SUCCESS);
    EXPECT("ordinal_value", ord, 0);
    EXPECT("is_managed", cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a), CUDA_SUCCESS);
    EXPECT("is_managed_value", managed, 0);
    EXPECT("mapped", cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, a), CUDA_SUCCESS);
    EXPECT("mapped_value", mapped, 1);
    unsigned long long ida = 0, idb = 0;
    EXPECT("buffer_id", cuPointerGetAttribute(&ida, CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 1), CUDA_SUCCESS);
    cuPointerGetAttribute(&idb, CU_POINTER_ATTRIBUTE_BUFFER_ID, b);
    CHECK("buffer_ids_distinct", ida != 0 && idb != 0 && ida != idb);
    void *hp = (void *)1;
    EXPECT("host_pointer_of_device_memory", cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, a), CUDA_ERROR_INVALID_VALUE);
    EXPECT("unknown_attribute", cuPointerGetAttribute(&mt, 999, a), CUDA_ERROR_INVALID_VALUE);
    /* DEVICE_POINTER needs a current context; MEMORY_TYPE does not. */
    cuCtxSetCurrent(NULL);
    EXPECT("device_pointer_no_ctx", cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT("memory_type_no_ctx", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a), CUDA_SUCCESS);
    cuCtxSetCurrent(c);

    /* cuPointerGetAttributes: all at once; unknown memory gives zeros, not an error. */
    int list[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_CONTEXT,
                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                   CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_HOST_POINTER };
    unsigned m2 = 7;
    CUdeviceptr dp2 = 7, st2 = 7;
    CUcontext c2 = (CUcontext)7;
    int ord2 = 7, man2 = 7;
    size_t sz2 = 7;
    unsigned long long id2 = 7;
    void *hp2 = (void *)7;
    void *data[] = { &m2, &dp2, &c2, &ord2, &st2, &sz2, &man2, &id2, &hp2 };
    EXPECT("attributes", cuPointerGetAttributes(9, list, data, b + 10), CUDA_SUCCESS);
    CHECK("attributes_values", m2 == CU_MEMORYTYPE_DEVICE && dp2 == b + 10 && c2 == c && ord2 == 0 && st2 == b && sz2 == 4096 && man2 == 0 && id2 == idb && hp2 == NULL);
    EXPECT("attributes_host", cuPointerGetAttributes(9, list, data, (CUdeviceptr)(uintptr_t)heap), CUDA_SUCCESS);
    CHECK("attributes_host_zeroed", m2 == 0 && dp2 == 0 && c2 == NULL && st2 == 0 && sz2 == 0 && id2 == 0 && hp2 == NULL);
    int bad[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 999 };
    EXPECT("attributes_unknown", cuPointerGetAttributes(2, bad, data, b), CUDA_ERROR_INVALID_VALUE);
    EXPECT("attributes_zero_count", cuPointerGetAttributes(0, list, data, b), CUDA_ERROR_INVALID_VALUE);
    MUST(cuMemFree_v2(a));
    EXPECT("memory_type_after_free", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a), CUDA_ERROR_INVALID_VALUE);
    return fails;
}

/* The CPU cannot touch device memory through the application's address: a child that reads
 * or writes it dies of SIGSEGV, while copies through the runtime round-trip exactly. */
static int touch(CUdeviceptr p, int write) {
    pid_t pid = fork();
    if (pid == 0) {
        volatile unsigned char *q = (volatile unsigned char *)(uintptr_t)p;
        if (write) q[0] = 1;
        else printf("read %d\n", q[0]);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st);
}

static int fault(void) {
    setup();
    CUdeviceptr p;
    size_t n = 4 << 20;
    MUST(cuMemAlloc_v2(&p, n));
    EXPECT("cpu_read_faults", touch(p, 0), SIGSEGV);
    EXPECT("cpu_write_faults", touch(p + n - 1, 1), SIGSEGV);
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)((i >> 3) ^ (i * 31));
    MUST(cuMemcpyHtoD_v2(p, src, n));
    EXPECT("cpu_read_faults_after_copy", touch(p + 12345, 0), SIGSEGV);
    MUST(cuMemcpyDtoH_v2(dst, p, n));
    CHECK("copy_roundtrip_exact", !memcmp(src, dst, n));
    /* What the verbs simulator sees: a ---s mapping of /memfd:mrshim-gpu at the address. */
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], want[32];
    snprintf(want, sizeof want, "%llx-", p);
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, want, strlen(want))) {
            found = strstr(line, " ---s ") && strstr(line, "/memfd:mrshim-gpu");
            printf("info maps %s", line);
        }
    fclose(f);
    CHECK("maps_prot_none_memfd", found);
    return fails;
}

static int streams(void) {
    setup();
    CUstream blocking, nonblocking, s3;
    CUdeviceptr p;
    size_t n = 1 << 20;
    unsigned flags = 0;
    MUST(cuMemAlloc_v2(&p, n));
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 7 + 3);
    EXPECT("create_blocking", cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    EXPECT("create_nonblocking", cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT("create_bad_flags", cuStreamCreate(&s3, 0x80), CUDA_ERROR_INVALID_VALUE);
    EXPECT("create_null", cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    (void)flags;

    /* In-order queue: HtoD then DtoH on one stream, nothing visible before synchronize. */
    EXPECT("htod_async", cuMemcpyHtoDAsync_v2(p, src, n, blocking), CUDA_SUCCESS);
    EXPECT("dtoh_async", cuMemcpyDtoHAsync_v2(dst, p, n, blocking), CUDA_SUCCESS);
    EXPECT("sync", cuStreamSynchronize(blocking), CUDA_SUCCESS);
    CHECK("async_roundtrip_exact", !memcmp(src, dst, n));
    EXPECT("query_idle", cuStreamQuery(blocking), CUDA_SUCCESS);

    /* A long "kernel" on the blocking stream: the queue behind it waits... */
    EXPECT("busy", mrshim_sim_cuda_stream_busy(blocking, 1500), CUDA_SUCCESS);
    EXPECT("query_busy", cuStreamQuery(blocking), CUDA_ERROR_NOT_READY);
    memset(dst, 0, n);
    cuMemcpyDtoHAsync_v2(dst, p, 64, blocking);
    /* ...while copies on a non-blocking stream complete. */
    double t0 = now_ms();
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 13 + 1);
    EXPECT("nb_htod", cuMemcpyHtoDAsync_v2(p + 4096, src, 8192, nonblocking), CUDA_SUCCESS);
    static unsigned char back[8192];
    EXPECT("nb_dtoh", cuMemcpyDtoHAsync_v2(back, p + 4096, 8192, nonblocking), CUDA_SUCCESS);
    EXPECT("nb_sync", cuStreamSynchronize(nonblocking), CUDA_SUCCESS);
    double t1 = now_ms();
    printf("info nonblocking_ms=%.0f\n", t1 - t0);
    CHECK("nonblocking_not_delayed_by_busy_stream", t1 - t0 < 1000);
    CHECK("nonblocking_data_exact", !memcmp(back, src, 8192));
    EXPECT("busy_stream_still_busy", cuStreamQuery(blocking), CUDA_ERROR_NOT_READY);
    CHECK("queued_behind_busy_not_run", dst[0] == 0 && dst[1] == 0);
    EXPECT("sync_busy", cuStreamSynchronize(blocking), CUDA_SUCCESS);
    CHECK("waited_for_busy", now_ms() - t0 >= 1300);
    CHECK("queued_behind_busy_ran", dst[1] == (unsigned char)(1 * 7 + 3));

    /* The legacy default stream (synchronous cuMemcpy*) waits for blocking streams, not for
     * non-blocking ones: a copy on it stalls behind a "kernel" on a blocking stream. */
    mrshim_sim_cuda_stream_busy(nonblocking, 1500);
    t0 = now_ms();
    MUST(cuMemcpyHtoD_v2(p, src, 16));
    printf("info legacy_vs_nonblocking_ms=%.0f\n", now_ms() - t0);
    CHECK("legacy_ignores_nonblocking_stream", now_ms() - t0 < 1000);
    mrshim_sim_cuda_stream_busy(blocking, 800);
    t0 = now_ms();
    MUST(cuMemcpyDtoH_v2(dst, p, 16));
    printf("info legacy_vs_blocking_ms=%.0f\n", now_ms() - t0);
    CHECK("legacy_waits_for_blocking_stream", now_ms() - t0 >= 600);
    EXPECT("null_stream_async_is_sync", cuMemcpyDtoHAsync_v2(back, p, 16, NULL), CUDA_SUCCESS);
    CHECK("null_stream_done_on_return", !memcmp(back, src, 16));
    EXPECT("null_stream_sync", cuStreamSynchronize(NULL), CUDA_SUCCESS);
    EXPECT("null_stream_query", cuStreamQuery(NULL), CUDA_SUCCESS);
    EXPECT("busy_null_refused", mrshim_sim_cuda_stream_busy(NULL, 10), CUDA_ERROR_INVALID_VALUE);
    EXPECT("async_out_of_bounds", cuMemcpyHtoDAsync_v2(p + n - 1, src, 2, nonblocking), CUDA_ERROR_INVALID_VALUE);
    EXPECT("ctx_sync", cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT("ctx_sync_drained", cuStreamQuery(nonblocking), CUDA_SUCCESS);

    /* Destroy returns at once; queued work still completes. */
    mrshim_sim_cuda_stream_busy(nonblocking, 300);
    memset(back, 0, 16);
    cuMemcpyDtoHAsync_v2(back, p, 16, nonblocking);
    EXPECT("destroy", cuStreamDestroy_v2(nonblocking), CUDA_SUCCESS);
    EXPECT("destroy_twice", cuStreamDestroy_v2(nonblocking), CUDA_ERROR_INVALID_HANDLE);
    EXPECT("use_destroyed", cuMemcpyHtoDAsync_v2(p, src, 16, nonblocking), CUDA_ERROR_INVALID_HANDLE);
    EXPECT("sync_destroyed", cuStreamSynchronize(nonblocking), CUDA_ERROR_INVALID_HANDLE);
    EXPECT("query_bogus", cuStreamQuery((CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
    usleep(600 * 1000);
    CHECK("destroyed_stream_drained", !memcmp(back, src, 16));
    EXPECT("destroy_blocking", cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
    return fails;
}

/* Threads: the current context is per thread; each worker binds the shared context and runs
 * its own stream's copies while the others do the same. */
static CUcontext shared_ctx;
static void *worker(void *arg) {
    long id = (long)arg, bad = 0;
    CUcontext got = (CUcontext)1;
    cuCtxGetCurrent(&got);
    if (got != NULL) bad |= 1; /* a new thread starts with no current context */
    if (cuCtxSetCurrent(shared_ctx)) return (void *)2L;
    CUstream s;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) return (void *)4L;
    unsigned char src[8192], dst[8192];
    for (int it = 0; it < 100; it++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, sizeof src)) { bad |= 8; break; }
        for (int i = 0; i < (int)sizeof src; i++) src[i] = (unsigned char)(i + it * 3 + id * 101);
        memset(dst, 0, sizeof dst);
        if (cuMemcpyHtoDAsync_v2(p, src, sizeof src, s) || cuMemcpyDtoHAsync_v2(dst, p, sizeof dst, s) || cuStreamSynchronize(s)) bad |= 16;
        if (memcmp(src, dst, sizeof src)) bad |= 32;
        if (cuMemFree_v2(p)) bad |= 64;
    }
    cuStreamDestroy_v2(s);
    return (void *)bad;
}

static int threads(void) {
    shared_ctx = setup();
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        EXPECT("thread_ok", (long)r, 0);
    }
    size_t fr, total;
    MUST(cuMemGetInfo_v2(&fr, &total));
    EXPECT("threads_freed_everything", fr, total);
    /* Freeing memory a queued copy still reads: the copy completes with the data. */
    CUstream s;
    CUdeviceptr p;
    static unsigned char src[65536], dst[65536];
    MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    MUST(cuMemAlloc_v2(&p, sizeof src));
    for (int i = 0; i < (int)sizeof src; i++) src[i] = (unsigned char)(i * 3);
    MUST(cuMemcpyHtoD_v2(p, src, sizeof src));
    mrshim_sim_cuda_stream_busy(s, 200);
    MUST(cuMemcpyDtoHAsync_v2(dst, p, sizeof dst, s));
    EXPECT("free_with_copy_queued", cuMemFree_v2(p), CUDA_SUCCESS);
    MUST(cuStreamSynchronize(s));
    CHECK("queued_copy_after_free_exact", !memcmp(src, dst, sizeof src));
    return fails;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s CHECK\n", argv[0]); return 2; }
    cu_load();
    const char *w = argv[1];
    if (!strcmp(w, "preinit")) return preinit();
    if (!strcmp(w, "init")) return init_only();
    if (!strcmp(w, "devices")) return devices();
    if (!strcmp(w, "contexts")) return contexts();
    if (!strcmp(w, "memory")) return memory();
    if (!strcmp(w, "attrs")) return attrs();
    if (!strcmp(w, "fault")) return fault();
    if (!strcmp(w, "streams")) return streams();
    if (!strcmp(w, "threads")) return threads();
    fprintf(stderr, "unknown check %s\n", w);
    return 2;
}
