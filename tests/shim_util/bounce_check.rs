//! The bounce checker's oracle (tests/c/bounce_check.c's traces), shared by the simulator's
//! checker (tests/bounce_checker.rs) and the kernel tier's run of its programs on rxe0.

/// Every feature of bounce_check.c. On main 039e958 each of `srq` (N1: SRQ receives not
/// copied), `dupid` (N2: receives sharing a wr_id), `dereg` (N6: a completion polled after
/// ibv_dereg_mr), `msge` (N12: a two-SGE receive with its header in a plain MR overruns the
/// message's end), `refuse` (N13: a refused READ left pending), `immbuf` (N20: WRITE_WITH_IMM
/// copies the receive's buffer) and `destroy` (found by this checker, seed 1001069: receives left
/// posted at ibv_destroy_qp) had a failing seed; `threads` (N3: one thread refilling a buffer
/// while another's post_recv folded the region, whose shadow and baseline got different reads of
/// it) showed a rare difference in the sender's own slot until 5d6c721. All fixed (issue 28).
pub const DEFAULT_FEATURES: &str =
    "send,fill,write,imm,read,rereg,unannounced,unannounced-read,srq,dupid,threads,dereg,msge,refuse,immbuf,destroy";

/// At most 1500 characters of `s`.
pub fn clip(s: &str) -> String {
    if s.chars().count() > 1500 {
        format!("{}...", s.chars().take(1500).collect::<String>())
    } else {
        s.to_string()
    }
}

/// One slot digest that differed under a contract exclusion: the side whose slot it is (`A`,
/// `B`), the exclusion that explains the bytes that differ (`w`: an unannounced write, `r`: an
/// unannounced read, `wr`: both; `attribute`), and whether what the write changed is equal again
/// at the end of the program (`settled`: the bytes arrived late, or the application replaced
/// them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub side: char,
    pub slot: String,
    pub kind: String,
    pub settled: bool,
}

/// Compares two traces line by line. Ok(number of slot digests that differ under an exclusion);
/// Err(the first difference the contract does not allow).
pub fn compare(plain: &str, bounce: &str) -> Result<u64, String> {
    compare_detail(plain, bounce).map(|d| d.len() as u64)
}

/// [`compare`], with each excluded difference: whose slot, and which exclusion.
pub fn compare_detail(plain: &str, bounce: &str) -> Result<Vec<Excluded>, String> {
    let (p, b): (Vec<&str>, Vec<&str>) = (plain.lines().collect(), bounce.lines().collect());
    let mut excluded = Vec::new();
    // slots that differ in a side's `end` line, with both digests
    let mut at_end: Vec<(char, String, &str, &str)> = Vec::new();
    for (lp, lb) in p.iter().zip(&b) {
        if let (Some((hp, sp)), Some((_, sb))) = (lp.split_once(" |"), lb.split_once(" |")) {
            if hp.ends_with(" end") {
                for (a, c) in sp.split_whitespace().zip(sb.split_whitespace()) {
                    if a != c {
                        let slot = a.split('=').next().unwrap_or(a).to_string();
                        at_end.push((hp.chars().next().unwrap_or('?'), slot, a, c));
                    }
                }
            }
        }
    }
    // whether what an unannounced write may have changed in a slot is equal at the end
    let write_settled = |side: char, slot: &str| match at_end.iter().find(|e| e.0 == side && e.1 == slot) {
        None => true,
        Some((_, _, a, c)) => !mark(a).0.contains('w') || attribute(a, c) == Attribution::Read,
    };
    for (lp, lb) in p.iter().zip(&b) {
        if lp == lb {
            continue;
        }
        let (hp, sp) = lp.split_once(" |").unwrap_or((lp, ""));
        let (hb, sb) = lb.split_once(" |").unwrap_or((lb, ""));
        if hp != hb {
            return Err(format!("plain `{}` / bounce `{}`", clip(lp), clip(lb)));
        }
        let (sp, sb): (Vec<&str>, Vec<&str>) = (sp.split_whitespace().collect(), sb.split_whitespace().collect());
        if sp.len() != sb.len() {
            return Err(format!("{hp}: plain `{}` / bounce `{}`", clip(lp), clip(lb)));
        }
        for (a, c) in sp.iter().zip(&sb) {
            if a == c {
                continue;
            }
            match a.split_once('*') {
                Some(_) => {
                    let side = hp.chars().next().unwrap_or('?');
                    let slot = a.split('=').next().unwrap_or(a).to_string();
                    let (kind, settled) = match attribute(a, c) {
                        Attribution::Read => ("r".to_string(), true),
                        // bytes no exclusion may have changed differ: nothing explains it
                        Attribution::Outside => ("wr".to_string(), false),
                        Attribution::Kind(k) => {
                            let settled = if k.contains('w') {
                                write_settled(side, &slot)
                            } else {
                                !at_end.iter().any(|e| e.0 == side && e.1 == slot)
                            };
                            (k, settled)
                        }
                    };
                    excluded.push(Excluded { side, slot, kind, settled })
                }
                None => {
                    let slot = a.split('=').next().unwrap_or(a);
                    return Err(format!("after `{hp}`: slot {slot} is {a} plain, {c} through bounce"));
                }
            }
        }
    }
    if p.len() != b.len() {
        return Err(format!("the plain trace has {} lines, the bounce trace {}", p.len(), b.len()));
    }
    Ok(excluded)
}

/// A starred digest's mark (`*K:W:O[:DC]`): the kinds (`w`, `r`, `wr`), the digests of the bytes
/// an unannounced write may have changed and of the bytes no exclusion may have, and for a slot
/// whose write span is one unannounced write's window, whether the window holds what that write
/// carried (`D`: 1, it arrived) and the kinds those bytes carried (`C`: `w`, `r`, `wr` or `-`).
fn mark(tok: &str) -> (&str, Vec<&str>) {
    let m = tok.split_once('*').map_or("", |(_, m)| m);
    let mut parts = m.split(':');
    (parts.next().unwrap_or(""), parts.collect())
}

/// Which exclusion explains a starred slot digest that differs (plain `a`, bounce `c`).
#[derive(Debug, PartialEq, Eq)]
enum Attribution {
    /// these kinds
    Kind(String),
    /// the READ's bytes differ: the slot's are `wr` but the bytes the write may have changed are
    /// equal, or the write arrived in both runs and its bytes carried only a READ's difference
    Read,
    /// bytes no exclusion may have changed differ
    Outside,
}

fn attribute(a: &str, c: &str) -> Attribution {
    let ((k, pa), (_, pc)) = (mark(a), mark(c));
    if pa.len() < 2 || pc.len() < 2 {
        return Attribution::Kind(k.to_string());
    }
    if pa[1] != pc[1] {
        return Attribution::Outside;
    }
    let kind = match (pa.get(2), pc.get(2)) {
        // the write's bytes differ, but it arrived in both runs: what it carried differs
        (Some(da), Some(dc)) if pa[0] != pc[0] && da.starts_with('1') && dc.starts_with('1') => match &da[1..] {
            "-" => return Attribution::Outside,
            carried => carried,
        },
        _ if k == "wr" && pa[0] == pc[0] => "r",
        _ => k,
    };
    if kind == "r" && k.contains('w') {
        Attribution::Read
    } else {
        Attribution::Kind(kind.to_string())
    }
}

/// What an excluded difference that no process reported is (docs/bounce.md, "What is detected
/// and what is not"): a category no shim can detect, or one it should have.
pub fn undetected_category(x: &Excluded) -> &'static str {
    if !x.kind.contains('w') {
        // a peer's READ is served by the target's NIC: no event in the target's process
        "read-unannounced"
    } else if x.settled {
        // a later RECV completion or idle pass brought the write over: what an announced
        // write looks like
        "write-late"
    } else {
        "unexplained"
    }
}
