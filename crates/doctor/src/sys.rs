//! File access below a root directory, tolerant of anything missing, and of anything hostile in
//! a captured tree: paths resolve as if the tree were `/` (a symbolic link, absolute or relative,
//! never leads out of it; `..` stops at its top), reads take regular files only (a FIFO would block,
//! a device could be anything) and at most [`MAX_READ`] bytes (a sparse 4 GiB file is skipped, not
//! read into memory).
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The largest file doctor reads (PCI config space is 4 KiB, /proc files a few KiB).
pub const MAX_READ: u64 = 1 << 20;
/// Links followed in one path before giving up (the kernel's limit).
const MAX_LINKS: usize = 40;

pub struct Fs {
    root: PathBuf,
}

impl Fs {
    pub fn new(root: &Path) -> Fs {
        Fs { root: root.to_path_buf() }
    }
    pub fn is_real_root(&self) -> bool {
        self.root == Path::new("/")
    }
    /// `abs` is an absolute path as on the node ("/proc/self/limits"), below the root, unresolved.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }
    /// `abs` resolved inside the tree (see the module), if it exists.
    fn inside(&self, abs: &str) -> Option<PathBuf> {
        let mut todo: VecDeque<String> = parts(abs).collect();
        let mut done: Vec<String> = Vec::new();
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                done.pop();
                continue;
            }
            let here = self.root.join(done.join("/")).join(&c);
            if !std::fs::symlink_metadata(&here).ok()?.file_type().is_symlink() {
                done.push(c);
                continue;
            }
            links += 1;
            let target = std::fs::read_link(&here).ok()?;
            let target = target.to_str()?;
            if links > MAX_LINKS {
                return None;
            }
            if target.starts_with('/') {
                done.clear();
            }
            for p in parts(target).rev() {
                todo.push_front(p);
            }
        }
        Some(self.root.join(done.join("/")))
    }
    pub fn read(&self, abs: &str) -> Option<String> {
        read_bounded(&self.inside(abs)?).map(|b| String::from_utf8_lossy(&b).into_owned())
    }
    pub fn read_trim(&self, abs: &str) -> Option<String> {
        self.read(abs).map(|s| s.trim().to_string())
    }
    /// `p`: a path below the root as [`Fs::resolve`] gives them.
    pub fn read_bytes(&self, p: &Path) -> Option<Vec<u8>> {
        let rel = p.strip_prefix(&self.root).ok()?;
        read_bounded(&self.inside(rel.to_str()?)?)
    }
    pub fn exists(&self, abs: &str) -> bool {
        self.inside(abs).is_some()
    }
    /// Sorted entry names of a directory (empty if absent).
    pub fn list(&self, abs: &str) -> Vec<String> {
        self.inside(abs).map(|p| list_dir(&p)).unwrap_or_default()
    }
    /// Where a symlink below the root leads, kept inside the root.
    pub fn resolve(&self, abs: &str) -> Option<PathBuf> {
        self.inside(abs)
    }
}

fn parts(p: &str) -> impl DoubleEndedIterator<Item = String> + '_ {
    p.split('/').filter(|c| !c.is_empty() && *c != ".").map(String::from)
}

/// A regular file's bytes, if it has at most [`MAX_READ`] of them.
fn read_bounded(p: &Path) -> Option<Vec<u8>> {
    // O_NONBLOCK: opening a FIFO does not wait for a writer (and it is refused just below)
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(p).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut v = Vec::new();
    f.take(MAX_READ + 1).read_to_end(&mut v).ok()?;
    (v.len() as u64 <= MAX_READ).then_some(v)
}

pub fn list_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(p) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// "1.5 GiB" style sizes.
pub fn human_bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, U[i])
    } else {
        format!("{:.1} {}", v, U[i])
    }
}
