//! Inputs: files, directories (recursively), `-` for stdin; plain or gzip (detected by magic, not name).
//! Lines are read with a length cap so a binary or newline-free input cannot make memory grow.
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Longest line kept; the rest of a longer line is dropped (and counted).
pub const MAX_LINE: usize = 1 << 20;

#[derive(Debug, Clone)]
pub enum Source {
    Stdin,
    File(PathBuf),
}

impl Source {
    pub fn name(&self) -> String {
        match self {
            Source::Stdin => "<stdin>".into(),
            Source::File(p) => p.display().to_string(),
        }
    }
}

/// Expands the command line into sources; unreadable paths become notes. Each file is read once
/// however many paths lead to it (`latest -> run3`, a file named twice), and a directory is walked
/// once: a link back to a directory already walked (`run3/self -> .`, two links into each other)
/// is skipped with a note instead of being followed around the loop.
pub fn expand(paths: &[String], notes: &mut Vec<String>) -> Vec<Source> {
    let mut w = Walk::default();
    for p in paths {
        if p == "-" {
            w.out.push(Source::Stdin);
            continue;
        }
        let path = Path::new(p);
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => w.dir(path, &m, notes),
            Ok(m) => w.file(path, &m),
            Err(e) => notes.push(format!("{p}: skipped: {e}")),
        }
    }
    w.out
}

/// What a walk has seen, by (device, inode).
#[derive(Default)]
struct Walk {
    dirs: HashSet<(u64, u64)>,
    files: HashSet<(u64, u64)>,
    out: Vec<Source>,
}

impl Walk {
    fn file(&mut self, p: &Path, m: &std::fs::Metadata) {
        if self.files.insert((m.dev(), m.ino())) {
            self.out.push(Source::File(p.to_path_buf()));
        }
    }

    fn dir(&mut self, dir: &Path, m: &std::fs::Metadata, notes: &mut Vec<String>) {
        if !self.dirs.insert((m.dev(), m.ino())) {
            notes.push(format!("{}: skipped: already read through another path", dir.display()));
            return;
        }
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
            Err(e) => {
                notes.push(format!("{}: skipped: {e}", dir.display()));
                return;
            }
        };
        entries.sort();
        for p in entries {
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => self.dir(&p, &m, notes),
                Ok(m) if m.is_file() => self.file(&p, &m),
                _ => {}
            }
        }
    }
}

/// Opens a source, transparently gunzipping it.
pub fn open(src: &Source) -> io::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = match src {
        Source::Stdin => Box::new(io::stdin()),
        Source::File(p) => Box::new(File::open(p)?),
    };
    let mut br = BufReader::with_capacity(256 << 10, raw);
    let head = br.fill_buf()?;
    if head.len() >= 2 && head[0] == 0x1f && head[1] == 0x8b {
        Ok(Box::new(BufReader::with_capacity(256 << 10, flate2::bufread::MultiGzDecoder::new(br))))
    } else {
        Ok(Box::new(br))
    }
}

/// Yields lines without their terminator, at most [`MAX_LINE`] bytes each.
pub struct Lines<R> {
    inner: R,
    buf: Vec<u8>,
    /// Bytes of the reader's buffer handed out by the last call, consumed on the next one.
    pending: usize,
    /// Lines that were longer than the cap.
    pub truncated: u64,
    pub bytes: u64,
}

impl<R: BufRead> Lines<R> {
    pub fn new(inner: R) -> Self {
        Lines { inner, buf: Vec::with_capacity(4096), pending: 0, truncated: 0, bytes: 0 }
    }

    /// The next line, or `None` at the end. An I/O error mid-stream (e.g. truncated gzip) is returned.
    pub fn next_line(&mut self) -> io::Result<Option<&[u8]>> {
        self.inner.consume(std::mem::take(&mut self.pending));
        // fast path: the whole line is in the reader's buffer, hand it out without copying
        let found = match self.inner.fill_buf() {
            Ok(avail) => memchr::memchr(b'\n', avail).filter(|&i| i <= MAX_LINE),
            Err(_) => None,
        };
        if let Some(i) = found {
            self.pending = i + 1;
            self.bytes += i as u64 + 1;
            // a second fill_buf returns the same buffered bytes without reading
            let avail = self.inner.fill_buf()?;
            let line = &avail[..i];
            return Ok(Some(line.strip_suffix(b"\r").unwrap_or(line)));
        }
        self.buf.clear();
        let mut any = false;
        let mut cut = false;
        loop {
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if any {
                        // hand out what we have; the error shows up on the next call
                        break;
                    }
                    return Err(e);
                }
            };
            if avail.is_empty() {
                if !any {
                    return Ok(None);
                }
                break;
            }
            any = true;
            let (take, done) = match memchr::memchr(b'\n', avail) {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            let room = MAX_LINE.saturating_sub(self.buf.len());
            if take > room {
                cut = true;
            }
            self.buf.extend_from_slice(&avail[..take.min(room)]);
            let used = if done { take + 1 } else { take };
            self.bytes += used as u64;
            self.inner.consume(used);
            if done {
                break;
            }
        }
        if cut {
            self.truncated += 1;
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some(&self.buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn caps_long_lines() {
        let mut data = vec![b'a'; MAX_LINE + 10];
        data.extend_from_slice(b"\nshort\r\nlast");
        let mut l = Lines::new(&data[..]);
        assert_eq!(l.next_line().unwrap().unwrap().len(), MAX_LINE);
        assert_eq!(l.next_line().unwrap().unwrap(), b"short");
        assert_eq!(l.next_line().unwrap().unwrap(), b"last");
        assert!(l.next_line().unwrap().is_none());
        assert_eq!(l.truncated, 1);
    }
}
