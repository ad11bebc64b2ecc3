//! The concrete fixes each category suggests: commands, settings and the knobs by their real names.

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

pub fn memlock() -> Vec<String> {
    v(&[
        "check the limit the job really gets: `bash -c 'ulimit -l; grep \"Max locked memory\" /proc/self/limits'` from the job launcher (srun/mpirun), not a login shell",
        "/etc/security/limits.conf (or limits.d): `* soft memlock unlimited` and `* hard memlock unlimited`, then start a new session",
        "systemd services (slurmd, containerd, your trainer): LimitMEMLOCK=infinity in the unit, then `systemctl daemon-reload` and restart",
        "Docker: `docker run --ulimit memlock=-1:-1 ...`; Kubernetes: securityContext.capabilities.add: [IPC_LOCK] and a runtime with unlimited memlock",
        "Slurm: remove `ulimit -l 64` (or any small memlock) from the prolog/TaskProlog and set PropagateResourceLimits so the submit host's unlimited limit reaches the job",
        "Open MPI / PMIx launchers: raise the limit on every node before the launcher daemons (orted, prted, slurmd) start; processes inherit it from them",
    ])
}

/// The GPU vendor a job's collective library implies: MCCL → MetaX, RCCL → AMD, NCCL → NVIDIA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuVendor {
    Nvidia,
    Amd,
    Metax,
}

pub fn gpu_peer_memory(p: &str, vendor: GpuVendor, efault: bool) -> Vec<String> {
    let (peer, dmabuf) = match vendor {
        GpuVendor::Nvidia => (
            "load NVIDIA's GPU peer-memory client on every node: `modprobe nvidia_peermem` (check `lsmod | grep -e nvidia_peermem -e nv_peer_mem`, /sys/module/nvidia_peermem)".to_string(),
            "or register GPU memory through dmabuf instead of by address: kernel >= 5.12, an rdma-core with ibv_reg_dmabuf_mr, the open GPU kernel driver, NCCL_DMABUF_ENABLE=1".to_string(),
        ),
        GpuVendor::Amd => (
            "load AMD's peer memory on every node: the amdgpu DKMS driver with peer-memory support (amdkfd in /sys/kernel/mm/memory_peers; `mrshim doctor` lists every peer-memory client)".to_string(),
            "or register GPU memory through dmabuf: ROCm >= 6 (hipMemGetHandleForAddressRange) or ROCm 5 (HSA's hsa_amd_portable_export_dmabuf), kernel >= 5.12, an rdma-core with ibv_reg_dmabuf_mr, NCCL_DMABUF_ENABLE=1 (RCCL reads NCCL_*)".to_string(),
        ),
        GpuVendor::Metax => (
            "load MetaX's peer-memory module from the same MACA driver release as the `metax` module on every node (`lsmod | grep metax`; `mrshim doctor` lists every peer-memory client)".to_string(),
            format!("or register GPU memory through dmabuf: kernel >= 5.12, an rdma-core with ibv_reg_dmabuf_mr, MACA's mcMemGetHandleForAddressRange ({p}_DMABUF_ENABLE=1 where your MCCL release has it)"),
        ),
    };
    let mut f = vec![
        peer,
        dmabuf,
        "check the PCIe path NIC <-> GPU: `mrshim doctor` (pcie check), `lspci -vvv | grep -i acsctl`; ACS redirect must be off and the IOMMU in passthrough (iommu=pt) for GPUDirect".into(),
    ];
    if efault && vendor == GpuVendor::Nvidia {
        f.insert(0, "CUDA VMM (cuMem*) buffers fail with EFAULT even with nvidia_peermem: use the dmabuf path (NCCL_DMABUF_ENABLE=1) or allocate with cudaMalloc (NCCL_CUMEM_ENABLE=0)".into());
    }
    f.push(format!("to run now without GPUDirect: {p}_NET_GDR_LEVEL=LOC (stage through host memory; slower); {p}_IB_DISABLE=1 falls back to TCP (much slower); or keep RDMA with mrshim's host bounce buffers: MRSHIM_RETRY=va-to-dmabuf,bounce"));
    f.push(format!("{p}_IB_PCI_RELAXED_ORDERING does not help here: it only picks ibv_reg_mr_iova2 vs ibv_reg_mr for the same memory"));
    f
}

pub fn relaxed(p: &str) -> Vec<String> {
    vec![
        format!("{p}_IB_PCI_RELAXED_ORDERING=0 (registration without IBV_ACCESS_RELAXED_ORDERING); UCX: UCX_IB_PCI_RELAXED_ORDERING=off; Mooncake: MC_IB_PCI_RELAXED_ORDERING=0; another engine: its own relaxed-ordering switch"),
        "update the NIC firmware and rdma-core: relaxed ordering needs device support, which rdma-core otherwise masks off itself".into(),
        "check PCIe relaxed ordering on the NIC (`mrshim doctor`, `lspci -vvv | grep RlxdOrd`) and in the BIOS".into(),
    ]
}

pub fn odp() -> Vec<String> {
    v(&[
        "register pinned memory instead: drop IBV_ACCESS_ON_DEMAND (UCX: leave `odp` out of UCX_IB_REG_METHODS, e.g. UCX_IB_REG_METHODS=rcache,direct)",
        "`ibv_devinfo -v | grep -iA6 odp` shows whether the device supports On-Demand Paging (rxe, siw and EFA do not; mlx5 needs ODP-capable firmware)",
    ])
}

pub fn iova() -> Vec<String> {
    v(&[
        "pass an iova with the same offset within the page as the address (iova % 4096 == addr % 4096) to ibv_reg_mr_iova2",
        "if a library computes the iova (NCCL rounds the base down to a page), check for a patched/plugin net transport that does not",
    ])
}

pub fn access() -> Vec<String> {
    v(&[
        "register read-only file mappings with IBV_ACCESS_REMOTE_READ only (no LOCAL_WRITE/REMOTE_WRITE/REMOTE_ATOMIC), or map the file writable (MAP_PRIVATE with PROT_WRITE) / copy it to anonymous memory first",
        "REMOTE_WRITE and REMOTE_ATOMIC require IBV_ACCESS_LOCAL_WRITE as well",
    ])
}

/// The transfer library itself has no GPU memory support (NIXL over UCX without CUDA/ROCm).
pub fn gpu_stack() -> String {
    "give UCX its GPU support first: `ucx_info -d | grep -i -e cuda -e rocm` must list the cuda/rocm memory domains; UCX_TLS must include cuda_copy (and cuda_ipc) or be unset; a wheel that bundles UCX modules needs UCX_MODULE_DIR pointed at them; a UCX built without CUDA/ROCm must be replaced".into()
}

pub fn version() -> Vec<String> {
    v(&[
        "use one RDMA stack per node: either the distribution's inbox driver with its rdma-core, or MLNX_OFED's kernel modules with MLNX_OFED's user space (`ibv_devinfo -v`, `modinfo mlx5_core | head`, `dpkg -l | grep -e rdma-core -e ibverbs`)",
        "containers: the image's libibverbs/providers must match the host's kernel driver — mount the host's rdma-core libraries or rebuild the image for the host's release",
        "compare nodes: `mrshim doctor --json > $(hostname).json` on each, then `mrshim doctor --compare a.json b.json`",
        "after a kernel update, rebuild DKMS modules (mlnx-ofed-kernel, nvidia_peermem) and reboot",
    ])
}

/// A kernel that crashed or warned inside the registration path (parse/kernel.rs `trace`).
pub fn kernel_bug() -> String {
    "the kernel itself failed inside the registration: boot the newest stable kernel of that series (stable updates carry the drivers/infiniband fixes; `uname -r` against the distribution's latest) or the last kernel that worked; if it persists, send the whole trace with `uname -r` and the driver (`ethtool -i`, `modinfo <driver> | head`) to linux-rdma@vger.kernel.org or the distribution's bug tracker".into()
}

pub fn address() -> Vec<String> {
    v(&[
        "the buffer is not (fully) mapped when registered: check for use after free/munmap and for a length that runs past the allocation (compare with /proc/PID/maps)",
        "if the pointer is GPU memory, see gpu-peer-memory (peer-memory module or dmabuf)",
    ])
}

pub fn resource() -> Vec<String> {
    v(&[
        "sysctl -w vm.max_map_count=1048576 (persist in /etc/sysctl.d/)",
        "register fewer, larger regions: NCCL_BUFFSIZE / NCCL_MAX_NCHANNELS down, UCX_RCACHE_* / UCX memory pools, and make sure regions are deregistered (leaks show as steadily rising registered bytes)",
        "mlx5: check `dmesg` for CREATE_MKEY syndromes; a newer firmware/driver, ODP (implicit On-Demand Paging) or fewer processes per NIC relieve the mkey/MR-cache limit",
    ])
}

/// A stack whose registration limits have knobs of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    /// libfabric's CXI provider on Slingshot (cxil_map, MR buffer IDs).
    Cxi,
    /// uGNI on Aries/Gemini (Cray MPICH, libfabric gni, Chapel ugni).
    Gni,
    /// mlx4 (ConnectX-3): the MTT table.
    Mlx4,
    Ucx,
    /// libfabric's other providers (verbs, EFA): the util MR cache.
    Libfabric,
}

/// The knobs that bound the registrations each stack keeps, named as users set them.
pub fn resource_knobs(stacks: &[Stack]) -> Vec<String> {
    stacks
        .iter()
        .map(|s| match s {
            // prov/cxi/src/cxip_iomm.c (cache defaults CXIP_DEFAULT_MR_CACHE_MAX_CNT 4096, size -1), man/fi_cxi.7.md (FI_CXI_ODP),
            // cxip_dom.c (CXIP_BUFFER_ID_MAX 64k), shs-libcxi utils/cxi_service.c (the AC limits)
            Stack::Cxi => "Slingshot CXI: registrations stay mapped in the NIC while libfabric's MR cache holds them — up to FI_MR_CACHE_MAX_COUNT regions (CXI's default 4096) and FI_MR_CACHE_MAX_SIZE bytes (no limit by default); lower them (e.g. FI_MR_CACHE_MAX_COUNT=1024, FI_MR_CACHE_MAX_SIZE=8G) so the cache evicts before the NIC's address contexts / IOVA space run out (cxil_map ENOSPC), close remote-access MRs no longer needed (at most 64k per domain: `Failed to allocate MR buffer ID`), compare the job's use with its CXI service's limits (`cxi_service list`), and FI_CXI_ODP=1 (on-demand paging, fi_cxi(7)) stops pinning every DMA buffer where the application's mr_mode hints allow it",
            // fi_gni(7) v1.14 (GNI_MR_* domain parameters); Chapel doc/rst/platforms/cray.rst;
            // MPICH_GNI_NDREG_ENTRIES is Cray MPICH's (intro_mpi(3)), no public source
            Stack::Gni => "Cray Aries/Gemini (uGNI): the NIC's memory domain descriptors are used up — register fewer, larger regions (hugepages: `module load craype-hugepages2M`), Cray MPICH: MPICH_GNI_NDREG_ENTRIES (its registration cache's entries, intro_mpi(3)), libfabric gni: the domain's GNI_MR_UDREG_LIMIT / GNI_MR_HARD_REG_LIMIT (fi_gni(7)), Chapel: CHPL_RT_COMM_UGNI_MAX_MEM_REGIONS",
            // mlx4_core module parameters (drivers/net/ethernet/mellanox/mlx4/main.c), Open MPI's
            // openib help text on registerable memory
            Stack::Mlx4 => "mlx4 (ConnectX-3): the MTT table bounds registered memory — raise it with the mlx4_core module options log_num_mtt / log_mtts_per_seg and the number of MRs with log_num_mpt (`options mlx4_core log_num_mtt=24` in /etc/modprobe.d/, then reload the driver)",
            // src/ucs/memory/rcache.c: RCACHE_MAX_REGIONS / RCACHE_MAX_SIZE default inf
            Stack::Ucx => "UCX: bound its registration cache — UCX_RCACHE_MAX_REGIONS / UCX_RCACHE_MAX_SIZE (default inf: a region stays registered until its memory is freed) — so it deregisters before the NIC's MR limit",
            // prov/util/src/util_mem_monitor.c (mr_cache_max_count default 1024, max_size
            // total memory / cores / 2)
            Stack::Libfabric => "libfabric: bound its MR cache — FI_MR_CACHE_MAX_COUNT (default 1024) / FI_MR_CACHE_MAX_SIZE — or FI_MR_CACHE_MONITOR=disabled to take the cache out of the picture",
        })
        .map(String::from)
        .collect()
}

/// An HPC runtime whose own settings bound what it pins and registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Gasnet,
    Chapel,
    Charm,
    Mvapich2,
    Psm2,
    Opx,
}

/// Words of each runtime's own registration messages (data/messages.json, their sources) and log
/// prefixes: GASNet's fatal errors and firehose, Chapel's comm=ofi internal errors, Charm++'s CmiAbort
/// and pool limits, MVAPICH2's vbuf/dreg lines and `[host:mpi_rank_N]` prefix, PSM2's TID update, OPX's
/// log prefix.
const RUNTIME_WORDS: [(Runtime, &[&str]); 6] = [
    (Runtime::Gasnet, &["gasnet", "firehose", "pinnable memory"]),
    (Runtime::Chapel, &["ofi error: fi_mr_", "comm-ofi.c", "chpl_rt_"]),
    (Runtime::Charm, &["cmiabort", "charm++", "charm_ugni", "mempool allowed", "memory registor"]),
    (Runtime::Mvapich2, &["vbuf region", "reregister dentry", ":mpi_rank_", "mv2_"]),
    (Runtime::Psm2, &["tid update", "nvidia driver apis mismatch"]),
    (Runtime::Opx, &[":opx:"]),
];

/// The runtimes whose words are in `lines` (a failure's evidence).
pub fn runtimes<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<Runtime> {
    let mut out = Vec::new();
    for l in lines {
        let l = l.to_ascii_lowercase();
        for (rt, words) in RUNTIME_WORDS {
            if !out.contains(&rt) && words.iter().any(|w| l.contains(w)) {
                out.push(rt);
            }
        }
    }
    out
}

/// The settings of each runtime that bound what it pins, for the category the finding names
/// (`memlock-limit` or `resource-exhaustion`), read from their sources and documentation.
pub fn runtime_knobs(rts: &[Runtime], cat: &str) -> Vec<String> {
    let memlock = cat == "memlock-limit";
    rts.iter()
        .filter_map(|rt| {
            Some(match rt {
                // ibv-conduit/gasnet_core.c (gasnetc_init_pin_info, gasneti_segreg_failed's hint),
                // other/firehose (GASNET_FIREHOSE_*), ibv-conduit README
                Runtime::Gasnet if memlock => "GASNet-EX pins its whole segment at attach (SEGMENT_FAST/LARGE): with the limit raised, bound what it pins with GASNET_PHYSMEM_MAX (e.g. GASNET_PHYSMEM_MAX='0.5' or '16G') and the segment with GASNET_MAX_SEGSIZE; GASNET_PHYSMEM_PROBE=1 measures again what each node can pin",
                Runtime::Gasnet => "GASNet-EX: pin less — GASNET_PHYSMEM_MAX and GASNET_MAX_SEGSIZE bound the segment it pins at attach; GASNET_FIREHOSE_M / GASNET_FIREHOSE_MAXVICTIM_M / GASNET_FIREHOSE_MAXREGION_SIZE bound firehose's dynamic pinning (SEGMENT_LARGE/EVERYTHING and buffers outside the segment)",
                // runtime/src/comm/ofi/comm-ofi.c (the fixed heap registered whole),
                // doc/rst/platforms/libfabric.rst (`OFI error: fi_mr_reg(ofi_domain, ...)`)
                Runtime::Chapel => "Chapel: CHPL_RT_MAX_HEAP_SIZE (e.g. CHPL_RT_MAX_HEAP_SIZE=50% or 16g) caps the heap that comm=ofi registers whole at start-up — Chapel's own fix for `OFI error: fi_mr_reg(ofi_domain, ...): Cannot allocate memory`; with comm=gasnet it sizes the GASNet segment",
                // src/arch/gni/machine.C, src/arch/ofi/machine.C (alloc_mempool_block)
                Runtime::Charm if memlock => return None,
                Runtime::Charm => "Charm++: the machine layer registers its message pool block by block up to a limit — gni: CHARM_UGNI_MEMPOOL_MAX (+gni-mempool-max) and CHARM_UGNI_SEND_MAX; ofi: +ofi-mempool-max-size; a smaller pool registers fewer regions",
                // src/mpid/ch3/channels/common/src/reg_cache/dreg.c, mrail/src/gen2/vbuf.c, ibv_param.c
                Runtime::Mvapich2 => "MVAPICH2: fewer pinned bytes and regions — MV2_NDREG_ENTRIES / MV2_NDREG_ENTRIES_MAX and MV2_DREG_CACHE_LIMIT (its registration cache), MV2_VBUF_POOL_SIZE / MV2_VBUF_MAX / MV2_VBUF_TOTAL_SIZE (the vbuf pools registered at start-up), MV2_USE_LAZY_MEM_UNREGISTER=0 (deregister at once instead of caching)",
                // ptl_ips/ips_tidcache.c, ips_proto_expected.c (PSM2_TID, PSM2_MQ_RNDV_HFI_THRESH)
                Runtime::Psm2 => "PSM2 (Omni-Path): expected receives pin their buffers through the hfi1 driver's TID updates, counted against RLIMIT_MEMLOCK — PSM2_TID=0 turns them off (eager copies, slower for large messages), a larger PSM2_MQ_RNDV_HFI_THRESH keeps more messages off them",
                // prov/opx/src/fi_opx_ep.c (FI_OPX_TID_DISABLE, FI_OPX_TID_MIN_PAYLOAD_BYTES)
                Runtime::Opx => "libfabric OPX: expected receives pin through the hfi1 driver's TID updates (RLIMIT_MEMLOCK) — FI_OPX_TID_DISABLE=1 turns them off, a larger FI_OPX_TID_MIN_PAYLOAD_BYTES keeps smaller messages off them",
            })
        })
        .map(String::from)
        .collect()
}

pub fn permissions() -> Vec<String> {
    v(&[
        "give the job access to the RDMA devices: /dev/infiniband/uverbs* readable and writable (udev rule or the rdma group)",
        "containers: `docker run --device=/dev/infiniband --cap-add IPC_LOCK` (or the RDMA device plugin on Kubernetes, with IPC_LOCK)",
    ])
}

pub fn unknown(p: &str) -> Vec<String> {
    vec![
        "capture the registrations themselves: run the job under `mrshim exec -- <cmd>` (or LD_PRELOAD=libmrshim.so) and analyze the records".into(),
        format!("more context from the library: {p}_DEBUG=INFO {p}_DEBUG_SUBSYS=INIT,NET; the kernel log (`dmesg -T`) from the same minute"),
        "run `mrshim doctor --json` on each node and pass the reports to `mrshim analyze` with the logs".into(),
    ]
}

pub fn dmabuf(p: &str) -> Vec<String> {
    v(&[
        &format!("{p}_DMABUF_ENABLE=0 to register GPU memory through nvidia-peermem / amdgpu peer memory instead"),
        "or bring the stack up to dmabuf: rdma-core >= 34 (ibv_reg_dmabuf_mr), a kernel >= 5.12 with the NIC driver's dmabuf support, NVIDIA open kernel modules (`nvidia-smi -q | grep -i dmabuf`)",
    ])
}

/// The one command or line that confirms or rules out each category.
pub fn check(cat: &str) -> &'static str {
    match cat {
        "memlock-limit" => "inside a rank (not your login shell): `cat /proc/$$/limits | grep 'Max locked memory'` or `mpirun ... bash -c 'ulimit -l'`; unlimited (or CAP_IPC_LOCK) rules it out",
        "gpu-peer-memory" => "`lsmod | grep -E 'nvidia_peermem|nv_peer_mem|amdgpu'`, the peer-memory module's and GPU driver's versions (`modinfo nvidia_peermem | grep ^version`, `nvidia-smi`) and `mrshim doctor` on the failing node; host memory registering while GPU memory fails confirms it",
        "relaxed-ordering" => "rerun with relaxed ordering off — NCCL_IB_PCI_RELAXED_ORDERING=0, UCX_IB_PCI_RELAXED_ORDERING=off, the engine's own switch (Mooncake: MC_IB_PCI_RELAXED_ORDERING=0) — or under `mrshim exec` with MRSHIM_RETRY=drop-relaxed-ordering: working confirms it, still failing rules it out",
        "odp-unsupported" => "`ibv_devinfo -v | grep -iA6 odp` on the failing node: no ODP capabilities confirms it; the failing records' access has ON_DEMAND",
        "iova-alignment" => "rerun under `mrshim exec`: the records show iova_page_offset != addr_page_offset",
        "access-flags" => "the failing address's line in `cat /proc/<pid>/maps`: a mapping without `w` (read-only data such as a string literal, a PROT_READ mmap, a file opened read-only) registered with LOCAL_WRITE/REMOTE_WRITE confirms it; or rerun under `mrshim exec`: the records show the mapping (mem_kind file-readonly) and the access bits asked for",
        "version-mismatch" => "`ibv_devinfo -v`, `ofed_info -s`, `modinfo mlx5_core | grep version` and the library versions on every node; `mrshim doctor --compare`",
        "address-invalid" => "rerun under `mrshim exec`: mem_fully_mapped=false or mem_kind unmapped in the failing record; `cat /proc/<pid>/maps` around the address",
        "resource-exhaustion" => "`ibv_devinfo -v | grep -E 'max_mr|max_mr_size'` against the number and size of the job's registrations (`rdma resource show mr | wc -l`), `dmesg | grep -iE 'mkey|reg mr|limits exceeded'`, `sysctl vm.max_map_count` on the failing node",
        "permissions" => "`ls -l /dev/infiniband/` inside the container and `capsh --print | grep ipc_lock`",
        "dmabuf-unsupported" => "`grep ibv_reg_dmabuf_mr $(ldconfig -p | awk '/libibverbs.so.1 /{print $NF}')` and `uname -r` (>= 5.12); NCCL_DMABUF_ENABLE=0 working confirms it",
        _ => "rerun the failing rank under `mrshim exec` (records with the memory kind, access and limits of every call) and `mrshim doctor` on its node",
    }
}
