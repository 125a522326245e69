//! Any bytes as an AdmissionReview body, through every endpoint (see `fuzz/checks.rs`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::review_bytes(data));
