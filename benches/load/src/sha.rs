//! `chbench sha --body FILE [--seconds S]`: SHA-256 of the content a source UPDATE review carries,
//! framed as confighistory frames it for the snapshot's name (docs/behaviour.md §5.1;
//! `fixtures::content_hash`), timed on this thread for S seconds (default 3). `benches/load/run`
//! pins it to the servers' core in each round of scenario (b): with the floor's CPU per request, the
//! limit of a 1 MiB UPDATE (no webhook that names snapshots by their content can
//! do less than parse the review and hash the content). Prints one JSON line.

use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{Opts, Result};

/// The framing `fixtures::content_hash` hashes, of the review's `object`.
fn framing(review: &Value) -> Vec<u8> {
    let object = &review["request"]["object"];
    let mut out = b"confighistory/v1\0".to_vec();
    for (tag, field) in [(b'd', "data"), (b'b', "binaryData")] {
        // serde_json's map iterates in key order, as confighistory frames it.
        let map = object.get(field).and_then(Value::as_object).cloned().unwrap_or_default();
        out.push(tag);
        out.extend_from_slice(&(map.len() as u64).to_be_bytes());
        for (k, v) in &map {
            let v = v.as_str().unwrap_or_default();
            out.extend_from_slice(&(k.len() as u64).to_be_bytes());
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(&(v.len() as u64).to_be_bytes());
            out.extend_from_slice(v.as_bytes());
        }
    }
    out
}

/// This thread's CPU time so far (`/proc/thread-self/schedstat`).
fn cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(s.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0))
}

pub fn main(opts: &Opts) -> Result<()> {
    let review: Value = serde_json::from_slice(&std::fs::read(opts.get("body")?)?)?;
    let seconds: f64 = opts.num("seconds", 3.0)?;
    let bytes = framing(&review);
    let (start, wall) = (cpu(), Instant::now());
    let mut n = 0u64;
    while wall.elapsed().as_secs_f64() < seconds {
        std::hint::black_box(Sha256::digest(std::hint::black_box(&bytes)));
        n += 1;
    }
    let per = (cpu() - start).as_secs_f64() / n as f64;
    println!("{{\"sha_us\": {:.1}, \"bytes\": {}, \"runs\": {n}}}", per * 1e6, bytes.len());
    Ok(())
}
