//! The order between two causes the output both supports. The rules (rules.rs) score each cause on
//! its own; where two of them fit the same failures (ENOMEM: the memlock accounting or a device's
//! limits; EFAULT: GPU memory without peer memory or a range the kernel cannot pin) a line of the
//! stack's own output often tells which, and that line decides the order: it is added to the
//! finding it supports as evidence (the finding's evidence lines name it) and its reason is said.
//! Each decision is one function, read from the stacks' and the kernel's sources.
use super::*;

/// A registration size no locked-memory limit that fails a job is set at: the defaults are 64 KiB
/// (older kernels and distributions) and 8 MiB (MLOCK_LIMIT since Linux 5.16), sites that care set
/// `unlimited`. A job under such a default fails on its first small buffers (a stack's pools, QP
/// and CQ buffers are pinned too), long before a registration of gigabytes.
const FAR_BEYOND_MEMLOCK: u64 = 1 << 30;

/// Sizes a line prints, with their unit (`37.7 GB`, `len 8388608 KB`, `4.00 GB segment`, `N bytes`) —
/// not rates (`100 Gb/s`, `200 Gbps`). Read from the whole failure line when it is collected (the
/// evidence kept is clipped to 200 characters), so it allocates nothing.
pub(crate) fn printed_sizes(text: &str) -> Vec<u64> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
            i += 1;
        }
        let Ok(n) = text[start..i].parse::<f64>() else { continue };
        let mut j = i;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        let w = j;
        while j < b.len() && (b[j].is_ascii_alphabetic() || b[j] == b'/') {
            j += 1;
        }
        let word = &text[w..j];
        let unit = |u: &str| word.eq_ignore_ascii_case(u);
        let mult: u64 = if unit("kb") || unit("kib") || unit("kbytes") {
            1 << 10
        } else if unit("mb") || unit("mib") || unit("mbytes") {
            1 << 20
        } else if unit("gb") || unit("gib") || unit("gbytes") {
            1 << 30
        } else if unit("tb") || unit("tib") {
            1 << 40
        } else if unit("bytes") {
            1
        } else {
            continue;
        };
        out.push((n * mult as f64) as u64);
    }
    out.extend(printed_ranges(text));
    out
}

/// The sizes of address ranges printed as intervals, `[0xSTART, 0xEND)` or `[0xSTART-0xEND]` (GASNet's
/// segment binding `when binding segment [0x602000000, 0xecc000000) to EP 2`): END - START.
fn printed_ranges(text: &str) -> impl Iterator<Item = u64> + '_ {
    let hex = crate::parse::shim::parse_hex;
    text.match_indices('[').filter_map(move |(i, _)| {
        let rest = &text[i + 1..];
        let close = rest.find([')', ']'])?;
        let inner = &rest[..close];
        let (a, b) = inner.split_once(',').or_else(|| inner.split_once('-'))?;
        let (a, b) = (hex(a)?, hex(b)?);
        (b > a).then(|| b - a)
    })
}

/// The largest size a failure group shows: its parsed length or a size printed on its lines
/// (collect.rs reads [`printed_sizes`] into `max_len` from each whole failure line).
fn group_size(g: &Group) -> u64 {
    g.max_len
}

/// Whether a failure line of the stack names the NIC's translation table as what ran out (libvma's
/// `register_memory() ... This might happen due to low MTT entries`, IBM Storage Scale's `VERBS RDMA
/// ibv_reg_mr err 12 ... Try increasing device MTTs`, mlx4's `log_num_mtt`).
pub(super) fn names_translation_table(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.match_indices("mtt").any(|(i, _)| {
        let before = lower[..i].chars().next_back();
        let after = lower[i + 3..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() && c != 's')
            || lower[..i].ends_with("log_num_")
    }) || lower.contains("translation table")
}

/// ENOMEM: the memlock accounting of `ib_umem_get` or a device's limits (mkeys, MTT, EFA's pages,
/// BAR1, a GPU segment). A registration of gigabytes where no small limit is shown, or a stack that
/// names the translation table in its failure line, puts resources first; a small limit shown keeps
/// memlock first (the memlock rule weighs it, 2.5).
pub(super) fn enomem<'a>(v: &View<'a>, cands: &mut [Cand<'a>]) {
    let limit_errno = |e: Option<i32>| matches!(e, Some(ENOMEM) | Some(EAGAIN));
    let small_limit = v.c.hosts.values().flat_map(|h| h.memlock.keys()).filter_map(|m| *m).min();
    // the largest failing registration with a memlock errno, with its line
    let big = v
        .fails
        .iter()
        .filter(|(k, _)| limit_errno(k.errno) && !k.call.contains("dmabuf"))
        .map(|(_, g)| (group_size(g), g))
        .filter(|(s, _)| *s >= FAR_BEYOND_MEMLOCK)
        .max_by_key(|(s, _)| *s);
    if let Some((size, g)) = big {
        // a limit shown below the size is the limit the registration crossed: memlock keeps its place
        if small_limit.is_none_or(|l| l >= size) {
            let e = g.evidence.first();
            let shown = match small_limit {
                Some(l) => format!("the locked-memory limit shown ({}) is above it", human_size(l)),
                None => "no locked-memory limit is shown".to_string(),
            };
            if let Some(c) = cands.iter_mut().find(|c| c.cat == "resource-exhaustion") {
                c.add(2.0, format!("A registration of {} failed with ENOMEM and {shown}: far beyond the default locked-memory limits (64 KiB, 8 MiB), under which a job fails on its first small buffers long before — at this size the device's limits run out (MTT/mkey entries, the GPU's BAR1 aperture, max_mr_size, a provider's page limit).", human_size(size)), e);
                if c.groups.is_empty() {
                    c.groups = v.fail_where(|k, _| limit_errno(k.errno));
                }
            }
            if let Some(c) = cands.iter_mut().find(|c| c.cat == "memlock-limit") {
                c.score -= 1.0;
                c.why.push(format!("A locked-memory limit a job first reaches at a {} registration is no default; one set that high on purpose is rarer than a device limit at that size.", human_size(size)));
            }
        }
    }
    // the stack's own failure line names the HCA's translation table
    let table = v.fails.iter().find_map(|(k, g)| {
        (limit_errno(k.errno) || k.errno.is_none())
            .then(|| g.evidence.iter().find(|e| names_translation_table(&e.text)))
            .flatten()
    });
    if let Some(e) = table {
        if let Some(c) = cands.iter_mut().find(|c| c.cat == "resource-exhaustion") {
            c.add(2.0, "The stack's own failure line names the HCA's memory translation table (MTT): registered memory is bounded by its entries (mlx4_core log_num_mtt x 2^log_mtts_per_seg; mlx5 firmware resources), which answer ENOMEM when full.", Some(e));
            if c.groups.is_empty() {
                c.groups = v.fail_where(|k, _| limit_errno(k.errno) || k.errno.is_none());
            }
        }
    }
}

/// EFAULT on a gdrcopy mapping: `gdr_map` maps the GPU's BAR into the process with
/// (io_)remap_pfn_range (gdrdrv.c `gdrdrv_mmap`), which makes the VMA VM_IO | VM_PFNMAP. Registering
/// that CPU address pins nothing (`check_vma_flags` refuses VM_IO/VM_PFNMAP: EFAULT), and no
/// peer-memory client claims it (it is no CUDA allocation): the address is wrong, not the missing
/// peer memory — register the CUDA device pointer, not its gdr_map mapping.
pub(super) fn efault_bar_mapping<'a>(v: &View<'a>, cands: &mut [Cand<'a>]) {
    let efault = v.fail_where(|k, _| k.errno == Some(EFAULT));
    // a line of its own (facts.rs), or the failure's own line naming the mapping it registered
    let own = efault
        .iter()
        .flat_map(|g| g.1.evidence.iter())
        .find(|e| crate::parse::facts::gdr_bar_mapping(&e.text.to_ascii_lowercase()));
    let Some(e) = v.flag(Flag::GdrBarMapping).or(own) else { return };
    if efault.is_empty() {
        return;
    }
    if let Some(c) = cands.iter_mut().find(|c| c.cat == "address-invalid") {
        c.add(3.0, format!("{} registration(s) failed with EFAULT and the program maps GPU memory into its address space with gdrcopy (gdr_map): gdrdrv maps the GPU's BAR with remap_pfn_range (VM_IO | VM_PFNMAP), which the kernel will not pin and no peer-memory client claims — register the CUDA device pointer itself, not its gdr_map CPU mapping.", sum(&efault)), Some(e));
        for g in &efault {
            if !c.groups.iter().any(|x| x.0 == g.0) {
                c.groups.push(*g);
            }
        }
    }
    if let Some(c) = cands.iter_mut().find(|c| c.cat == "gpu-peer-memory") {
        c.score -= 1.5;
        c.why.push("A gdr_map CPU mapping of GPU memory is no CUDA address: a peer-memory module would not make it registrable.".into());
    }
}
