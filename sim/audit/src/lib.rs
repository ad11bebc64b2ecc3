//! `LD_AUDIT` module of `mrshim sim`. Python wheels repaired by auditwheel bring their own
//! rdma-core under new names (`libibverbs-<hash>.so.1`, found through the RPATH `$ORIGIN/...`
//! of the extension that needs it), and conda environments bring `libibverbs.so.1` itself in an
//! RPATH directory: the loader searches an RPATH before LD_LIBRARY_PATH, so the simulator that
//! `mrshim sim` puts in LD_LIBRARY_PATH is never asked. The loader offers an audit module every
//! library name before it searches (`la_objsearch`, rtld-audit(7)): names of libibverbs and
//! librdmacm — renamed or not, as DT_NEEDED entries or `dlopen` arguments, bare or with a path —
//! become the simulator's own libraries, which sit next to this module in `mrshim sim`'s private
//! library directory. Every other name is returned unchanged.
//!
//! The module runs inside the dynamic loader, in a namespace of its own: no allocation, no
//! locks, no panics; the directory is found once (la_version) from the module's own path.

use std::ffi::{c_char, c_uint, CStr};

/// rtld-audit(7): the highest interface version this module knows. It uses la_objsearch only,
/// the same in versions 1 (glibc < 2.35) and 2, where the aarch64 register structures of
/// la_pltenter/la_pltexit changed — and where glibc on aarch64 ignores a module answering 1
/// ("requires version 1 (maximum supported version 2)": tests/dist/aarch64 found it).
const LAV_HIGHEST: c_uint = 2;

/// The version to answer the loader's `version`: the loader's own, up to [`LAV_HIGHEST`].
pub fn agreed_version(version: c_uint) -> c_uint {
    version.min(LAV_HIGHEST)
}
/// `flag` of la_objsearch: the name as the loader was asked for it.
const LA_SER_ORIG: c_uint = 0x01;

/// The libraries a name is redirected to, in the module's directory: (prefix of the basename,
/// file). A basename is redirected when it is the prefix followed by `.so` or by `-` (an
/// auditwheel name).
const REDIRECTS: [(&[u8], &[u8]); 2] = [(b"libibverbs", b"libibverbs.so.1\0"), (b"librdmacm", b"librdmacm.so.1\0")];

const PATH_MAX: usize = 4096;
/// The redirected paths, NUL-terminated, built once by [`la_version`] (the loader calls the
/// module's functions one at a time, under its own lock).
static mut TARGETS: [[u8; PATH_MAX]; 2] = [[0; PATH_MAX]; 2];

/// Which redirect (index into [`REDIRECTS`]) `name` falls under, if any.
pub fn redirect_of(name: &[u8]) -> Option<usize> {
    let base = match name.iter().rposition(|b| *b == b'/') {
        Some(i) => &name[i + 1..],
        None => name,
    };
    REDIRECTS.iter().position(|(prefix, _)| {
        base.strip_prefix(*prefix).is_some_and(|rest| {
            rest.starts_with(b".so") || (rest.starts_with(b"-") && rest.windows(3).any(|w| w == b".so"))
        })
    })
}

/// `dir/file` into `out` (NUL-terminated); false when it does not fit.
fn join(out: &mut [u8; PATH_MAX], dir: &[u8], file: &[u8]) -> bool {
    let n = dir.len() + 1 + file.len();
    if n > PATH_MAX {
        return false;
    }
    out[..dir.len()].copy_from_slice(dir);
    out[dir.len()] = b'/';
    out[dir.len() + 1..n].copy_from_slice(file);
    true
}

/// rtld-audit(7): called first; finds this module's directory.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn la_version(version: c_uint) -> c_uint {
    // SAFETY: an all-zero Dl_info is a valid value; dladdr fills it for an address of this module.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: la_version is code of this module, so dladdr describes the module.
    let found = unsafe { libc::dladdr(la_version as *const libc::c_void, &mut info) } != 0;
    if found && !info.dli_fname.is_null() {
        // SAFETY: dli_fname is the loader's NUL-terminated name of this module.
        let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
        if let Some(slash) = path.iter().rposition(|b| *b == b'/') {
            let dir = &path[..slash];
            // SAFETY: the loader calls audit functions one at a time; nothing reads TARGETS yet.
            let targets = unsafe { &mut *std::ptr::addr_of_mut!(TARGETS) };
            for (t, (_, file)) in targets.iter_mut().zip(REDIRECTS) {
                if !join(t, dir, file) {
                    t[0] = 0;
                }
            }
        }
    }
    agreed_version(version)
}

/// rtld-audit(7): the name to search instead of `name`.
///
/// # Safety
/// Called by the dynamic loader with a NUL-terminated `name`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn la_objsearch(name: *const c_char, _cookie: *mut usize, flag: c_uint) -> *mut c_char {
    if flag != LA_SER_ORIG || name.is_null() {
        return name.cast_mut();
    }
    // SAFETY: the caller's contract.
    let n = unsafe { CStr::from_ptr(name) }.to_bytes();
    match redirect_of(n) {
        Some(i) => {
            // SAFETY: written only by la_version, before any search.
            let t = unsafe { &*std::ptr::addr_of!(TARGETS) };
            if t[i][0] == 0 {
                name.cast_mut()
            } else {
                t[i].as_ptr().cast_mut().cast()
            }
        }
        None => name.cast_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaders_version_is_answered_up_to_the_highest_known() {
        assert_eq!([1, 2, 3].map(agreed_version), [1, 2, 2]);
    }

    #[test]
    fn rdma_core_names_are_redirected_and_nothing_else() {
        for n in [
            "libibverbs.so.1",
            "libibverbs.so",
            "libibverbs-9ba5b1b4.so.1.14.44.0",
            "/opt/venv/lib/python3.11/site-packages/nixl.libs/libibverbs-abc123.so.1",
        ] {
            assert_eq!(redirect_of(n.as_bytes()), Some(0), "{n}");
        }
        for n in ["librdmacm.so.1", "librdmacm-5e0b8f21.so.1.3.44.0"] {
            assert_eq!(redirect_of(n.as_bytes()), Some(1), "{n}");
        }
        for n in [
            "libmlx5-1b2c.so.1",
            "libibverbs_helper.so",
            "libibverbs",
            "libibverbs-abc",
            "libc.so.6",
            "x/libibverbsx.so",
            "",
        ] {
            assert_eq!(redirect_of(n.as_bytes()), None, "{n}");
        }
    }
}
