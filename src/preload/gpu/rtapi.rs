//! The copy engine for the CUDA-runtime-shaped APIs: HIP (`libamdhip64.so.N`) and MACA
//! (`libmcruntime.so`). One implementation, two flavours: the names differ by prefix, HIP's
//! hipMemoryType is chosen by the runtime's major version, MACA's values are assumed and proven
//! by the self-test before anything is trusted. Copies run on a non-blocking stream of the
//! shim's own per device, and the caller's current device is restored after each call.

use super::abi::{self, Attrs, DmabufPolicy, Family, Observed};
use super::loaded::{find, sym};
use mrshim_bounce::CopyEngine;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::{Mutex, OnceLock};

type AttrsFn = unsafe extern "C" fn(*mut c_void, *const c_void) -> c_int;
type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type SetDevice = unsafe extern "C" fn(c_int) -> c_int;
type StreamCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
type StreamSync = unsafe extern "C" fn(*mut c_void) -> c_int;
type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type AddressRange = unsafe extern "C" fn(*mut u64, *mut usize, u64) -> c_int;
type GetHandle = unsafe extern "C" fn(*mut c_void, u64, usize, c_uint, c_ulonglong) -> c_int;
/// hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *dmabuf, uint64_t *offset):
/// hsa_status_t, HSA_STATUS_SUCCESS = 0 (ROCr's hsa_ext_amd.h, ROCm 5.x and later).
type HsaExport = unsafe extern "C" fn(*const c_void, usize, *mut c_int, *mut u64) -> u32;
/// hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t, hipStream_t)
type DtoH = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> c_int;
/// hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t, hipStream_t)
type HtoD = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> c_int;
/// mcMemcpyAsync(void *dst, const void *src, size_t, mcMemcpyKind, mcStream_t)
type CopyKind = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_uint, *mut c_void) -> c_int;

/// `*StreamNonBlocking`: 0x01 in HIP and MACA.
const STREAM_NON_BLOCKING: c_uint = 1;
/// `*MemRangeHandleTypeDmaBufFd`.
const DMA_BUF_FD: c_uint = 1;
const PAGE: u64 = 4096;
/// What the engine lets a pointer query write into: larger than any known pointer-attribute
/// struct, so a runtime whose struct is bigger than assumed cannot write past it.
const ATTR_BUF: usize = 256;

enum CopyCalls {
    /// HIP: hipMemcpyDtoHAsync / hipMemcpyHtoDAsync (no direction value to get wrong).
    Directional { dtoh: DtoH, htod: HtoD },
    /// MACA: mcMemcpyAsync with the assumed mcMemcpyKind values.
    Kinds { memcpy_async: CopyKind },
}

pub struct RtApi {
    pub family: Family,
    /// The value of the memory-type field that means device memory.
    device_type: u32,
    attrs: AttrsFn,
    get_device: IntOut,
    set_device: SetDevice,
    stream_create: StreamCreate,
    stream_sync: StreamSync,
    copy: CopyCalls,
    malloc: Malloc,
    free: Free,
    address_range: Option<AddressRange>,
    get_handle: Option<GetHandle>,
    /// HIP without hipMemGetHandleForAddressRange (ROCm 5): HSA's export, looked up once in the
    /// libhsa-runtime64 the HIP runtime loaded.
    hsa_export: OnceLock<Option<HsaExport>>,
    /// The shim's own non-blocking stream per device.
    streams: Mutex<HashMap<i32, usize>>,
    /// The self-test's verdict (run once, when wanted).
    trusted: OnceLock<Result<(), String>>,
    dmabuf: Mutex<DmabufPolicy>,
}

// SAFETY: function pointers and stream handles the runtime accepts from any thread.
unsafe impl Send for RtApi {}
// SAFETY: as above; the mutable state is behind mutexes.
unsafe impl Sync for RtApi {}

/// A function the engine cannot do without.
fn need<T: Copy>(h: *mut c_void, path: &str, name: &str) -> Result<T, String> {
    sym(h, name).ok_or_else(|| format!("{path} has no {name}"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RtApi {
    /// HIP, if the application loaded libamdhip64.so[.N]: Err when it is loaded but the engine
    /// cannot speak it (a missing function, an unknown major version).
    pub fn hip() -> Option<Result<RtApi, String>> {
        let (h, path) = find(&["libamdhip64.so"])?;
        Some((|| {
            let version: IntOut = need(h, &path, "hipRuntimeGetVersion")?;
            let mut v = 0;
            // SAFETY: out pointer to a local int.
            let major = match unsafe { version(&mut v) } {
                0 => abi::hip_major(v),
                _ => None,
            }
            .or_else(|| abi::soname_major(path.rsplit('/').next().unwrap_or(&path), "libamdhip64.so"));
            let device_type = major.and_then(abi::hip_device_type).ok_or_else(|| {
                format!("{path}: unknown ROCm major version {major:?}: the hipMemoryType values are not known")
            })?;
            Ok(RtApi {
                family: Family::Hip,
                device_type,
                attrs: need(h, &path, "hipPointerGetAttributes")?,
                get_device: need(h, &path, "hipGetDevice")?,
                set_device: need(h, &path, "hipSetDevice")?,
                stream_create: need(h, &path, "hipStreamCreateWithFlags")?,
                stream_sync: need(h, &path, "hipStreamSynchronize")?,
                copy: CopyCalls::Directional {
                    dtoh: need(h, &path, "hipMemcpyDtoHAsync")?,
                    htod: need(h, &path, "hipMemcpyHtoDAsync")?,
                },
                malloc: need(h, &path, "hipMalloc")?,
                free: need(h, &path, "hipFree")?,
                address_range: sym(h, "hipMemGetAddressRange"),
                get_handle: sym(h, "hipMemGetHandleForAddressRange"),
                hsa_export: OnceLock::new(),
                streams: Mutex::new(HashMap::new()),
                trusted: OnceLock::new(),
                dmabuf: Mutex::new(DmabufPolicy::Try),
            })
        })())
    }

    /// MACA, if the application loaded libmcruntime.so (or libmxc-runtime64.so).
    pub fn maca() -> Option<Result<RtApi, String>> {
        let (h, path) = find(&["libmcruntime.so", "libmxc-runtime64.so"])?;
        Some((|| {
            Ok(RtApi {
                family: Family::Maca,
                device_type: abi::MACA_DEVICE_TYPE,
                attrs: need(h, &path, "mcPointerGetAttributes")?,
                get_device: need(h, &path, "mcGetDevice")?,
                set_device: need(h, &path, "mcSetDevice")?,
                stream_create: need(h, &path, "mcStreamCreateWithFlags")?,
                stream_sync: need(h, &path, "mcStreamSynchronize")?,
                copy: CopyCalls::Kinds { memcpy_async: need(h, &path, "mcMemcpyAsync")? },
                malloc: need(h, &path, "mcMalloc")?,
                free: need(h, &path, "mcFree")?,
                address_range: sym(h, "mcMemGetAddressRange"),
                get_handle: sym(h, "mcMemGetHandleForAddressRange"),
                hsa_export: OnceLock::new(),
                streams: Mutex::new(HashMap::new()),
                trusted: OnceLock::new(),
                dmabuf: Mutex::new(DmabufPolicy::Try),
            })
        })())
    }

    fn q(&self, what: &str) -> String {
        format!("{}{what}", if self.family == Family::Hip { "hip" } else { "mc" })
    }

    /// The pointer query, read at the offsets the engine assumes (None: the query failed).
    fn attributes(&self, p: u64) -> Option<Attrs> {
        let mut buf = [0u64; ATTR_BUF / 8];
        // SAFETY: the runtime writes its pointer-attribute struct into a zeroed buffer larger
        // than any known layout of it.
        let rc = unsafe { (self.attrs)(buf.as_mut_ptr().cast(), p as *const c_void) };
        // SAFETY: reading the buffer we own as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), 16) };
        (rc == 0).then(|| Attrs::from_bytes(bytes))
    }

    /// The device current on this thread (hipGetDevice / mcGetDevice).
    pub fn current_device(&self) -> Option<i32> {
        let mut cur: c_int = 0;
        // SAFETY: out pointer to a local int.
        let rc = unsafe { (self.get_device)(&mut cur) };
        (rc == 0).then_some(cur)
    }

    /// Runs `f` with `dev` current on this thread; the caller's current device is restored.
    fn on_device<R>(&self, dev: i32, f: impl FnOnce() -> R) -> Result<R, String> {
        let mut cur: c_int = 0;
        // SAFETY: out pointer to a local int.
        let rc = unsafe { (self.get_device)(&mut cur) };
        if rc != 0 {
            return Err(format!("{} failed: error {rc}", self.q("GetDevice")));
        }
        if cur != dev {
            // SAFETY: plain call with a device ordinal the runtime reported.
            let rc = unsafe { (self.set_device)(dev) };
            if rc != 0 {
                return Err(format!("{}({dev}) failed: error {rc}", self.q("SetDevice")));
            }
        }
        let r = f();
        if cur != dev {
            // SAFETY: as above, back to the caller's device.
            unsafe { (self.set_device)(cur) };
        }
        Ok(r)
    }

    /// The shim's non-blocking stream on `dev`, created at first use.
    fn stream(&self, dev: i32) -> Result<usize, String> {
        let mut streams = lock(&self.streams);
        if let Some(s) = streams.get(&dev) {
            return Ok(*s);
        }
        let mut s: *mut c_void = std::ptr::null_mut();
        // SAFETY: out pointer to a local stream handle, created on `dev`.
        let rc = self.on_device(dev, || unsafe { (self.stream_create)(&mut s, STREAM_NON_BLOCKING) })?;
        if rc != 0 {
            return Err(format!("{} failed: error {rc}", self.q("StreamCreateWithFlags")));
        }
        streams.insert(dev, s as usize);
        Ok(s as usize)
    }

    /// One copy on the device's stream, then synchronize it: `to_host` picks the direction.
    ///
    /// # Safety
    /// `host` must be valid for `n` bytes (written when `to_host`), `dev_addr` a device range
    /// of `n` bytes.
    unsafe fn copy(&self, dev: i32, to_host: bool, host: *mut u8, dev_addr: u64, n: usize) -> Result<(), String> {
        let s = self.stream(dev)? as *mut c_void;
        let rc = self.on_device(dev, || {
            // SAFETY: per this function's contract; the stream is ours.
            let rc = unsafe {
                match (&self.copy, to_host) {
                    (CopyCalls::Directional { dtoh, .. }, true) => dtoh(host.cast(), dev_addr, n, s),
                    (CopyCalls::Directional { htod, .. }, false) => htod(dev_addr, host.cast(), n, s),
                    (CopyCalls::Kinds { memcpy_async }, true) => {
                        memcpy_async(host.cast(), dev_addr as *const c_void, n, abi::MACA_DEVICE_TO_HOST, s)
                    }
                    (CopyCalls::Kinds { memcpy_async }, false) => {
                        memcpy_async(dev_addr as *mut c_void, host.cast(), n, abi::MACA_HOST_TO_DEVICE, s)
                    }
                }
            };
            if rc == 0 {
                // SAFETY: synchronising our own stream.
                unsafe { (self.stream_sync)(s) }
            } else {
                rc
            }
        })?;
        if rc != 0 {
            return Err(format!("{} copy failed: error {rc}", self.family.name()));
        }
        Ok(())
    }

    /// The self-test: a scratch allocation of the engine's own on the current device, its pointer
    /// query, a host pointer's, a pattern through the device and back; the scratch is freed.
    fn self_test(&self) -> Result<(), String> {
        let mut dev: c_int = 0;
        // SAFETY: out pointer to a local int.
        unsafe { (self.get_device)(&mut dev) };
        let mut scratch: *mut c_void = std::ptr::null_mut();
        const N: usize = 4096;
        // SAFETY: out pointer to a local; N bytes on the current device.
        let rc = unsafe { (self.malloc)(&mut scratch, N) };
        if rc != 0 || scratch.is_null() {
            return Err(format!("{} of its scratch failed: error {rc}", self.q("Malloc")));
        }
        let host = abi::pattern(N);
        let on_scratch = self.attributes(scratch as u64);
        let on_host = self.attributes(host.as_ptr() as u64);
        let mut back = vec![0u8; N];
        // SAFETY: host buffers of N bytes, the scratch allocation of N bytes.
        let round_trip = unsafe {
            self.copy(dev, false, host.as_ptr() as *mut u8, scratch as u64, N)
                .and_then(|_| self.copy(dev, true, back.as_mut_ptr(), scratch as u64, N))
        }
        .map(|_| back.iter().zip(&host).position(|(a, b)| a != b));
        // SAFETY: freeing the allocation made above.
        unsafe { (self.free)(scratch) };
        abi::verdict(
            self.family,
            self.device_type,
            &Observed { scratch: scratch as u64, device: dev, on_scratch, on_host, round_trip },
        )
    }

    /// Whether the engine may be used: the self-test, once, if this runtime needs it (MACA
    /// always, HIP with MRSHIM_COPY_SELFTEST=on). The verdict is reported once (report.rs).
    pub fn trusted(&self) -> Result<(), String> {
        self.trusted
            .get_or_init(|| {
                if !abi::selftest_wanted(self.family, abi::selftest_every()) {
                    return Ok(());
                }
                let r = self.self_test();
                super::report::report_selftest(self.family, &r);
                r
            })
            .clone()
    }

    /// True if `addr` is this runtime's device memory (only asked once the engine is trusted).
    pub fn is_device(&self, addr: u64) -> bool {
        self.trusted().is_ok() && self.attributes(addr).is_some_and(|a| a.memory_type == self.device_type)
    }

    pub fn engine(&'static self, addr: u64) -> Result<RtCopy, String> {
        self.trusted()?;
        let a = self.attributes(addr).ok_or_else(|| format!("{} failed", self.q("PointerGetAttributes")))?;
        self.stream(a.device)?;
        Ok(RtCopy { rt: self, device: a.device })
    }

    /// [addr, addr+len) as a dmabuf of its whole allocation: (fd, offset of addr in it). HIP on
    /// ROCm 5 exports through HSA when its runtime loaded libhsa-runtime64 (never loaded here).
    pub fn export_dmabuf(&self, addr: u64, len: u64) -> Result<(i32, u64), String> {
        let name = self.q("MemGetHandleForAddressRange");
        if *lock(&self.dmabuf) == DmabufPolicy::Never {
            return Err(format!("{name}: this runtime cannot export dmabufs (learned)"));
        }
        let r = self.trusted().and_then(|_| match self.get_handle {
            Some(get) => self.export(get, addr, len, &name),
            None => self.export_hsa(addr, len, &name),
        });
        let mut p = lock(&self.dmabuf);
        *p = p.after(r.is_ok());
        r
    }

    fn export(&self, get: GetHandle, addr: u64, len: u64, name: &str) -> Result<(i32, u64), String> {
        let Some(range) = self.address_range else {
            return Err(format!("{name} needs {}, which is not in this runtime", self.q("MemGetAddressRange")));
        };
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: out pointers to locals.
        let rc = unsafe { range(&mut base, &mut size, addr) };
        if rc != 0 {
            return Err(format!("{} failed: error {rc}", self.q("MemGetAddressRange")));
        }
        let want = (addr - base + len).div_ceil(PAGE) * PAGE;
        let mut fd: c_int = -1;
        // SAFETY: out pointer to a local int; the range is one allocation from its base.
        let rc = unsafe { get((&mut fd as *mut c_int).cast(), base, want.min(size as u64) as usize, DMA_BUF_FD, 0) };
        if rc != 0 || fd < 0 {
            return Err(format!("{name} failed: error {rc}"));
        }
        Ok((fd, addr - base))
    }

    /// hsa_amd_portable_export_dmabuf: the fd is the whole allocation's, the offset addr's in it.
    fn export_hsa(&self, addr: u64, len: u64, name: &str) -> Result<(i32, u64), String> {
        let export = self.hsa_export.get_or_init(|| {
            let (h, _) = find(&["libhsa-runtime64.so"])?;
            sym::<HsaExport>(h, "hsa_amd_portable_export_dmabuf")
        });
        let Some(export) = export else {
            return Err(format!(
                "{name} is not in this runtime (HIP: ROCm < 6) and no loaded libhsa-runtime64 has \
                 hsa_amd_portable_export_dmabuf"
            ));
        };
        let (mut fd, mut offset): (c_int, u64) = (-1, 0);
        // SAFETY: out pointers to locals; [addr, addr+len) is the caller's registration.
        let st = unsafe { export(addr as *const c_void, len as usize, &mut fd, &mut offset) };
        if st != 0 || fd < 0 {
            return Err(format!("hsa_amd_portable_export_dmabuf failed: status {st:#x}"));
        }
        Ok((fd, offset))
    }
}

/// Copies for one device's memory through its runtime.
pub struct RtCopy {
    rt: &'static RtApi,
    device: i32,
}

impl CopyEngine for RtCopy {
    fn name(&self) -> &'static str {
        self.rt.family.name()
    }
    unsafe fn to_host(&self, dst: *mut u8, src: u64, n: usize) -> Result<(), String> {
        // SAFETY: the caller's contract: dst is n bytes of host memory, src a device range.
        unsafe { self.rt.copy(self.device, true, dst, src, n) }
    }
    unsafe fn to_app(&self, dst: u64, src: *const u8, n: usize) -> Result<(), String> {
        // SAFETY: as above, the other way.
        unsafe { self.rt.copy(self.device, false, src as *mut u8, dst, n) }
    }
}
