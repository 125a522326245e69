//! The file certificate source: a certificate and key from files a mounted Secret keeps current
//! (the chart's `secret` and `certManager` modes: cert-manager and the kubelet rotate them in
//! place), reloaded when they change.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::sign::CertifiedKey;

use super::{certified_key, ClientAuth, Error, PairError, Reloading, Result};

/// Loads a certificate chain and key from files into a signing [`CertifiedKey`].
pub fn load(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let read = |p: &Path| std::fs::read(p).map_err(|source| Error::Read { path: p.to_owned(), source });
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    certified_key(&cert_pem, &key_pem).map_err(|e| match e {
        PairError::NoCert => Error::NoCert { path: cert.to_owned() },
        PairError::Key(reason) => Error::Key { path: key.to_owned(), reason },
        PairError::Mismatch => Error::Mismatch { key: key.to_owned(), cert: cert.to_owned() },
    })
}

/// A rustls server configuration whose certificate follows the files, plus the resolver to
/// swap certificates in. See [`server_config_with`].
pub fn server_config(cert: &Path, key: &Path, client_auth: Option<Arc<ClientAuth>>) -> Result<(Arc<rustls::ServerConfig>, Arc<Reloading>)> {
    let resolver = Arc::new(Reloading::new(load(cert, key)?));
    Ok((super::server_config_with(resolver.clone(), client_auth)?, resolver))
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
                resolver.set(ck);
                tracing::info!(cert = %cert.display(), "reloaded TLS certificate");
                seen = now;
            }
            // A rotation writes two files: the pair may be mismatched for a moment.
            Err(e) => tracing::warn!(error = %e, "TLS files changed but could not be loaded; keeping the previous certificate"),
        }
    }
}
