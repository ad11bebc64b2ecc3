//! A progress line on stderr for inputs that take more than about a second: only on a terminal, at
//! most ten updates a second, erased when done.
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    start: Instant,
    last: Option<Instant>,
    on: bool,
}

impl Progress {
    pub fn new() -> Progress {
        Progress { start: Instant::now(), last: None, on: std::io::stderr().is_terminal() }
    }
    pub fn update(&mut self, files_done: usize, files: usize, bytes: u64) {
        if !self.on || self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        if self.last.is_some_and(|l| l.elapsed() < Duration::from_millis(100)) {
            return;
        }
        self.last = Some(Instant::now());
        let _ = write!(
            std::io::stderr(),
            "\r\x1b[Kmrshim analyze: {files_done}/{files} inputs, {:.0} MB, {:.1} s",
            bytes as f64 / 1e6,
            self.start.elapsed().as_secs_f64()
        );
    }
    pub fn done(&mut self) {
        if self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
