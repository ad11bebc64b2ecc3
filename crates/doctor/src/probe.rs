//! The dmabuf probe: `ibv_reg_dmabuf_mr(pd, 0, 4096, 0, fd = -1, LOCAL_WRITE)` on the first RDMA
//! device. A provider and kernel that support dmabuf MRs look at the fd and answer EBADF; without
//! support the call fails with EOPNOTSUPP / EPROTONOSUPPORT before that. Needs no GPU and
//! registers nothing. libibverbs is dlopen'ed, as NCCL does.

use std::ffi::{c_int, c_void, CStr};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmabufProbe {
    /// EBADF: the fd was looked at.
    Supported,
    /// The call failed before looking at the fd: the errno.
    NotSupported(i32),
    /// The probe could not run (no libibverbs, no device, no ibv_reg_dmabuf_mr): why.
    Unavailable(String),
}

/// What the errno of the probe call means.
pub fn interpret(errno: i32) -> DmabufProbe {
    if errno == libc::EBADF {
        DmabufProbe::Supported
    } else {
        DmabufProbe::NotSupported(errno)
    }
}

fn sym<T: Copy>(h: *mut c_void, name: &CStr) -> Option<T> {
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: T is the pointer-sized function type of this verbs symbol.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy(&p) })
}

type GetList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeList = unsafe extern "C" fn(*mut *mut c_void);
type Open = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type Close = unsafe extern "C" fn(*mut c_void) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type DeallocPd = unsafe extern "C" fn(*mut c_void) -> c_int;
type RegDmabuf = unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void;
type Dereg = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Runs the probe on this machine.
pub fn run() -> DmabufProbe {
    // SAFETY: dlopen of the system's verbs library by its SONAME.
    let h = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        return DmabufProbe::Unavailable("libibverbs.so.1 not found".into());
    }
    let (Some(get), Some(free), Some(open), Some(close), Some(alloc), Some(dealloc), Some(dereg)) = (
        sym::<GetList>(h, c"ibv_get_device_list"),
        sym::<FreeList>(h, c"ibv_free_device_list"),
        sym::<Open>(h, c"ibv_open_device"),
        sym::<Close>(h, c"ibv_close_device"),
        sym::<AllocPd>(h, c"ibv_alloc_pd"),
        sym::<DeallocPd>(h, c"ibv_dealloc_pd"),
        sym::<Dereg>(h, c"ibv_dereg_mr"),
    ) else {
        return DmabufProbe::Unavailable("libibverbs lacks the basic verbs".into());
    };
    let Some(reg) = sym::<RegDmabuf>(h, c"ibv_reg_dmabuf_mr") else {
        return DmabufProbe::Unavailable("libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34)".into());
    };
    // SAFETY: the verbs calls in the order the API requires; every object is checked and released.
    unsafe {
        let mut n = 0;
        let list = get(&mut n);
        if list.is_null() || n < 1 {
            if !list.is_null() {
                free(list);
            }
            return DmabufProbe::Unavailable("no RDMA device".into());
        }
        let ctx = open(*list);
        free(list);
        if ctx.is_null() {
            return DmabufProbe::Unavailable("ibv_open_device failed".into());
        }
        let pd = alloc(ctx);
        if pd.is_null() {
            close(ctx);
            return DmabufProbe::Unavailable("ibv_alloc_pd failed".into());
        }
        *libc::__errno_location() = 0;
        let mr = reg(pd, 0, 4096, 0, -1, 1);
        let e = *libc::__errno_location();
        let r = if mr.is_null() {
            interpret(e)
        } else {
            dereg(mr);
            DmabufProbe::Unavailable("ibv_reg_dmabuf_mr accepted fd -1".into())
        };
        dealloc(pd);
        close(ctx);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ebadf_means_supported() {
        assert_eq!(interpret(libc::EBADF), DmabufProbe::Supported);
        assert_eq!(interpret(libc::EOPNOTSUPP), DmabufProbe::NotSupported(libc::EOPNOTSUPP));
        assert_eq!(interpret(libc::EPROTONOSUPPORT), DmabufProbe::NotSupported(libc::EPROTONOSUPPORT));
    }
}
