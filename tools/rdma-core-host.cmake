# CMake toolchain for ibverbs-sys' vendored rdma-core in the portable build (scripts/build-portable).
# ibverbs-sys configures and builds rdma-core only to generate Rust bindings from the headers that
# configuration writes; nothing of it is linked into mrshim. So it is built with the host compiler
# (and the host's libnl/libudev) whatever the Rust target: zig could not link it against glibc 2.17.
set(CMAKE_C_COMPILER cc)
set(CMAKE_CXX_COMPILER c++)
