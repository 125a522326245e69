//! TLS for the admission port, TLS 1.2 or newer only: where the serving certificate comes from
//! ([`Source`]: files, or the servers' own CA authority), the resolver handshakes take it from,
//! and the client certificates the port may require (docs/behaviour.md 9a.3).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::store::authority;

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

/// Why a certificate and key in PEM do not make a pair to serve.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("no PEM certificate")]
    NoCert,
    #[error("no usable PEM private key: {0}")]
    Key(String),
    #[error("the key does not belong to the certificate")]
    Mismatch,
}

/// A certificate chain and key (PEM) as a signing [`CertifiedKey`]; the leaf's expiry goes to
/// the certificate-expiring metric (docs/operations.md).
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, PairError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem).filter_map(|c| c.ok()).collect();
    if certs.is_empty() {
        return Err(PairError::NoCert);
    }
    let key_der = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| PairError::Key(e.to_string()))?;
    let signing = ring::sign::any_supported_type(&key_der).map_err(|e| PairError::Key(e.to_string()))?;
    let not_after = authority::not_after(&certs[0]);
    let certified = CertifiedKey::new(certs, signing);
    // A rotation that writes the key and the certificate one after the other leaves a moment (or,
    // with a slow writer, seconds) where the files do not belong together. Serving that pair fails
    // every handshake, so it is refused here and the previous pair stays in service.
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) = certified.keys_match() {
        return Err(PairError::Mismatch);
    }
    if let Some(t) = not_after {
        crate::metrics::METRICS.tls_not_after.store(t.max(0) as u64, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(certified)
}

pub mod files;
pub mod managed;

pub use files::{load, server_config, watch};

/// Where the serving certificate comes from, behind one interface (as cert-manager's webhook
/// has a file source and a dynamic one): each fills the [`Reloading`] resolver handshakes take
/// it from and keeps it current until the process ends, and says when one is loaded.
pub enum Source {
    /// Files a mounted Secret keeps current (the chart's `secret` and `certManager` modes),
    /// polled every `every`.
    Files { cert: PathBuf, key: PathBuf, every: Duration },
    /// The servers' own CA and certificate, in a Secret their replicas share (`server`, the
    /// default: `store::authority`).
    Managed(crate::store::authority::Target),
}

impl Source {
    /// The resolver to serve from: loaded at once from files (a pair that does not load stops
    /// the start, saying which file is wrong); empty for the managed source until it serves.
    pub fn resolver(&self) -> Result<Arc<Reloading>> {
        match self {
            Source::Files { cert, key, .. } => Ok(Arc::new(Reloading::new(load(cert, key)?))),
            Source::Managed(_) => Ok(Arc::default()),
        }
    }

    /// Keeps `resolver` current; `ready` turns true once a certificate is served. The managed
    /// source reads and writes through `client`, on the API server's time (`clock`).
    pub async fn run(
        self,
        client: kube::Client,
        clock: Arc<crate::cluster::clock::Clock>,
        resolver: Arc<Reloading>,
        ready: Arc<AtomicBool>,
    ) {
        match self {
            Source::Files { cert, key, every } => watch(cert, key, resolver, ready, every).await,
            Source::Managed(target) => managed::run(client, clock, target, resolver, ready).await,
        }
    }
}

/// Serves whatever certificate was loaded last (none yet: handshakes fail until one is).
#[derive(Debug, Default)]
pub struct Reloading {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl Reloading {
    pub fn new(certified: CertifiedKey) -> Reloading {
        Reloading { current: RwLock::new(Some(Arc::new(certified))) }
    }

    /// Serves `certified` from the next handshake on.
    pub fn set(&self, certified: CertifiedKey) {
        *self.current.write().expect("tls lock") = Some(Arc::new(certified));
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().expect("tls lock").clone()
    }
}

/// A rustls server configuration serving what `resolver` holds. With `client_auth`, every
/// client must present a certificate that its CA signed and that carries one of its names (the
/// API server's, configured through its AdmissionConfiguration kubeConfig): anyone else is
/// refused during the handshake, before a byte of a request is read (docs/behaviour.md 9a.3).
pub fn server_config_with(resolver: Arc<Reloading>, client_auth: Option<Arc<ClientAuth>>) -> Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let (builder, sessions) = match client_auth {
        None => (builder.with_no_client_auth(), None),
        Some(auth) => {
            let sessions = auth.sessions.clone();
            (builder.with_client_cert_verifier(auth), Some(sessions))
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    if let Some(sessions) = sessions {
        config.session_storage = sessions;
    }
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Mutual TLS: the CA bundle that signs the API server's client certificate, reloaded when its
/// file changes, and the names such a certificate may carry. The CA alone is not enough: a
/// cluster CA also signs kubelets' and users' certificates, so the name is pinned too.
pub struct ClientAuth {
    ca: PathBuf,
    /// Accepted subject CNs and SAN DNS names, matched exactly; empty accepts any name.
    names: Vec<String>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// The chain verifier for the CA bundle loaded last, and that bundle's bytes.
    current: RwLock<(Arc<dyn ClientCertVerifier>, Vec<u8>)>,
    /// Refusals are logged at most once a minute.
    last_logged: super::OncePerMinute,
    /// The TLS sessions clients may resume, emptied when the bundle changes: a resumed session
    /// skips the certificate check, so it must not outlive the CA that vouched for it.
    sessions: Arc<Sessions>,
}

/// rustls' in-memory session cache, which [`ClientAuth::reload`] replaces with an empty one.
#[derive(Debug)]
struct Sessions(RwLock<Arc<dyn StoresServerSessions>>);

impl Sessions {
    fn fresh() -> Arc<dyn StoresServerSessions> {
        ServerSessionMemoryCache::new(256)
    }

    fn current(&self) -> Arc<dyn StoresServerSessions> {
        self.0.read().expect("session lock").clone()
    }
}

impl StoresServerSessions for Sessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.current().put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.current().get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.current().take(key)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth").field("ca", &self.ca).field("names", &self.names).finish_non_exhaustive()
    }
}

impl ClientAuth {
    /// Loads the CA bundle at `ca`; fails when it holds no usable certificate.
    pub fn load(ca: &Path, names: Vec<String>) -> Result<Arc<Self>> {
        let provider = Arc::new(ring::default_provider());
        let pem = std::fs::read(ca).map_err(|source| Error::Read { path: ca.to_owned(), source })?;
        let verifier = Self::verifier(ca, &pem, &provider)?;
        let names = names.into_iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect();
        Ok(Arc::new(ClientAuth {
            ca: ca.to_owned(),
            names,
            provider,
            current: RwLock::new((verifier, pem)),
            last_logged: super::OncePerMinute::new(),
            sessions: Arc::new(Sessions(RwLock::new(Sessions::fresh()))),
        }))
    }

    fn verifier(path: &Path, pem: &[u8], provider: &Arc<rustls::crypto::CryptoProvider>) -> Result<Arc<dyn ClientCertVerifier>> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem).filter_map(|c| c.ok()) {
            roots.add(c).map_err(|_| Error::ClientCa { path: path.to_owned() })?;
        }
        if roots.is_empty() {
            return Err(Error::ClientCa { path: path.to_owned() });
        }
        Ok(WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?)
    }

    /// Reads the CA file again; returns whether a new bundle is now in use. A file that does not
    /// load leaves the previous bundle in use.
    pub fn reload(&self) -> Result<bool> {
        let pem = std::fs::read(&self.ca).map_err(|source| Error::Read { path: self.ca.clone(), source })?;
        if self.current.read().expect("client CA lock").1 == pem {
            return Ok(false);
        }
        let verifier = Self::verifier(&self.ca, &pem, &self.provider)?;
        *self.current.write().expect("client CA lock") = (verifier, pem);
        *self.sessions.0.write().expect("session lock") = Sessions::fresh();
        Ok(true)
    }

    /// Whether `der` (a certificate the CA verifier accepted) carries one of the pinned names.
    fn name_allowed(&self, der: &[u8]) -> std::result::Result<(), String> {
        if self.names.is_empty() {
            return Ok(());
        }
        let Some(names) = authority::cert_names(der) else {
            return Err("a client certificate whose names cannot be read".into());
        };
        if names.iter().any(|n| self.names.iter().any(|a| a == n)) {
            return Ok(());
        }
        // The presented names, bounded: they come from whoever holds a certificate the CA signed.
        let shown: Vec<String> = names.iter().take(4).map(|n| n.chars().take(64).filter(|c| !c.is_control()).collect()).collect();
        Err(format!("a client certificate named {shown:?}, not one of {:?}", self.names))
    }

    fn log_refusal(&self, why: &str) {
        if self.last_logged.due() {
            tracing::warn!(
                ca = %self.ca.display(),
                "refused {why} on the admission port (mutual TLS; at most one such message a minute). If it is the API server's, add its name to clientAuth.allowedNames or check that the CA bundle signed it"
            );
        }
    }
}

impl ClientCertVerifier for ClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No CA names are hinted: a client then sends the certificate it has. Hinting the bundle
    /// would make a Go client (the API server) withhold a certificate from a CA not hinted, which
    /// turns a CA rotation in the wrong order into failures nobody can see in its logs.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        let verifier = self.current.read().expect("client CA lock").0.clone();
        if let Err(e) = verifier.verify_client_cert(end_entity, intermediates, now) {
            self.log_refusal(&format!("a client certificate ({e})"));
            return Err(e);
        }
        self.name_allowed(end_entity).map_err(|why| {
            self.log_refusal(&why);
            rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure)
        })?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// Polls the client CA file and swaps a changed bundle in; one that does not load is logged and
/// the previous bundle kept.
pub async fn watch_client_ca(auth: Arc<ClientAuth>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match auth.reload() {
            Ok(false) => {}
            Ok(true) => tracing::info!(ca = %auth.ca.display(), "reloaded the client CA bundle"),
            Err(e) => tracing::warn!(error = %e, "client CA file changed or unreadable; keeping the previous bundle"),
        }
    }
}
