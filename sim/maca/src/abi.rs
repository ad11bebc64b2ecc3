//! MACA's types and values. The function names and argument lists are public (MetaX-MACA
//! organisation repos, FlagCX's MetaX adaptor, Mooncake's MACA path, UCC's MACA component); the
//! numeric enum values and `mcPointerAttribute_t`'s layout are not — the SDK headers are not
//! public. This runtime uses the CUDA runtime's values and layout (the API mirrors it name for
//! name), which is also what mrshim's MACA engine assumes and proves at run time with its
//! self-test. `MRSHIM_SIM_MACA_ABI` makes this runtime differ from that assumption.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

pub type mcError_t = u32;

// mcSuccess = 0 is public (code compares against it); the other codes and mcMemcpyKind follow
// the CUDA runtime's numbering (sim/gpu `codes`).
pub use simgpu::codes::*;

/// `mcPointerAttribute_t` as cudaPointerAttributes (CUDA ≥ 11): type, device, devicePointer,
/// hostPointer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttribute {
    pub memory_type: u32,
    pub device: i32,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
}

/// The same four fields with `device` first: what `MRSHIM_SIM_MACA_ABI=layout` writes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttributeSwapped {
    pub device: i32,
    pub memory_type: u32,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
}

/// What `MRSHIM_SIM_MACA_ABI` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// CUDA's values and layout (mcMemoryTypeUnregistered 0, Host 1, Device 2, Managed 3).
    Assumed,
    /// mcMemoryType numbered like ROCm 5's hipMemoryType: Host 0, Device 1, … (no Unregistered).
    Enum,
    /// `device` before `type` in mcPointerAttribute_t.
    Layout,
}

impl Variant {
    /// (host, device) mcMemoryType values.
    pub fn memory_types(self) -> (u32, u32) {
        match self {
            Variant::Enum => (0, 1),
            _ => (1, 2),
        }
    }

    pub fn parse(v: Option<&str>) -> Result<Variant, String> {
        match v.map(str::trim) {
            None | Some("") | Some("assumed") => Ok(Variant::Assumed),
            Some("enum") => Ok(Variant::Enum),
            Some("layout") => Ok(Variant::Layout),
            Some(other) => Err(format!(
                "mrshim-sim-maca: MRSHIM_SIM_MACA_ABI={other:?} is not valid: assumed (default), enum or layout"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_and_layouts() {
        assert_eq!(Variant::parse(None), Ok(Variant::Assumed));
        assert_eq!(Variant::parse(Some("enum")), Ok(Variant::Enum));
        assert_eq!(Variant::parse(Some("layout")), Ok(Variant::Layout));
        assert!(Variant::parse(Some("cuda")).unwrap_err().contains("MRSHIM_SIM_MACA_ABI=\"cuda\""));
        assert_eq!(Variant::Assumed.memory_types(), (1, 2));
        assert_eq!(Variant::Enum.memory_types(), (0, 1));
        assert_eq!(std::mem::size_of::<PointerAttribute>(), 24);
        assert_eq!(std::mem::size_of::<PointerAttributeSwapped>(), 24);
    }
}
