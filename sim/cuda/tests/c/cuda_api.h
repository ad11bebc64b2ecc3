/* The CUDA driver API subset the tests use, declared from cuda.h's documented signatures and
 * loaded the way NCCL and the CUDA runtime do: dlopen("libcuda.so.1") + dlsym. No CUDA
 * headers are needed to build the tests. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

enum {
    CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_NOT_READY = 600,
};
enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1, CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4, CU_POINTER_ATTRIBUTE_BUFFER_ID = 7, CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11, CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    CU_POINTER_ATTRIBUTE_MAPPED = 13, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE = 15,
};
enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2 };
enum {
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
};
#define CU_STREAM_DEFAULT 0x0
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 0x1

#define CU_FUNCS(X) \
    X(cuInit, (unsigned)) \
    X(cuDriverGetVersion, (int *)) \
    X(cuDeviceGetCount, (int *)) \
    X(cuDeviceGet, (CUdevice *, int)) \
    X(cuDeviceGetName, (char *, int, CUdevice)) \
    X(cuDeviceGetAttribute, (int *, int, CUdevice)) \
    X(cuDeviceGetPCIBusId, (char *, int, CUdevice)) \
    X(cuDeviceTotalMem_v2, (size_t *, CUdevice)) \
    X(cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice)) \
    X(cuCtxDestroy_v2, (CUcontext)) \
    X(cuCtxSetCurrent, (CUcontext)) \
    X(cuCtxGetCurrent, (CUcontext *)) \
    X(cuCtxGetDevice, (CUdevice *)) \
    X(cuCtxPushCurrent_v2, (CUcontext)) \
    X(cuCtxPopCurrent_v2, (CUcontext *)) \
    X(cuCtxSynchronize, (void)) \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice)) \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice)) \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t)) \
    X(cuMemFree_v2, (CUdeviceptr)) \
    X(cuMemGetInfo_v2, (size_t *, size_t *)) \
    X(cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t)) \
    X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t)) \
    X(cuMemcpyDtoD_v2, (CUdeviceptr, CUdeviceptr, size_t)) \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream)) \
    X(cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream)) \
    X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t)) \
    X(cuStreamCreate, (CUstream *, unsigned)) \
    X(cuStreamDestroy_v2, (CUstream)) \
    X(cuStreamSynchronize, (CUstream)) \
    X(cuStreamQuery, (CUstream)) \
    X(cuPointerGetAttribute, (void *, int, CUdeviceptr)) \
    X(cuPointerGetAttributes, (unsigned, int *, void **, CUdeviceptr)) \
    X(cuMemGetHandleForAddressRange, (void *, CUdeviceptr, size_t, int, unsigned long long)) \
    X(cuGetErrorName, (CUresult, const char **)) \
    X(cuGetErrorString, (CUresult, const char **)) \
    X(mrshim_sim_cuda_stream_busy, (CUstream, unsigned))

#define CU_DECLARE(name, args) static CUresult(*name) args;
CU_FUNCS(CU_DECLARE)

static void cu_load(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen(libcuda.so.1): %s\n", dlerror()); exit(3); }
#define CU_LOAD(name, args) \
    if (!(name = (CUresult(*) args)dlsym(h, #name))) { fprintf(stderr, "dlsym(%s) failed\n", #name); exit(3); }
    CU_FUNCS(CU_LOAD)
}

/* Self-checking: one "ok NAME" or "FAIL NAME: ..." line per check; exit status = failures. */
static int fails;
#define EXPECT(name, got, want) do { \
    long long g_ = (long long)(got), w_ = (long long)(want); \
    if (g_ == w_) printf("ok %s\n", name); \
    else { printf("FAIL %s: got %lld want %lld (line %d)\n", name, g_, w_, __LINE__); fails++; } \
    fflush(stdout); } while (0)
#define CHECK(name, cond) EXPECT(name, !!(cond), 1)
/* Must succeed, or the rest of the program makes no sense. */
#define MUST(call) do { CUresult r_ = (call); if (r_) { printf("FAIL %s = %d (line %d)\n", #call, r_, __LINE__); exit(10); } } while (0)
