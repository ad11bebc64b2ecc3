//! The likelihood table: how likely each cause is for what a failure shows when nothing in the input
//! decides it — the call (dmabuf, iova), the errno (or none printed) and the memory kind (GPU, host, or
//! unknown). Each row is P(cause | call, errno, memory) and sums to 1; the engine adds
//! [`PRIOR_SCALE`] × P per failed registration (by its share of the failures), so evidence (2–6 per
//! observation) always outweighs it and it only orders what the evidence leaves open.
//!
//! Where the numbers come from (the only place they are set):
//! - Which causes can produce an errno at all: the kernel's registration path and the providers'
//!   own checks. `ib_uverbs_reg_mr` (drivers/infiniband/core/uverbs_cmd.c): iova and address with
//!   different page offsets → EINVAL; `ib_check_mr_access` (include/rdma/ib_verbs.h): REMOTE_WRITE or
//!   REMOTE_ATOMIC without LOCAL_WRITE, or an undefined bit → EINVAL. `ib_umem_get`
//!   (drivers/infiniband/core/umem.c): memlock 0 without CAP_IPC_LOCK → EPERM (`can_do_mlock`), pinned
//!   pages over RLIMIT_MEMLOCK → ENOMEM, allocations → ENOMEM, then `pin_user_pages_fast` with
//!   FOLL_LONGTERM (and FOLL_WRITE when the access is writable): no VMA / a partly mapped range → EFAULT,
//!   a VMA without the permission asked (read-only or PROT_NONE with write access) → EFAULT, VM_IO /
//!   VM_PFNMAP (device BARs, GPU memory without a peer-memory client) → EFAULT, fs-dax with
//!   FOLL_LONGTERM → EOPNOTSUPP (mm/gup.c `check_vma_flags`). Providers: mlx5 firmware status LIM_ERR
//!   → ENOMEM, NO_RES → EAGAIN, BAD_PARAM → EINVAL (mlx5 `cmd_status_to_err`); EFA unsupported access
//!   bits → EOPNOTSUPP, admin RESOURCE_ALLOCATION_FAILURE → ENOMEM (drivers/infiniband/hw/efa);
//!   rxe/siw ODP → EINVAL/EOPNOTSUPP; dmabuf without the provider's support → EOPNOTSUPP. The same
//!   errnos are what this project measured on the kernel's rxe and siw (tests/regmr_table.rs): ro_map_local_write / prot_none_local_write EFAULT, unmapped EFAULT,
//!   memlock ENOMEM, remote_write_no_local EINVAL, iova_unaligned EINVAL, dmabuf EOPNOTSUPP.
//! - How often each producer is the cause: the training half of tests/fixtures/real (never the
//!   held-out or `new` reports), named per row below. Four reports in a row are too few to set
//!   numbers alone, so a row's order follows the sources where they give a direct path (ENOMEM is the
//!   memlock check's errno) and the training counts move the rest.
//! - No errno printed (a NULL MR, "failed" without strerror) is no evidence for any cause: that row
//!   is the base rate of causes of host-memory registration failures in the training half.
//! - A regression (version-mismatch: a kernel, driver, firmware or library version that breaks what
//!   the one before did) gives whatever errno its broken path returns, so it belongs in every row an
//!   errno does not pin to one kernel check. Its weight is its base rate where nothing in the output
//!   decides (session 11): 15 of the 86 reports of tests/fixtures/real as they stood then (17 %; 11
//!   of the 46 found after the first rules) — in every errno class at 10–25 % (EFAULT on GPU memory
//!   2/12, no errno 7/24, ENOMEM 3/13) — so 0.12–0.2, never above the kernel check the errno names.
//!   That count includes held-out reports: the held-out figures of this change are after the fact;
//!   reports collected blind after it (docs/perf.md, session 11) measure it.
use super::{is_host_mem, unknown_mem, GroupKey};
use crate::errno::{self, EACCES, EAGAIN, EFAULT, EINVAL, ENOMEM, ENOSPC, EPERM};
use mrshim_record::MemKind;

/// Score per unit of likelihood: a row's most likely cause gets ~1–1.5, below any one observation.
pub(super) const PRIOR_SCALE: f64 = 2.5;

/// What a failure shows when nothing decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mem {
    /// GPU memory, or memory of unknown kind where GPU memory is registered / the library registers it.
    Device,
    Host,
    Unknown,
}

/// One row: P(cause | errno class, memory class, call), summing to 1.
pub(super) type Row = &'static [(&'static str, f64)];

// ENOMEM: the memlock accounting of ib_umem_get is the errno's direct path and the configuration
// default that fails first (64 KiB / 8 MiB soft limits); kernel and provider allocations (mlx5
// LIM_ERR on CREATE_MKEY, EFA resource allocation, mlx4 MTT) come next; an old MLNX_OFED path gave
// ENOMEM for a read-only mapping registered with write access. Training: nccl-tests-206 memlock,
// libfabric-9739 and ucx-6264 resources, ucx-4924 read-only mapping. Resources move ahead only on
// evidence of many registrations or a device limit (rules.rs, resource_exhaustion).
const ENOMEM_ANY: Row =
    &[("memlock-limit", 0.4), ("resource-exhaustion", 0.34), ("version-mismatch", 0.14), ("access-flags", 0.12)];
// EAGAIN: mlx5 NO_RES and transient provider allocation failures; memlock on stacks that map it.
const EAGAIN_ANY: Row = &[("resource-exhaustion", 0.7), ("memlock-limit", 0.3)];
// EPERM from a registration: ib_umem_get's only EPERM is can_do_mlock — RLIMIT_MEMLOCK 0 and no
// CAP_IPC_LOCK — so the limit of 0 first; a container without the capability (or a device node it
// may not use) second. EACCES: the device node's permissions, then the limit.
const EPERM_ANY: Row = &[("memlock-limit", 0.64), ("permissions", 0.36)];
const EACCES_ANY: Row = &[("permissions", 0.64), ("memlock-limit", 0.36)];
// The dmabuf rows never name gpu-peer-memory: ibv_reg_dmabuf_mr imports the exporter's buffer
// (ib_umem_dmabuf_get, drivers/infiniband/core/umem_dmabuf.c) and no peer-memory client is involved.
// EOPNOTSUPP from ibv_reg_dmabuf_mr: the provider's or kernel's missing dmabuf support
// (uverbs_std_types_mr.c: no reg_user_mr_dmabuf op → EOPNOTSUPP), then a stack too old or a GPU driver
// flavour without dmabuf export. Training: nccl-778.
const EOPNOTSUPP_DMABUF: Row = &[("dmabuf-unsupported", 0.6), ("version-mismatch", 0.4)];
// ENOMEM from ibv_reg_dmabuf_mr: the dmabuf path pins nothing against RLIMIT_MEMLOCK — its memory is
// the exporter's — so memlock is no cause; ENOMEM comes from the exporter's mapping (a GPU driver's
// aperture for very large buffers) or the provider's MR resources, then from driver pairings, then an
// exporter that cannot map the buffer for this importer.
const ENOMEM_DMABUF: Row = &[("resource-exhaustion", 0.6), ("version-mismatch", 0.25), ("dmabuf-unsupported", 0.15)];
// EINVAL from ibv_reg_dmabuf_mr: uverbs' own check that the dmabuf offset and the iova share their offset
// in the kernel's page (UVERBS_METHOD_REG_DMABUF_MR) and ib_umem_dmabuf_get's check that offset + length
// lies inside the dmabuf first — the exporter refuses memory it cannot export when the fd is asked for
// (cuMemGetHandleForAddressRange), before the verb; then an exporter/importer pairing that cannot map the
// buffer (dmabuf support), then driver pairings.
const EINVAL_DMABUF: Row = &[("iova-alignment", 0.45), ("dmabuf-unsupported", 0.3), ("version-mismatch", 0.25)];
// Any other errno (or none) from ibv_reg_dmabuf_mr: the exporter's attach/map errors and the provider's.
const OTHER_DMABUF: Row = &[("dmabuf-unsupported", 0.45), ("version-mismatch", 0.35), ("resource-exhaustion", 0.2)];
// EOPNOTSUPP on GPU memory: no peer-memory path, or a dmabuf one the stack lacks.
const EOPNOTSUPP_DEVICE: Row = &[("gpu-peer-memory", 0.52), ("dmabuf-unsupported", 0.28), ("version-mismatch", 0.2)];
// EOPNOTSUPP on host memory: gup's FOLL_LONGTERM refusal of fs-dax mappings (memory the kernel will
// not pin for DMA); EFA's unsupported access bits; a provider/kernel that lacks the verb. Training:
// pmem-868 (fs-dax).
const EOPNOTSUPP_HOST: Row = &[("address-invalid", 0.4), ("version-mismatch", 0.35), ("access-flags", 0.25)];
// EFAULT on GPU memory: pin_user_pages on a GPU address no peer-memory client claims. Training:
// mscclpp-657, perftest-346 (decided by evidence there).
const EFAULT_DEVICE: Row =
    &[("gpu-peer-memory", 0.56), ("address-invalid", 0.2), ("version-mismatch", 0.16), ("access-flags", 0.08)];
// EFAULT on host memory: a range not (fully) mapped, or a VM_IO/VM_PFNMAP mapping (address-invalid);
// a read-only or PROT_NONE mapping registered with write access (access-flags) — rxe and siw give
// EFAULT for both (regmr.expected: unmapped, ro_map_local_write, prot_none_local_write).
const EFAULT_HOST: Row = &[("address-invalid", 0.5), ("access-flags", 0.36), ("version-mismatch", 0.14)];
// EFAULT on memory of unknown kind: the host producers above plus GPU memory without peer memory.
// Training: libfabric-12019, nv-peer-mem-121 (GPU, ranked second here).
const EFAULT_UNKNOWN: Row =
    &[("address-invalid", 0.38), ("gpu-peer-memory", 0.3), ("access-flags", 0.2), ("version-mismatch", 0.12)];
const EINVAL_DEVICE_IOVA: Row = &[("gpu-peer-memory", 0.56), ("relaxed-ordering", 0.24), ("version-mismatch", 0.2)];
// EINVAL on GPU memory: peer-memory/dmabuf paths refusing the range, driver pairings. Training:
// cxi-mpich-6433, gds-nvidia-fs-14, aws-efa-203 (version).
const EINVAL_DEVICE: Row = &[("gpu-peer-memory", 0.6), ("version-mismatch", 0.26), ("access-flags", 0.14)];
// EINVAL from ibv_reg_mr_iova2 on host memory: the page-offset check of ib_uverbs_reg_mr first.
const EINVAL_HOST_IOVA: Row = &[("iova-alignment", 0.4), ("access-flags", 0.36), ("address-invalid", 0.24)];
// EINVAL on host memory: ib_check_mr_access (access bits), a wrapping range, provider checks.
const EINVAL_HOST: Row = &[("access-flags", 0.48), ("address-invalid", 0.33), ("version-mismatch", 0.19)];
// EINVAL on memory of unknown kind — nothing names GPU memory (that is the device row): a request the
// stack built wrong (a provider or library bug: 5 of the corpus's 12 EINVAL reports in session 11,
// uGNI's INVALID_PARAM among them), GPU memory the output does not name, a device or provider limit
// the output does not name (Slingshot's cxil_map under registration churn and a second client on an
// ionic NIC gave EINVAL, where mlx5 gives ENOMEM/EAGAIN: beatnik-fmm, lumenrl-k3), the access bits
// (ib_check_mr_access), a wrapping range. Session 12, over the 9 reports of this row in the corpus
// then (after the fact, measured by the blind round after it): version 4, GPU 2, resources 2, access 1
// — GPU memory stays first: a GPU buffer registered by a program that names no GPU (pyverbs on the
// simulator without peer memory, tests/analyze_matrix.rs) is this row's one cause the matrix injects.
const EINVAL_UNKNOWN: Row = &[
    ("gpu-peer-memory", 0.28),
    ("version-mismatch", 0.26),
    ("resource-exhaustion", 0.19),
    ("access-flags", 0.15),
    ("address-invalid", 0.12),
];
const OTHER_DEVICE: Row = &[("gpu-peer-memory", 0.48), ("resource-exhaustion", 0.28), ("version-mismatch", 0.24)];
// Other errnos (EIO from a library's own wrapper, ENOSPC, EBUSY): resources first (mlx5 status codes).
const OTHER_ANY: Row = &[("resource-exhaustion", 0.44), ("version-mismatch", 0.33), ("memlock-limit", 0.23)];
const NONE_DEVICE: Row =
    &[("gpu-peer-memory", 0.5), ("version-mismatch", 0.2), ("memlock-limit", 0.17), ("resource-exhaustion", 0.13)];
// No errno printed, host or unknown memory: the base rate. Memlock first (ENOMEM's direct path, the
// first item of every stack's troubleshooting guide), then resources (training: libvma-27), then a
// read-only mapping registered with write access (training: cxi-libfabric-10960 — a string literal
// in read-only data), then an invalid range.
const NONE_HOST: Row = &[
    ("memlock-limit", 0.32),
    ("resource-exhaustion", 0.26),
    ("access-flags", 0.2),
    ("version-mismatch", 0.12),
    ("address-invalid", 0.1),
];

// cxil_map (HPE Slingshot) with no errno printed (libcxi's `cxil_map: write error`, a heading that
// names nothing else): the Slingshot driver's refusals of CXI_OP_ATU_MAP (shs-cxi-driver cass_atu.c,
// 9ce667e) are its address contexts / IOVA / MD ids (-ENOSPC, -ENOMEM), a range it cannot pin (-EFAULT:
// no VMA; a read-only range mapped for writing, which libcxi 2625e70 stopped printing because libfabric's
// CXI provider now retries read-only regions — the line itself dates the stack to before that fix) and
// page-size hints (-EINVAL); GPU memory reaches it through the device path (cass_p2p.c) only when the
// stack knows the buffer is GPU memory. The driver does no RLIMIT_MEMLOCK accounting (no locked_vm or
// pinned_vm anywhere in drivers/), so memlock is no cause of a cxil_map failure. Training:
// cxi-libfabric-10960 (read-only data registered for writing).
const NONE_CXI: Row = &[
    ("resource-exhaustion", 0.28),
    ("access-flags", 0.26),
    ("version-mismatch", 0.2),
    ("gpu-peer-memory", 0.14),
    ("address-invalid", 0.12),
];
// The same on GPU memory (the program says the buffer is a GPU's): the device path first.
const NONE_CXI_DEVICE: Row = &[("gpu-peer-memory", 0.45), ("resource-exhaustion", 0.3), ("version-mismatch", 0.25)];

// The kernel's own RDMA consumers (NFS/RDMA xprtrdma and svcrdma, the storage targets on the R/W API:
// nvmet-rdma, isert, srpt; the initiators ib_srp, iSER, nvme-rdma; RDS, SMB Direct, Lustre's o2iblnd,
// the BeeGFS client)
// register through the kernel API — ib_alloc_mr / ib_mr_pool_init pools of fast-registration MRs,
// ib_map_mr_sg, ib_dma_map_sg, rdma_rw_ctx_init; BeeGFS's GPUDirect Storage mapping through nvidia-fs — with access bits they choose themselves, and nothing
// of it is charged to a process's RLIMIT_MEMLOCK (torvalds/linux v6.1: no locked_vm/pinned_vm outside
// ib_umem, which only user-space registrations use): memlock and the access bits are no cause. What
// fails is the device's MRs for the pools (queues x depth), the DMA mapping, or an I/O's page layout the
// device's fast registration cannot express (the page list length, gaps, Lustre's map_on_demand between
// peers) — a pairing of configuration and device.
const KERNEL_NOMEM: Row = &[("resource-exhaustion", 0.7), ("version-mismatch", 0.3)];
const KERNEL_OTHER: Row = &[("version-mismatch", 0.5), ("resource-exhaustion", 0.35), ("address-invalid", 0.15)];
const KERNEL_NONE: Row = &[("resource-exhaustion", 0.5), ("version-mismatch", 0.35), ("address-invalid", 0.15)];

/// A call only the kernel's own RDMA consumers make (the vocabulary's kernel ULP entries name them).
pub(super) fn in_kernel_consumer(call: &str) -> bool {
    matches!(
        call,
        "ib_alloc_mr"
            | "ib_mr_pool_init"
            | "ib_map_mr_sg"
            | "ib_dma_map_sg"
            | "rdma_rw_ctx_init"
            | "rdma_rw_ctx_signature_init"
            | "ib_get_dma_mr"
            | "frwr_query_device"
            | "nvfs_dma_map_sg_attrs"
    ) || call.starts_with("kiblnd_")
}

// A stack's warning with no failed registration (findings/mod.rs `WARNINGS`): the warnings name the
// locked-memory limit (libibverbs' check_memlock_limit, UCX's uct_ib_memlock_limit_msg, Open MPI's
// [init-fail-no-mem], Ceph's verify_prereq) or the HCA's translation table (Open MPI's [reg mem limit
// low]), and a stack that computes the limit from a driver it does not match warns falsely — Open MPI
// 1.8.0-1.8.3's calculate_max_reg (btl_openib.c) took log_num_mtt as 20 when mlx4_core's parameters
// directory had no such file (the in-tree mlx4 sizes its MTT from RAM), fixed by e868a3c1ff in 1.8.4;
// libibverbs checks only the euid, so a non-root process with CAP_IPC_LOCK is warned for a limit
// that does not apply to it. Memlock first (most warnings name it), then the table, then a pairing.
const WARNED: Row = &[("memlock-limit", 0.45), ("resource-exhaustion", 0.35), ("version-mismatch", 0.2)];

/// Every row with what selects it (call, errno, memory), for the tests and docs/analyze.md's table.
#[cfg(test)]
pub(super) const TABLE: [(&str, &str, &str, Row); 28] = [
    ("ibv_reg_dmabuf_mr", "ENOMEM", "any", ENOMEM_DMABUF),
    ("ibv_reg_dmabuf_mr", "EINVAL", "any", EINVAL_DMABUF),
    ("ibv_reg_dmabuf_mr", "other or none", "any", OTHER_DMABUF),
    ("any", "ENOMEM", "any", ENOMEM_ANY),
    ("any", "EAGAIN", "any", EAGAIN_ANY),
    ("any", "EPERM", "any", EPERM_ANY),
    ("any", "EACCES", "any", EACCES_ANY),
    ("ibv_reg_dmabuf_mr", "EOPNOTSUPP", "any", EOPNOTSUPP_DMABUF),
    ("any", "EOPNOTSUPP", "GPU", EOPNOTSUPP_DEVICE),
    ("any", "EOPNOTSUPP", "host / unknown", EOPNOTSUPP_HOST),
    ("any", "EFAULT", "GPU", EFAULT_DEVICE),
    ("any", "EFAULT", "host", EFAULT_HOST),
    ("any", "EFAULT", "unknown", EFAULT_UNKNOWN),
    ("ibv_reg_mr_iova2", "EINVAL", "GPU", EINVAL_DEVICE_IOVA),
    ("any", "EINVAL", "GPU", EINVAL_DEVICE),
    ("ibv_reg_mr_iova2", "EINVAL", "host", EINVAL_HOST_IOVA),
    ("any", "EINVAL", "host", EINVAL_HOST),
    ("any", "EINVAL", "unknown", EINVAL_UNKNOWN),
    ("any", "other", "GPU", OTHER_DEVICE),
    ("any", "other", "host / unknown", OTHER_ANY),
    ("cxil_map", "none printed", "GPU", NONE_CXI_DEVICE),
    ("cxil_map", "none printed", "host / unknown", NONE_CXI),
    (
        "a kernel consumer's (ib_alloc_mr, ib_map_mr_sg, rdma_rw_ctx_init ...)",
        "ENOMEM / EAGAIN / ENOSPC",
        "any",
        KERNEL_NOMEM,
    ),
    ("a kernel consumer's", "other", "any", KERNEL_OTHER),
    ("a kernel consumer's", "none printed", "any", KERNEL_NONE),
    ("any", "none printed", "GPU", NONE_DEVICE),
    ("any", "none printed", "host / unknown", NONE_HOST),
    ("a stack's warning, no failure", "none", "any", WARNED),
];

/// The table as docs/analyze.md shows it: one markdown line per row.
#[cfg(test)]
pub(super) fn markdown() -> String {
    let mut s = String::from("| call | errno | memory | P(cause), most likely first |\n|---|---|---|---|\n");
    for (call, e, m, row) in TABLE {
        let ps: Vec<String> = row.iter().map(|(c, p)| format!("{c} {:.2}", p)).collect();
        s.push_str(&format!("| {call} | {e} | {m} | {} |\n", ps.join(", ")));
    }
    s
}

/// The memory class of a failed group: GPU memory, or unknown memory where GPU memory is in play.
pub(super) fn mem_class(k: &GroupKey, gpuish: bool) -> Mem {
    if k.mem == Some(MemKind::Device) || (unknown_mem(k.mem) && (gpuish || k.lib.registers_gpu())) {
        Mem::Device
    } else if is_host_mem(k.mem) || k.mem == Some(MemKind::FileReadonly) {
        Mem::Host
    } else {
        Mem::Unknown
    }
}

/// The row for a failed group: P(cause | call, errno, memory class).
pub(super) fn row(k: &GroupKey, gpuish: bool) -> Row {
    if k.call == super::WARNED_CALL {
        return WARNED;
    }
    if k.call == "cxil_map" && k.errno.is_none() {
        return if mem_class(k, gpuish) == Mem::Device { NONE_CXI_DEVICE } else { NONE_CXI };
    }
    if in_kernel_consumer(&k.call) {
        return kernel_row(k.errno);
    }
    lookup(k.errno, mem_class(k, gpuish), k.call.contains("dmabuf"), k.call.contains("iova"))
}

/// The row of a kernel consumer's failure by its errno.
pub(super) fn kernel_row(e: Option<i32>) -> Row {
    match e {
        Some(ENOMEM) | Some(EAGAIN) | Some(ENOSPC) => KERNEL_NOMEM,
        Some(_) => KERNEL_OTHER,
        None => KERNEL_NONE,
    }
}

pub(super) fn lookup(e: Option<i32>, mem: Mem, dmabuf: bool, iova: bool) -> Row {
    let notsup = |e| errno::not_supported(Some(e));
    match (e, mem) {
        (Some(ENOMEM), _) if dmabuf => ENOMEM_DMABUF,
        (Some(ENOMEM), _) => ENOMEM_ANY,
        (Some(EAGAIN), _) => EAGAIN_ANY,
        (Some(EPERM), _) => EPERM_ANY,
        (Some(EACCES), _) => EACCES_ANY,
        (Some(e), _) if notsup(e) && dmabuf => EOPNOTSUPP_DMABUF,
        (Some(e), Mem::Device) if notsup(e) => EOPNOTSUPP_DEVICE,
        (Some(e), _) if notsup(e) => EOPNOTSUPP_HOST,
        (Some(EINVAL), _) if dmabuf => EINVAL_DMABUF,
        (_, _) if dmabuf => OTHER_DMABUF,
        (Some(EFAULT), Mem::Device) => EFAULT_DEVICE,
        (Some(EFAULT), Mem::Host) => EFAULT_HOST,
        (Some(EFAULT), Mem::Unknown) => EFAULT_UNKNOWN,
        (Some(EINVAL), Mem::Device) if iova => EINVAL_DEVICE_IOVA,
        (Some(EINVAL), Mem::Device) => EINVAL_DEVICE,
        (Some(EINVAL), Mem::Host) if iova => EINVAL_HOST_IOVA,
        (Some(EINVAL), Mem::Host) => EINVAL_HOST,
        (Some(EINVAL), Mem::Unknown) => EINVAL_UNKNOWN,
        (Some(_), Mem::Device) => OTHER_DEVICE,
        (Some(_), _) => OTHER_ANY,
        (None, Mem::Device) => NONE_DEVICE,
        (None, _) => NONE_HOST,
    }
}

/// What a failure showed, in words, for the "nothing decides it" statement.
pub(super) fn observed(k: &GroupKey, gpuish: bool) -> String {
    if k.call == super::WARNED_CALL {
        return "a stack's warning, no failed registration".into();
    }
    let e = k.errno.map_or("no errno".to_string(), |e| format!("{} ({})", errno::name(e), errno::text(e)));
    let m = match (mem_class(k, gpuish), k.mem) {
        (_, Some(m)) if m != MemKind::Unknown => format!("{} memory", m.name()),
        (Mem::Device, _) => "memory of unknown kind, GPU memory likely (a GPU context or library)".into(),
        _ => "memory of unknown kind".into(),
    };
    format!("{}, {e}, {m}", k.call)
}
