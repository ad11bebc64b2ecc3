# A pyverbs client for tests/analyze_matrix.rs: registers 1 MiB of host memory on the first device
# with LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ, plus IBV_ACCESS_RELAXED_ORDERING when the first
# argument is `ro` (as NCCL-style clients ask for it). Its output is pyverbs' own: on failure the
# PyverbsRDMAError traceback.
import sys

import pyverbs.enums as e
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD

name = get_device_list()[0].name.decode()
ctx = Context(name=name)
pd = PD(ctx)
access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
if sys.argv[1:] == ["ro"]:
    access |= e.IBV_ACCESS_RELAXED_ORDERING
mr = MR(pd, 1 << 20, access)
print(f"registered 1 MiB on {name}, lkey {mr.lkey:#x}")
