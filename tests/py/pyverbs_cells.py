# Runs tests/c/pyverbs_reg.py once per MODE=FILE in one python3 process (in the kernel tier's VM,
# under TCG, a python3 start costs seconds): pyverbs is imported once, and each mode runs in a
# forked child whose stdout and stderr go to FILE. What a child writes there is what
# `python3 pyverbs_reg.py MODE` prints: its output, or pyverbs' exception with the traceback of
# pyverbs_reg.py (this driver's own frame left out). Prints "MODE PID EXIT" per mode (the kernel
# tier attributes the kernel's answers to a mode by its pid).
#
#   python3 pyverbs_cells.py PATH/TO/pyverbs_reg.py MODE=FILE...
import os
import sys
import traceback

import pyverbs.device  # noqa: F401 (the costly imports, once)
import pyverbs.mr  # noqa: F401
import pyverbs.pd  # noqa: F401

reg = sys.argv[1]
with open(reg) as f:
    code = compile(f.read(), reg, "exec")
for arg in sys.argv[2:]:
    mode, out = arg.split("=", 1)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = [reg, mode]
        status = 0
        try:
            exec(code, {"__name__": "__main__", "__file__": reg})
        except SystemExit as e:
            if e.code not in (None, 0):
                print(e.code, file=sys.stderr)
                status = 1
        except BaseException as e:
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    _, st = os.waitpid(pid, 0)
    print(mode, pid, os.waitstatus_to_exitcode(st), flush=True)
