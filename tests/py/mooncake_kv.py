# A KV-cache transfer with Mooncake's Transfer Engine (PyPI mooncake-transfer-engine-non-cuda):
# a target process registers a host buffer and stays passive (it never posts or polls; the
# engine's own threads serve the handshake), an initiator RDMA-READs and RDMA-WRITEs it.
# Metadata: P2PHANDSHAKE (no etcd), protocol "rdma", device mlx5_0 (the simulator's). The two
# processes meet through files in DIR (written whole, then renamed into place):
#
#   python3 mooncake_kv.py target    DIR SIZE [readonly]
#   python3 mooncake_kv.py initiator DIR SIZE
#
# The buffers are anonymous private pages (an inference server's KV pool); with `readonly` the
# target registers a PROT_READ mapping instead (as a read-only mapped file of weights would be),
# which the engine asks to register with write access.
#
# Phases (as tests/c/passive_target.c):
#   1. the target fills its buffer with generation 1; the initiator READs it all and checks it;
#   2. the initiator WRITEs generation 2 into it; the target checks its own buffer;
#   3. the target refills its buffer with generation 3; the initiator READs it all and checks it.
# Each process prints (to stderr) "<role>: ok", or "<role>: stale: N of M pages in phase P" per phase and
# "<role>: stale" (exit 1). What the engine says goes to stderr through glog, unchanged. A
# registration the engine refuses prints "<role>: register_memory failed: RC" (exit 2; the peer
# then prints "<role>: the peer gave up" and exits 2 too); setup failures exit 3.
import ctypes
import os
import sys
import time

from mooncake.engine import TransferEngine

PAGE = 4096
role, d, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
readonly = sys.argv[4:] == ["readonly"]

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def say(msg, code=None):
    # stderr, as the engine's glog lines: one stream keeps a process's lines in order
    print(f"{role}: {msg}", file=sys.stderr, flush=True)
    if code is not None:
        sys.exit(code)


def put(name, text):
    # the temporary name is this process's own: both sides may give up (write "abort") at once
    p = os.path.join(d, name)
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, p)


def give_up(msg, code):
    """Tells the peer (which may be waiting for a phase) and exits."""
    put("abort", msg)
    say(msg, code)


def wait_for(name, timeout=60):
    p = os.path.join(d, name)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(p):
            with open(p) as f:
                return f.read()
        if os.path.exists(os.path.join(d, "abort")):
            say("the peer gave up", 2)
        time.sleep(0.01)
    give_up(f"timed out waiting for {name}", 3)


def host_buffer():
    """Anonymous private pages, as an inference server's KV pool gets them (or read-only ones)."""
    PROT_READ, PROT_RW, MAP_PRIVATE, MAP_ANONYMOUS = 1, 3, 2, 0x20
    prot = PROT_READ if readonly else PROT_RW
    addr = libc.mmap(None, size, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        say(f"mmap: errno {ctypes.get_errno()}", 3)
    return addr


def fill(addr, gen):
    """Each page starts with its generation and page number (8 bytes each), the rest is gen."""
    page = bytearray([gen & 0xFF]) * PAGE
    for i in range(size // PAGE):
        page[0:16] = gen.to_bytes(8, "little") + i.to_bytes(8, "little")
        ctypes.memmove(addr + i * PAGE, bytes(page), PAGE)


def stale_pages(addr, gen):
    want_tail = bytes([gen & 0xFF]) * (PAGE - 16)
    bad = 0
    for i in range(size // PAGE):
        got = ctypes.string_at(addr + i * PAGE, PAGE)
        if got[:16] != gen.to_bytes(8, "little") + i.to_bytes(8, "little") or got[16:] != want_tail:
            bad += 1
    return bad


stale = False


def check(addr, gen, phase):
    global stale
    bad = stale_pages(addr, gen)
    if bad:
        say(f"stale: {bad} of {size // PAGE} pages in phase {phase}")
        stale = True


def end():
    put("done" if role == "initiator" else "finished", "")
    say("stale" if stale else "ok", 1 if stale else 0)


engine = TransferEngine()
# MOONCAKE_KV_DEVICE: the kernel tier runs it on rxe0
if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", os.environ.get("MOONCAKE_KV_DEVICE", "mlx5_0")) != 0:
    give_up("initialize failed", 3)
session = f"127.0.0.1:{engine.get_rpc_port()}"
buf = host_buffer()
rc = engine.register_memory(buf, size, "cpu:0")

if rc != 0:
    give_up(f"register_memory failed: {rc}", 2)
if role == "target":
    fill(buf, 1)
    put("target", f"{session} {buf}")
    wait_for("written")
    check(buf, 2, 2)
    fill(buf, 3)
    put("refilled", "")
    wait_for("done")
    end()
elif role == "initiator":
    peer, peer_addr = wait_for("target").split()
    peer_addr = int(peer_addr)
    if engine.transfer_sync_read(peer, buf, peer_addr, size) != 0:
        give_up("transfer_sync_read failed", 3)
    check(buf, 1, 1)
    fill(buf, 2)
    if engine.transfer_sync_write(peer, buf, peer_addr, size) != 0:
        give_up("transfer_sync_write failed", 3)
    put("written", "")
    wait_for("refilled")
    ctypes.memset(buf, 0, size)
    if engine.transfer_sync_read(peer, buf, peer_addr, size) != 0:
        give_up("transfer_sync_read failed", 3)
    check(buf, 3, 3)
    end()
else:
    say("role must be target or initiator", 3)
