//! `libamdhip64.so.6`: ROCm 6's HIP ABI (hipMemoryType Unregistered=0 Host=1 Device=2 …, unknown
//! host pointers are hipSuccess + Unregistered, dmabuf export through
//! hipMemGetHandleForAddressRange).
simhip::exports!(simhip::abi::ROCM6);
simhip::exports_rocm6!();
