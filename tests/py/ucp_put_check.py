"""UCP over the UCX a Python wheel vendors (NIXL's: UCX 1.23 with verbs, its own libibverbs
renamed by auditwheel and found through RPATH $ORIGIN), through ctypes: an endpoint from a
worker to itself over rc_verbs (the reachability check of UCX >= 1.23 looks up the RoCE port's
network interface), RDMA PUT and GET of 1 MiB, every byte checked.

usage: ucp_put_check.py WHEEL_LIBS_DIR   (prints one line per step; exit 0 when all bytes match)
"""
import ctypes
import os
import random
import sys

libdir = sys.argv[1]
for prefix in ("libucs-", "libucp-"):
    name = next(f for f in sorted(os.listdir(libdir)) if f.startswith(prefix))
    lib = ctypes.CDLL(os.path.join(libdir, name), mode=ctypes.RTLD_GLOBAL)
ucp = lib
VP, U64, SZ = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
UCS_INPROGRESS = 1


def ok(what, status):
    if status != 0:
        print(f"{what}: UCS status {status}", flush=True)
        sys.exit(3)


class Params(ctypes.Structure):
    # field_mask first, then the first field: ucp_params_t.features, ucp_ep_params_t.address,
    # ucp_mem_map_params_t.address (+ length); zero padding for the fields not set.
    _fields_ = [("field_mask", U64), ("first", U64), ("second", U64), ("pad", ctypes.c_byte * 512)]


major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
ucp.ucp_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release))
print(f"ucx {major.value}.{minor.value}", flush=True)

config = VP()
ok("ucp_config_read", ucp.ucp_config_read(None, None, ctypes.byref(config)))
p = Params(field_mask=1, first=1 | 2)  # FEATURES: TAG | RMA
context = VP()
ok("ucp_init", ucp.ucp_init_version(major, minor, ctypes.byref(p), config, ctypes.byref(context)))
worker = VP()
ok("ucp_worker_create", ucp.ucp_worker_create(context, ctypes.byref(Params()), ctypes.byref(worker)))
address, address_len = VP(), SZ()
ok("ucp_worker_get_address", ucp.ucp_worker_get_address(worker, ctypes.byref(address), ctypes.byref(address_len)))
ep = VP()
ok("ucp_ep_create", ucp.ucp_ep_create(worker, ctypes.byref(Params(field_mask=1, first=address.value)), ctypes.byref(ep)))
print("endpoint connected", flush=True)

N = 1 << 20
data = random.Random(2026).randbytes(N)
src = (ctypes.c_ubyte * N).from_buffer_copy(data)
dst = (ctypes.c_ubyte * N)()
back = (ctypes.c_ubyte * N)()
memh = VP()
mp = Params(field_mask=3, first=ctypes.addressof(dst), second=N)  # ADDRESS | LENGTH
ok("ucp_mem_map", ucp.ucp_mem_map(context, ctypes.byref(mp), ctypes.byref(memh)))
rkey_buf, rkey_len, rkey = VP(), SZ(), VP()
ok("ucp_rkey_pack", ucp.ucp_rkey_pack(context, memh, ctypes.byref(rkey_buf), ctypes.byref(rkey_len)))
ok("ucp_ep_rkey_unpack", ucp.ucp_ep_rkey_unpack(ep, rkey_buf, ctypes.byref(rkey)))

ucp.ucp_worker_flush_nbx.restype = VP
ucp.ucp_request_check_status.argtypes = [VP]
ucp.ucp_put_nbi.argtypes = ucp.ucp_get_nbi.argtypes = [VP, VP, SZ, U64, VP]


def flush():
    req = ucp.ucp_worker_flush_nbx(worker, ctypes.byref(Params()))
    if req is None:
        return
    if req >= 2**64 - 4096:  # UCS_PTR_IS_ERR
        ok("ucp_worker_flush_nbx", req - 2**64)
    while (st := ucp.ucp_request_check_status(req)) == UCS_INPROGRESS:
        ucp.ucp_worker_progress(worker)
    ok("flush", st)
    ucp.ucp_request_free(VP(req))


st = ucp.ucp_put_nbi(ep, ctypes.addressof(src), N, ctypes.addressof(dst), rkey)
ok("ucp_put_nbi", 0 if st == UCS_INPROGRESS else st)
flush()
print("put", "byte-exact" if bytes(dst) == data else "MISMATCH", flush=True)
st = ucp.ucp_get_nbi(ep, ctypes.addressof(back), N, ctypes.addressof(dst), rkey)
ok("ucp_get_nbi", 0 if st == UCS_INPROGRESS else st)
flush()
print("get", "byte-exact" if bytes(back) == data else "MISMATCH", flush=True)

# Everything released, as a real client does at its end (the shim's records then show every
# region deregistered).
ucp.ucp_rkey_destroy(rkey)
ucp.ucp_rkey_buffer_release(rkey_buf)
ok("ucp_mem_unmap", ucp.ucp_mem_unmap(context, memh))
ucp.ucp_ep_close_nbx.restype = VP
req = ucp.ucp_ep_close_nbx(ep, ctypes.byref(Params()))
if req is not None and req < 2**64 - 4096:
    while ucp.ucp_request_check_status(req) == UCS_INPROGRESS:
        ucp.ucp_worker_progress(worker)
    ucp.ucp_request_free(VP(req))
ucp.ucp_worker_release_address(worker, address)
ucp.ucp_worker_destroy(worker)
ucp.ucp_cleanup(context)
ucp.ucp_config_release(config)
sys.exit(0 if bytes(dst) == data and bytes(back) == data else 4)
