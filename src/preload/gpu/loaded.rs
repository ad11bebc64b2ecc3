//! Finding a GPU runtime the application already loaded: the loaded objects' paths (from
//! dl_iterate_phdr), the runtime's file matched by its name and any version suffix, then
//! `dlopen(path, RTLD_NOLOAD)` — a handle to that very library, never a load of one the
//! application did not.

use std::ffi::{c_int, c_void, CStr, CString};

/// Paths of every object loaded in this process.
fn loaded_paths() -> Vec<String> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for this call and our Vec as `data`.
        unsafe {
            let v = &mut *(data as *mut Vec<String>);
            let name = (*info).dlpi_name;
            if !name.is_null() {
                v.push(CStr::from_ptr(name).to_string_lossy().into_owned());
            }
        }
        0
    }
    let mut v: Vec<String> = Vec::new();
    // SAFETY: the callback only reads the entry it is given and appends to `v`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut v as *mut Vec<String>).cast()) };
    v
}

/// A handle to the loaded runtime whose file is `stem` (or `stem.N...`), and its path.
pub fn find(stems: &[&str]) -> Option<(*mut c_void, String)> {
    let paths = loaded_paths();
    stems.iter().find_map(|stem| {
        let path = paths.iter().find(|p| super::abi::is_runtime_file(p, stem))?;
        let c = CString::new(path.as_str()).ok()?;
        // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded library.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        (!h.is_null()).then(|| (h, path.clone()))
    })
}

/// A function of the runtime, by name.
pub fn sym<T: Copy>(h: *mut c_void, name: &str) -> Option<T> {
    let n = CString::new(name).ok()?;
    // Our own dlsym export forwards real handles to glibc.
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, n.as_ptr()) };
    // SAFETY: T is the pointer-sized function type of this symbol (the caller names it).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy(&p) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_only_what_is_loaded() {
        // libc is loaded in every test process; a runtime nobody loaded is not found (and not loaded).
        assert!(super::find(&["libc.so"]).is_some());
        assert!(super::find(&["libmcruntime.so"]).is_none());
        assert!(!super::loaded_paths().iter().any(|p| p.contains("libmcruntime")));
    }
}
