# A pyverbs client for tests/analyze_matrix.rs: registers 1 MiB on the first device, one request
# shape per mode (the first argument). Its output is pyverbs' own: on failure the PyverbsRDMAError
# traceback ("Failed to register a MR. length: N, access flags: M" with the mask in decimal).
#   (none)    host memory pyverbs allocates, LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ
#   ro        the same plus IBV_ACCESS_RELAXED_ORDERING (as NCCL-style clients ask for it)
#   readonly  an anonymous PROT_READ mapping registered with the same writable access
#   remote    REMOTE_WRITE without LOCAL_WRITE (invalid by the verbs specification)
#   gpu       device memory from the CUDA driver API (cuMemAlloc) through MR(address=...)
#   dmabuf    the same memory exported as a dma-buf (cuMemGetHandleForAddressRange) and
#             registered with DmaBufMR
#   odp       host memory with IBV_ACCESS_ON_DEMAND added (the kernel tier: rxe has no ODP)
#   memfd     DmaBufMR on a memfd (the kernel tier: its guest kernel has no dma-buf exporter, and a
#             provider without dma-buf refuses before it looks at the descriptor)
import ctypes
import sys

import pyverbs.enums as e
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR, DmaBufMR
from pyverbs.pd import PD

SIZE = 1 << 20
mode = sys.argv[1] if len(sys.argv) > 1 else ""
name = get_device_list()[0].name.decode()
ctx = Context(name=name)
pd = PD(ctx)
access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def cuda_alloc():
    """A device allocation through the driver API, as a CUDA program gets one."""
    cu = ctypes.CDLL("libcuda.so.1")
    dev, cuctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for what, rc in [
        ("cuInit", cu.cuInit(0)),
        ("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0)),
        ("cuCtxCreate", cu.cuCtxCreate_v2(ctypes.byref(cuctx), 0, dev)),
        ("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(SIZE))),
    ]:
        if rc != 0:
            sys.exit(f"{what}: CUresult {rc}")
    return cu, ptr.value


if mode == "ro":
    mr = MR(pd, SIZE, access | e.IBV_ACCESS_RELAXED_ORDERING)
elif mode == "readonly":
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    PROT_READ, MAP_PRIVATE, MAP_ANONYMOUS = 1, 2, 0x20
    buf = libc.mmap(None, SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    mr = MR(pd, SIZE, access, address=buf)
elif mode == "remote":
    mr = MR(pd, SIZE, e.IBV_ACCESS_REMOTE_WRITE)
elif mode == "gpu":
    _, dptr = cuda_alloc()
    mr = MR(pd, SIZE, access, address=dptr)
elif mode == "dmabuf":
    cu, dptr = cuda_alloc()
    fd = ctypes.c_int(-1)
    rc = cu.cuMemGetHandleForAddressRange(ctypes.byref(fd), ctypes.c_uint64(dptr), ctypes.c_size_t(SIZE), 1, 0)
    if rc != 0:
        sys.exit(f"cuMemGetHandleForAddressRange: CUresult {rc}")
    mr = DmaBufMR(pd, SIZE, access, dmabuf=fd.value, offset=0)
elif mode == "odp":
    mr = MR(pd, SIZE, access | e.IBV_ACCESS_ON_DEMAND)
elif mode == "memfd":
    import os

    fd = os.memfd_create("pyverbs_reg")
    os.ftruncate(fd, SIZE)
    mr = DmaBufMR(pd, SIZE, access, dmabuf=fd, offset=0)
elif mode == "":
    mr = MR(pd, SIZE, access)
else:
    sys.exit(f"unknown mode {mode}")
print(f"registered 1 MiB on {name}, lkey {mr.lkey:#x}")
