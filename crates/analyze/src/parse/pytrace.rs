//! Python tracebacks: an exception raised under a frame that registers memory is a failed
//! registration, even when its own line names no registration and no errno. The Python bindings of
//! the stacks raise their library's status as the exception: NIXL's `register_memory()` calls
//! `agent.registerMem()`, whose failing status becomes `nixl._bindings.nixlBackendError:
//! NIXL_ERR_BACKEND` (src/bindings/python/nixl_bindings.cpp, throw_nixl_exception); pyverbs raises
//! `PyverbsRDMAError` from `MR.__init__`. The traceback's frames (`File "...", line N, in NAME`,
//! then the frame's source line) say which call raised; the exception is the first unindented line
//! after them. Exception lines another parser recognises (pyverbs' message, MSCCL++'s
//! `IbError: (14, 'ibv_reg_mr failed ...')`) are left to it: one failure counts once.
use super::frame::Frame;
use super::{generic, vocab, FileCtx};
use crate::errno;
use crate::event::{Event, Lib, RegEv};

/// The traceback being read.
#[derive(Debug, Default, Clone)]
pub struct PyTrace {
    /// A frame's function or source line names a memory registration.
    reg: bool,
    /// The library the frames' files belong to (`site-packages/nixl/_api.py`).
    lib: Option<Lib>,
}

/// `File "path", line N, in NAME`: the frame line of a traceback.
fn is_frame(t: &str) -> bool {
    t.starts_with("File \"") && t.contains("\", line ")
}

/// `pkg.module.SomeError: message` (or a bare name): what Python prints after the frames.
fn is_exception(t: &str) -> bool {
    let name = t.split_once(':').map_or(t, |(n, _)| n).trim_end();
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        && ["Error", "Exception", "Fault", "Failure"].iter().any(|w| name.ends_with(w))
}

/// The message of an exception line whose message is a line of its own (`RuntimeError: [1733...]
/// [gpu-a:2412:0] ib_md.c:309 UCX ERROR ...`): `None` for other lines.
pub fn message(body: &str) -> Option<&str> {
    let i = crate::scan::find!(body, ": ")?;
    let (name, msg) = (&body[..i], &body[i + 2..]);
    let msg = msg.trim_start();
    // `IbError: (14, 'ibv_reg_mr failed')` is the exception's own arguments, not a line it carries
    (name.len() < 100 && is_exception(name) && !msg.is_empty() && !msg.starts_with(['(', '\'', '"'])).then_some(msg)
}

/// Reads traceback lines; true when the line was consumed as a failure.
pub fn parse(f: &Frame, ctx: &mut FileCtx, lineno: u64, line: &str, emit: &mut dyn FnMut(Event)) -> bool {
    let body = f.body;
    let t = body.trim();
    if t.starts_with("Traceback (most recent call last)") {
        ctx.pytrace = Some(PyTrace::default());
        return false;
    }
    if is_frame(t) {
        let st = ctx.pytrace.get_or_insert_with(PyTrace::default);
        let func = t.rsplit_once(", in ").map_or("", |(_, n)| n);
        st.reg |= generic::mentions_registration(func);
        st.lib = generic::lib_hint(t).or(st.lib);
        return false;
    }
    let Some(st) = ctx.pytrace.as_mut() else { return false };
    if t.is_empty() || body.starts_with([' ', '\t']) {
        // the frame's source line (`self.agent.registerMem(reg_descs, handle_list)`) or a caret line
        st.reg |= generic::mentions_registration(t);
        return false;
    }
    let st = ctx.pytrace.take().unwrap_or_default();
    if !st.reg || !is_exception(t) || generic::recognise(body).is_some() || !vocab::table().matches(body).is_empty() {
        return false;
    }
    let ev = RegEv {
        lib: st.lib.or_else(|| generic::lib_hint(body)).or(ctx.lib_hint),
        host: f.host.map(String::from).or_else(|| ctx.host.clone()),
        pid: f.pid,
        rank: f.rank,
        call: "register memory".into(),
        ok: false,
        errno: errno::find(body),
        mem: generic::mem_hint(body),
        evid: Some((lineno, line.to_string())),
        ..Default::default()
    };
    if message(body).is_some() {
        // the line the exception carries may be a failure of its own: one failure counts once
        ctx.py_failure = Some(ev);
        return false;
    }
    generic::flush(ctx, emit);
    emit(Event::Reg(ev));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Vec<RegEv> {
        let out = super::super::vocab::tests::run(lines);
        out.into_iter().filter_map(|e| if let Event::Reg(r) = e { Some(r) } else { None }).collect()
    }

    /// NIXL's binding raises the backend's status from registerMem (nixl_bindings.cpp): one failure,
    /// library NIXL, no errno invented.
    #[test]
    fn exception_under_a_registering_frame_is_a_failure() {
        let r = run(&[
            "Traceback (most recent call last):",
            "  File \"/opt/app/worker.py\", line 40, in setup",
            "    descs = agent.register_memory(tensors)",
            "  File \"/usr/lib/python3/site-packages/nixl/_api.py\", line 429, in register_memory",
            "    self.agent.registerMem(reg_descs, handle_list)",
            "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND",
        ]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].lib, r[0].errno, r[0].ok), (Some(Lib::Nixl), None, false));
        // a partial paste without the header line reads the same
        assert_eq!(
            run(&["  File \"/x/nixl/_api.py\", line 1, in register_memory", "nixlBackendError: NIXL_ERR_BACKEND"])
                .len(),
            1
        );
    }

    /// Exceptions under frames that register nothing, and lines after the traceback, are not failures.
    #[test]
    fn other_exceptions_are_not_failures() {
        assert!(run(&[
            "Traceback (most recent call last):",
            "  File \"/x/nixl/_api.py\", line 500, in make_connection",
            "    self.agent.makeConnection(remote)",
            "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND",
            "registerMem() done",
        ])
        .is_empty());
    }

    /// An exception line another parser reads (pyverbs' own message) counts once.
    #[test]
    fn recognised_exception_lines_count_once() {
        let r = run(&[
            "Traceback (most recent call last):",
            "  File \"/t/reg.py\", line 18, in <module>",
            "    mr = MR(pd, 1 << 20, access)",
            "  File \"mr.pyx\", line 115, in pyverbs.mr.MR.__init__",
            "pyverbs.pyverbs_error.PyverbsRDMAError: Failed to register a MR. length: 1048576, access flags: 1048583. Errno: 22, Invalid argument",
        ]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].errno, r[0].access), (Some(22), Some(1048583)));
    }

    /// A library's line, then the traceback's frames, then the exception that carries the same
    /// line: the frames sit between two layers of one failure, which counts once.
    #[test]
    fn frames_between_two_layers_of_one_failure_count_once() {
        let lib = "mem.cc:88 Failed to register memory 0x7f105035d000: Input/output error [5]";
        let exc = format!("RuntimeError: {lib}");
        let frames = [
            "Traceback (most recent call last):",
            "  File \"/opt/app/serve.py\", line 40, in <module>",
            "    engine.register_memory(buf)",
            "  File \"/opt/app/engine.py\", line 12, in register_memory",
            "    raise RuntimeError(msg)",
        ];
        let mut lines = vec![lib];
        lines.extend(frames);
        lines.push(&exc);
        let r = run(&lines);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].errno, Some(5));
    }
}
