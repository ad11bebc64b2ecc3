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
    Libfabric,
    Mscclpp,
    Nvshmem,
    Deepep,
    Mooncake,
    Nixl,
    Gdrcopy,
    Mori,
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
            Lib::Libfabric => "libfabric",
            Lib::Mscclpp => "MSCCL++",
            Lib::Nvshmem => "NVSHMEM",
            Lib::Deepep => "DeepEP",
            Lib::Mooncake => "Mooncake",
            Lib::Nixl => "NIXL",
            Lib::Gdrcopy => "gdrcopy",
            Lib::Mori => "MORI",
        }
    }
    /// Libraries whose registrations are GPU buffers (a prior, not proof: they register host memory too).
    pub fn registers_gpu(self) -> bool {
        matches!(
            self,
            Lib::Nccl
                | Lib::Mccl
                | Lib::Rccl
                | Lib::Mscclpp
                | Lib::Nvshmem
                | Lib::Deepep
                | Lib::Mooncake
                | Lib::Nixl
                | Lib::Gdrcopy
                | Lib::Mori
        )
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
    /// The range was fully mapped (`mem_fully_mapped`, or a MRSHIM WARN line naming a host kind
    /// without "not fully mapped"): observed, not guessed.
    pub mapped: Option<bool>,
    pub iova_misaligned: bool,
    pub over_memlock: bool,
    pub memlock: Option<Option<u64>>,
    pub time_ns: Option<u64>,
    pub injected: bool,
    pub strategy: Option<String>,
    pub attempt: u32,
    /// Evidence line (number, text) when the event is emitted after its own line (held-back UCX/perftest).
    pub evid: Option<(u64, String)>,
    /// Which kind of output reported it: the same failure is often seen as a shim record, as a MRSHIM WARN
    /// line and as the library's own line; per process each kind is counted and only the largest kept.
    pub source: Source,
    /// A learned strategy applied up front (the record's own fields may describe the shadow, see `used_*`).
    pub learned: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Record,
    ShimWarn,
    ShimSummary,
    #[default]
    Text,
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
    /// A stack printed its own warning with the soft RLIMIT_MEMLOCK it found too small (libibverbs'
    /// `Warning: RLIMIT_MEMLOCK is N bytes`, UCX's `Please set max locked memory ... (current: N
    /// kbytes)`): read by the warning-only diagnosis; the failure rules weigh the value itself.
    MemlockWarned,
    /// A buffer was larger than the device's `max_mr_size`.
    MrSizeExceeded,
    GdrOffWorks,
    TcpWorks,
    RoOffStillFails,
    VersionMismatchProse,
    GpuContext,
    DmabufUnsupported,
    MaxMapLow,
    CudaVmm,
    /// The GPU cannot export dmabuf (`dmaBufSupported: 0`, `DMA_BUF_SUPPORTED 0`).
    GpuDmabufUnavailable,
    /// A GeForce GPU: no GPUDirect RDMA.
    GeforceGpu,
    /// Pinning GPU pages for a peer failed in the kernel (nvidia_p2p_get_pages, gdrdrv, nvidia-fs).
    P2pPinFail,
    /// The process had CAP_IPC_LOCK (memlock does not apply).
    IpcLock,
    /// The program says it will ask for IBV_ACCESS_RELAXED_ORDERING (Mooncake's "[RDMA TENT] ...
    /// IBV_ACCESS_RELAXED_ORDERING will be enabled", and the like).
    RoRequested,
    /// A driver says the registration asked for access bits the device does not support (EFA's
    /// `Unsupported access flags[asked], supported[mask]`): the request, not the memory.
    AccessRefused,
    /// The transfer library has no GPU memory support at run time (NIXL: UCX without CUDA/ROCm memory
    /// types — built without them, its cuda modules not found, or UCX_TLS without cuda_copy), so GPU
    /// buffers are taken for host memory and their registration is refused.
    GpuSupportMissing,
    /// The memory to be registered could not be allocated at all (perftest's hugepage / SysV shm /
    /// work-buffer allocation): the MR failed before any registration call.
    BufferAllocFail,
    /// A layer's table of registered regions, or the NIC's registration resources, is full (Chapel
    /// ugni's `no more registered memory region table entries`, GNI_RC_ERROR_RESOURCE): no more
    /// memory can be registered, whatever errno the layer above reports.
    RegTableFull,
    /// UCX's mlx5 memory domain could not set up what it binds and exports memory keys through (its UMR
    /// QP, CQ or mkeys, or the indirect KSM key over a registration): the stack against the NIC's driver,
    /// firmware or port configuration, not the memory.
    MkeySetupFail,
    /// A stack's start-up probe found that some nodes can pin (register) much less memory than others
    /// (GASNet-EX's `Probe of max pinnable memory found varying results`): every node is then held to the
    /// smallest; memlock or the HCA's limits differ between nodes. Read by the warning-only diagnosis.
    PinnableShort,
    /// A line printed a registration cache's limits (libfabric CXI's `MR cache using max_size N and
    /// max_cnt M`): the knobs (FI_MR_CACHE_MAX_COUNT / _SIZE) that bound what stays registered.
    MrCacheLimit,
    /// The HCA is driven by mlx4 (ConnectX-2/3: `mlx4_0`, `mlx4_core`, its `log_num_mtt`): its
    /// registrations are bounded by the MTT table (mlx4 mr.c: MTT buddy allocator full -> ENOMEM).
    Mlx4Hca,
    /// mlx5's UMR (the work request that rewrites an mkey) completed with an error or could not be
    /// recovered (`reg umr failed (N)`): the driver or firmware, not the application's resources.
    UmrFail,
    /// An ODP MR's page fault could not update the mkey's translation (`Failed to update mkey page
    /// tables`, `Failed to update PAS`): the pages were mapped, the driver's UMR update failed.
    OdpXltFail,
    // What the reporter tried, told in words (parse/tried.rs; weighed in findings/rules.rs `TRIED`).
    // `...Works`: the change made the job work; `...StillFails`: the failure survived it.
    /// The locked-memory limit raised (ulimit -l, limits.conf, LimitMEMLOCK, --ulimit memlock).
    MemlockRaiseWorks,
    MemlockRaiseStillFails,
    /// Run as root, privileged, with CAP_IPC_LOCK.
    PrivilegedWorks,
    PrivilegedStillFails,
    /// Relaxed ordering off (*_IB_PCI_RELAXED_ORDERING=0 / off).
    RoOffWorks,
    /// dmabuf off (NCCL_DMABUF_ENABLE=0): registration by address works.
    DmabufOffWorks,
    DmabufOffStillFails,
    /// dmabuf on: GPU memory registers through dmabuf.
    DmabufWorks,
    /// GPUDirect RDMA off and the failure stayed.
    GdrOffStillFails,
    /// The peer-memory module (nvidia_peermem, nv_peer_mem, amdgpu) loaded.
    PeermemLoadWorks,
    PeermemStillFails,
    /// Host memory (cudaMallocHost, malloc) registers where GPU memory does not.
    HostMemWorks,
    HostMemStillFails,
    /// A kernel, driver, firmware or library version changed (upgrade, downgrade, rollback).
    VersionChangeWorks,
    VersionChangeStillFails,
    /// A registration-resource knob (log_num_mtt, UCX_RCACHE_*, FI_MR_CACHE_*) changed.
    ResourceTuneWorks,
    ResourceTuneStillFails,
    /// Smaller registrations work, larger ones fail.
    SizeThreshold,
    /// It works on one node and fails on another.
    OtherNodeWorks,
    // Regressions (version-mismatch), read from what the kernel prints and what the thread says.
    /// The kernel crashed or warned (Oops, BUG, WARNING, a call trace) with a frame in the memory
    /// registration path (ib_umem_get, ib_uverbs_reg_mr, a driver's *_reg_user_mr, pin_user_pages,
    /// ...): a kernel bug in that path (parse/kernel.rs).
    RegPathCrash,
    /// A release candidate or development build is in use (`5.10.0-rc3+`, `next-20201016`): the
    /// release a regression is found in before its fix (parse/facts.rs).
    DevRelease,
    /// The thread says it is a regression: bisected to a commit (`git bisect`, `first bad commit`), a
    /// `Fixes:` tag, "regression", "since commit" (parse/prose.rs).
    RegressionTold,
    /// The program maps GPU memory into its address space with gdrcopy (`gdr_map`, its `map_d_ptr` /
    /// `ptr_va` prints): a VM_IO | VM_PFNMAP mapping of the GPU's BAR (parse/facts.rs).
    GdrBarMapping,
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
    /// An `ibv_rereg_mr` record: `result` `ok`, `error` (also a failed call of its own) or
    /// `refused` (by mrshim, on an MR a retry strategy made: the application falls back to
    /// dereg + reg, no failure of its registrations).
    Rereg {
        result: mrshim_record::CallResult,
    },
    /// A bounce region used outside its contract (a `violation` record, or its WARN line):
    /// `kind` as the shim names it (`unannounced_write`), `record`: from a record (else a line).
    BounceViolation {
        kind: String,
        record: bool,
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
    /// A line matched pattern `n` of the known-issue table.
    Known(usize),
}

impl Event {
    pub fn fact(lib: Lib, host: Option<&str>, pid: Option<u32>, fact: Fact) -> Event {
        Event::Fact { lib, host: host.map(String::from), pid, fact }
    }
}
