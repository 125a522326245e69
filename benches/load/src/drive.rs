//! HTTPS keep-alive load generator.
//!
//! Fixed rate (`--rate R`): request i is due at `start + i/R`; each of `--connections` keep-alive
//! connections takes the next due request when it is free. Latency runs from the due time when the
//! request could not be sent on time because every connection was still waiting for the server (the
//! queueing a real client would see; no coordinated omission), and from the actual send otherwise
//! (so the generator's own timer granularity is not charged to the server).
//! Closed loop (`--rate max`): every connection sends back to back; the rate is what the server
//! sustains, latency is per request.
//! Only requests due after `--warmup` seconds are recorded; the run lasts `--warmup + --duration`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::{Opts, Result};

struct Plan {
    addr: SocketAddr,
    /// The name the certificate is checked against: `--server-name`, else the address (a server
    /// reached by a pod IP serves a certificate for its Service's DNS name).
    server_name: ServerName<'static>,
    host: String,
    path: String,
    body: Bytes,
    expect: String,
    /// None: closed loop.
    interval: Option<Duration>,
    start: Instant,
    measure_from: Instant,
    end: Instant,
    next: AtomicU64,
}

#[derive(Default)]
struct Tally {
    hist: Option<Histogram<u64>>,
    ok: u64,
    errors: u64,
    late: u64,
    first_error: Option<String>,
}

pub fn main(opts: &Opts) -> Result<()> {
    let url = opts.get("url")?;
    let rest = url.strip_prefix("https://").ok_or("--url must be https://HOST:PORT/PATH")?;
    let (hostport, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let addr: SocketAddr = hostport.parse()?;
    let body = Bytes::from(std::fs::read(opts.get("body")?)?);
    let connections: usize = opts.num("connections", 8)?;
    let rate = opts.or("rate", "max");
    let interval = if rate == "max" { None } else { Some(Duration::from_secs_f64(1.0 / rate.parse::<f64>()?)) };
    let warmup = Duration::from_secs_f64(opts.num("warmup", 2.0)?);
    let duration = Duration::from_secs_f64(opts.num("duration", 10.0)?);
    let threads: usize = opts.num("threads", 1)?;
    let server_name = match opts.or("server-name", "") {
        "" => ServerName::IpAddress(addr.ip().into()),
        name => ServerName::try_from(name.to_owned())?,
    };

    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(opts.get("ca")?)? {
        roots.add(c?)?;
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = TlsConnector::from(Arc::new(tls));

    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?
    };
    let tallies = rt.block_on(async move {
        // Connect (and handshake) every connection before the clock starts.
        let mut senders = Vec::new();
        for _ in 0..connections {
            senders.push(connect(&connector, addr, &server_name).await?);
        }
        let start = Instant::now() + Duration::from_millis(50);
        let plan = Arc::new(Plan {
            addr,
            server_name,
            host: hostport.to_owned(),
            path,
            body,
            expect: opts.or("expect", "\"allowed\":true").to_owned(),
            interval,
            start,
            measure_from: start + warmup,
            end: start + warmup + duration,
            next: AtomicU64::new(0),
        });
        let tasks: Vec<_> = senders.into_iter().map(|s| tokio::spawn(run_connection(plan.clone(), s, connector.clone()))).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await?);
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(out)
    })?;

    let mut hist = new_hist();
    let (mut ok, mut errors, mut late, mut first_error) = (0, 0, 0, None);
    for t in tallies {
        if let Some(h) = &t.hist {
            hist.add(h)?;
        }
        ok += t.ok;
        errors += t.errors;
        late += t.late;
        first_error = first_error.or(t.first_error);
    }
    let q = |p: f64| hist.value_at_quantile(p) as f64 / 1000.0;
    let secs = duration.as_secs_f64();
    let result = json!({
        "mode": if interval.is_some() { "fixed" } else { "max" },
        "target_rate": interval.map(|i| 1.0 / i.as_secs_f64()),
        "connections": connections,
        "duration_s": secs,
        "requests": ok,
        "errors": errors,
        "late": late,
        "achieved_rate": ok as f64 / secs,
        "mean_ms": hist.mean() / 1000.0,
        "p50_ms": q(0.50),
        "p90_ms": q(0.90),
        "p99_ms": q(0.99),
        "p999_ms": q(0.999),
        "max_ms": hist.max() as f64 / 1000.0,
        "first_error": first_error,
    });
    println!("{result}");
    if errors > 0 {
        return Err(format!("{errors} requests failed; first: {}", result["first_error"]).into());
    }
    Ok(())
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

async fn connect(connector: &TlsConnector, addr: SocketAddr, name: &ServerName<'static>) -> Result<SendRequest<Full<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let stream = connector.connect(name.clone(), tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn run_connection(plan: Arc<Plan>, mut sender: SendRequest<Full<Bytes>>, connector: TlsConnector) -> Tally {
    let mut tally = Tally { hist: Some(new_hist()), ..Default::default() };
    let hist = tally.hist.as_mut().expect("set");
    tokio::time::sleep_until(plan.start.into()).await;
    let mut free_since = Instant::now();
    loop {
        let (due, from) = match plan.interval {
            Some(iv) => {
                let i = plan.next.fetch_add(1, Ordering::Relaxed);
                let due = plan.start + iv.mul_f64(i as f64);
                if due >= plan.end {
                    break;
                }
                if free_since <= due {
                    tokio::time::sleep_until(due.into()).await;
                    (due, None)
                } else {
                    tally.late += u64::from(due >= plan.measure_from);
                    (due, Some(due))
                }
            }
            None => {
                let now = Instant::now();
                if now >= plan.end {
                    break;
                }
                (now, None)
            }
        };
        let sent = Instant::now();
        let outcome = send(&plan, &mut sender).await;
        let done = Instant::now();
        free_since = done;
        let record = match plan.interval {
            Some(_) => due >= plan.measure_from,
            None => sent >= plan.measure_from && done <= plan.end,
        };
        match outcome {
            Ok(()) if record => {
                tally.ok += 1;
                let latency = done - from.unwrap_or(sent);
                let _ = hist.record((latency.as_micros() as u64).max(1));
            }
            Ok(()) => {}
            Err(e) => {
                tally.errors += u64::from(record);
                tally.first_error.get_or_insert(e.to_string());
                // The connection may be gone: open a new one.
                match connect(&connector, plan.addr, &plan.server_name).await {
                    Ok(s) => sender = s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    }
    tally
}

async fn send(plan: &Plan, sender: &mut SendRequest<Full<Bytes>>) -> Result<()> {
    sender.ready().await?;
    let req = hyper::Request::post(plan.path.as_str())
        .header(hyper::header::HOST, plan.host.as_str())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(plan.body.clone()))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() || !contains(&body, plan.expect.as_bytes()) {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(300)])).into());
    }
    Ok(())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
