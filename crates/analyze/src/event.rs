//! What the parsers emit: registration attempts and facts about a host, process or run.
use mrshim_record::MemKind;
use serde::Serialize;

/// The program or library that printed the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lib {
    Shim,
    Nccl,
    Mccl,
    Rccl,
    Ucx,
    Ompi,
    Perftest,
    Verbs,
    Kernel,
    Doctor,
    Text,
}

impl Lib {
    pub fn name(self) -> &'static str {
        match self {
            Lib::Shim => "mrshim",
            Lib::Nccl => "NCCL",
            Lib::Mccl => "MCCL",
            Lib::Rccl => "RCCL",
            Lib::Ucx => "UCX",
            Lib::Ompi => "Open MPI",
            Lib::Perftest => "perftest",
            Lib::Verbs => "libibverbs",
            Lib::Kernel => "kernel",
            Lib::Doctor => "mrshim doctor",
            Lib::Text => "text",
        }
    }
    /// NCCL and its ports, whose knobs share names up to the prefix.
    pub fn is_ccl(self) -> bool {
        matches!(self, Lib::Nccl | Lib::Mccl | Lib::Rccl)
    }
}

/// One registration call as the evidence shows it. Unknown fields stay `None`.
#[derive(Debug, Clone, Default)]
pub struct RegEv {
    pub lib: Option<Lib>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub rank: Option<i64>,
    /// A rank guess (NCCL's `[N]` is the CUDA device) used only when no real rank is known.
    pub rank_hint: Option<i64>,
    pub call: String,
    pub ok: bool,
    pub errno: Option<i32>,
    pub mem: Option<MemKind>,
    pub access: Option<u32>,
    pub length: Option<u64>,
    pub addr: Option<u64>,
    pub relaxed: Option<bool>,
    pub iova_misaligned: bool,
    pub over_memlock: bool,
    pub memlock: Option<Option<u64>>,
    pub time_ns: Option<u64>,
    pub injected: bool,
    pub strategy: Option<String>,
    pub attempt: u32,
    /// Evidence line (number, text) when the event is emitted after its own line (held-back UCX/perftest).
    pub evid: Option<(u64, String)>,
}

/// Facts that are true or false of a host (or of the whole input when the host is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flag {
    GdrOn,
    GdrOff,
    RoAdvertised,
    UmemGetFail,
    MkeyLimit,
    KernelRegFail,
    IommuFault,
    PcieError,
    AbiMismatch,
    DriverLoadFail,
    NoProvider,
    PeermemLoaded,
    PeermemMissing,
    AcsOn,
    IommuTranslated,
    Container,
    NoIpcLock,
    DevPermission,
    LockedMemWarn,
    RegLimitWarn,
    GdrOffWorks,
    TcpWorks,
    RoOffStillFails,
    VersionMismatchProse,
    GpuContext,
    DmabufUnsupported,
    MaxMapLow,
    CudaVmm,
}

#[derive(Debug, Clone)]
pub enum Fact {
    Flag(Flag),
    Env(String, String),
    Version(String, String),
    /// Soft RLIMIT_MEMLOCK in bytes, `None` = unlimited.
    Memlock(Option<u64>),
    MaxMapCount(u64),
    RankOf(i64),
    /// The process finished initialisation (NCCL `Init COMPLETE`, a perftest result table, ...).
    Done,
    /// A shim log starts (its config record): the job it belongs to, as far as the record tells.
    Started {
        world_size: Option<u64>,
        job_id: Option<String>,
    },
    /// The shim's exit summary: the process ended normally after `calls` intercepted calls.
    Exit {
        calls: u64,
    },
    /// An `ibv_dereg_mr` at this time (ns), for the timeline.
    Dereg {
        time_ns: u64,
        rank: Option<i64>,
    },
}

#[derive(Debug, Clone)]
pub enum Event {
    Reg(RegEv),
    Fact {
        lib: Lib,
        host: Option<String>,
        pid: Option<u32>,
        fact: Fact,
    },
    /// Something the reader should know about the input (newer schema, unparsable record...).
    Note(String),
}

impl Event {
    pub fn fact(lib: Lib, host: Option<&str>, pid: Option<u32>, fact: Fact) -> Event {
        Event::Fact { lib, host: host.map(String::from), pid, fact }
    }
}
