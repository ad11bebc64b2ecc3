//! One JSON object per line, one line per event. The shim writes them, `mrshim analyze` reads them.
//! Schema: docs/record-schema.md. Bump [`SCHEMA_VERSION`] on any incompatible change.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA_VERSION: u32 = 1;

/// How the `change` of a `refused` reg record starts when bounce would not take a region peers
/// can RDMA-WRITE or READ: outside the bounce contract (docs/bounce.md, "The contract"; the rest
/// of `change` names the access and the fix).
pub const REFUSED_OUTSIDE_BOUNCE_CONTRACT: &str = "outside the bounce contract";

/// How the `change` of a `refused` reg record (without `strategy`) starts when the request is
/// invalid by the verbs specification and no strategy was tried (docs/retry.md).
pub const REFUSED_INVALID_REQUEST: &str = "invalid request";

/// Every field a line may carry, in the order of [`Reg`]: the one list the writer (the shim's
/// hand writer, crates/shim-core/src/line.rs), the reader (serde, [`Reg`]) and the documentation
/// table (docs/record-schema.md) are checked against (tests/schema.rs and the shim's line tests).
pub const FIELDS: &[&str] = &[
    "v",
    "kind",
    "seq",
    "time_ns",
    "host",
    "pid",
    "tid",
    "rank",
    "local_rank",
    "call",
    "device",
    "pd",
    "addr",
    "length",
    "addr_page_offset",
    "addr_align",
    "iova",
    "iova_page_offset",
    "access",
    "access_names",
    "relaxed_ordering",
    "dmabuf_fd",
    "dmabuf_offset",
    "mem_kind",
    "memlock_soft",
    "memlock_hard",
    "registered_bytes",
    "result",
    "mr",
    "lkey",
    "rkey",
    "errno",
    "errno_name",
    "duration_ns",
    "probe",
    "injected",
    "attempt",
    "parent_seq",
    "strategy",
    "learned",
    "change",
    "symbol_version",
    "reg_seq",
    "mem_region",
    "mem_fully_mapped",
    "registered_bytes_after",
    "shim_version",
    "exe",
    "env",
    "settings",
    "job_id",
    "world_size",
    "launcher",
    "job_env",
    "summary",
    "error",
    "used_addr",
    "used_length",
    "used_access",
    "used_mem_kind",
    "rereg_flags",
    "new_addr",
    "new_length",
    "new_access",
    "new_pd",
    "rereg_ret",
    "rereg_ret_name",
];

/// What a line describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The process's effective configuration, first line of every log.
    Config,
    /// One registration call (or one retry attempt of it).
    #[default]
    Reg,
    /// One `ibv_dereg_mr`.
    Dereg,
    /// A change of learned retry policy.
    Policy,
    /// Per-process exit summary.
    Summary,
    /// The shim caught a panic of its own; the call it interrupted went to the real function.
    Error,
    /// One `ibv_rereg_mr`: the MR before, the change asked for, the result.
    Rereg,
    /// A bounce region used outside its contract, detected at run time (docs/bounce.md): `call`
    /// names the kind, `error` what happened.
    Violation,
}

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 8] =
        [Kind::Config, Kind::Reg, Kind::Dereg, Kind::Policy, Kind::Summary, Kind::Error, Kind::Rereg, Kind::Violation];

    /// The name a record carries (what serde writes; a test checks it).
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Reg => "reg",
            Kind::Dereg => "dereg",
            Kind::Policy => "policy",
            Kind::Summary => "summary",
            Kind::Error => "error",
            Kind::Rereg => "rereg",
            Kind::Violation => "violation",
        }
    }
}

/// Where the registered address lives, as far as the shim can tell.
/// (Ordered as declared: analyze sorts groups by it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum MemKind {
    HostAnon,
    HostStack,
    Hugepage,
    FileReadonly,
    FileWritable,
    Device,
    Unmapped,
    Unknown,
}

impl MemKind {
    /// Every kind, in declaration order.
    pub const ALL: [MemKind; 8] = [
        MemKind::HostAnon,
        MemKind::HostStack,
        MemKind::Hugepage,
        MemKind::FileReadonly,
        MemKind::FileWritable,
        MemKind::Device,
        MemKind::Unmapped,
        MemKind::Unknown,
    ];

    /// The name a record carries (`host-anon`, ...): the one table the shim's hand writer,
    /// MRSHIM_INJECT's `kind=` and analyze's texts use; a test checks it against serde.
    pub const fn name(self) -> &'static str {
        match self {
            MemKind::HostAnon => "host-anon",
            MemKind::HostStack => "host-stack",
            MemKind::Hugepage => "hugepage",
            MemKind::FileReadonly => "file-readonly",
            MemKind::FileWritable => "file-writable",
            MemKind::Device => "device",
            MemKind::Unmapped => "unmapped",
            MemKind::Unknown => "unknown",
        }
    }

    pub fn from_name(name: &str) -> Option<MemKind> {
        MemKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A record's `result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CallResult {
    /// Not a call: the `config` and `summary` records carry `"result":""`.
    #[default]
    #[serde(rename = "")]
    NotACall,
    /// The call succeeded.
    Ok,
    /// The call failed (`errno` says why).
    Error,
    /// A retry strategy the engine refused to try (`change` says why); nothing was called.
    Refused,
}

impl CallResult {
    pub const ALL: [CallResult; 4] = [CallResult::NotACall, CallResult::Ok, CallResult::Error, CallResult::Refused];

    /// The name a record carries: the one table the shim's hand writer and serde agree on (a
    /// test checks it).
    pub const fn name(self) -> &'static str {
        match self {
            CallResult::NotACall => "",
            CallResult::Ok => "ok",
            CallResult::Error => "error",
            CallResult::Refused => "refused",
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.name()
    }
}

impl std::fmt::Display for CallResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Comparing with the name (tests read records that way).
impl PartialEq<&str> for CallResult {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// One registration (or deregistration) event. Optional fields are omitted when unknown.
/// Addresses are hex strings ("0x7f..."): JSON numbers lose precision above 2^53.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Reg {
    pub v: u32,
    pub kind: Option<Kind>,
    pub seq: u64,
    /// Wall clock, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    pub host: String,
    pub pid: u32,
    pub tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<i64>,
    /// Entry point as the application called it, e.g. `ibv_reg_mr_iova2`.
    pub call: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr_page_offset: Option<u64>,
    /// Largest power of two dividing the address (0 for address 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr_align: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iova: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iova_page_offset: Option<u64>,
    /// Access flags exactly as the caller requested them (retry attempts too: see `used_access`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_names: Vec<String>,
    #[serde(default)]
    pub relaxed_ordering: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dmabuf_fd: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dmabuf_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_kind: Option<MemKind>,
    /// Soft / hard RLIMIT_MEMLOCK in bytes; `None` means unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memlock_soft: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memlock_hard: Option<u64>,
    /// Bytes this process had registered (through the shim) before this call.
    #[serde(default)]
    pub registered_bytes: u64,
    /// `ok`, `error` (the call failed), `refused` (a retry strategy the engine did not try); `""`
    /// on records that are not calls (config, summary).
    pub result: CallResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lkey: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rkey: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno_name: Option<String>,
    pub duration_ns: u64,
    /// A dmabuf capability probe (fd -1): passed through untouched, never retried.
    #[serde(default, skip_serializing_if = "is_false")]
    pub probe: bool,
    /// The failure was injected by MRSHIM_INJECT.
    #[serde(default, skip_serializing_if = "is_false")]
    pub injected: bool,
    /// 0 for the application's own call; 1.. for retry attempts linked by `parent_seq`.
    #[serde(default)]
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Applied up front because it worked before for this kind of memory (sticky retry).
    #[serde(default, skip_serializing_if = "is_false")]
    pub learned: bool,
    /// What the strategy changed, human readable ("access 0x10f -> 0xf").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,

    // ---- added in schema 1 (additive; readers must ignore unknown fields) ----
    /// Symbol version the caller asked for when it is not the default one (`IBVERBS_1.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol_version: Option<String>,
    /// Dereg records: `seq` of the registration that created this MR (if it went through the shim).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reg_seq: Option<u64>,
    /// The /proc/self/maps pathname column of the mapping holding `addr` (`[heap]`, a file, "").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_region: Option<String>,
    /// false when [addr, addr+length) is not entirely covered by mappings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_fully_mapped: Option<bool>,
    /// Bytes this process had registered after the call (successful regs add, deregs subtract).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registered_bytes_after: Option<u64>,
    /// Config records: the shim's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shim_version: Option<String>,
    /// Config records: /proc/self/exe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Config records: every MRSHIM_* variable and the rank variables, as seen at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Config records: the effective settings after parsing (`log`, `level`, `summary`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<BTreeMap<String, String>>,
    /// Config records: the job id (SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, FLUX_JOB_ID, Open MPI's
    /// OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE; settings.job_id_from names the variable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Config records: the number of ranks (settings.world_size_from names the variable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world_size: Option<i64>,
    /// Config records: `openmpi`, `mvapich`, `flux`, `pals`, `slurm`, `pmix`, `pmi`, `torchrun`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// Config records: NCCL_*, MCCL_*, RCCL_*, UCX_*, FI_*, CUDA/HIP/ROCR_VISIBLE_DEVICES as set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_env: Option<BTreeMap<String, String>>,
    /// Summary records (last line of a log when the process exits normally).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Error records: what went wrong inside the shim (a panic message and where).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Retry attempts and learned applications: what the shim registered instead of what the
    /// application asked (`addr`, `length`, `access`, `mem_kind` stay as asked), each present
    /// only where it differs: a bounce shadow's address and kind, access without
    /// RELAXED_ORDERING, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_access: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_mem_kind: Option<MemKind>,
    /// Rereg records: the `flags` argument (CHANGE_TRANSLATION 1, CHANGE_PD 2, CHANGE_ACCESS 4).
    /// `addr`, `length`, `access` and `pd` are the MR before the call, as the shim knew it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rereg_flags: Option<i32>,
    /// Rereg records: the new translation asked for (with CHANGE_TRANSLATION).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_length: Option<u64>,
    /// Rereg records: the new access flags asked for (with CHANGE_ACCESS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_access: Option<u32>,
    /// Rereg records: the new protection domain asked for (with CHANGE_PD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_pd: Option<String>,
    /// Rereg records: what `ibv_rereg_mr` returned (0, or `enum ibv_rereg_mr_err_code`: -1 .. -5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rereg_ret: Option<i32>,
    /// Rereg records: the name of a non-zero `rereg_ret` (`IBV_REREG_MR_ERR_CMD`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rereg_ret_name: Option<String>,
}

/// Per-process totals, written as the `summary` of a [`Kind::Summary`] line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Summary {
    /// Intercepted application calls (registrations and deregistrations).
    pub calls: u64,
    pub failures: u64,
    /// Probes (dmabuf fd -1) are counted here, not as failures.
    #[serde(default)]
    pub probes: u64,
    /// Per entry point: calls, failures and failures by errno name.
    pub by_call: BTreeMap<String, CallStats>,
    /// Sum of the lengths of all successful registrations.
    pub bytes_registered_total: u64,
    /// Bytes still registered at exit.
    pub registered_bytes: u64,
    pub peak_registered_bytes: u64,
    /// Records handed to the kernel / records that could not be written.
    pub records_written: u64,
    pub records_lost: u64,
    /// Registrations each retry strategy rescued (learned applications included).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rescued: BTreeMap<String, u64>,
    /// For each strategy in `rescued`: the job-wide setting with the same effect
    /// (`NCCL_IB_PCI_RELAXED_ORDERING=0`, ...), for users who prefer to make it permanent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub equivalents: BTreeMap<String, String>,
    /// Panics the shim caught in itself (each one passed its call through; see `error` lines).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub internal_errors: u64,
    /// Bounce regions used outside their contract (see `violation` lines, docs/bounce.md).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub violations: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct CallStats {
    pub calls: u64,
    pub failures: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errnos: BTreeMap<String, u64>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Reg {
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("record serializes");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod mem_kind_names {
    use super::{CallResult, Kind, MemKind};

    #[test]
    fn kind_names_are_what_serde_writes() {
        for k in Kind::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.name()));
        }
    }

    #[test]
    fn outcome_names_are_what_serde_writes_and_reads() {
        for o in CallResult::ALL {
            let json = format!("\"{}\"", o.name());
            assert_eq!(serde_json::to_string(&o).unwrap(), json);
            assert_eq!(serde_json::from_str::<CallResult>(&json).unwrap(), o);
        }
        assert!(serde_json::from_str::<CallResult>("\"maybe\"").is_err());
    }

    #[test]
    fn names_are_what_serde_writes_and_read_back() {
        for k in MemKind::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.name()));
            assert_eq!(MemKind::from_name(k.name()), Some(k));
        }
        assert_eq!(MemKind::from_name("gpu"), None);
    }
}

/// docs/record.schema.json is generated from the types above; these tests keep it current and
/// check that real lines validate against it.
#[cfg(test)]
mod json_schema {
    use super::*;
    use std::path::PathBuf;

    fn path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/record.schema.json")
    }

    fn generated() -> String {
        let mut schema = schemars::schema_for!(Reg);
        schema.insert("$id".into(), format!("urn:mrshim:record:v{SCHEMA_VERSION}").into());
        schema.insert("title".into(), "mrshim record".into());
        schema.insert(
            "description".into(),
            format!(
                "One line of a libmrshim.so log (JSON lines), schema version {SCHEMA_VERSION}. Generated from \
                 crates/record by `MRSHIM_BLESS=1 cargo test -p mrshim-record`; see docs/record-schema.md. \
                 Readers must ignore fields they do not know."
            )
            .into(),
        );
        serde_json::to_string_pretty(&schema).unwrap() + "\n"
    }

    #[test]
    fn the_shipped_schema_is_generated_from_the_types() {
        let want = generated();
        if std::env::var_os("MRSHIM_BLESS").is_some() {
            std::fs::write(path(), &want).unwrap();
        }
        let have = std::fs::read_to_string(path()).unwrap_or_default();
        assert!(have == want, "docs/record.schema.json is stale: run `MRSHIM_BLESS=1 cargo test -p mrshim-record`");
    }

    fn validator() -> jsonschema::Validator {
        jsonschema::validator_for(&serde_json::from_str(&generated()).unwrap()).unwrap()
    }

    fn errors(v: &jsonschema::Validator, line: &str) -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        v.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path())).collect()
    }

    #[test]
    fn example_records_validate_and_broken_ones_do_not() {
        let v = validator();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/logs/shim");
        let mut lines = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "jsonl") {
                // A torn line (a killed process's last write) is the reader's business, not the schema's.
                let text = std::fs::read_to_string(&p).unwrap();
                for line in text.lines().filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()) {
                    assert_eq!(errors(&v, line), Vec::<String>::new(), "{}: {line}", p.display());
                    lines += 1;
                }
            }
        }
        assert!(lines > 20, "only {lines} example lines");
        // What the schema must reject: a wrong type, an unknown memory kind, a missing required field.
        let ok = r#"{"v":1,"kind":"reg","seq":1,"time_ns":1,"host":"h","pid":1,"tid":1,"call":"ibv_reg_mr","result":"ok","duration_ns":1}"#;
        assert!(errors(&v, ok).is_empty());
        for bad in [
            ok.replace(r#""seq":1"#, r#""seq":"1""#),
            ok.replace(r#""kind":"reg""#, r#""kind":"regs""#),
            ok.replace(r#""call":"ibv_reg_mr","#, ""),
        ] {
            assert!(!errors(&v, &bad).is_empty(), "accepted: {bad}");
        }
        let kind = ok.replace(r#""result":"ok""#, r#""result":"ok","mem_kind":"gpu""#);
        assert!(!errors(&v, &kind).is_empty(), "unknown mem_kind accepted");
    }
}
