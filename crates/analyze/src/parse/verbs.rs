//! libibverbs' own warnings (rdma-core verbs/init.c): provider load failures, kernel ABI mismatch,
//! and the RLIMIT_MEMLOCK warning.
use super::FileCtx;
use crate::event::{Event, Fact, Flag, Lib};
use crate::scan::find;

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    let Some(i) = find!(line, "libibverbs: ") else {
        return false;
    };
    let m = &line[i + 12..];
    // printed by whichever process loaded libibverbs, without a host: in interleaved multi-node output the last
    // host seen is a guess, so these stay unattributed and count for the whole input
    let _ = ctx;
    let host: Option<String> = None;
    let mut fact = |f: Fact| emit(Event::Fact { lib: Lib::Verbs, host: host.clone(), pid: None, fact: f });
    if m.contains("does not support the kernel ABI") {
        fact(Fact::Flag(Flag::AbiMismatch));
    } else if m.contains("couldn't load driver") {
        fact(Fact::Flag(Flag::DriverLoadFail));
    } else if m.contains("no userspace device-specific driver") {
        fact(Fact::Flag(Flag::NoProvider));
    } else if let Some(j) = m.find("RLIMIT_MEMLOCK is ") {
        let n: String = m[j + 18..].chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(n) = n.parse::<u64>() {
            fact(Fact::Memlock(Some(n)));
            // check_memlock_limit prints it only for a limit of 32 KiB or less, and not for root
            fact(Fact::Flag(Flag::MemlockWarned));
        }
    }
    true
}
