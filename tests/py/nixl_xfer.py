"""Two NIXL agents in two processes, through NIXL's own Python API (`nixl_agent`, the wheel
`nixl-cu12`: its UCX backend on the UCX 1.23 with verbs it vendors), as its two-peer example
does: the target listens for metadata on a TCP port (NIXL's listener thread), the initiator
fetches the target's metadata and sends its own, the target sends its transfer descriptors as a
notification. Each registers two 1 MiB regions of host memory (anonymous mmap, as a CPU tensor's
pages); the initiator WRITEs its first region into the target's first and READs the target's
second into its own second, then notifies the target, which checks what was written. Every byte
is checked on both sides.

usage: nixl_xfer.py target|initiator PORT   (one line per step; exit 0 when all bytes match)

Nothing is caught: a registration NIXL refuses ends the process with NIXL's own exception and
traceback, as in an application that calls register_memory() without a try.
"""
import ctypes
import mmap
import random
import sys
import time

from nixl_cu12 import nixl_agent, nixl_agent_config

role, port = sys.argv[1], int(sys.argv[2])
N = 1 << 20
DEADLINE = time.monotonic() + 60


def region(fill):
    m = mmap.mmap(-1, N)
    m[:] = fill
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def wait(what, poll):
    while True:
        got = poll()
        if got:
            return got
        if time.monotonic() > DEADLINE:
            print(f"{role}: timed out waiting for {what}", flush=True)
            sys.exit(4)
        time.sleep(0.001)


written = random.Random(2026).randbytes(N)
to_read = random.Random(2027).randbytes(N)
agent = nixl_agent(role, nixl_agent_config(True, True, port if role == "target" else 0))
if role == "target":
    (dst, dst_addr), (src, src_addr) = region(bytes(N)), region(to_read)
else:
    (src, src_addr), (dst, dst_addr) = region(written), region(bytes(N))
regions = [(src_addr, N, 0, ""), (dst_addr, N, 0, "")]
reg = agent.register_memory(regions, "DRAM")
print(f"{role}: registered 2 x {N} bytes of host memory", flush=True)

if role == "target":
    # the first receives the WRITE, the second is READ by the initiator
    descs = [agent.get_xfer_descs([(a, N, 0)], "DRAM") for a in (dst_addr, src_addr)]
    wait("the initiator's metadata", lambda: agent.check_remote_metadata("initiator"))
    agent.send_notif("initiator", agent.get_serialized_descs(descs))
    notifs = wait("the initiator's notification", lambda: agent.get_new_notifs().get("initiator"))
    assert notifs == [b"done"], notifs
    if dst[:] != written:
        bad = next(i for i in range(N) if dst[i] != written[i])
        print(f"target: WRITE landed wrong bytes from offset {bad}", flush=True)
        sys.exit(5)
    print("target: write byte-exact", flush=True)
else:
    agent.fetch_remote_metadata("target", "127.0.0.1", port)
    agent.send_local_metadata("127.0.0.1", port)
    remote = agent.deserialize_descs(wait("the target's descriptors", lambda: agent.get_new_notifs().get("target"))[0])
    wait("the target's metadata", lambda: agent.check_remote_metadata("target"))
    print("initiator: connected", flush=True)
    for op, addr, there in (("WRITE", src_addr, remote[0]), ("READ", dst_addr, remote[1])):
        h = agent.initialize_xfer(op, agent.get_xfer_descs([(addr, N, 0)], "DRAM"), there, "target")
        state = agent.transfer(h)
        while state == "PROC":
            state = agent.check_xfer_state(h)
        if state != "DONE":
            print(f"initiator: {op} ended {state}", flush=True)
            sys.exit(6)
        agent.release_xfer_handle(h)
    if dst[:] != to_read:
        bad = next(i for i in range(N) if dst[i] != to_read[i])
        print(f"initiator: READ brought wrong bytes from offset {bad}", flush=True)
        sys.exit(5)
    print("initiator: read byte-exact", flush=True)
    agent.send_notif("target", b"done")
    agent.remove_remote_agent("target")
    agent.invalidate_local_metadata("127.0.0.1", port)
agent.deregister_memory(reg)
print(f"{role}: done", flush=True)
