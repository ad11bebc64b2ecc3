//! Which memory the kernel's write tracking can vouch for: only private anonymous mappings.
//! Writes through another mapping of the same pages (a shared mapping, a file another process
//! writes) never touch this process's page tables, so a tracker there would miss them.

/// Whether /proc/self/maps text `maps` covers [start, end) without a hole, with private
/// anonymous mappings only (no file, inode 0; `[heap]`, `[stack]`, `[anon:...]` names allowed).
pub fn private_anonymous(maps: &str, start: u64, end: u64) -> bool {
    let mut at = start;
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (Some(r), Some(perm), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((s, e)) = r.split_once('-') else { continue };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else { continue };
        if e <= at || s > at {
            continue;
        }
        let name = f.next().unwrap_or("");
        let anon =
            inode == "0" && (name.is_empty() || name == "[heap]" || name == "[stack]" || name.starts_with("[anon:"));
        if !anon || perm.as_bytes().get(3) != Some(&b'p') {
            return false;
        }
        at = e;
        if at >= end {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::private_anonymous;

    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/prog
01000000-01100000 rw-p 00000000 00:00 0           [heap]
7f0000000000-7f0000010000 rw-p 00000000 00:00 0
7f0000010000-7f0000020000 rw-p 00000000 00:00 0           [anon:ucx]
7f0000030000-7f0000040000 rw-s 00000000 00:01 4711        /dev/zero (deleted)
7f0000040000-7f0000050000 rw-p 00000000 00:01 4712        /memfd:x (deleted)
7f0000050000-7f0000060000 rw-p 00000000 00:00 0
";

    #[test]
    fn private_anonymous_mappings_only_and_no_holes() {
        assert!(private_anonymous(MAPS, 0x0100_0000, 0x0100_1000), "heap");
        assert!(private_anonymous(MAPS, 0x7f00_0000_8000, 0x7f00_0001_8000), "two adjacent anonymous mappings");
        assert!(!private_anonymous(MAPS, 0x7f00_0001_8000, 0x7f00_0002_8000), "a hole after them");
        assert!(!private_anonymous(MAPS, 0x7f00_0003_0000, 0x7f00_0003_1000), "shared");
        assert!(!private_anonymous(MAPS, 0x7f00_0004_0000, 0x7f00_0004_1000), "private file (memfd)");
        assert!(!private_anonymous(MAPS, 0x0040_0000, 0x0040_1000), "program text");
        assert!(!private_anonymous(MAPS, 0x7f00_0005_f000, 0x7f00_0006_1000), "runs past the end");
        assert!(private_anonymous(MAPS, 0x7f00_0005_f000, 0x7f00_0006_0000));
    }
}
