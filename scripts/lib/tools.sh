# Sourced by scripts/install-deps, scripts/build-portable, scripts/package and the tests under
# tests/dist: where the tools that are not Debian packages live, and their pinned versions.
# zig (PyPI `ziglang`) and cargo-zigbuild: the portable build's C toolchain (tools/zig-cc).
MRSHIM_TOOLS=${MRSHIM_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/mrshim-tools}
MRSHIM_VENV=$MRSHIM_TOOLS/venv
MRSHIM_PIP_PKGS=(ziglang==0.17.1 cargo-zigbuild==0.24.1)
# Python-wheel clients run on the simulator (tests/stacks_wheels.rs), in a venv of Debian's
# python3 of their own, without their dependencies (torch: not used): NIXL's wheel for the
# UCX 1.23 (with verbs, and its own renamed libibverbs) it vendors, mpi4py on Debian's Open MPI,
# Mooncake's Transfer Engine without CUDA (cp311: Debian 12's python3; its engine.so links the
# system's libibverbs, libnuma and libcurl; `mooncake.engine` imports without its dependencies),
# and numpy, which NIXL's Python API (nixl_cu12/_api.py) imports: the client of
# tests/analyze_matrix.rs's NIXL row (tests/py/nixl_xfer.py) needs it.
MRSHIM_PYCLIENTS=$MRSHIM_TOOLS/pyclients
MRSHIM_PYCLIENT_PKGS=(nixl-cu12==1.5.1 mpi4py==4.1.2 mooncake-transfer-engine-non-cuda==0.3.13.post1 numpy==2.4.6)
# Debian's arm64 verbs programs, unpacked (not installed: their amd64 twins own /usr/bin).
MRSHIM_ARM64_ROOT=$MRSHIM_TOOLS/arm64-root
MRSHIM_ARM64_PROGRAMS=(ibverbs-utils perftest)
export PATH="$MRSHIM_VENV/bin:$PATH"
# The kernel test bed (scripts/rdma-vm): Debian's own kernel image package, downloaded and
# unpacked (never installed), its uncompressed vmlinux and a small initramfs, one directory
# per kernel release. MRSHIM_VM_KERNEL_PKG names the meta package that picks the release.
MRSHIM_RDMA_VM=$MRSHIM_TOOLS/rdma-vm
MRSHIM_VM_KERNEL_PKG=${MRSHIM_VM_KERNEL_PKG:-linux-image-amd64}
# rdma-core's own tests (pyverbs), unpacked from Debian's python3-pyverbs (tests/shim_util/pyverbs.rs).
MRSHIM_PYVERBS_TESTS=$MRSHIM_TOOLS/pyverbs-tests
