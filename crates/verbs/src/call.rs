//! The verbs entry points mrshim records, retries and makes failures up for, by the names
//! records, `MRSHIM_RETRY` (`calls=`, `on.CALL=`) and `MRSHIM_INJECT` use: one enum for the shim,
//! its retry engine and everything that reads their output.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    RegMr,
    RegMrIova,
    RegMrIova2,
    RegDmabufMr,
    DeregMr,
    /// Recorded, never retried or injected: it changes an MR, it makes none.
    ReregMr,
}

impl Call {
    pub const ALL: [Call; 6] =
        [Call::RegMr, Call::RegMrIova, Call::RegMrIova2, Call::RegDmabufMr, Call::DeregMr, Call::ReregMr];
    /// The registrations: what retries and injected failures apply to.
    pub const REGISTRATIONS: [Call; 4] = [Call::RegMr, Call::RegMrIova, Call::RegMrIova2, Call::RegDmabufMr];

    pub fn name(self) -> &'static str {
        match self {
            Call::RegMr => "ibv_reg_mr",
            Call::RegMrIova => "ibv_reg_mr_iova",
            Call::RegMrIova2 => "ibv_reg_mr_iova2",
            Call::RegDmabufMr => "ibv_reg_dmabuf_mr",
            Call::DeregMr => "ibv_dereg_mr",
            Call::ReregMr => "ibv_rereg_mr",
        }
    }

    /// Position in [`Call::ALL`] (per-call counters).
    pub fn index(self) -> usize {
        self as usize
    }

    /// A registration by name, with or without the `ibv_` prefix (`reg_mr_iova2`).
    pub fn parse_registration(s: &str) -> Option<Call> {
        let s = s.strip_prefix("ibv_").unwrap_or(s);
        Call::REGISTRATIONS.into_iter().find(|c| &c.name()[4..] == s)
    }

    pub fn is_dmabuf(self) -> bool {
        self == Call::RegDmabufMr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_parse_by_either_name_and_dereg_is_not_one() {
        for c in Call::REGISTRATIONS {
            assert_eq!(Call::parse_registration(c.name()), Some(c));
            assert_eq!(Call::parse_registration(&c.name()[4..]), Some(c));
        }
        assert_eq!(Call::parse_registration("ibv_dereg_mr"), None);
        assert_eq!(Call::parse_registration("ibv_rereg_mr"), None);
        assert!(Call::ALL.iter().enumerate().all(|(i, c)| c.index() == i));
    }
}
