//! errno names as users see them in logs (`EINVAL (22)`), both ways: the shared table of
//! crates/errno, here for the shim, the retry crate and the simulator that already speak verbs.
pub use mrshim_errno::{name, names_help, parse, text};
