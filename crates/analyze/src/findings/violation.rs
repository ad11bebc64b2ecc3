//! A rule of its own: bounce regions used outside their contract (the shim's `violation`
//! records and WARN lines; docs/bounce.md, Run-time detection). Not a cause of failed
//! registrations — the registrations succeeded through bounce — but data the application may
//! have read stale, so it comes first.
use super::Finding;
use crate::collect::Collector;

pub fn bounce_violation(c: &Collector, prefix: &str) -> Option<Finding> {
    let procs: Vec<_> = c.violations.iter().filter(|(_, v)| v.count() > 0).collect();
    if procs.is_empty() {
        return None;
    }
    let count: u64 = procs.iter().map(|(_, v)| v.count()).sum();
    let mut kinds: Vec<String> = procs.iter().flat_map(|(_, v)| v.kinds.iter().cloned()).collect();
    kinds.sort();
    kinds.dedup();
    let mut hosts: Vec<String> = procs.iter().map(|((h, _), _)| h.clone()).filter(|h| !h.is_empty()).collect();
    hosts.sort();
    hosts.dedup();
    let evidence = procs.iter().flat_map(|(_, v)| v.evidence.iter()).take(4).map(|e| c.path_of(e)).collect();
    Some(Finding {
        category: "bounce-violation",
        confidence: 1.0,
        call: None,
        calls: vec![],
        errno: None,
        errnos: vec![],
        hosts,
        ranks: procs.iter().filter_map(|((h, p), _)| c.rank_of(h, (*p)?)).collect(),
        count,
        evidence,
        explanation: format!(
            "mrshim's host bounce buffers were used outside their coherence contract {count} time(s) ({}): a peer \
             wrote or read a bounce region without a completion this process polled or a message it posted \
             announcing it (a passive one-sided peer: a KV-cache transfer engine, NVSHMEM, DeepEP). The bytes \
             the application saw there{} may have been stale, although every call succeeded.",
            kinds.join(", "),
            if kinds.iter().any(|k| k == "stale_for_peers") {
                ", and those peers' RDMA READs were served from it (stale_for_peers: bytes the application \
                 wrote that no post brought to the shadow while the process neither posted nor polled),"
            } else {
                ""
            }
        ),
        fixes: vec![
            "Register the buffer directly instead of through bounce: dmabuf (ibv_reg_dmabuf_mr, MRSHIM_RETRY=va-to-dmabuf) or GPU peer memory (nvidia_peermem, amdgpu peer memory).".into(),
            format!("Or take the job-wide fallback that needs no registration of GPU memory: {prefix}_NET_GDR_LEVEL=0."),
            "To stop such a job at the first violation instead of computing on: MRSHIM_BOUNCE_ON_VIOLATION=abort.".into(),
            "A job whose processes only pause longer than MRSHIM_BOUNCE_WATCH (10 s by default) between announced accesses (a compute phase between two MPI fences) is reported by the run-time watcher too: raise MRSHIM_BOUNCE_WATCH above its longest pause.".into(),
        ],
        retry: None,
        basis: "evidence",
        check: "grep 'bounce coherence violation' in the job's stderr, or kind \"violation\" in the mrshim logs",
        known_issue: None,
        warning: false,
        decide: vec![],
        score: 10.0,
    })
}

#[cfg(test)]
mod tests {
    /// analyze's result for one log file holding `text` (written to a directory of `name`'s own).
    fn analyze_log(name: &str, text: &str) -> crate::Analysis {
        let dir = std::env::temp_dir().join(format!("mrshim-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("rank0.log");
        std::fs::write(&f, text).unwrap();
        let a = crate::analyze(&[f.display().to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
        a
    }

    /// A `violation` record and its WARN line (one violation, seen twice) make the first finding,
    /// even when nothing failed; the WARN line is not taken for a failed registration.
    #[test]
    fn a_violation_is_the_first_finding_and_counted_once() {
        let a = analyze_log(
            "violation",
            "{\"v\":1,\"kind\":\"violation\",\"seq\":9,\"time_ns\":1,\"host\":\"node1\",\"pid\":42,\"tid\":42,\
             \"call\":\"unannounced_write\",\"strategy\":\"bounce\",\"result\":\"error\",\"error\":\"64 bytes\"}\n\
             node1:42:42 [-] MRSHIM WARN bounce coherence violation (unannounced_write): 64 bytes a peer wrote\n",
        );
        let first = a.findings.first().expect("a finding");
        assert_eq!((first.category, first.count), ("bounce-violation", 1));
        assert!(first.explanation.contains("unannounced_write"), "{}", first.explanation);
        assert_eq!(a.failed(), 0, "the WARN line is no failed call");
    }

    /// The watcher's kind for bytes peers READ stale (docs/bounce.md, Run-time detection), from
    /// a log a process left with _exit (no summary): counted and named like the others.
    #[test]
    fn stale_bytes_served_to_peers_are_a_violation_too() {
        let a = analyze_log(
            "violation-peers",
            "{\"v\":1,\"kind\":\"violation\",\"seq\":9,\"time_ns\":1,\"host\":\"node1\",\"pid\":42,\"tid\":43,\
             \"call\":\"unannounced_write\",\"strategy\":\"bounce\",\"result\":\"error\",\"error\":\"a peer\"}\n\
             {\"v\":1,\"kind\":\"violation\",\"seq\":10,\"time_ns\":2,\"host\":\"node1\",\"pid\":42,\"tid\":43,\
             \"call\":\"stale_for_peers\",\"strategy\":\"bounce\",\"result\":\"error\",\"error\":\"the app\"}\n",
        );
        let first = a.findings.first().expect("a finding");
        assert_eq!((first.category, first.count), ("bounce-violation", 2));
        assert!(first.explanation.contains("stale_for_peers, unannounced_write"), "{}", first.explanation);
        assert!(first.explanation.contains("peers' RDMA READs were served"), "{}", first.explanation);
        assert!(first.fixes.iter().any(|f| f.contains("MRSHIM_BOUNCE_WATCH")), "{:?}", first.fixes);
    }
}
