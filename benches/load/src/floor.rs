//! The floor: the same stack as `confighistory serve` (tokio multi-thread runtime, tokio-rustls
//! with ring, hyper HTTP/1.1 keep-alive with the same timeouts) minus everything confighistory
//! adds: the whole AdmissionReview is parsed, then answered allowed with its uid.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::{Opts, Result};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HEADER_BYTES: usize = 64 * 1024;
const MAX_BODY: usize = 8 * 1024 * 1024;

pub fn main(opts: &Opts) -> Result<()> {
    let listen: SocketAddr = opts.get("listen")?.parse()?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(opts.get("cert")?)?.collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_file(opts.get("key")?)?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let listener = TcpListener::bind(listen).await?;
        eprintln!("floor: serving on {listen}");
        loop {
            let (tcp, _) = listener.accept().await?;
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(Ok(stream)) = tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(tcp)).await else { return };
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.timer(TokioTimer::new()).header_read_timeout(CLIENT_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
                let _ = builder.serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle)).await;
            });
        }
    })
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, b"{}".to_vec())),
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, b"{}".to_vec())),
    };
    let uid = review.pointer("/request/uid").cloned().unwrap_or(Value::Null);
    let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": true}});
    Ok(reply(StatusCode::OK, serde_json::to_vec(&out)?))
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}
