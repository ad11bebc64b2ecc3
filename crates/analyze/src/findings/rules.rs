//! One rule per category: a few weighted observations over the aggregated evidence, the fixes and
//! the shim strategy that keeps the job running. The engine (super) scores and ranks them.
use super::*;
use mrshim_access::{LOCAL_WRITE, REMOTE_ATOMIC, REMOTE_WRITE};

pub(super) fn gpu_peer_memory<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("gpu-peer-memory");
    let p = v.prefix;
    // A dmabuf registration uses no peer-memory client: the kernel imports the exporter's buffer
    // (ib_umem_dmabuf_get, drivers/infiniband/core/umem_dmabuf.c) and never pins the GPU's pages through
    // nvidia_peermem / amdgpu peer memory, so its failures (whatever the errno) are no evidence that the
    // peer-memory module is missing: they are the exporter's, uverbs' offset/iova checks, the provider's.
    // (Unless the input says the peer-memory client is missing: then the registration that could not be
    // made through dmabuf could not be made by address either — NCCL GIN's "Peermem is not supported,
    // and device N does not support DMA-BUF".)
    let peermem_missing = v.flag(Flag::PeermemMissing).is_some();
    let dmabuf = |k: &GroupKey| k.call.contains("dmabuf") && !peermem_missing;
    // A refused memory key (ENOKEY) is decided before any page is pinned: no evidence of peer memory.
    let other = |k: &GroupKey| dmabuf(k) || k.errno == Some(errno::ENOKEY);
    let device = v.fail_where(|k, _| k.mem == Some(MemKind::Device) && !other(k));
    let unknown = v.fail_where(|k, _| unknown_mem(k.mem) && !other(k));
    let ok_host = v.ok_where(|k| is_host_mem(k.mem));
    let ok_dev = v.ok_where(|k| k.mem == Some(MemKind::Device));
    let gdr = v.gdr_context();
    let gdr_off_ok = v.runs.iter().filter(|r| r.gdr == Some(false) && View::completed(r)).count();
    if !device.is_empty() {
        c.add(
            3.0,
            format!(
                "{} registration(s) of GPU (device) memory failed with {}.",
                sum(&device),
                describe_errnos(&device)
            ),
            None,
        );
        c.groups.extend(device.iter().copied());
        if ok_host > 0 {
            c.add(1.0, format!("Host memory registered fine ({ok_host} time(s)): the NIC and verbs stack work, GPU memory does not."), None);
        }
        if ok_dev > 0 {
            c.score -= 1.0;
            c.why.push(format!("Note: {ok_dev} device-memory registration(s) did succeed."));
        }
    } else if v.gdr_evidence() && !unknown.is_empty() {
        let enomem = errnos_of(&unknown).first().map(|x| x.0) == Some(ENOMEM);
        c.add(if enomem { 0.5 } else { 1.5 }, format!("{} registration(s) failed with {} while GPUDirect RDMA was in use (GPU buffers registered with the NIC).", sum(&unknown), describe_errnos(&unknown)), v.flag(Flag::GdrOn).or(v.flag(Flag::GpuContext)));
        c.groups.extend(unknown.iter().copied());
    } else if gdr && !unknown.is_empty() {
        // the library's name is a prior, not an observation: such libraries register host memory too
        c.guess(0.8, format!("{} registration(s) of memory of unknown kind failed with {}; the library often registers GPU memory, but nothing here says this was GPU memory.", sum(&unknown), describe_errnos(&unknown)));
        c.groups.extend(unknown.iter().copied());
    } else if let Some(e) = v.flag(Flag::GeforceGpu).or(v.flag(Flag::P2pPinFail)) {
        c.add(0.5, "", Some(e));
        c.groups.extend(v.fails.iter().copied());
    } else {
        return c;
    }
    if let Some(e) = v.flag(Flag::GeforceGpu) {
        c.add(
            2.0,
            "The GPU is a GeForce: GeForce GPUs do not support GPUDirect RDMA, so the NIC cannot pin their memory.",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::P2pPinFail) {
        c.add(
            1.5,
            "The kernel could not pin the GPU pages for the peer (nvidia_p2p_get_pages / gdrdrv failed).",
            Some(e),
        );
    }
    let no_gpu_stack = v.flag(Flag::GpuSupportMissing);
    if let Some(e) = no_gpu_stack {
        c.add(
            2.0,
            "The transfer library has no GPU memory support here (UCX without CUDA/ROCm memory types): it takes GPU buffers for host memory and their registration is refused before the NIC sees them.",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::GpuDmabufUnavailable) {
        c.add(
            0.5,
            "The GPU cannot export dmabuf here, so GPU memory can only be registered through a peer-memory module.",
            Some(e),
        );
    }
    if gdr_off_ok > 0 {
        c.add(
            2.0,
            "A run with GPUDirect RDMA off completed: registering GPU memory is what fails.",
            v.runs.iter().find(|r| r.gdr == Some(false) && View::completed(r)).and_then(|r| r.evid.as_ref()),
        );
    } else if let Some(e) = v.flag(Flag::GdrOffWorks) {
        c.add(
            2.0,
            "With GDR off (buffers in system memory) the job works: registering GPU memory is what fails.",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::TcpWorks) {
        c.add(
            0.5,
            format!("With {p}_IB_DISABLE=1 (TCP) it works: the network itself is fine, the RDMA registration is not."),
            Some(e),
        );
    }
    let calls: BTreeSet<&str> = c.groups.iter().map(|g| g.0.call.as_str()).collect();
    let both = calls.iter().any(|c| c.contains("iova")) && calls.contains("ibv_reg_mr");
    let ro_off_fail = v.runs.iter().any(|r| r.ro == Some(false) && r.failed > 0)
        || c.groups.iter().any(|g| g.0.relaxed == Some(false));
    let ro_still = v.flag(Flag::RoOffStillFails);
    if both || ro_off_fail || ro_still.is_some() {
        let mut s = String::from("Relaxed ordering is not the cause: ");
        if both {
            s.push_str("ibv_reg_mr_iova2 (used with relaxed ordering) and plain ibv_reg_mr (used without it) fail the same way");
        } else {
            s.push_str("registrations without relaxed ordering fail too");
        }
        if ro_still.is_some() {
            s.push_str(&format!(
                ", and {p}_IB_PCI_RELAXED_ORDERING=0 only moved the failure from one entry point to the other"
            ));
        }
        s.push_str(" — the failure is independent of the access flags and follows the memory.");
        c.add(1.5, s, ro_still);
    }
    if let Some(e) = v.flag(Flag::PeermemMissing) {
        c.add(2.0, "No GPU peer-memory client is loaded (nvidia_peermem / nv_peer_mem / amdgpu peer memory).", Some(e));
    }
    let efault = errnos_of(&c.groups).first().map(|x| x.0) == Some(EFAULT);
    if efault && (v.flag(Flag::PeermemLoaded).is_some() || v.flag(Flag::CudaVmm).is_some()) {
        c.add(1.0, "EFAULT with peer memory loaded is what CUDA VMM (cuMem*) buffers give: they can only be registered through dmabuf.", v.flag(Flag::CudaVmm).or(v.flag(Flag::PeermemLoaded)));
    }
    let top = errnos_of(&c.groups).first().map(|x| x.0);
    if matches!(top, Some(EINVAL) | Some(EFAULT) | Some(EOPNOTSUPP)) {
        c.add(0.5, "", None);
    }
    if let Some(e) = v.flag(Flag::UmemGetFail) {
        c.add(
            0.5,
            "The kernel could not pin the pages (ib_umem_get failed): GPU pages need a peer-memory client or dmabuf.",
            Some(e),
        );
    }
    for (f, why) in [
        (
            Flag::AcsOn,
            "ACS redirect is enabled on the PCIe path between NIC and GPU (known cause of GPUDirect hangs and errors).",
        ),
        (
            Flag::PcieError,
            "PCIe bus errors were reported when GPUDirect P2P was used — check ACS/IOMMU on the NIC-GPU path.",
        ),
        (Flag::IommuFault, "IOMMU faults were logged: P2P DMA between NIC and GPU is being translated or blocked."),
        (Flag::IommuTranslated, "The IOMMU translates DMA (not passthrough): GPUDirect P2P often fails that way."),
    ] {
        if let Some(e) = v.flag(f) {
            c.add(0.5, why, Some(e));
        }
    }
    let libs = |l: Lib| v.c.hosts.values().any(|h| h.libs.contains(&l));
    let vendor = if libs(Lib::Mccl) {
        fixes::GpuVendor::Metax
    } else if libs(Lib::Rccl) {
        fixes::GpuVendor::Amd
    } else {
        fixes::GpuVendor::Nvidia
    };
    c.fixes = fixes::gpu_peer_memory(p, vendor, efault);
    if no_gpu_stack.is_some() {
        c.fixes.insert(0, fixes::gpu_stack());
    }
    c.retry = Some("va-to-dmabuf,bounce");
    c
}

pub(super) fn memlock_limit<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("memlock-limit");
    // Over the limit only matters where the kernel's memlock errno came back (ENOMEM, or EPERM
    // for a limit of 0): EINVAL/EFAULT are decided before the pinned-page accounting.
    // A dmabuf registration pins nothing against RLIMIT_MEMLOCK (umem_dmabuf.c): never this cause.
    // Nor does the kernel's own RDMA consumers' (NFS/RDMA, the storage targets, o2iblnd: likelihood.rs).
    let memlock_errno = |e: Option<i32>| matches!(e, Some(ENOMEM) | Some(EPERM) | None);
    let pins = |k: &GroupKey| !k.call.contains("dmabuf") && !super::likelihood::in_kernel_consumer(&k.call);
    let over = v.fail_where(|k, g| g.over_memlock > 0 && memlock_errno(k.errno) && pins(k));
    if !over.is_empty() {
        c.add(3.5, format!("{} registration(s) would have exceeded the locked-memory limit (bytes already registered + length > RLIMIT_MEMLOCK).", sum(&over)), None);
    }
    let mut small: Vec<(&str, u64)> = Vec::new();
    let mut unlimited_hosts = 0;
    let hosts = v.fail_hosts();
    let mut check_hosts: Vec<&str> = hosts.iter().copied().collect();
    if !check_hosts.contains(&"") {
        check_hosts.push("");
    }
    for h in check_hosts {
        match v.memlock(h) {
            Some(Some(m)) => small.push((h, m)),
            Some(None) => unlimited_hosts += 1,
            None => {}
        }
    }
    let candidates = v.fail_where(|k, g| {
        pins(k)
            && ((g.over_memlock > 0 && memlock_errno(k.errno))
                || (memlock_errno(k.errno)
                    && (small.iter().any(|s| s.0 == k.host || s.0.is_empty()) || v.memlock(&k.host).is_none())))
    });
    if candidates.is_empty() {
        return c;
    }
    c.groups = candidates;
    if let Some(&(h, m)) = small.iter().min_by_key(|s| s.1) {
        let w = if m < 1 << 30 { 2.5 } else { 1.0 };
        let on = if h.is_empty() { String::new() } else { format!(" on {h}") };
        c.add(
            w,
            format!(
                "The soft memlock limit{on} is {} (`ulimit -l`); RDMA pins every registered byte against it.",
                human_size(m)
            ),
            v.memlock_evid(h).as_ref(),
        );
    }
    let enomem = v.errno_count(ENOMEM);
    let total = sum(&v.fails);
    if enomem * 2 >= total {
        // the errno is one reading of the failure (the likelihood table's), not an observation of the limit
        c.guess(1.0, "ENOMEM is what the kernel returns at that limit.");
    }
    if v.errno_count(EPERM) * 2 >= total {
        // ib_umem_get's only EPERM: can_do_mlock, a limit of 0 without CAP_IPC_LOCK
        c.guess(
            1.0,
            "EPERM is what the kernel returns to a registration at a locked-memory limit of 0 without CAP_IPC_LOCK.",
        );
    }
    if v.errno_count(EPERM) > 0 && small.iter().any(|s| s.1 == 0) {
        c.add(1.0, "EPERM with a memlock limit of 0: the process may not pin memory at all.", None);
    }
    if let Some(e) = v.flag(Flag::LockedMemWarn) {
        c.add(1.5, "The stack warned at start-up that the locked-memory limit is too small for RDMA (Open MPI, Intel MPI, GASNet-EX, Ceph).", Some(e));
    }
    if small.is_empty() && unlimited_hosts > 0 && over.is_empty() {
        c.score -= 3.0;
    }
    let good = v.good_hosts();
    let min_small = small.iter().map(|s| s.1).min();
    let good_with_unlimited: Vec<&str> = good
        .iter()
        .copied()
        .filter(|h| match (v.memlock(h), min_small) {
            (Some(None), Some(_)) => true,
            (Some(Some(m)), Some(s)) => m > s,
            _ => false,
        })
        .collect();
    if !small.is_empty() && !good_with_unlimited.is_empty() {
        c.add(
            1.0,
            format!("{} registered fine with a larger limit.", mrshim_hostlist::compress(good_with_unlimited)),
            None,
        );
    }
    if c.groups.iter().any(|g| is_host_mem(g.0.mem)) {
        c.add(0.3, "", None);
    }
    c.fixes = fixes::memlock();
    c.fixes.splice(1..1, fixes::runtime_knobs(&runtimes_of(v), "memlock-limit"));
    c.retry = Some("raise-memlock,bounce");
    c
}

pub(super) fn resource_exhaustion<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("resource-exhaustion");
    let mr_size = v.flag(Flag::MrSizeExceeded);
    let table_full = v.flag(Flag::RegTableFull);
    // a full registration table is reported as whatever the layer maps it to (ENOSPC, EBUSY)
    let size_errno = |e: Option<i32>| e == Some(errno::ENOSPC) || (table_full.is_some() && e == Some(errno::EBUSY));
    // With CXI_FORK_SAFE, libcxi madvise(MADV_DONTFORK)s every pinned host range before mapping it and
    // returns -EFAULT when madvise fails (shs-libcxi src/libcxi.c cxil_map → cxil_dontfork_range,
    // src/memory.c), on kernels without RDMA copy-on-fork; madvise fails with ENOMEM past
    // vm.max_map_count as the ranges split VMAs — or for a range not mapped: a reading, not evidence
    let fork_safe = v.c.hosts.values().find_map(|h| h.env.get("CXI_FORK_SAFE").map(|x| &x.1));
    let cxi_efault = |k: &GroupKey| fork_safe.is_some() && k.call == "cxil_map" && k.errno == Some(EFAULT);
    // ENOSPC is "no slot left" wherever a registration path returns it: an ID allocator (ida_alloc_range
    // → -ENOSPC: the CXI driver's address contexts and MDs, ionic's MR ids), the CXI provider's MR buffer
    // IDs (cxip_domain_ctrl_id_alloc → -FI_ENOSPC), libfabric GNI's uGNI failures (-FI_ENOSPC)
    let gs = v.fail_where(|k, _| {
        matches!(k.errno, Some(ENOMEM) | Some(EAGAIN) | Some(errno::ENOSPC) | None)
            || ((mr_size.is_some() || table_full.is_some()) && size_errno(k.errno))
            || cxi_efault(k)
    });
    if gs.is_empty() {
        return c;
    }
    c.groups = gs;
    // cxil_map's ENOSPC has one source in the Slingshot driver (shs-cxi-driver cass_atu.c): no address
    // context or IOVA range left for the LNI (get_matching_ac, cass_iova_alloc), or the service's AC
    // limit reached (cxi_rgroup_alloc_resource, cass_rgroup.c) — its EFAULT / EINVAL are the range and
    // the page-size hints, not resources, and are left to their rows
    let cxi_nospc: Vec<_> =
        c.groups.iter().filter(|g| g.0.call == "cxil_map" && g.0.errno == Some(errno::ENOSPC)).copied().collect();
    if !cxi_nospc.is_empty() {
        let e = cxi_nospc[0].1.evidence.first();
        c.add(2.0, format!("{} cxil_map call(s) failed with ENOSPC: the Slingshot NIC had no address context or IOVA range left for this process's service (the CXI driver's only ENOSPC on that path) — registrations held, not a bad buffer.", sum(&cxi_nospc)), e);
    } else if v.errno_count(errno::ENOSPC) > 0 && table_full.is_none() && mr_size.is_none() {
        c.guess(0.5, "ENOSPC: a table of the device, driver or library (IDs, keys, address contexts) is full.");
    }
    let fork_efault: Vec<_> = c.groups.iter().filter(|g| cxi_efault(g.0)).copied().collect();
    if let (Some(e), false) = (fork_safe, fork_efault.is_empty()) {
        c.add(0.0, "", Some(e));
        c.guess(0.8, format!("{} cxil_map call(s) failed with EFAULT while CXI_FORK_SAFE was set: libcxi marks every pinned range MADV_DONTFORK and answers EFAULT when madvise fails, which it does past vm.max_map_count as many registered ranges split the process's mappings (or for a range not mapped) — compare `wc -l /proc/<pid>/maps` with `sysctl vm.max_map_count`.", sum(&fork_efault)));
    }
    if let Some(e) = v.flag(Flag::MrCacheLimit) {
        c.add(0.0, "The registration cache's limits are printed: registrations stay mapped in the NIC until the cache reaches them (FI_MR_CACHE_MAX_COUNT / FI_MR_CACHE_MAX_SIZE).", Some(e));
    }
    if let Some(e) = mr_size {
        c.add(3.0, "A buffer was larger than the device's max_mr_size: one memory region cannot cover it; register it in several MRs.", Some(e));
    }
    if let Some(e) = v.flag(Flag::BufferAllocFail) {
        c.add(3.0, "The memory to register could not be allocated at all (hugepages, SysV shared memory or the work buffer): the MR failed before any registration — check HugePages_Free, kernel.shmmni / shmmax and free memory, or run without hugepages.", Some(e));
    }
    if let Some(e) = table_full {
        c.add(3.0, "The stack reported its table of registered memory regions (or the NIC's registration resources) full: nothing more could be registered — raise the limit the line names (e.g. CHPL_RT_COMM_UGNI_MAX_MEM_REGIONS) or register fewer, larger regions.", Some(e));
    }
    if let Some(e) = v.flag(Flag::MkeyLimit) {
        c.add(3.0, "The mlx5 firmware refused to create more memory keys (CREATE_MKEY: limits exceeded): the NIC's MR/mkey resources are exhausted.", Some(e));
    }
    if let Some(e) = v.flag(Flag::KernelRegFail) {
        c.add(1.5, "The NIC driver logged registration failures with ENOMEM in the kernel log.", Some(e));
    }
    if let Some(e) = v.flag(Flag::RegLimitWarn) {
        c.add(1.5, "Open MPI warned that the driver only allows registering part of physical memory (MTT/mkey table too small).", Some(e));
    }
    let hosts = v.fail_hosts();
    let unlimited = !hosts.is_empty()
        && hosts.iter().all(|h| v.memlock(h) == Some(None) || (v.memlock(h).is_none() && v.memlock("") == Some(None)));
    if unlimited && v.errno_count(ENOMEM) > 0 {
        c.add(1.5, "ENOMEM although memlock is unlimited: something other than RLIMIT_MEMLOCK ran out.", None);
    }
    for hf in v.c.hosts.values() {
        if let Some((n, e)) = &hf.max_map_count {
            if *n < 262_144 {
                c.add(1.5, format!("vm.max_map_count is {n}: each registration can split VMAs and the process runs out of mappings."), Some(e));
                break;
            }
        }
    }
    if v.errno_count(EAGAIN) > 0 {
        c.guess(1.0, "EAGAIN: the device is temporarily out of resources.");
    }
    // mlx4 (ConnectX-2/3) bounds registered memory by its MTT table: the buddy allocator of
    // log_num_mtt x 2^log_mtts_per_seg entries returns -1 when full and mlx4_mtt_init turns that into
    // -ENOMEM, no MPT left is -ENOMEM too (drivers/net/ethernet/mellanox/mlx4/mr.c); Open MPI's openib
    // BTL sizes what it registers from the same parameters and warns when they cover less than physical
    // memory (calculate_max_reg, help-mpi-btl-openib.txt [reg mem limit low]). So on an mlx4 HCA an
    // ENOMEM/EAGAIN (or unreported) failure reads as the MTT at least as often as memlock — unless the
    // input shows a memlock limit or the stack's locked-memory warning, which keep memlock first.
    let memlock_shown = v.flag(Flag::LockedMemWarn).is_some()
        || v.c.hosts.values().any(|h| h.memlock.keys().any(|m| m.is_some_and(|b| b < 1 << 30)));
    if let (Some(e), false) = (v.flag(Flag::Mlx4Hca), memlock_shown) {
        let mtt = c.groups.iter().filter(|g| matches!(g.0.errno, Some(ENOMEM) | Some(EAGAIN) | None)).count();
        if mtt > 0 {
            c.add(0.0, "", Some(e));
            c.guess(2.0, "The HCA is an mlx4 device (ConnectX-2/3): its registered memory is bounded by the MTT table (mlx4_core log_num_mtt x 2^log_mtts_per_seg), which answers ENOMEM when full — the classic cause of openib/mlx4 registration failures when no memlock limit is shown (`cat /sys/module/mlx4_core/parameters/log_num_mtt log_mtts_per_seg` against physical memory).");
        }
    }
    let ok_on_fail_hosts = v.ok_where(|k| hosts.contains(k.host.as_str()));
    if ok_on_fail_hosts > 10_000 {
        c.add(
            0.5,
            format!("{ok_on_fail_hosts} registrations succeeded on the same host(s) before the failures."),
            None,
        );
    }
    c.fixes = fixes::runtime_knobs(&runtimes_of(v), "resource-exhaustion")
        .into_iter()
        .chain(fixes::resource_knobs(&stacks_of(v)))
        .chain(fixes::resource())
        .collect();
    c.retry = Some("bounce");
    c
}

/// The HPC runtimes the failures' lines come from (GASNet, Chapel, Charm++, MVAPICH2, PSM2, OPX),
/// for the settings of their own that bound what they pin.
fn runtimes_of(v: &View) -> Vec<fixes::Runtime> {
    fixes::runtimes(v.fails.iter().flat_map(|g| g.1.evidence.iter().map(|e| e.text.as_str())))
}

/// Which stacks' registration limits the failures went through, for the knobs the fix names: the
/// failing calls and libraries, the provider in libfabric's log prefix (`::cxi:mr:`, `:gni:mr:`),
/// and the facts printed (Open MPI's MTT warning for mlx4, CXI's MR cache limits).
fn stacks_of(v: &View) -> Vec<fixes::Stack> {
    use fixes::Stack;
    let mut out = Vec::new();
    let text = |g: &GroupRef, pat: &[&str]| {
        g.1.evidence.iter().any(|e| {
            let l = e.text.to_ascii_lowercase();
            pat.iter().any(|p| l.contains(p))
        })
    };
    let any = |f: &dyn Fn(&GroupRef) -> bool| v.fails.iter().any(f);
    if any(&|g| g.0.call == "cxil_map" || text(g, &["::cxi:", ":cxi:mr:", "cxip_"]))
        || v.flag(Flag::MrCacheLimit).is_some()
    {
        out.push(Stack::Cxi);
    }
    if any(&|g| g.0.call.contains("GNI_") || text(g, &[":gni:", "ugni"])) {
        out.push(Stack::Gni);
    }
    if v.flag(Flag::RegLimitWarn).is_some() || any(&|g| text(g, &["mlx4"])) {
        out.push(Stack::Mlx4);
    }
    if any(&|g| g.0.lib == Lib::Ucx) {
        out.push(Stack::Ucx);
    }
    if !out.iter().any(|s| matches!(s, Stack::Cxi | Stack::Gni)) && any(&|g| g.0.lib == Lib::Libfabric) {
        out.push(Stack::Libfabric);
    }
    out
}

pub(super) fn relaxed_ordering<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("relaxed-ordering");
    let p = v.prefix;
    let ro_fail = v.fail_where(|k, _| k.relaxed == Some(true));
    let noro_fail = v.fail_where(|k, _| k.relaxed == Some(false) || (k.lib.is_ccl() && k.call == "ibv_reg_mr"));
    let noro_ok = v.ok_where(|k| k.relaxed == Some(false));
    if !ro_fail.is_empty() && noro_fail.is_empty() && noro_ok > 0 {
        c.add(
            3.5,
            format!(
                "{} registration(s) with IBV_ACCESS_RELAXED_ORDERING failed while {noro_ok} without it succeeded.",
                sum(&ro_fail)
            ),
            None,
        );
        c.groups = ro_fail.clone();
    }
    let on_fail = v.runs.iter().find(|r| r.ro == Some(true) && r.failed > 0);
    let off_ok = v.runs.iter().find(|r| r.ro == Some(false) && View::completed(r));
    if let (Some(a), Some(b)) = (on_fail, off_ok) {
        c.add(
            3.0,
            format!("A run with relaxed ordering failed and a run with {p}_IB_PCI_RELAXED_ORDERING=0 completed."),
            b.evid.as_ref().or(a.evid.as_ref()),
        );
    }
    let iova_only = v.fail_where(|k, _| k.call.contains("iova"));
    if !iova_only.is_empty() && noro_fail.is_empty() {
        if let Some(e) = v.flag(Flag::RoAdvertised) {
            c.add(
                1.0,
                "Only ibv_reg_mr_iova2 (the relaxed-ordering path) fails, and relaxed ordering is on ([RO]).",
                Some(e),
            );
        }
        if c.groups.is_empty() {
            c.groups = iova_only;
        }
    }
    // Relaxed ordering asked for on every failing registration of host memory, with the errnos a
    // device or platform that refuses it gives: no contrast is needed to put it among the first two
    // (a single failing run never has registrations without it to compare with).
    let refusal = |e: Option<i32>| matches!(e, Some(EINVAL) | Some(EFAULT) | Some(EOPNOTSUPP));
    let requested = v.flag(Flag::RoRequested);
    let fits =
        |k: &GroupKey| refusal(k.errno) && (k.relaxed == Some(true) || (k.relaxed.is_none() && requested.is_some()));
    let host = |k: &GroupKey| k.mem != Some(MemKind::Device) && k.mem != Some(MemKind::Unmapped);
    let host_fails = v.fail_where(|k, _| host(k) && fits(k));
    // Processes that write to one terminal interleave their lines: a line cut into another gives
    // a failure without its access mask or with the other line's status. Such strays (at most 1 in
    // 100) do not contradict what every whole line says; a registration seen without relaxed
    // ordering does (`noro_fail`).
    let strays = sum(&v.fail_where(|k, _| host(k) && !fits(k) && k.relaxed != Some(false)));
    let all_ro = !host_fails.is_empty() && strays * 100 <= sum(&host_fails);
    // A cut line can also show a mask without bit 20 (`access=0x10000f` cut after `0x1`): a
    // registration without relaxed ordering contradicts only beyond the same 1 in 100.
    let noro = sum(&noro_fail);
    let contradicted = noro > 0 && noro * 100 > sum(&host_fails);
    if all_ro && !contradicted {
        let how = if host_fails.iter().all(|(k, _)| k.relaxed == Some(true)) {
            "its access mask has IBV_ACCESS_RELAXED_ORDERING (bit 20, e.g. UCX's access=0x10000f)"
        } else {
            "the program said it would request IBV_ACCESS_RELAXED_ORDERING"
        };
        c.add(
            3.0,
            format!(
                "Relaxed ordering was requested on every failing registration of host memory ({} failed with {}): {how}. A device, driver or platform that refuses relaxed ordering fails exactly these; nothing here shows a registration without it, so the check below decides.",
                sum(&host_fails),
                describe_errnos(&host_fails)
            ),
            requested,
        );
        c.top_two = true;
        if c.groups.is_empty() {
            c.groups = host_fails.clone();
        }
    }
    if contradicted
        || (noro > 0 && host_fails.is_empty())
        || v.flag(Flag::RoOffStillFails).is_some()
        || v.runs.iter().any(|r| r.ro == Some(false) && r.failed > 0)
    {
        c.score -= 4.0;
        c.top_two = false;
    }
    // UCX's default depends on the CPU model: say so where UCX is involved
    let ucx_fail = v.fails.iter().any(|g| g.0.lib == Lib::Ucx);
    let ucx_env: Option<(String, String)> = v.c.hosts.values().find_map(|h| {
        h.env.get("UCX_IB_PCI_RELAXED_ORDERING").map(|x| ("UCX_IB_PCI_RELAXED_ORDERING".to_string(), x.0.clone()))
    });
    let ucx_config = v.c.hosts.values().any(|h| h.env.keys().any(|k| k.starts_with("UCX_")));
    if ucx_fail || ucx_config {
        c.note = Some(match ucx_env {
            Some((k, val)) => format!(
                "UCX ran with {k}={val}. Its default (try/auto) asks for relaxed ordering only on CPU models UCX prefers it for (AMD Naples/Rome/Milan; Genoa from UCX 1.16, Turin from 1.18; Fujitsu ARM before 1.18), so on a mixed fleet only those nodes fail — `mrshim doctor` on a node says what the default means there."
            ),
            None => "UCX's default UCX_IB_PCI_RELAXED_ORDERING=try (auto) asks for relaxed ordering only on CPU models UCX prefers it for (AMD Naples/Rome/Milan; Genoa from UCX 1.16, Turin from 1.18; Fujitsu ARM before 1.18), so on a mixed fleet only those nodes fail — `mrshim doctor` on a node says what the default means there; set UCX_IB_PCI_RELAXED_ORDERING=off (or on) explicitly to make every node alike.".into(),
        });
    }
    c.fixes = fixes::relaxed(p);
    c.retry = Some("drop-relaxed-ordering");
    c
}

pub(super) fn iova_alignment<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("iova-alignment");
    let gs = v.fail_where(|_, g| g.iova_misaligned > 0);
    if !gs.is_empty() {
        c.add(3.5, format!("{} ibv_reg_mr_iova2 call(s) passed an iova whose offset within the page differs from the address's; the kernel rejects that with EINVAL.", gs.iter().map(|g| g.1.iova_misaligned).sum::<u64>()), None);
        c.groups = gs;
    }
    c.fixes = fixes::iova();
    c.retry = Some("realign-iova");
    c
}

/// The bits that need writable pages.
const WRITE_BITS: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_ATOMIC;

pub(super) fn access_flags<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("access-flags");
    let ro = v.fail_where(|k, g| {
        k.mem == Some(MemKind::FileReadonly) && (g.access.is_empty() || g.access.iter().any(|a| a & WRITE_BITS != 0))
    });
    if !ro.is_empty() {
        c.add(3.5, format!("{} registration(s) of a read-only file mapping asked for write access ({}); the kernel cannot pin read-only pages for writing.", sum(&ro), describe_errnos(&ro)), None);
        c.groups.extend(ro.iter().copied());
    }
    let bad =
        v.fail_where(|_, g| g.access.iter().any(|a| a & (REMOTE_WRITE | REMOTE_ATOMIC) != 0 && a & LOCAL_WRITE == 0));
    if !bad.is_empty() {
        c.add(
            3.0,
            "REMOTE_WRITE or REMOTE_ATOMIC was requested without LOCAL_WRITE, which verbs rejects with EINVAL.",
            None,
        );
        c.groups.extend(bad.iter().copied());
    }
    if let Some(e) = v.flag(Flag::AccessRefused) {
        c.add(3.5, "The driver says the registration asked for access bits the device does not support (the first mask is what was asked, the second what the device takes).", Some(e));
        c.groups.extend(v.fails.iter().copied());
    }
    c.fixes = fixes::access();
    c.retry = Some("bounce");
    c
}

pub(super) fn version_mismatch<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("version-mismatch");
    if let Some(e) = v.flag(Flag::AbiMismatch) {
        c.add(3.5, "libibverbs' provider does not support the kernel's uverbs ABI: user-space rdma-core and the kernel driver are from different releases.", Some(e));
    }
    if let Some(e) = v.flag(Flag::NoProvider) {
        c.add(
            2.0,
            "libibverbs found no user-space provider for the device (missing or mismatched rdma-core providers).",
            Some(e),
        );
    }
    // an Oops/BUG/WARNING whose call trace runs through the registration path (parse/kernel.rs
    // `trace`): the kernel itself failed inside the registration — a bug of that kernel or driver
    // release, whatever errno (if any) user space saw
    if let Some(e) = v.flag(Flag::RegPathCrash) {
        c.add(
            3.5,
            "The kernel crashed or warned inside memory registration (its call trace runs through the registration path): a kernel bug — compare the kernel (uname -r) with the stable releases that fix that path (the driver's and drivers/infiniband/core's fixes), and upgrade or downgrade the kernel or driver.",
            Some(e),
        );
        let k = v.fail_where(|k, _| k.lib == Lib::Kernel);
        c.groups.extend(if k.is_empty() { v.fails.clone() } else { k });
    }
    if let Some(e) = v.flag(Flag::VersionMismatchProse) {
        c.add(1.5, "The report says the kernel driver and the user-space RDMA libraries do not match.", Some(e));
    }
    // UCX's mlx5 DV memory domain binds and exports memory keys through a private UMR QP it creates on
    // first use, and builds an indirect (KSM) key over a registration (src/uct/ib/mlx5/dv/ib_mlx5dv_md.c):
    // when those fail the memory was never refused — the UCX release does not fit the NIC's driver,
    // firmware or port setup (a bonded port's affinity, a KSM the firmware refuses on a relaxed-order MR).
    if let Some(e) = v.flag(Flag::MkeySetupFail) {
        c.add(
            2.5,
            "UCX could not set up the UMR queue pair or the indirect key it binds and exports memory keys through: the memory was not refused, the UCX release does not fit the NIC's driver, firmware or port configuration — compare the UCX version (ucx_info -v) with the release notes for the NIC, or try another UCX release.",
            Some(e),
        );
    }
    // A registration refused with "Required key not available" never reached the memory: the provider
    // refused the memory key the caller asked for, because another registration holds it or because the
    // provider needs the caller to choose keys (libfabric: the MR map's ofi_mr_map_insert turns a key in
    // use into -FI_ENOKEY, prov/util/src/util_mr_map.c; CXI's cxip_ep_mr_insert does the same for a
    // duplicate key; the LinkX provider notes callers such as Open MPI that leave requested_key unset).
    // That is the calling library's key handling against the provider's mr_mode (FI_MR_PROV_KEY): a
    // release of the caller, the provider or both.
    let keys = v.fail_where(|k, _| k.errno == Some(errno::ENOKEY));
    if !keys.is_empty() {
        c.add(
            2.5,
            format!(
                "{} registration(s) failed with \"Required key not available\" (ENOKEY, libfabric's FI_ENOKEY): the provider refused the memory key the caller asked for — one already in use, or none chosen where the provider needs the caller to choose — before any memory was pinned. The calling library's key handling does not fit the provider's mr_mode (FI_MR_PROV_KEY): compare `fi_info -v -p <provider> | grep mr_mode` with what the library requests, and the release notes of the library and libfabric for MR-key fixes.",
                sum(&keys)
            ),
            None,
        );
    }
    // UCX's cuda_copy memory domain page-locks with CUDA (cuMemHostRegister, cudaHostRegister before
    // v1.17) only what its memory-type detection called host memory (src/uct/cuda/cuda_copy/
    // cuda_copy_md.c, uct_cuda_copy_mem_reg): CUDA refusing such a buffer means the detection was wrong
    // (GPU or managed memory taken for host memory — the memory-type cache's failure mode) or the
    // buffer was page-locked twice. A UCX release or setting, not the NIC and not the memlock limit.
    // Open MPI's and MVAPICH2's own CUDA/ROCm page-locking (common_cuda, accelerator/rocm,
    // ibv_cuda_util.c) has no memory-type detection behind it: not this row.
    let host_reg = v.fail_where(|k, _| k.call.ends_with("HostRegister") && k.lib == Lib::Ucx);
    if !host_reg.is_empty() {
        c.add(
            2.5,
            format!(
                "{} buffer(s) that UCX's cuda_copy memory domain took for host memory could not be page-locked by CUDA ({}): UCX page-locks only what its memory-type detection calls host memory, so the detection was wrong (GPU or managed memory taken for host memory) or the buffer was locked twice — UCX's release or its memory-type cache, not the NIC.",
                sum(&host_reg),
                host_reg.iter().map(|g| g.0.call.as_str()).collect::<BTreeSet<_>>().into_iter().collect::<Vec<_>>().join(", ")
            ),
            None,
        );
        c.groups.extend(host_reg.iter().copied());
    }
    // mlx5's UMR completes with an error status (`reg umr failed (N)`, umr.c; mr.c before 5.19) and the
    // registration returns -EFAULT whatever the status; an ODP page fault that mapped its pages and then
    // could not update the mkey's translation (`Failed to update mkey page tables` / `Failed to update
    // PAS`, odp.c pagefault_real_mr / pagefault_implicit_mr: mlx5_ib_update_xlt / mlx5r_umr_update_xlt
    // failed with anything but -EAGAIN). Neither is the application's memory or its resources: the
    // driver or the firmware (fixes such as the ODP iova / mkey-size ones land in later kernels).
    let odp_xlt = v.flag(Flag::OdpXltFail);
    if let Some(e) = v.flag(Flag::UmrFail).or(odp_xlt) {
        c.add(
            2.5,
            if odp_xlt.is_some() {
                "The mlx5 driver could not update an On-Demand-Paging MR's translation after a page fault (its UMR failed): the pages were mapped, the driver's mkey update was refused — a kernel driver or firmware problem (compare the kernel and firmware with the mlx5 ODP fixes of later releases), not the application's resources."
            } else {
                "The mlx5 driver's UMR (the work request that rewrites a cached mkey for a registration) completed with an error: the driver or firmware refused the mkey update — the EFAULT it returns is no bad address; compare the kernel/MLNX_OFED and firmware with a node where it works."
            },
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::DriverLoadFail) {
        c.add(
            0.3,
            "libibverbs could not load some provider drivers (often harmless, but check the one for your NIC).",
            Some(e),
        );
    }
    if let Some(e) = v.flag(Flag::DmabufUnsupported) {
        c.add(0.5, "ibv_reg_dmabuf_mr is not supported: the driver/rdma-core is too old for dmabuf.", Some(e));
    }
    // The kernel refused to pin GPU pages for a peer on a GPU that supports GPUDirect (not a GeForce):
    // gdrcopy's README ("Restrictions and known issues") names GPU driver versions and the driver's
    // flavour against the kernel's configuration as reasons pinning fails, and aws-ofi-nccl's
    // maintainers name the proprietary driver on a recently patched kernel for EFA's peer-to-peer
    // registrations (aws/aws-ofi-nccl#803): the driver/kernel pairing is the second thing to check.
    // gdr_pin_buffer's errno is gdrdrv's pin ioctl, i.e. nvidia_p2p_get_pages refusing
    let pin_fails = v.fail_where(|k, _| matches!(k.call.as_str(), "gdr_pin_buffer" | "nvidia_p2p_get_pages"));
    let pinned = v.flag(Flag::P2pPinFail).map(Some).or((!pin_fails.is_empty()).then_some(None));
    if let (Some(e), None) = (pinned, v.flag(Flag::GeforceGpu)) {
        c.add(
            1.0,
            "The kernel refused to pin GPU pages for the peer (nvidia_p2p_get_pages, gdrcopy's gdr_pin_buffer) and nothing shows a GeForce GPU: besides a missing peer-memory path, GPU driver versions and the driver's flavour (proprietary or open) against the kernel make pinning fail — compare the NVIDIA driver, its flavour and the kernel with a node where pinning works.",
            e,
        );
    }
    // versions that differ between a failing and a working host
    let fails = v.fail_hosts();
    let good = v.good_hosts();
    for f in &fails {
        for g in &good {
            let (Some(a), Some(b)) = (v.c.hosts.get(*f), v.c.hosts.get(*g)) else {
                continue;
            };
            for (name, va) in &a.versions {
                if let Some(vb) = b.versions.get(name) {
                    if va != vb {
                        c.add(2.0, format!("{name} differs: {f} has {}, {g} has {}.", join(va), join(vb)), None);
                    }
                }
            }
        }
    }
    if c.score > 0.0 {
        c.groups = v.fails.clone();
    }
    c.fixes = fixes::version();
    if v.flag(Flag::RegPathCrash).is_some() {
        c.fixes.insert(0, fixes::kernel_bug());
    }
    if !host_reg.is_empty() {
        c.fixes.insert(0, "UCX: turn its memory-type cache off (`UCX_MEMTYPE_CACHE=n`) and use a UCX release whose memory-type detection knows your allocator (`ucx_info -v`); `ucx_info -d | grep -i cuda` must list cuda_copy".into());
    }
    c
}

fn join(s: &BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join("/")
}

pub(super) fn address_invalid<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("address-invalid");
    // implicit ODP registers the whole address space (address 0, length SIZE_MAX) on purpose
    let unm = v.fail_where(|k, g| k.mem == Some(MemKind::Unmapped) && g.odp < g.count);
    if !unm.is_empty() {
        c.add(3.5, format!("{} registration(s) of an address that is not mapped in the process.", sum(&unm)), None);
        c.groups.extend(unm.iter().copied());
    }
    // EFAULT on host memory is what an incompletely mapped range gives, but also what a device or
    // platform gives for an access it refuses (relaxed ordering): a reading, unless the mapping was seen
    let host_efault = v.fail_where(|k, g| k.errno == Some(EFAULT) && is_host_mem(k.mem) && g.mapped < g.count);
    if !host_efault.is_empty() {
        c.guess(
            1.2,
            format!(
                "{} registration(s) of host memory failed with EFAULT (Bad address): the kernel could not pin the range for the access asked — a range not fully mapped would do that, but nothing here shows the mapping.",
                sum(&host_efault)
            ),
        );
        c.groups.extend(host_efault.iter().copied());
    }
    let zero = v.fail_where(|_, g| g.zero_len_or_addr > 0);
    if !zero.is_empty() {
        c.add(2.0, "A registration with address 0 or length 0.", None);
        c.groups.extend(zero.iter().copied());
    }
    if c.groups.is_empty() && !v.gdr_context() {
        let unk = v.fail_where(|k, _| k.errno == Some(EFAULT) && unknown_mem(k.mem));
        if !unk.is_empty() {
            c.guess(
                1.0,
                format!(
                    "{} registration(s) failed with EFAULT (Bad address) and nothing points at GPU memory.",
                    sum(&unk)
                ),
            );
            c.groups.extend(unk.iter().copied());
            if let Some(e) = v.flag(Flag::UmemGetFail) {
                c.add(0.5, "The kernel could not pin the pages (ib_umem_get failed).", Some(e));
            }
        }
    }
    c.fixes = fixes::address();
    c.retry = Some("bounce");
    c
}

pub(super) fn permissions<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("permissions");
    let gs = v.fail_where(|k, _| matches!(k.errno, Some(EPERM) | Some(EACCES)));
    let zero_memlock = v.c.hosts.values().any(|h| h.memlock.contains_key(&Some(0)));
    if !gs.is_empty() && !zero_memlock {
        // EPERM alone is the kernel's refusal at a memlock limit of 0 (can_do_mlock) as much as a
        // missing capability: it weighs fully only where the capability or the device node is seen
        // missing (a container without IPC_LOCK, /dev/infiniband not permitted) or the errno is EACCES
        let seen = v.flag(Flag::DevPermission).is_some()
            || v.flag(Flag::NoIpcLock).is_some()
            || gs.iter().any(|g| g.0.errno == Some(EACCES));
        let w = if seen { 2.0 } else { 1.0 };
        c.add(w, format!("{} registration(s) were refused with {}.", sum(&gs), describe_errnos(&gs)), None);
        c.groups = gs;
    }
    if let Some(e) = v.flag(Flag::DevPermission) {
        c.add(2.0, "Opening /dev/infiniband was not permitted.", Some(e));
    }
    if let (Some(e), Some(_)) = (v.flag(Flag::NoIpcLock), v.flag(Flag::Container)) {
        if c.score > 0.0 {
            c.add(1.0, "The job runs in a container without CAP_IPC_LOCK.", Some(e));
        }
    }
    c.fixes = fixes::permissions();
    c
}

pub(super) fn dmabuf_unsupported<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("dmabuf-unsupported");
    let gs = v.fail_where(|k, _| k.call.contains("dmabuf") && errno::not_supported(k.errno));
    if !gs.is_empty() {
        c.add(2.0, format!("{} ibv_reg_dmabuf_mr call(s) were refused as not supported: the RDMA stack (rdma-core, kernel, NIC driver) or the GPU driver cannot do dmabuf.", sum(&gs)), None);
        c.groups = gs;
        if let Some(e) = v.flag(Flag::DmabufUnsupported) {
            c.add(0.5, "", Some(e));
        }
    }
    c.fixes = fixes::dmabuf(v.prefix);
    c.retry = Some("dmabuf-to-va,bounce");
    c
}

/// A retry strategy that registered what the application's call could not decides its cause: the
/// call failed for what the strategy changed. `bounce` changes everything and decides nothing.
pub(super) fn rescues<'a>(v: &View<'a>, cands: &mut [Cand<'a>]) {
    const DECIDES: [(&str, &str, &str); 5] = [
        ("drop-relaxed-ordering", "relaxed-ordering", "the same call without IBV_ACCESS_RELAXED_ORDERING registered"),
        ("raise-memlock", "memlock-limit", "the same call registered once RLIMIT_MEMLOCK was raised"),
        ("realign-iova", "iova-alignment", "the same call registered with the iova on the address's page offset"),
        ("dmabuf-to-va", "dmabuf-unsupported", "the same memory registered by address instead of through dmabuf"),
        ("va-to-dmabuf", "gpu-peer-memory", "the same GPU memory registered through dmabuf instead of by address"),
    ];
    for (strategy, cat, what) in DECIDES {
        let n = v.rescued_by(strategy);
        if n == 0 {
            continue;
        }
        let Some(c) = cands.iter_mut().find(|c| c.cat == cat) else { continue };
        c.add(6.0, format!("mrshim's retry strategy {strategy} rescued {n} call(s): {what}, which decides it."), None);
        if c.groups.is_empty() {
            let gs = match cat {
                "relaxed-ordering" => v.fail_where(|k, _| k.relaxed != Some(false)),
                "memlock-limit" => v.fail_where(|k, _| matches!(k.errno, Some(ENOMEM) | Some(EPERM) | None)),
                _ => vec![],
            };
            c.groups = if gs.is_empty() { v.fails.clone() } else { gs };
        }
    }
}

/// What a contrast the reporter tells (parse/tried.rs) does to a cause.
#[derive(Clone, Copy)]
enum Tried {
    /// The change made it work: evidence for the cause it removes (and its failures are the cause's).
    Confirms(f64),
    /// Confirms, and the cause stays in the top two whatever outranks it (the change removes only it).
    Decides(f64),
    /// Confirms where the sizes the threshold sentence states are near a locked-memory limit the
    /// input shows ([`crate::parse::tried::near_limit`]; `{limit}` in the reason is that limit).
    AtMemlock(f64),
    /// Confirms where they are not.
    NotAtMemlock(f64),
    /// Evidence for the cause only where the rules already gave it failures of its own.
    Supports(f64),
    /// The failure survived the change: the cause is less likely. Never ruled out on words: a
    /// change told as made may not have reached the job (a limit raised in a shell, not in the
    /// daemon that started it), and only the relaxed-ordering row, read before this table, rules out.
    Lowers(f64),
}

/// The weight of each contrast the reporter tells, one row per (flag, cause); the reason is said in
/// the finding (or in `ruled_out`). GdrOffWorks, TcpWorks and RoOffStillFails, read by the same
/// table, are weighed where they were before: gpu_peer_memory (+2.0, +0.5, +1.5), relaxed_ordering
/// (-4) and `ruled_out`. A confirmation is below mrshim's own rescue (6.0) and about one decisive
/// line (3.0–3.5): words can be misread, a rescue cannot.
const TRIED: &[(Flag, &str, Tried, &str)] = &[
    (Flag::MemlockRaiseWorks, "memlock-limit", Tried::Confirms(3.0), "The report says raising the locked-memory limit (ulimit -l, limits.conf, LimitMEMLOCK, --ulimit memlock) made it work."),
    // a limit raised in limits.conf or a shell often never reaches the daemon-started job (slurmd,
    // sshd, systemd units keep their own): "still fails after raising it" lowers memlock, never
    // rules it out
    (Flag::MemlockRaiseStillFails, "memlock-limit", Tried::Lowers(1.5), ""),
    (Flag::PrivilegedWorks, "memlock-limit", Tried::Confirms(2.0), "The report says it works as root / privileged / with CAP_IPC_LOCK, which lifts RLIMIT_MEMLOCK: the unprivileged run's memlock limit is the likely difference."),
    (Flag::PrivilegedWorks, "permissions", Tried::Supports(1.5), "The report says it works as root / privileged: the unprivileged process lacks a permission."),
    // root in a container has no CAP_IPC_LOCK unless it is added: lowered, not ruled out
    (Flag::PrivilegedStillFails, "memlock-limit", Tried::Lowers(1.5), ""),
    (Flag::PrivilegedStillFails, "permissions", Tried::Lowers(2.0), ""),
    (Flag::RoOffWorks, "relaxed-ordering", Tried::Decides(3.5), "The report says it works with relaxed ordering off (*_IB_PCI_RELAXED_ORDERING=0, UCX_IB_PCI_RELAXED_ORDERING=off)."),
    (Flag::DmabufOffWorks, "dmabuf-unsupported", Tried::Confirms(3.0), "The report says it works with dmabuf off (NCCL_DMABUF_ENABLE=0): the registration by address works where dmabuf does not."),
    (Flag::DmabufOffStillFails, "dmabuf-unsupported", Tried::Lowers(2.0), ""),
    (Flag::DmabufWorks, "gpu-peer-memory", Tried::Confirms(2.0), "The report says GPU memory registers through dmabuf: registering it by address (through a peer-memory client) is what fails."),
    (Flag::GdrOffStillFails, "gpu-peer-memory", Tried::Lowers(3.0), ""),
    (Flag::PeermemLoadWorks, "gpu-peer-memory", Tried::Confirms(3.0), "The report says loading the peer-memory module (nvidia_peermem / nv_peer_mem / amdgpu) made it work."),
    (Flag::PeermemStillFails, "gpu-peer-memory", Tried::Lowers(1.0), ""),
    (Flag::HostMemWorks, "gpu-peer-memory", Tried::Confirms(2.0), "The report says host memory (cudaMallocHost, malloc) registers where GPU memory does not."),
    (Flag::HostMemStillFails, "gpu-peer-memory", Tried::Lowers(2.0), ""),
    (Flag::VersionChangeWorks, "version-mismatch", Tried::Confirms(2.5), "The report says a version change decides it (it worked before an upgrade, or an upgrade or downgrade made it work): compare the kernel, driver, firmware and library versions."),
    (Flag::VersionChangeStillFails, "version-mismatch", Tried::Lowers(1.0), ""),
    // a regression told in words or versions (parse/prose.rs `regression_told`, facts.rs `dev_release`)
    (Flag::RegressionTold, "version-mismatch", Tried::Confirms(2.0), "The report says it is a regression (bisected to a commit, a `Fixes:` tag, \"regression\", \"since commit\"): a kernel, driver or library release broke it — compare with the release before the commit, and with the release that carries its fix."),
    (Flag::DevRelease, "version-mismatch", Tried::Confirms(1.5), "A release candidate or development build is in use (-rcN, linux-next): regressions are found, and fixed, in those — compare with the released version and its stable updates."),
    (Flag::ResourceTuneWorks, "resource-exhaustion", Tried::Confirms(2.5), "The report says raising a registration resource (log_num_mtt, UCX_RCACHE_*, FI_MR_CACHE_*) made it work."),
    (Flag::ResourceTuneStillFails, "resource-exhaustion", Tried::Lowers(1.0), ""),
    // a size threshold near a locked-memory limit the input shows is that limit: registrations pin
    // against RLIMIT_MEMLOCK cumulatively (ib_umem_get), so the size that first fails lies at or
    // below it — not a device's resources, which run out orders of magnitude above a memlock limit
    (Flag::SizeThreshold, "memlock-limit", Tried::AtMemlock(1.5), "The report says smaller registrations work and larger ones fail, at about the locked-memory limit the input shows ({limit}): RDMA pins every registered byte against it."),
    (Flag::SizeThreshold, "resource-exhaustion", Tried::NotAtMemlock(1.5), "The report says smaller registrations work and larger ones fail: a size limit (max_mr_size, MTT/mkey resources, BAR1)."),
    (Flag::OtherNodeWorks, "address-invalid", Tried::Lowers(1.0), ""),
    (Flag::OtherNodeWorks, "access-flags", Tried::Lowers(0.5), ""),
];

/// The contrasts the reporter tells, weighed by [`TRIED`].
pub(super) fn tried<'a>(v: &View<'a>, cands: &mut [Cand<'a>]) {
    let limits: Vec<u64> =
        v.c.hosts.values().flat_map(|h| h.memlock.keys().filter_map(|m| *m)).filter(|m| *m > 0).collect();
    let size_is_memlock = v.flag(Flag::SizeThreshold).and_then(|e| {
        let sizes = crate::parse::tried::stated_sizes(&e.text);
        limits.iter().copied().find(|l| crate::parse::tried::near_limit(&sizes, *l))
    });
    for (f, cat, effect, why) in TRIED {
        let Some(e) = v.flag(*f) else { continue };
        let why = match (effect, size_is_memlock) {
            (Tried::AtMemlock(_), None) | (Tried::NotAtMemlock(_), Some(_)) => continue,
            (Tried::AtMemlock(_), Some(l)) => why.replace("{limit}", &human_size(l)),
            _ => why.to_string(),
        };
        let Some(c) = cands.iter_mut().find(|c| c.cat == *cat) else { continue };
        match *effect {
            Tried::Confirms(w) | Tried::Decides(w) | Tried::AtMemlock(w) | Tried::NotAtMemlock(w) => {
                c.add(w, why, Some(e));
                c.top_two |= matches!(effect, Tried::Decides(_));
                if c.groups.is_empty() {
                    c.groups = v.fails.clone();
                }
            }
            Tried::Supports(w) if !c.groups.is_empty() => c.add(w, why, Some(e)),
            Tried::Supports(_) => {}
            Tried::Lowers(w) => c.score -= w,
        }
    }
}

pub(super) fn odp_unsupported<'a>(v: &View<'a>) -> Cand<'a> {
    let mut c = Cand::new("odp-unsupported");
    let gs = v.fail_where(|k, _| k.odp && matches!(k.errno, Some(EINVAL) | Some(EOPNOTSUPP) | None));
    if !gs.is_empty() {
        c.add(
            4.0,
            format!(
                "{} registration(s) asked for On-Demand Paging (IBV_ACCESS_ON_DEMAND) and failed with {}: the provider has no ODP (rxe, siw, EFA; mlx5 only where the firmware reports ODP capabilities), and the kernel refuses the access bit.",
                gs.iter().map(|g| g.1.odp).sum::<u64>(),
                describe_errnos(&gs)
            ),
            None,
        );
        c.groups = gs;
    }
    // an ODP page fault the driver could not complete (odp.c): ODP is in use on a device/firmware whose
    // ODP support (capabilities per transport, implicit ODP) may not cover the access — a reading
    if let (Some(e), true) = (v.flag(Flag::OdpXltFail), c.groups.is_empty()) {
        c.add(0.0, "", Some(e));
        c.guess(1.2, "The failure is an On-Demand-Paging MR's page fault: without ODP (register the memory pinned, without IBV_ACCESS_ON_DEMAND) the driver's fault path is not used — check `ibv_devinfo -v | grep -A12 -i odp` for the transport and operation.");
        c.groups = v.fails.clone();
    }
    c.fixes = fixes::odp();
    c
}
