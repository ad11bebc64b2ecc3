//! Who is calling: host, pid, tid, rank and local rank.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Rank variables in the order they are consulted (MVAPICH, Flux and Cray PALS after the
/// original five, so that existing logs keep their `rank_from`).
pub const RANK_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "RANK",
    "MV2_COMM_WORLD_RANK",
    "FLUX_TASK_RANK",
    "PALS_RANKID",
];
pub const LOCAL_RANK_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
    "LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "FLUX_TASK_LOCAL_ID",
    "PALS_LOCAL_RANKID",
];

/// The first variable of `vars` that holds a non-negative integer.
pub fn first_int(vars: &[&'static str], get: &impl Fn(&str) -> Option<String>) -> Option<(i64, &'static str)> {
    vars.iter().find_map(|v| {
        let s = get(v)?;
        let n: i64 = s.trim().parse().ok()?;
        (n >= 0).then_some((n, *v))
    })
}

pub fn rank(get: &impl Fn(&str) -> Option<String>) -> Option<(i64, &'static str)> {
    first_int(RANK_VARS, get)
}

pub fn local_rank(get: &impl Fn(&str) -> Option<String>) -> Option<(i64, &'static str)> {
    first_int(LOCAL_RANK_VARS, get)
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates on success when
    // the name fits (the last byte is kept 0 in any case).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let h = String::from_utf8_lossy(&buf[..end]).into_owned();
    if h.is_empty() {
        "unknown".into()
    } else {
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(v: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn precedence_and_garbage() {
        assert_eq!(rank(&env(&[("RANK", "7"), ("PMI_RANK", "3")])), Some((3, "PMI_RANK")));
        assert_eq!(rank(&env(&[("OMPI_COMM_WORLD_RANK", "1"), ("PMIX_RANK", "2")])), Some((1, "OMPI_COMM_WORLD_RANK")));
        assert_eq!(
            rank(&env(&[("PMIX_RANK", "5"), ("PMI_RANK", "4")])),
            Some((4, "PMI_RANK")),
            "the order the issue lists"
        );
        assert_eq!(rank(&env(&[("OMPI_COMM_WORLD_RANK", "x"), ("SLURM_PROCID", " 5 ")])), Some((5, "SLURM_PROCID")));
        assert_eq!(rank(&env(&[("RANK", "-1")])), None);
        assert_eq!(rank(&env(&[])), None);
        assert_eq!(local_rank(&env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "2")])), Some((2, "OMPI_COMM_WORLD_LOCAL_RANK")));
        assert_eq!(rank(&env(&[("PALS_RANKID", "9"), ("MV2_COMM_WORLD_RANK", "8")])), Some((8, "MV2_COMM_WORLD_RANK")));
        assert_eq!(rank(&env(&[("FLUX_TASK_RANK", "6"), ("RANK", "1")])), Some((1, "RANK")), "after today's");
        assert_eq!(local_rank(&env(&[("PALS_LOCAL_RANKID", "3")])), Some((3, "PALS_LOCAL_RANKID")));
    }

    #[test]
    fn host_is_nonempty() {
        assert!(!hostname().is_empty());
    }
}

/// Bumped in a forked child: every thread's cached tid is stale there.
static FORK_GEN: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static TID: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, u32::MAX)) };
}

/// This thread's id, cached per thread (gettid is a syscall) and per fork generation.
pub fn tid() -> u32 {
    let gen = FORK_GEN.load(Relaxed);
    TID.with(|c| {
        let (t, g) = c.get();
        if g == gen && t != 0 {
            return t;
        }
        // The system call, not glibc's gettid(): that wrapper only exists since glibc 2.30 and
        // the portable build must load on 2.17.
        // SAFETY: SYS_gettid takes no arguments and cannot fail.
        let t = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        c.set((t, gen));
        t
    })
}

/// In a forked child: every thread's cached tid is the parent's.
pub fn forget_tids() {
    FORK_GEN.fetch_add(1, Relaxed);
}
