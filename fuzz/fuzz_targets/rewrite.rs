//! Reference rewriting: bytes choose a workload request; the invariants are in `fuzz/checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::rewrite_bytes(data));
