#![forbid(unsafe_code)]
//! Load tools for confighistory's benchmarks, driven by `benches/load/run`:
//!
//! - `chbench floor --listen ADDR --cert PEM --key PEM`: the floor of this stack, a webhook that
//!   does the least any webhook must do: TLS (rustls, ring), HTTP/1.1 keep-alive (hyper), parse the
//!   AdmissionReview (serde_json, the whole document) and answer allowed with the request's uid.
//! - `chbench drive --url https://HOST:PORT/PATH --body FILE --ca PEM [--rate R] [--server-name DNS] ...`: HTTPS
//!   keep-alive load at a fixed rate (latency measured from each request's intended send time, so
//!   a stalled server is not hidden by coordinated omission), or closed-loop (`--rate max`) for the
//!   highest rate. Prints one JSON line.
//! - `chbench fixtures --namespace NS --out DIR`: the cluster objects of the steady-state scenario
//!   (a source, its snapshot, a Deployment pinned to it) and the AdmissionReview bodies.
//! - `chbench sha --body FILE`: SHA-256 of the content a source UPDATE review carries, as
//!   confighistory frames it, timed (the other half of the 1 MiB UPDATE's limit, with the floor).
//! - `chbench bulk --namespaces N --configmaps C --deployments D --out DIR`: multi-document YAML for the
//!   memory-at-scale measurement.

mod drive;
mod fixtures;
mod floor;
mod sha;

use std::collections::HashMap;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(cmd) = args.next() else { usage() };
    let opts = Opts::parse(args);
    let result = match cmd.as_str() {
        "floor" => floor::main(&opts),
        "drive" => drive::main(&opts),
        "fixtures" => fixtures::main(&opts),
        "bulk" => fixtures::bulk(&opts),
        "sha" => sha::main(&opts),
        _ => usage(),
    };
    if let Err(e) = result {
        eprintln!("chbench {cmd}: {e}");
        std::process::exit(1);
    }
}

fn usage() -> ! {
    eprintln!("usage: chbench floor|drive|fixtures|bulk|sha --flag value ... (see src/main.rs)");
    std::process::exit(2)
}

pub type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// `--name value` pairs.
pub struct Opts(HashMap<String, String>);

impl Opts {
    fn parse(mut args: impl Iterator<Item = String>) -> Opts {
        let mut m = HashMap::new();
        while let Some(a) = args.next() {
            let Some(name) = a.strip_prefix("--") else { usage() };
            let Some(value) = args.next() else { usage() };
            m.insert(name.to_owned(), value);
        }
        Opts(m)
    }

    pub fn get(&self, name: &str) -> Result<&str> {
        self.0.get(name).map(String::as_str).ok_or_else(|| format!("--{name} is required").into())
    }

    pub fn or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.0.get(name).map(String::as_str).unwrap_or(default)
    }

    pub fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T> {
        match self.0.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name}: not a number: {v}").into()),
        }
    }
}
