//! `libamdhip64.so.5`: ROCm 5's HIP ABI (hipMemoryType Host=0 Device=1 …, unknown host pointers
//! are hipErrorInvalidValue in hipPointerGetAttributes, no hipMemGetHandleForAddressRange).
simhip::exports!(simhip::abi::ROCM5);
