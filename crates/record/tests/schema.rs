//! The record schema is written down once, in `mrshim_record::FIELDS`: the reader (serde's
//! `Reg`) and the documentation table must agree with it, field for field.
use mrshim_record::{Kind, MemKind, Reg, Summary, FIELDS};
use std::collections::{BTreeMap, BTreeSet};

/// A record with every optional field set, so serde writes every key.
fn full() -> Reg {
    let s = || Some("x".to_string());
    Reg {
        v: 1,
        kind: Some(Kind::Reg),
        rank: Some(0),
        local_rank: Some(0),
        device: s(),
        pd: s(),
        addr: s(),
        length: Some(1),
        addr_page_offset: Some(1),
        addr_align: Some(1),
        iova: s(),
        iova_page_offset: Some(1),
        access: Some(1),
        access_names: vec!["LOCAL_WRITE".into()],
        dmabuf_fd: Some(1),
        dmabuf_offset: Some(1),
        mem_kind: Some(MemKind::Device),
        memlock_soft: Some(1),
        memlock_hard: Some(1),
        mr: s(),
        lkey: Some(1),
        rkey: Some(1),
        errno: Some(1),
        errno_name: s(),
        probe: true,
        injected: true,
        parent_seq: Some(1),
        strategy: s(),
        learned: true,
        change: s(),
        symbol_version: s(),
        reg_seq: Some(1),
        mem_region: s(),
        mem_fully_mapped: Some(true),
        registered_bytes_after: Some(1),
        shim_version: s(),
        exe: s(),
        env: Some(BTreeMap::new()),
        settings: Some(BTreeMap::new()),
        job_id: s(),
        world_size: Some(1),
        launcher: s(),
        job_env: Some(BTreeMap::new()),
        summary: Some(Summary::default()),
        error: s(),
        used_addr: s(),
        used_length: Some(1),
        used_access: Some(1),
        used_mem_kind: Some(MemKind::HostAnon),
        rereg_flags: Some(1),
        new_addr: s(),
        new_length: Some(1),
        new_access: Some(1),
        new_pd: s(),
        rereg_ret: Some(-4),
        rereg_ret_name: s(),
        ..Reg::default()
    }
}

#[test]
fn the_reader_has_exactly_the_listed_fields_in_order() {
    let line = full().to_line();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want: Vec<&str> = FIELDS.to_vec();
    want.sort_unstable();
    let mut got = keys.clone();
    got.sort_unstable();
    assert_eq!(got, want, "Reg and mrshim_record::FIELDS differ");
    // and a line with every field parses back to the same record
    assert_eq!(serde_json::from_str::<Reg>(&line).unwrap(), full());
}

/// The names in the first column of every table of docs/record-schema.md (`a`, `b` cells list
/// several).
fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/record-schema.md")).unwrap();
    let mut names = BTreeSet::new();
    for l in doc.lines().filter(|l| l.starts_with("| `")) {
        let first = l.split('|').nth(1).unwrap();
        for part in first.split(',') {
            if let Some(n) = part.trim().strip_prefix('`').and_then(|p| p.strip_suffix('`')) {
                names.insert(n.to_string());
            }
        }
    }
    names
}

#[test]
fn the_documentation_table_lists_exactly_the_fields() {
    let doc = documented();
    // the line-kind table names kinds, not fields (`summary` and `error` are both)
    let kinds = ["config", "reg", "dereg", "policy", "rereg", "violation"];
    for f in FIELDS {
        assert!(doc.contains(*f), "docs/record-schema.md does not document `{f}`");
    }
    for d in &doc {
        assert!(
            FIELDS.contains(&d.as_str()) || kinds.contains(&d.as_str()),
            "docs/record-schema.md documents `{d}`, which no record has"
        );
    }
}
