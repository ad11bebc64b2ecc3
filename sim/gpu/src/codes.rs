//! The numbering HIP's runtime API shares with the CUDA runtime (hip_runtime_api.h), and that the
//! MACA simulator uses as the assumed one (MACA's values are not public): error codes,
//! `*MemcpyKind`, the error names of each.

use crate::device_runtime::Direction;
use crate::Fault;

pub const SUCCESS: u32 = 0;
pub const INVALID_VALUE: u32 = 1;
pub const OUT_OF_MEMORY: u32 = 2;
pub const NOT_INITIALIZED: u32 = 3;
pub const INVALID_MEMCPY_DIRECTION: u32 = 21;
pub const NO_DEVICE: u32 = 100;
pub const INVALID_DEVICE: u32 = 101;
pub const OPERATING_SYSTEM: u32 = 304;
pub const INVALID_HANDLE: u32 = 400;
pub const NOT_READY: u32 = 600;
pub const UNKNOWN: u32 = 999;

// *MemcpyKind
pub const MEMCPY_HOST_TO_HOST: u32 = 0;
pub const MEMCPY_HOST_TO_DEVICE: u32 = 1;
pub const MEMCPY_DEVICE_TO_HOST: u32 = 2;
pub const MEMCPY_DEVICE_TO_DEVICE: u32 = 3;
pub const MEMCPY_DEFAULT: u32 = 4;

/// Which API's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Hip,
    Maca,
}

/// (code, HIP's name, MACA's name, text), NUL-terminated for C; the last row is the fallback.
const ERRORS: &[(u32, &str, &str, &str)] = &[
    (SUCCESS, "hipSuccess\0", "mcSuccess\0", "no error\0"),
    (INVALID_VALUE, "hipErrorInvalidValue\0", "mcErrorInvalidValue\0", "invalid argument\0"),
    (OUT_OF_MEMORY, "hipErrorOutOfMemory\0", "mcErrorMemoryAllocation\0", "out of memory\0"),
    (NOT_INITIALIZED, "hipErrorNotInitialized\0", "mcErrorInitializationError\0", "initialization error\0"),
    (
        INVALID_MEMCPY_DIRECTION,
        "hipErrorInvalidMemcpyDirection\0",
        "mcErrorInvalidMemcpyDirection\0",
        "invalid copy direction for memcpy\0",
    ),
    (NO_DEVICE, "hipErrorNoDevice\0", "mcErrorNoDevice\0", "no GPU device is detected\0"),
    (INVALID_DEVICE, "hipErrorInvalidDevice\0", "mcErrorInvalidDevice\0", "invalid device ordinal\0"),
    (
        OPERATING_SYSTEM,
        "hipErrorOperatingSystem\0",
        "mcErrorOperatingSystem\0",
        "OS call failed or operation not supported on this OS\0",
    ),
    (INVALID_HANDLE, "hipErrorInvalidHandle\0", "mcErrorInvalidResourceHandle\0", "invalid resource handle\0"),
    (NOT_READY, "hipErrorNotReady\0", "mcErrorNotReady\0", "device not ready\0"),
    (UNKNOWN, "hipErrorUnknown\0", "mcErrorUnknown\0", "unknown error\0"),
];

/// `*GetErrorName` (`long`: `*GetErrorString`) of `e`, a static C string.
pub fn error_text(names: Names, e: u32, long: bool) -> *const std::ffi::c_char {
    let row = ERRORS.iter().find(|x| x.0 == e).unwrap_or(&ERRORS[ERRORS.len() - 1]);
    let s = match (long, names) {
        (true, _) => row.3,
        (false, Names::Hip) => row.1,
        (false, Names::Maca) => row.2,
    };
    s.as_ptr().cast()
}

/// The error code of a memory-model fault.
pub fn code(f: Fault) -> u32 {
    match f {
        Fault::Invalid => INVALID_VALUE,
        Fault::OutOfMemory => OUT_OF_MEMORY,
        Fault::System => OPERATING_SYSTEM,
        Fault::BadHandle => INVALID_HANDLE,
        Fault::InvalidDevice => INVALID_DEVICE,
    }
}

/// A `*MemcpyKind` value → direction.
pub fn direction(kind: u32) -> Result<Direction, u32> {
    Ok(match kind {
        MEMCPY_HOST_TO_HOST => Direction::HostToHost,
        MEMCPY_HOST_TO_DEVICE => Direction::HostToDevice,
        MEMCPY_DEVICE_TO_HOST => Direction::DeviceToHost,
        MEMCPY_DEVICE_TO_DEVICE => Direction::DeviceToDevice,
        MEMCPY_DEFAULT => Direction::Default,
        _ => return Err(INVALID_MEMCPY_DIRECTION),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn names_and_directions() {
        // SAFETY: error_text returns static NUL-terminated strings.
        let s = |p| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(s(error_text(Names::Hip, INVALID_VALUE, false)), "hipErrorInvalidValue");
        assert_eq!(s(error_text(Names::Maca, OUT_OF_MEMORY, false)), "mcErrorMemoryAllocation");
        assert_eq!(s(error_text(Names::Maca, 12345, false)), "mcErrorUnknown");
        assert_eq!(s(error_text(Names::Hip, NOT_READY, true)), "device not ready");
        assert_eq!(direction(2), Ok(Direction::DeviceToHost));
        assert_eq!(direction(9), Err(INVALID_MEMCPY_DIRECTION));
        assert_eq!(code(Fault::BadHandle), INVALID_HANDLE);
    }
}
