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

/// Yields lines without their terminator, at most [`MAX_LINE`] bytes each. A carriage return alone
/// also ends a line: progress bars (tqdm, pip, wget) redraw themselves with `\r` and no `\n`, so a
/// job's output can hold megabytes of them before the next newline, and the failure printed after
/// them is a line of its own. `\r\n` is one terminator. [`Lines::line_no`] is the physical line
/// (counted in `\n`s) a piece came from, so evidence points where an editor shows it.
pub struct Lines<R> {
    inner: R,
    buf: Vec<u8>,
    /// Bytes of the reader's buffer handed out by the last call, consumed on the next one.
    pending: usize,
    /// The last piece ended with a `\r` at the end of the reader's buffer: a `\n` right after it
    /// belongs to the same terminator.
    after_cr: bool,
    /// [`Lines::after_cr_end`] found the line ended there (a `\n` or the end of the input).
    after_cr_eof: bool,
    /// Physical line of the piece last returned (1-based), and of the next one.
    pub line_no: u64,
    next_no: u64,
    /// The piece last returned ended with a lone `\r` and more of its physical line follows: a
    /// terminal redrew over it (a progress bar's earlier state).
    pub overwritten: bool,
    /// Lines that were longer than the cap.
    pub truncated: u64,
    pub bytes: u64,
}

impl<R: BufRead> Lines<R> {
    pub fn new(inner: R) -> Self {
        Lines {
            inner,
            buf: Vec::with_capacity(4096),
            pending: 0,
            after_cr: false,
            after_cr_eof: false,
            line_no: 0,
            next_no: 1,
            overwritten: false,
            truncated: 0,
            bytes: 0,
        }
    }

    /// The next line with its physical line number, or `None` at the end. An I/O error mid-stream
    /// (e.g. truncated gzip) is returned.
    pub fn next_line(&mut self) -> io::Result<Option<(u64, &[u8])>> {
        Ok(self.next_piece()?.map(|(n, _, b)| (n, b)))
    }

    /// [`Lines::next_line`] with [`Lines::overwritten`] of the piece.
    pub fn next_piece(&mut self) -> io::Result<Option<(u64, bool, &[u8])>> {
        self.inner.consume(std::mem::take(&mut self.pending));
        self.after_cr_end();
        self.line_no = self.next_no;
        self.overwritten = false;
        // fast path: the whole line and its terminator are in the reader's buffer, hand it out
        // without copying
        let found = match self.inner.fill_buf() {
            Ok(avail) => memchr::memchr2(b'\n', b'\r', avail).filter(|&i| i <= MAX_LINE).and_then(|i| {
                match avail[i] {
                    b'\n' => Some((i, i + 1, true)),
                    _ if i + 1 < avail.len() => {
                        let lf = avail[i + 1] == b'\n';
                        self.overwritten = !lf;
                        Some((i, i + 1 + usize::from(lf), lf))
                    }
                    // a \r at the end of the buffer: whether a \n follows is not known yet
                    _ => None,
                }
            }),
            Err(_) => None,
        };
        if let Some((i, used, newline)) = found {
            self.pending = used;
            self.bytes += used as u64;
            self.next_no += u64::from(newline);
            // a second fill_buf returns the same buffered bytes without reading
            let avail = self.inner.fill_buf()?;
            return Ok(Some((self.line_no, self.overwritten, &avail[..i])));
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
            let (take, end) = match memchr::memchr2(b'\n', b'\r', avail) {
                Some(i) => (i, Some(avail[i])),
                None => (avail.len(), None),
            };
            let room = MAX_LINE.saturating_sub(self.buf.len());
            if take > room {
                cut = true;
            }
            self.buf.extend_from_slice(&avail[..take.min(room)]);
            let mut used = take + usize::from(end.is_some());
            match end {
                Some(b'\n') => self.next_no += 1,
                // a CR LF in one read: one line end
                Some(_) if used < avail.len() && avail[used] == b'\n' => {
                    used += 1;
                    self.next_no += 1;
                }
                // a lone CR followed by more: the next line starts right after it
                Some(_) if used < avail.len() => self.overwritten = true,
                Some(_) => self.after_cr = true,
                None => {}
            }
            self.bytes += used as u64;
            self.inner.consume(used);
            if end.is_some() {
                break;
            }
        }
        if cut {
            self.truncated += 1;
        }
        // a CR at the end of the reader's buffer: whether it was a CR LF, or more of the line
        // follows, is known only after the next read
        if self.after_cr {
            self.after_cr_end();
            self.overwritten = !self.after_cr_eof;
        }
        Ok(Some((self.line_no, self.overwritten, &self.buf)))
    }

    /// After a piece that ended with a CR at the end of the reader's buffer: a `\n` right after it
    /// belongs to the same terminator.
    fn after_cr_end(&mut self) {
        if std::mem::take(&mut self.after_cr) {
            self.after_cr_eof = true;
            if let Ok(avail) = self.inner.fill_buf() {
                self.after_cr_eof = avail.is_empty();
                if avail.first() == Some(&b'\n') {
                    self.inner.consume(1);
                    self.bytes += 1;
                    self.next_no += 1;
                    self.after_cr_eof = true;
                }
            }
        }
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
        assert_eq!(l.next_line().unwrap().unwrap().1.len(), MAX_LINE);
        assert_eq!(l.next_line().unwrap().unwrap(), (2, &b"short"[..]));
        assert_eq!(l.next_line().unwrap().unwrap(), (3, &b"last"[..]));
        assert!(l.next_line().unwrap().is_none());
        assert_eq!(l.truncated, 1);
    }

    /// Every line of `data` with its physical line number, read through a reader that hands out
    /// `chunk` bytes at a time (so terminators fall on buffer boundaries).
    fn all(data: &[u8], chunk: usize) -> Vec<(u64, String)> {
        let r = std::io::BufReader::with_capacity(chunk, data);
        let mut l = Lines::new(r);
        let mut out = Vec::new();
        while let Some((n, b)) = l.next_line().unwrap() {
            out.push((n, String::from_utf8_lossy(b).into_owned()));
        }
        assert_eq!(l.bytes, data.len() as u64, "every byte counted once");
        out
    }

    /// A carriage return ends a line (progress bars), `\r\n` is one terminator, and the line
    /// numbers are the physical ones, whatever the buffer boundaries.
    #[test]
    fn carriage_returns_split_lines() {
        let data = b"a\r\nprogress 1%\rprogress 2%\rfailed: ibv_reg_mr\nlast\r\n\rx";
        let want: Vec<(u64, String)> = [
            (1, "a"),
            (2, "progress 1%"),
            (2, "progress 2%"),
            (2, "failed: ibv_reg_mr"),
            (3, "last"),
            (4, ""),
            (4, "x"),
        ]
        .iter()
        .map(|(n, s)| (*n, s.to_string()))
        .collect();
        for chunk in [1, 2, 3, 5, 7, 64, 4096] {
            assert_eq!(all(data, chunk), want, "chunk {chunk}");
        }
    }

    /// A failure after more than MAX_LINE bytes of `\r` progress output on one physical line.
    #[test]
    fn a_line_after_a_long_progress_bar_is_whole() {
        let mut data = Vec::new();
        let mut i = 0;
        while data.len() < MAX_LINE + (MAX_LINE >> 1) {
            data.extend_from_slice(format!("{i:>6}/100000 [00:01<00:00, 9000.00it/s]\r").as_bytes());
            i += 1;
        }
        data.extend_from_slice(b"ibv_reg_mr failed: Cannot allocate memory\n");
        let l = all(&data, 256 << 10);
        assert_eq!(l.last().unwrap(), &(1, "ibv_reg_mr failed: Cannot allocate memory".to_string()));
        assert_eq!(l.len(), i + 1);
    }
}
