//! File access below a root directory, tolerant of anything missing.
use std::path::{Path, PathBuf};

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
    /// `abs` is an absolute path as on the node ("/proc/self/limits").
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }
    pub fn read(&self, abs: &str) -> Option<String> {
        std::fs::read_to_string(self.path(abs)).ok()
    }
    pub fn read_trim(&self, abs: &str) -> Option<String> {
        self.read(abs).map(|s| s.trim().to_string())
    }
    pub fn read_bytes(&self, p: &Path) -> Option<Vec<u8>> {
        std::fs::read(p).ok()
    }
    pub fn exists(&self, abs: &str) -> bool {
        self.path(abs).exists()
    }
    /// Sorted entry names of a directory (empty if absent).
    pub fn list(&self, abs: &str) -> Vec<String> {
        list_dir(&self.path(abs))
    }
    /// Where a symlink below the root leads, kept inside the root.
    pub fn resolve(&self, abs: &str) -> Option<PathBuf> {
        std::fs::canonicalize(self.path(abs)).ok()
    }
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
