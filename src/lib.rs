//! libmrshim.so — the preload. See README.md.
