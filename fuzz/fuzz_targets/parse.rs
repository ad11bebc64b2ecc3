//! Any bytes through every parser, the collector, the findings engine and all three renderers.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mrshim_analyze::fuzz_one(data);
});
