//! Is this file a whole libmrshim.so for this machine? Read from the file, before anything maps
//! it: a truncated copy (an interrupted `cp` to a shared filesystem) maps fine and then kills
//! the loader with SIGBUS when it touches a page past the end of the file; a library of another
//! architecture or another library altogether (`--lib` pointing at libibverbs) must not be
//! preloaded into a job either.

/// The ELF machine this program runs on (`e_machine`).
pub const HOST_MACHINE: u16 = if cfg!(target_arch = "aarch64") { 183 } else { 62 };

fn machine_name(m: u16) -> String {
    match m {
        3 => "i386".into(),
        40 => "arm".into(),
        62 => "x86_64".into(),
        183 => "aarch64".into(),
        243 => "riscv".into(),
        21 => "ppc64".into(),
        o => format!("machine {o}"),
    }
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// One program header: type, file offset, vaddr, file size.
struct Phdr {
    ty: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;

/// Checks `file` (the whole library) as described above; `want_soname`: the SONAME it must
/// carry. The error says what is wrong in words a user can act on.
pub fn check(file: &[u8], want_soname: &str) -> Result<(), String> {
    let len = file.len() as u64;
    if file.len() < 64 || &file[..4] != b"\x7fELF" {
        return Err(if file.is_empty() { "it is empty".into() } else { "it is not an ELF file".into() });
    }
    if file[4] != 2 || file[5] != 1 {
        return Err("it is not a 64-bit little-endian ELF file".into());
    }
    let bad = || "its ELF header is damaged".to_string();
    let machine = u16_at(file, 18).ok_or_else(bad)?;
    if machine != HOST_MACHINE {
        return Err(format!(
            "it is built for {}, this machine is {}",
            machine_name(machine),
            machine_name(HOST_MACHINE)
        ));
    }
    if u16_at(file, 16) != Some(3) {
        return Err("it is not a shared library (ELF type is not ET_DYN)".into());
    }
    let truncated = |need: u64| format!("it is truncated: {len} bytes, its headers need {need} (a partial copy?)");
    let (phoff, phentsize, phnum) =
        (u64_at(file, 32).ok_or_else(bad)?, u16_at(file, 54).ok_or_else(bad)?, u16_at(file, 56).ok_or_else(bad)?);
    let (shoff, shentsize, shnum) =
        (u64_at(file, 40).ok_or_else(bad)?, u16_at(file, 58).ok_or_else(bad)?, u16_at(file, 60).ok_or_else(bad)?);
    if phentsize < 56 || phnum == 0 {
        return Err(bad());
    }
    let ph_end = phoff.saturating_add(phentsize as u64 * phnum as u64);
    if ph_end > len {
        return Err(truncated(ph_end));
    }
    let sh_end = shoff.saturating_add(shentsize as u64 * shnum as u64);
    if shnum != 0 && sh_end > len {
        return Err(truncated(sh_end));
    }
    let mut phdrs = Vec::with_capacity(phnum as usize);
    for i in 0..phnum as usize {
        let o = phoff as usize + i * phentsize as usize;
        phdrs.push(Phdr {
            ty: u32_at(file, o).ok_or_else(bad)?,
            offset: u64_at(file, o + 8).ok_or_else(bad)?,
            vaddr: u64_at(file, o + 16).ok_or_else(bad)?,
            filesz: u64_at(file, o + 32).ok_or_else(bad)?,
        });
    }
    // Every byte the loader maps from the file must be in it.
    let need = phdrs.iter().filter(|p| p.ty == PT_LOAD).map(|p| p.offset.saturating_add(p.filesz)).max().unwrap_or(0);
    if need > len {
        return Err(truncated(need));
    }
    let soname = soname(file, &phdrs).ok_or_else(|| format!("it has no SONAME (not {want_soname})"))?;
    if soname != want_soname {
        return Err(format!("it is {soname}, not {want_soname}"));
    }
    Ok(())
}

/// File offset of virtual address `va`, through the PT_LOAD that maps it.
fn offset_of(phdrs: &[Phdr], va: u64) -> Option<usize> {
    let p = phdrs.iter().find(|p| p.ty == PT_LOAD && va >= p.vaddr && va - p.vaddr < p.filesz)?;
    usize::try_from(p.offset + (va - p.vaddr)).ok()
}

/// DT_SONAME, read through PT_DYNAMIC and DT_STRTAB.
fn soname(file: &[u8], phdrs: &[Phdr]) -> Option<String> {
    let dynamic = phdrs.iter().find(|p| p.ty == PT_DYNAMIC)?;
    let (mut strtab, mut name) = (None, None);
    let start = dynamic.offset as usize;
    for i in 0..(dynamic.filesz / 16) as usize {
        let tag = u64_at(file, start + 16 * i)?;
        let val = u64_at(file, start + 16 * i + 8)?;
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_SONAME => name = Some(val),
            _ => {}
        }
    }
    let at = offset_of(phdrs, strtab?)?.checked_add(usize::try_from(name?).ok()?)?;
    let bytes = file.get(at..)?;
    let end = bytes.iter().position(|b| *b == 0)?;
    String::from_utf8(bytes[..end].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test program's own libc: a whole ELF shared library of this machine, not libmrshim.
    fn libc_bytes() -> Vec<u8> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("/libc.so.6")).unwrap();
        std::fs::read(path).unwrap()
    }

    #[test]
    fn whole_files_pass_and_partial_or_foreign_ones_are_named() {
        let libc = libc_bytes();
        assert_eq!(check(&libc, "libc.so.6"), Ok(()));
        assert_eq!(check(&libc, "libmrshim.so"), Err("it is libc.so.6, not libmrshim.so".into()));
        for cut in [libc.len() / 2, libc.len() - 1, 4096] {
            let e = check(&libc[..cut], "libc.so.6").unwrap_err();
            assert!(e.starts_with(&format!("it is truncated: {cut} bytes")), "{cut}: {e}");
        }
        assert_eq!(check(&libc[..10], "libc.so.6"), Err("it is not an ELF file".into()));
        assert_eq!(check(b"", "libc.so.6"), Err("it is empty".into()));
        let mut other = libc.clone();
        other[18..20].copy_from_slice(&(if HOST_MACHINE == 62 { 183u16 } else { 62u16 }).to_le_bytes());
        let e = check(&other, "libc.so.6").unwrap_err();
        assert!(e.starts_with("it is built for "), "{e}");
        let mut exe = libc;
        exe[16] = 2;
        assert_eq!(check(&exe, "libc.so.6"), Err("it is not a shared library (ELF type is not ET_DYN)".into()));
    }
}
