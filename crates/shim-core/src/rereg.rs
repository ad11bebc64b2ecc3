//! `ibv_rereg_mr`: one call, its `rereg` record, and the MR table following the MR to its new
//! address, length and access (so the later dereg record and the registered bytes stay right).
//!
//! An MR a retry strategy registered another way than rdma-core's struct says (a bounce region,
//! whose NIC registration is on a host shadow; an MR registered through a dmabuf, or by virtual
//! address instead of one) cannot be changed by the provider without breaking what the shim keeps
//! for it. Such a rereg is refused the way rdma-core answers for a provider without the command:
//! IBV_REREG_MR_ERR_CMD with errno EOPNOTSUPP. Callers that rereg (UCX, Open MPI) then deregister
//! the MR and register again, and the new registration goes through the shim like any other. (An
//! MR the application registered from a dmabuf gets rdma-core's own answer for dmabuf MRs,
//! IBV_REREG_MR_ERR_INPUT with EINVAL, whatever the shim registered for it.)
//! Every flag is refused, CHANGE_PD alone too: a provider may give the MR new keys on any rereg
//! (mlx5 does when it cannot modify the mkey in place), and the bounce layer finds its regions by
//! lkey; rdma-core itself lets callers fall back for exactly this answer.

use crate::config::{Level, PanicAt};
use crate::line::RegLine;
use crate::mr_table::Live;
use crate::{clock, internal, stderr_line, Call, DevName, Meta, Shim};
use mrshim_record::Kind;
use mrshim_retry::strategy::Strategy;
use mrshim_verbs::rereg as rr;
use std::sync::atomic::Ordering::Relaxed;

/// One `ibv_rereg_mr(mr, flags, pd, addr, length, access)` and the MR as its struct said before.
#[derive(Debug, Clone, Default)]
pub struct ReregArgs {
    pub mr: usize,
    pub flags: i32,
    pub pd: usize,
    pub addr: u64,
    pub length: u64,
    pub access: i32,
    /// `mr->addr`, `mr->length`, `mr->pd` before the call (0 when `mr` is null).
    pub mr_addr: u64,
    pub mr_length: u64,
    pub mr_pd: usize,
}

/// What the caller gets: the return code and errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReregOutcome {
    pub ret: i32,
    pub errno: i32,
}

/// The real `ibv_rereg_mr`, as the FFI layer reaches it.
pub trait ReregBackend {
    /// Calls the real function once: (return code, errno).
    fn invoke(&self) -> (i32, i32);
    /// The MR's lkey and rkey now (None when `mr` is null).
    fn keys(&self) -> Option<(u32, u32)>;
    /// `mr->context->device->name`.
    fn device_name(&self) -> Option<DevName>;
}

/// The MR was made by a retry strategy that registered another way than the struct says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Altered(pub Strategy);

impl Altered {
    /// The return code and errno of the refusal: rdma-core's own answer for a dmabuf MR when the
    /// application registered one (dmabuf-to-va), else a provider's without the command.
    pub fn answer(self) -> (i32, i32) {
        match self.0 {
            Strategy::DmabufToVa => (rr::ERR_INPUT, libc::EINVAL),
            _ => (rr::ERR_CMD, libc::EOPNOTSUPP),
        }
    }

    /// Why a rereg of this MR is refused (the record's `change`, the INFO line).
    pub fn why(self) -> String {
        let how = match self.0 {
            Strategy::Bounce => "its NIC registration is on a host shadow the shim keeps coherent with this buffer",
            Strategy::VaToDmabuf => "it is registered through a dmabuf of this memory",
            Strategy::DmabufToVa => {
                return "the application registered a dmabuf (rescued by dmabuf-to-va, registered by virtual \
                        address): IBV_REREG_MR_ERR_INPUT with EINVAL, as rdma-core answers for a dmabuf MR"
                    .into()
            }
            _ => "it is registered another way than asked",
        };
        format!(
            "the MR was rescued by {}: {how}, which a rereg would bypass; IBV_REREG_MR_ERR_CMD with EOPNOTSUPP \
             (as a provider without rereg) so the caller deregisters and registers again",
            self.0.name()
        )
    }
}

/// True when the shim refuses this rereg: an MR a strategy altered, asked to change anything,
/// with input libibverbs would accept (what it rejects itself it still answers, as without the
/// shim).
pub fn refuses(a: &ReregArgs, altered: Option<Altered>) -> bool {
    altered.is_some() && a.mr != 0 && a.flags != 0 && !rr::input_rejected(a.flags, a.addr, a.length, a.access)
}

impl Shim {
    /// One application `ibv_rereg_mr` (see the module doc): refused or passed to the real
    /// function, then counted, followed in the MR table, warned about and recorded.
    pub fn rereg(&self, a: &ReregArgs, altered: Option<Altered>, backend: &dyn ReregBackend) -> ReregOutcome {
        let refused = altered.filter(|_| refuses(a, altered));
        let Some(cfg) = &self.cfg else {
            let (ret, errno) = backend.invoke();
            return ReregOutcome { ret, errno };
        };
        let seq = self.next_seq();
        let before = self.mrs.get(a.mr);
        let registered_before = self.mrs.current();
        let t0 = if self.log.enabled() { clock::mono_ns() } else { 0 };
        let (ret, errno) = match refused {
            Some(s) => s.answer(),
            None => backend.invoke(),
        };
        let dur = if t0 != 0 { clock::mono_ns().saturating_sub(t0) } else { 0 };
        let out = ReregOutcome { ret, errno };
        self.debug_panic(PanicAt::Call);
        internal::guarded(Call::ReregMr.name(), || {
            let done = ReregDone { a, out, refused, before, registered_before, seq, t0, dur };
            self.rereg_done(cfg, backend, &done)
        });
        out
    }

    fn rereg_done(&self, cfg: &crate::config::Config, backend: &dyn ReregBackend, d: &ReregDone) {
        let (a, out) = (d.a, d.out);
        let call = Call::ReregMr;
        self.stats.calls[call.index()].fetch_add(1, Relaxed);
        let applied = rr::applied(out.ret);
        if !applied && d.refused.is_none() {
            self.stats.failures[call.index()].fetch_add(1, Relaxed);
            *self.stats.errnos.lock().entry((call, out.errno)).or_default() += 1;
        }
        let registered_after = if applied && a.mr != 0 {
            let translated = rr::translated(a.flags, out.ret);
            self.mrs.follow(a.mr, a.mr_length, |e| Live {
                addr: if translated { a.addr } else { e.addr },
                len: if translated { a.length } else { e.len },
                access: if a.flags & rr::CHANGE_ACCESS != 0 { a.access as u32 } else { e.access },
                seq: e.seq,
            })
        } else {
            d.registered_before
        };
        if cfg.warn {
            if let Some(s) = d.refused {
                stderr_line(&format!("{} INFO {} refused: {}", self.prefix(), self.rereg_call(a), s.why()));
            } else if out.ret != 0 {
                stderr_line(&format!(
                    "{} WARN {} failed: {} ({}), {}",
                    self.prefix(),
                    self.rereg_call(a),
                    mrshim_verbs::errno::name(out.errno).unwrap_or("errno"),
                    out.errno,
                    rr::ret_name(out.ret).map_or_else(|| format!("returned {}", out.ret), String::from)
                ));
            }
        }
        if !self.log.enabled() || (cfg.level == Level::Failures && out.ret == 0) {
            return;
        }
        self.debug_panic(PanicAt::Record);
        let device = backend.device_name();
        let why = d.refused.map(Altered::why);
        let keys = backend.keys();
        let ask = |flag: i32| a.flags & flag != 0;
        let l = RegLine {
            kind: Kind::Rereg,
            seq: d.seq,
            time_ns: self.clock.wall_ns(d.t0),
            host: &self.host,
            pid: self.pid.load(Relaxed),
            tid: crate::ident::tid(),
            rank: self.rank.map(|r| r.0),
            local_rank: self.local_rank.map(|r| r.0),
            call: call.name(),
            device: device.as_ref().map(DevName::as_str),
            // the MR before the call, as the shim knew it (the struct's when it did not see it made)
            pd: (a.mr_pd != 0).then_some(a.mr_pd as u64),
            addr: (a.mr != 0).then(|| d.before.map_or(a.mr_addr, |b| b.addr)),
            length: (a.mr != 0).then(|| d.before.map_or(a.mr_length, |b| b.len)),
            access: d.before.map(|b| b.access),
            registered_bytes: d.registered_before,
            registered_bytes_after: Some(registered_after),
            ok: out.ret == 0,
            mr: (a.mr != 0).then_some(a.mr as u64),
            lkey: keys.map(|k| k.0),
            rkey: keys.map(|k| k.1),
            errno: (out.ret != 0).then_some(out.errno),
            errno_name: (out.ret != 0).then(|| mrshim_verbs::errno::name(out.errno)).flatten(),
            duration_ns: d.dur,
            reg_seq: d.before.map(|b| b.seq),
            rereg_flags: Some(a.flags),
            new_addr: ask(rr::CHANGE_TRANSLATION).then_some(a.addr),
            new_length: ask(rr::CHANGE_TRANSLATION).then_some(a.length),
            new_access: ask(rr::CHANGE_ACCESS).then_some(a.access as u32),
            new_pd: ask(rr::CHANGE_PD).then_some(a.pd as u64),
            rereg_ret: Some(out.ret),
            rereg_ret_name: rr::ret_name(out.ret),
            meta: Meta {
                strategy: d.refused.map(|s| s.0.name()),
                change: why.as_deref(),
                refused: d.refused.is_some(),
                ..Meta::default()
            },
            ..Default::default()
        };
        self.emit_line(&l);
    }

    /// `ibv_rereg_mr(mr=0x.., flags=CHANGE_TRANSLATION, addr=0x.., len=N, access=..)`: the
    /// arguments its flags use.
    fn rereg_call(&self, a: &ReregArgs) -> String {
        let mut s = format!("{}(mr={:#x}, flags={}", Call::ReregMr.name(), a.mr, rr::describe_flags(a.flags));
        if a.flags & rr::CHANGE_TRANSLATION != 0 {
            s.push_str(&format!(", addr={:#x}, len={}", a.addr, a.length));
        }
        if a.flags & rr::CHANGE_ACCESS != 0 {
            s.push_str(&format!(", access={}", mrshim_verbs::access::describe(a.access as u32)));
        }
        if a.flags & rr::CHANGE_PD != 0 {
            s.push_str(&format!(", pd={:#x}", a.pd));
        }
        s + ")"
    }
}

/// One finished rereg: what its counters, lines and record need.
struct ReregDone<'a> {
    a: &'a ReregArgs,
    out: ReregOutcome,
    refused: Option<Altered>,
    /// The MR table's entry before the call (None: not tracked).
    before: Option<Live>,
    registered_before: u64,
    seq: u64,
    t0: u64,
    dur: u64,
}
