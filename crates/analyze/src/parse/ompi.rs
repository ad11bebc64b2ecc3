//! Open MPI help messages (openib BTL / registered-memory warnings) and its version banner.
use super::FileCtx;
use crate::errno;
use crate::event::{Event, Fact, Flag, Lib, RegEv};
use crate::scan::has;

/// A registration Open MPI says failed (its openib BTL's `ibv_reg_mr`), with the line that stands for
/// it where that is not the line that prints the failure.
fn reg_failed(host: Option<String>, errno: Option<i32>, evid: Option<&str>) -> Event {
    Event::Reg(RegEv {
        lib: Some(Lib::Ompi),
        host,
        call: "ibv_reg_mr".into(),
        errno,
        evid: evid.map(|t| (0, t.to_string())),
        ..Default::default()
    })
}

pub fn parse(line: &str, ctx: &mut FileCtx, emit: &mut dyn FnMut(Event)) -> bool {
    let t = line.trim();
    if let Some(h) = t.strip_prefix("Local host:").or_else(|| t.strip_prefix("Hostname:")) {
        let h = h.trim();
        if !h.is_empty() {
            ctx.host = Some(h.split('.').next().unwrap_or(h).to_string());
        }
        return true;
    }
    let host = ctx.host.clone();
    let fact = |f: Fact| Event::Fact { lib: Lib::Ompi, host: host.clone(), pid: None, fact: f };
    if let Some(v) = t.strip_prefix("mpirun (Open MPI) ") {
        emit(fact(Fact::Version("Open MPI".into(), v.trim().to_string())));
        return true;
    }
    if has!(t, "error registering openib memory") {
        emit(reg_failed(host, errno::find(t), None));
        return true;
    }
    if has!(t, "allocate some locked memory")
        || has!(t, "limit on locked memory")
        || (has!(t, "OpenFabrics") && has!(t, "locked memory"))
    {
        ctx.ompi_lockwarn = true;
        emit(fact(Fact::Flag(Flag::LockedMemWarn)));
        return true;
    }
    if has!(t, "only allow registering part of your physical memory")
        || has!(t, "configured to only") && has!(t, "OpenFabrics")
    {
        emit(fact(Fact::Flag(Flag::RegLimitWarn)));
        ctx.ompi_reglimit = true;
        return true;
    }
    // the warning's table ends with the registerable amount: the registrations past it are the ones
    // the job fails or hangs on, so the warning stands for one failed (ENOMEM) registration
    if t.starts_with("Registerable memory:") && std::mem::take(&mut ctx.ompi_reglimit) {
        emit(reg_failed(host, Some(errno::ENOMEM), Some(t)));
        return true;
    }
    if let Some(v) = t.strip_prefix("Memlock limit:") {
        let v = v.trim();
        if let Ok(n) = v.parse::<u64>() {
            emit(fact(Fact::Memlock(Some(n))));
        } else if v == "unlimited" {
            emit(fact(Fact::Memlock(None)));
        }
        // the help text ends the failed allocation: count it as the failed registration it was
        if std::mem::take(&mut ctx.ompi_lockwarn) {
            emit(reg_failed(host, None, None));
        }
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registerable_memory_warning_stands_for_one_enomem_registration() {
        let text = "WARNING: It appears that your OpenFabrics subsystem is configured to only
allow registering part of your physical memory.  This can cause MPI jobs to
  Local host:              node02
  Registerable memory:     32768 MiB
  Total memory:            65476 MiB";
        let mut ctx = FileCtx::default();
        let (mut flags, mut regs) = (Vec::new(), Vec::new());
        for l in text.lines() {
            parse(l, &mut ctx, &mut |e| match e {
                Event::Fact { fact: Fact::Flag(f), .. } => flags.push(f),
                Event::Reg(r) => regs.push((r.host, r.errno)),
                _ => {}
            });
        }
        assert_eq!(flags, [Flag::RegLimitWarn]);
        assert_eq!(regs, [(Some("node02".to_string()), Some(errno::ENOMEM))]);
        // without the warning, the table line alone is not a failure
        let mut ctx = FileCtx::default();
        let mut n = 0;
        parse("  Registerable memory:     32768 MiB", &mut ctx, &mut |e| n += matches!(e, Event::Reg(_)) as usize);
        assert_eq!(n, 0);
    }

    /// v1.5's [mem-reg-fail] help text is one failure whose errno is in its table: on `Errno says:`,
    /// or on `Function:` where v1.5's call (no want_error_header argument) shifted the table by one.
    #[test]
    fn the_mem_reg_fail_help_text_takes_its_errno_from_its_table() {
        let fails = |lines: &[&str]| -> Vec<Option<i32>> {
            crate::parse::vocab::tests::run(lines)
                .into_iter()
                .filter_map(|e| if let Event::Reg(r) = e { (!r.ok).then_some(r.errno) } else { None })
                .collect()
        };
        let head = [
            "The OpenFabrics (openib) BTL failed to register memory in the driver.",
            "Please check /var/log/messages or dmesg for driver specific failure",
            "reason.",
            "The failure occured here:",
            "",
        ];
        let shifted = [
            "  Local host:    mlx4_0",
            "  Device:        openib_reg_mr",
            "  Function:      Cannot allocate memory()",
            "  Errno says:    (null) (errno=0)",
            "",
            "You may need to consult with your system administrator to get this",
        ];
        let lines: Vec<&str> = head.iter().chain(&shifted).copied().collect();
        assert_eq!(fails(&lines), [Some(errno::ENOMEM)]);
        let table = [
            "  Local host:    node03",
            "  Device:        mlx4_0",
            "  Function:      openib_reg_mr()",
            "  Errno says:    Bad address (errno=14)",
            "",
        ];
        let lines: Vec<&str> = head.iter().chain(&table).copied().collect();
        assert_eq!(fails(&lines), [Some(errno::EFAULT)]);
    }
}
