//! How bytes move between the application's buffer and its host shadow: one small trait. The
//! host engine is here; the GPU runtimes' engines live next to their FFI in libmrshim.so
//! (src/preload/copy.rs, src/preload/gpu/).

pub trait CopyEngine: Send + Sync {
    fn name(&self) -> &'static str;
    /// `n` bytes from the application's buffer at `src` into host memory at `dst`.
    ///
    /// # Safety
    /// `dst` is writable host memory of `n` bytes; [src, src+n) is memory of the application's
    /// this engine was made for (a registered region's), readable for `n` bytes.
    unsafe fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String>;
    /// `n` bytes of host memory at `src` into the application's buffer at `dst`.
    ///
    /// # Safety
    /// `src` is readable host memory of `n` bytes; [dst, dst+n) is writable memory of the
    /// application's this engine was made for; the two do not overlap.
    unsafe fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String>;
    /// The application's addresses are host memory the shim may read in place.
    fn app_is_host(&self) -> bool {
        false
    }
}

/// Plain memory on both sides.
pub struct HostCopy;

impl CopyEngine for HostCopy {
    fn name(&self) -> &'static str {
        "host"
    }
    fn app_is_host(&self) -> bool {
        true
    }
    unsafe fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract (host memory on both sides here).
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, n) };
        Ok(())
    }
    unsafe fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, n) };
        Ok(())
    }
}
