//! cuPointerGetAttribute(s) values, with the C type each attribute writes (as in cuda.h's
//! documentation: "boolean" attributes are C ints).

use crate::abi::*;
use crate::memory::Alloc;
use std::ffi::c_void;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Val {
    U32(u32),
    I32(i32),
    U64(u64),
    Ptr(usize),
    Size(usize),
}

impl Val {
    /// Writes into the caller's buffer of the attribute's type.
    ///
    /// # Safety
    /// `data` must be valid for a write of that type.
    pub unsafe fn write(self, data: *mut c_void) {
        // SAFETY: per this function's contract.
        unsafe {
            match self {
                Val::U32(v) => data.cast::<u32>().write_unaligned(v),
                Val::I32(v) => data.cast::<i32>().write_unaligned(v),
                Val::U64(v) => data.cast::<u64>().write_unaligned(v),
                Val::Ptr(v) | Val::Size(v) => data.cast::<usize>().write_unaligned(v),
            }
        }
    }

    fn zero(self) -> Val {
        match self {
            Val::U32(_) => Val::U32(0),
            Val::I32(_) => Val::I32(0),
            Val::U64(_) => Val::U64(0),
            Val::Ptr(_) => Val::Ptr(0),
            Val::Size(_) => Val::Size(0),
        }
    }
}

/// The value of `attr` for `ptr` inside `a`. `None`: attribute not supported.
/// HOST_POINTER of device memory has no value (`Err` in the single-attribute query).
fn value(attr: u32, a: &Alloc, ptr: u64) -> Option<Result<Val, Val>> {
    Some(Ok(match attr {
        CU_POINTER_ATTRIBUTE_CONTEXT => Val::Ptr(a.owner),
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE => Val::U32(CU_MEMORYTYPE_DEVICE),
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER => Val::U64(ptr),
        CU_POINTER_ATTRIBUTE_HOST_POINTER => return Some(Err(Val::Ptr(0))),
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS => Val::I32(0),
        CU_POINTER_ATTRIBUTE_BUFFER_ID => Val::U64(a.buffer_id),
        CU_POINTER_ATTRIBUTE_IS_MANAGED => Val::I32(0),
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => Val::I32(a.device),
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE => Val::I32(1),
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => Val::U64(a.dptr),
        CU_POINTER_ATTRIBUTE_RANGE_SIZE => Val::Size(a.size as usize),
        CU_POINTER_ATTRIBUTE_MAPPED => Val::I32(1),
        CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => Val::U32(1),
        _ => return None,
    }))
}

/// The type an attribute writes, for addresses that are not device memory (zero values).
fn kind(attr: u32) -> Option<Val> {
    Some(match attr {
        CU_POINTER_ATTRIBUTE_CONTEXT | CU_POINTER_ATTRIBUTE_HOST_POINTER => Val::Ptr(0),
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE | CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => Val::U32(0),
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER
        | CU_POINTER_ATTRIBUTE_BUFFER_ID
        | CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => Val::U64(0),
        CU_POINTER_ATTRIBUTE_RANGE_SIZE => Val::Size(0),
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
        | CU_POINTER_ATTRIBUTE_IS_MANAGED
        | CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        | CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
        | CU_POINTER_ATTRIBUTE_MAPPED => Val::I32(0),
        _ => return None,
    })
}

/// cuPointerGetAttribute: memory that is not a device allocation is CUDA_ERROR_INVALID_VALUE
/// (like unregistered host memory on a real driver).
pub fn single(attr: u32, a: Option<&Alloc>, ptr: u64) -> Result<Val, CUresult> {
    kind(attr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let a = a.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    value(attr, a, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?.map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

/// cuPointerGetAttributes: never fails for unknown memory, its attributes read as zero/NULL.
pub fn multi(attr: u32, a: Option<&Alloc>, ptr: u64) -> Result<Val, CUresult> {
    let k = kind(attr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(match a {
        None => k.zero(),
        Some(a) => match value(attr, a, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)? {
            Ok(v) | Err(v) => v,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_and_unknown_memory() {
        let a = Alloc::new(8192, 0x1234, 1, 9).unwrap();
        let p = a.dptr + 100;
        assert_eq!(single(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, Some(&a), p), Ok(Val::U32(2)));
        assert_eq!(single(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, Some(&a), p), Ok(Val::U64(a.dptr)));
        assert_eq!(single(CU_POINTER_ATTRIBUTE_RANGE_SIZE, Some(&a), p), Ok(Val::Size(8192)));
        assert_eq!(single(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Some(&a), p), Ok(Val::I32(1)));
        assert_eq!(single(CU_POINTER_ATTRIBUTE_CONTEXT, Some(&a), p), Ok(Val::Ptr(0x1234)));
        assert_eq!(single(CU_POINTER_ATTRIBUTE_HOST_POINTER, Some(&a), p), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(single(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, None, p), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(single(999, Some(&a), p), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(multi(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, None, p), Ok(Val::U32(0)));
        assert_eq!(multi(CU_POINTER_ATTRIBUTE_HOST_POINTER, Some(&a), p), Ok(Val::Ptr(0)));
        assert_eq!(multi(CU_POINTER_ATTRIBUTE_BUFFER_ID, Some(&a), p), Ok(Val::U64(9)));
        a.release_address();
    }
}
