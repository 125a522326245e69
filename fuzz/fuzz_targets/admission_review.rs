//! Any bytes as an AdmissionReview body, through every endpoint (see `fuzz/checks.rs`); and the
//! memory model measured, not computed: the heap `review::parse` takes for the bytes, counted by
//! the allocator, stays within what admission charges for them before parsing
//! (`model::json::parse_cost`, docs/reliability.md "The memory model").
#![no_main]

#[path = "../checks.rs"]
mod checks;

/// Counts the bytes allocated now and the most at once. libFuzzer runs one input at a time on
/// one thread, so the peak is this input's.
#[global_allocator]
static ALLOC: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let cost = confighistory::model::json::parse_cost(data);
    let before = ALLOC.current_usage();
    ALLOC.reset_peak_usage();
    let parsed = confighistory::admission::review::parse(data);
    let peak = ALLOC.peak_usage().saturating_sub(before);
    // A body that does not parse is refused with a message: the request's constant share
    // (`webhook::request_cost`, 64 KiB) holds it; the tree built before the error is charged.
    let allowed = if parsed.is_ok() { cost } else { cost + 64 * 1024 };
    drop(parsed);
    assert!(peak <= allowed, "parsing {} bytes took {peak} bytes of heap, more than the {allowed} charged", data.len());
    checks::review_bytes(data);
});
