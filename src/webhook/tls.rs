//! TLS for the admission port: certificate and key from files, reloaded when they change
//! (cert-manager and the chart rotate Secrets in place), TLS 1.2 or newer only.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no PEM certificate")]
    NoCert { path: PathBuf },
    #[error("{path} holds no usable PEM private key: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("the key in {key} does not belong to the certificate in {cert}")]
    Mismatch { key: PathBuf, cert: PathBuf },
    #[error("{path} holds no usable PEM CA certificate for client certificates")]
    ClientCa { path: PathBuf },
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Loads a certificate chain and key into a signing [`CertifiedKey`].
pub fn load(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| Error::Read { path: p.to_owned(), source });
    let cert_pem = read(cert)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem).filter_map(|c| c.ok()).collect();
    if certs.is_empty() {
        return Err(Error::NoCert { path: cert.to_owned() });
    }
    let key_pem = read(key)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| Error::Key { path: key.to_owned(), reason: e.to_string() })?;
    let signing = ring::sign::any_supported_type(&key_der).map_err(|e| Error::Key { path: key.to_owned(), reason: e.to_string() })?;
    // The leaf's expiry, for the certificate-expiring alert (docs/operations.md).
    if let Some(t) = not_after(&certs[0]) {
        crate::metrics::METRICS.tls_not_after.store(t.max(0) as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let certified = CertifiedKey::new(certs, signing);
    // A rotation that writes the key and the certificate one after the other leaves a moment (or,
    // with a slow writer, seconds) where the files do not belong together. Serving that pair fails
    // every handshake, so it is refused here and the previous pair stays in service.
    match certified.keys_match() {
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(Error::Mismatch { key: key.to_owned(), cert: cert.to_owned() })
        }
        _ => Ok(certified),
    }
}

/// Serves whatever certificate was loaded last.
#[derive(Debug)]
pub struct Reloading {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("tls lock").clone())
    }
}

/// A rustls server configuration whose certificate follows the files, plus the resolver to
/// swap certificates in. With `client_ca`, every client must present a certificate that CA
/// signed (the API server's, configured through its AdmissionConfiguration kubeConfig): anyone
/// else is refused during the handshake, before a byte of a request is read (SPEC §9a).
pub fn server_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<(Arc<rustls::ServerConfig>, Arc<Reloading>)> {
    let resolver = Arc::new(Reloading { current: RwLock::new(Arc::new(load(cert, key)?)) });
    let provider = Arc::new(ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem).filter_map(|c| c.ok()) {
                roots.add(c).map_err(|_| Error::ClientCa { path: path.to_owned() })?;
            }
            if roots.is_empty() {
                return Err(Error::ClientCa { path: path.to_owned() });
            }
            builder
                .with_client_cert_verifier(rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?)
        }
    };
    let mut config = builder.with_cert_resolver(resolver.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), resolver))
}

fn mtime(p: &Path) -> Option<SystemTime> {
    // Kubernetes updates Secret volumes by swapping a symlink: follow it.
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Polls the files and reloads on change; a broken pair is logged and the old one kept.
pub async fn watch(cert: PathBuf, key: PathBuf, resolver: Arc<Reloading>, ready: Arc<AtomicBool>, every: Duration) {
    let mut seen = (mtime(&cert), mtime(&key), std::fs::read(&cert).ok());
    ready.store(true, Ordering::Relaxed);
    loop {
        tokio::time::sleep(every).await;
        let now = (mtime(&cert), mtime(&key), std::fs::read(&cert).ok());
        if now == seen {
            continue;
        }
        match load(&cert, &key) {
            Ok(ck) => {
                *resolver.current.write().expect("tls lock") = Arc::new(ck);
                tracing::info!(cert = %cert.display(), "reloaded TLS certificate");
                seen = now;
            }
            // A rotation writes two files: the pair may be mismatched for a moment.
            Err(e) => tracing::warn!(error = %e, "TLS files changed but could not be loaded; keeping the previous certificate"),
        }
    }
}

/// One DER element: (tag, content, rest).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n].iter().fold(0usize, |acc, x| (acc << 8) | *x as usize);
        b = &b[n..];
        len
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// notAfter of an X.509 certificate, in seconds since the epoch (RFC 5280 §4.1).
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    // [0] version is optional; then serial, signature algorithm, issuer, validity.
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    for _ in 0..3 {
        rest = tlv(rest)?.2;
    }
    let (_, validity, _) = tlv(rest)?;
    let (_, _, after) = tlv(validity)?;
    let (tag, time, _) = tlv(after)?;
    let text = std::str::from_utf8(time).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        // UTCTime: YY from 1950 to 2049.
        0x17 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, text.get(2..)?)
        }
        0x18 => (text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}
