//! rdma_event_str: rdma-core's names of the events.

use crate::abi::rdma_cm_event_type as et;
use std::os::raw::c_char;

#[no_mangle]
pub extern "C" fn rdma_event_str(event: et::Type) -> *const c_char {
    let s: &'static std::ffi::CStr = match event {
        et::RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        et::RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        et::RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        et::RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        et::RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        et::RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        et::RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        et::RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        et::RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        et::RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        et::RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        et::RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        et::RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        et::RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        et::RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        et::RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_rdma_core() {
        // SAFETY: static NUL-terminated strings.
        let s = |e| unsafe { std::ffi::CStr::from_ptr(rdma_event_str(e)) }.to_str().unwrap().to_string();
        assert_eq!(s(et::RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(s(99), "UNKNOWN EVENT");
    }
}
