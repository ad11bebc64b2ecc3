"""mpi4py (PyPI's binary wheel) on the MPI it finds at run time (Debian's Open MPI): a
send/recv ring from 1 B to --max-size bytes (x16 each step), an int64 allreduce, and
MPI_Put/MPI_Get of 1 MiB in a window; every byte checked against what its sender wrote.

usage: mpi4py_datacheck.py [--max-size N]   (each rank prints "mpi4py_datacheck: rank R ok ...")
"""
import array
import os
import random
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
max_size = int(sys.argv[sys.argv.index("--max-size") + 1]) if "--max-size" in sys.argv else 4 << 20
nxt, prv = (rank + 1) % size, (rank - 1) % size


def payload(sender, n, it):
    return random.Random(f"{sender}-{n}-{it}").randbytes(n)


def say(line):
    # One write per line: mpirun forwards each rank's output as it comes.
    os.write(1, f"mpi4py_datacheck: rank {rank} {line}\n".encode())


def fail(what):
    say(what)
    comm.Abort(1)


sizes = []
n = 1
while n < max_size:
    sizes.append(n)
    n *= 16
sizes.append(max_size)
for it in range(2):
    for n in sizes:
        out = bytearray(payload(rank, n, it))
        got = bytearray(n)
        comm.Sendrecv(out, dest=nxt, sendtag=n, recvbuf=got, source=prv, recvtag=n)
        if got != payload(prv, n, it):
            bad = next(i for i in range(n) if got[i] != payload(prv, n, it)[i])
            fail(f"send/recv {n} bytes from rank {prv}, iteration {it}: first wrong byte at {bad}")
say(f"send/recv {2 * len(sizes)} messages up to {max_size} bytes ok")

for count in (1, 1000, 1 << 20):
    mine = array.array("q", [rank * 1000003 + i for i in range(count)])
    total = array.array("q", bytes(8 * count))
    comm.Allreduce(mine, total, op=MPI.SUM)
    base = 1000003 * size * (size - 1) // 2
    if any(total[i] != base + size * i for i in range(0, count, max(1, count // 4096))) or total[-1] != base + size * (count - 1):
        fail(f"allreduce of {count} int64 wrong")

N = 1 << 20
window_mem = MPI.Alloc_mem(N)
win = MPI.Win.Create(window_mem, comm=comm)
win.Fence()
# the origin buffer must live until the fence that completes the Put (UCX may read it then)
origin = bytearray(payload(rank, N, 7))
win.Put(origin, nxt)
win.Fence()
del origin
if bytes(window_mem) != payload(prv, N, 7):
    fail(f"MPI_Put of {N} bytes from rank {prv} wrong")
back = bytearray(N)
win.Fence()
win.Get(back, nxt)
win.Fence()
if back != payload(rank, N, 7):
    fail(f"MPI_Get of {N} bytes from rank {nxt} wrong")
win.Free()
MPI.Free_mem(window_mem)
say("ok")
