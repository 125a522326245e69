//! The webhook's CA authority (docs/behaviour.md §10.3, docs/operations.md "Certificates"): the
//! servers keep a CA and a serving certificate in a Secret of their namespace, write the CA bundle
//! into their own webhook configurations, and rotate both before they expire.
//!
//! Replicas coordinate through the Secret only, every write carrying the resourceVersion read
//! (a replica that loses a race reads again). The rotation is an overlap:
//! 1. a new CA joins the bundle (the Secret's `ca.crt`), and every replica writes that bundle
//!    into the webhook configurations (server-side apply, field manager [`FIELD_MANAGER`], with a
//!    bundle generation that never goes back, so a replica that read an older Secret cannot undo
//!    a newer bundle);
//! 2. once the webhooks have trusted the new CA for [`Timing::settle`], the serving certificate
//!    is re-issued from it;
//! 3. each replica records in the Secret which CAs it may serve with *before* it serves with
//!    one, and serves the new certificate once its record says so and the webhooks trust it;
//! 4. an old CA leaves the bundle once no live record names it and the serving certificate is
//!    not its.
//!
//! Here: the Secret's and the configurations' contents, and the rules ([`decide`], [`choose`]:
//! pure functions of what was read). The reads and writes, and the certificate served, are the
//! webhook's managed certificate source (`webhook::tls::managed`), through a direct kube
//! client like the Lease's (docs/architecture.md "What goes through the port").

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

use crate::model::digest::{digest, Sha256};

/// The field manager that owns the webhook configurations' `caBundle`: the chart renders none,
/// so Helm, Argo CD and Flux never own it and re-rendering never fights this one.
pub const FIELD_MANAGER: &str = "confighistory-certs";
/// Annotation on the webhook configurations: the generation of the bundle they carry.
pub const GENERATION_ANNOTATION: &str = "confighistory.io/ca-bundle-generation";

const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const STATE: &str = "state.json";

/// How long certificates live and how often replicas look, all from one validity
/// (docs/operations.md "Certificates", "The rotation's timings").
///
/// What the API server needs, and how each wait follows from it:
/// - Before a replica serves a certificate from a new CA, every API server must have loaded a
///   webhook configuration whose `caBundle` trusts that CA. A replica knows the configurations
///   carry it by reading them back (every [`Timing::poll`]); the API servers load them through
///   their own watch of those objects, which trails the write by well under a second (measured
///   in-cluster: docs/operations.md). [`Timing::settle`] is that lag with a wide margin, scaled
///   with the validity where waiting costs nothing.
/// - A serving certificate must never expire in service: the rotation that replaces it (notice
///   the CA is due, add a CA, every replica writes the bundle and sees it, settle, re-issue,
///   record, serve: [`Timing::rotation`]) must fit, with room for failed writes retried, in the
///   time left when it begins ([`Timing::renew_before`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lifetime of a CA and of the serving certificates it signs (ms).
    pub validity: i64,
}

impl Timing {
    pub fn new(validity: Duration) -> Timing {
        Timing { validity: i64::try_from(validity.as_millis()).unwrap_or(i64::MAX).max(3_000) }
    }

    /// A certificate is replaced once less than a third of its lifetime is left: 30 days of 90,
    /// 20 s of 60 s. A [`Timing::rotation`] fits in it with [`Timing::RETRIES`] polls to spare
    /// at every validity from 60 s.
    pub fn renew_before(&self) -> i64 {
        self.validity / 3
    }

    /// How often a replica reads the Secret and the webhook configurations (three reads by name):
    /// a deleted Secret (the start-over runbook) or a re-created configuration is noticed within
    /// this, so a few seconds at most (docs/operations.md "Certificates").
    pub fn poll(&self) -> Duration {
        Duration::from_millis((self.validity / 30).clamp(200, 2_000) as u64)
    }

    /// How long a replica's record stands without renewal: a replica gone without a word blocks
    /// the removal of its CA this long at most.
    pub fn lease(&self) -> i64 {
        (self.validity / 6).clamp(1_000, 300_000)
    }

    /// How long the webhooks must have carried a CA (as a replica reads them) before anything
    /// serves with it: the API servers' lag in loading a changed configuration, under a second,
    /// with a margin of four times that at the shortest validity the project supports (60 s: 4 s)
    /// and far more where the validity allows (a fifteenth of it, 15 minutes at most: 90 days
    /// wait 15 minutes, against 30 days to spare).
    pub fn settle(&self) -> i64 {
        (self.validity / 15).clamp(500, 900_000)
    }

    /// The longest a rotation takes when nothing fails, from the CA falling due to every replica
    /// serving the new certificate: six polls (notice, add the CA, the bundle written, seen,
    /// re-issue, record and serve) and the settle.
    pub fn rotation(&self) -> i64 {
        6 * self.poll().as_millis() as i64 + self.settle()
    }

    /// Polls a rotation may lose to failed writes (a lost race, an API server error) and still
    /// finish before anything expires, at every validity from 60 s.
    pub const RETRIES: i64 = 2;
}

/// A CA of the bundle.
#[derive(Clone, PartialEq, Eq)]
pub struct Ca {
    pub pem: String,
    pub fingerprint: String,
    pub not_after: i64,
}

/// The serving certificate and its key.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    pub cert_pem: String,
    key_pem: String,
    /// Fingerprint of the CA that signed it.
    pub issuer: String,
    pub not_after: i64,
    pub names: Vec<String>,
}

impl Leaf {
    /// The private key's PEM, for the TLS server alone (never printed: see `Debug`).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf").field("issuer", &self.issuer).field("not_after", &self.not_after).field("names", &self.names).finish()
    }
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("fingerprint", &self.fingerprint).field("not_after", &self.not_after).finish()
    }
}

/// What a replica said it may serve with, until when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub cas: BTreeSet<String>,
    pub until: i64,
}

/// The bookkeeping kept beside the certificates (`state.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bookkeeping {
    generation: u64,
    leaf_issuer: String,
    /// The names the serving certificate was issued for.
    #[serde(default)]
    leaf_names: Vec<String>,
    /// When each CA joined the bundle (for people reading the Secret; the rules go by what each
    /// replica saw the webhooks trust).
    #[serde(default)]
    added: BTreeMap<String, i64>,
    #[serde(default)]
    replicas: BTreeMap<String, Record>,
}

/// The Secret's content, parsed. `Debug` shows no key.
#[derive(Clone, PartialEq, Eq)]
pub struct Stored {
    /// The bundle, oldest first; the last one signs new certificates.
    pub cas: Vec<Ca>,
    ca_key: String,
    pub leaf: Leaf,
    /// Increases with every change of the bundle.
    pub generation: u64,
    pub replicas: BTreeMap<String, Record>,
    added: BTreeMap<String, i64>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("cas", &self.cas)
            .field("leaf", &self.leaf)
            .field("generation", &self.generation)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

/// Fingerprint of a certificate: SHA-256 of its DER, hex.
pub fn fingerprint(der: &[u8]) -> String {
    crate::model::digest::hex(&digest::<Sha256>(der))
}

/// The certificates of a PEM text, as (PEM of each, DER of each).
fn pem_certs(pem: &str) -> Vec<(String, Vec<u8>)> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).filter_map(|c| c.ok()).map(|der| (to_pem("CERTIFICATE", &der), der.to_vec())).collect()
}

/// PEM by the `pem` crate (rcgen's PEM writer, in the tree through kube): 64-character lines and
/// `\n` on every platform, so a stored bundle is the same bytes wherever it was written.
fn to_pem(label: &str, der: &[u8]) -> String {
    pem::encode_config(&pem::Pem::new(label, der), pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF))
}

/// Fingerprints of the CAs in a PEM bundle.
pub fn bundle_fingerprints(pem: &[u8]) -> BTreeSet<String> {
    CertificateDer::pem_slice_iter(pem).filter_map(|c| c.ok()).map(|der| fingerprint(&der)).collect()
}

impl Stored {
    /// The bundle the webhooks must carry: every CA, oldest first.
    pub fn bundle(&self) -> String {
        self.cas.iter().map(|c| c.pem.as_str()).collect()
    }

    pub fn newest(&self) -> &Ca {
        self.cas.last().expect("a stored bundle has a CA")
    }

    /// Parses the Secret's data; None when a part is missing or does not parse (the Secret is
    /// then made anew).
    pub fn parse(data: &BTreeMap<String, Vec<u8>>) -> Option<Stored> {
        let text = |k: &str| data.get(k).and_then(|v| String::from_utf8(v.clone()).ok());
        let book: Bookkeeping = serde_json::from_slice(data.get(STATE)?).ok()?;
        let cas: Vec<Ca> = pem_certs(&text(CA_CRT)?)
            .into_iter()
            .map(|(pem, der)| Some(Ca { fingerprint: fingerprint(&der), not_after: not_after(&der)? * 1000, pem }))
            .collect::<Option<_>>()?;
        let ca_key = text(CA_KEY)?;
        let (cert_pem, leaf_der) = pem_certs(&text(TLS_CRT)?).into_iter().next()?;
        let leaf = Leaf {
            cert_pem,
            key_pem: text(TLS_KEY)?,
            issuer: book.leaf_issuer,
            not_after: not_after(&leaf_der)? * 1000,
            names: book.leaf_names,
        };
        (!cas.is_empty()).then_some(Stored { cas, ca_key, leaf, generation: book.generation, replicas: book.replicas, added: book.added })
    }

    /// The Secret's data.
    pub fn data(&self) -> BTreeMap<String, Vec<u8>> {
        let book = Bookkeeping {
            generation: self.generation,
            leaf_issuer: self.leaf.issuer.clone(),
            leaf_names: self.leaf.names.clone(),
            added: self.added.clone(),
            replicas: self.replicas.clone(),
        };
        BTreeMap::from([
            (CA_CRT.to_owned(), self.bundle().into_bytes()),
            (CA_KEY.to_owned(), self.ca_key.clone().into_bytes()),
            (TLS_CRT.to_owned(), self.leaf.cert_pem.clone().into_bytes()),
            (TLS_KEY.to_owned(), self.leaf.key_pem.clone().into_bytes()),
            (STATE.to_owned(), serde_json::to_vec(&book).unwrap_or_default()),
        ])
    }
}

/// What one replica knows besides the Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replica {
    pub id: String,
    /// The issuer of the certificate it serves now, if any.
    pub serving: Option<String>,
    /// CAs every managed webhook trusts, each with the time this replica first saw that (and has
    /// kept seeing since); None when the webhook configurations could not be read.
    pub trusted: Option<BTreeMap<String, i64>>,
}

impl Replica {
    /// The webhooks have trusted `ca` for long enough that the API server uses it.
    fn trusts(&self, ca: &str, now: i64, timing: &Timing) -> bool {
        self.trusted.as_ref().and_then(|t| t.get(ca)).is_some_and(|since| now - since >= timing.settle())
    }
}

/// The one change a replica makes to the Secret next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// No usable Secret (missing, unreadable, or its newest CA expired): a new CA and serving
    /// certificate.
    Create,
    /// The newest CA is due: a new CA joins the bundle (nothing serves with it yet).
    AddCa,
    /// A serving certificate from the newest CA: the current one is another CA's (and the
    /// webhooks trust the newest), is due, or names other hosts.
    Reissue,
    /// This replica's record: the CAs it may serve with, renewed before it lapses.
    Record(BTreeSet<String>),
    /// These CAs leave the bundle: nothing serves with them any more, or they expired.
    Drop(Vec<String>),
    /// Nothing to change.
    Wait,
}

/// Whether a stored serving certificate is one this replica may serve: the webhooks trust its
/// CA, or what the replica serves is no better (nothing yet, or a CA that left the bundle: it
/// expired, or nothing the webhooks can be told about trusts it).
fn acceptable(stored: &Stored, me: &Replica, now: i64, timing: &Timing) -> bool {
    let Some(serving) = me.serving.as_deref() else { return true };
    serving == stored.leaf.issuer || !stored.cas.iter().any(|c| c.fingerprint == serving) || me.trusts(&stored.leaf.issuer, now, timing)
}

/// The record this replica needs: the CA it serves with, and the one it is about to serve with.
fn needed_record(stored: &Stored, me: &Replica, now: i64, timing: &Timing) -> BTreeSet<String> {
    let mut cas: BTreeSet<String> = me.serving.iter().cloned().collect();
    if acceptable(stored, me, now, timing) {
        cas.insert(stored.leaf.issuer.clone());
    }
    cas
}

/// The next change to the Secret, from what it holds (`None`: missing or unusable), what this
/// replica serves and sees, and the time (the API server's, ms since the epoch).
pub fn decide(stored: Option<&Stored>, me: &Replica, now: i64, timing: &Timing, names: &[String]) -> Action {
    let Some(stored) = stored else { return Action::Create };
    let newest = stored.newest();
    if newest.not_after <= now {
        return Action::Create;
    }
    if newest.not_after - now <= timing.renew_before() {
        return Action::AddCa;
    }
    let leaf = &stored.leaf;
    let stale = leaf.issuer != newest.fingerprint || leaf.not_after - now <= timing.renew_before() || leaf.names != names;
    let expired = leaf.not_after <= now || !stored.cas.iter().any(|c| c.fingerprint == leaf.issuer);
    if expired || (stale && me.trusts(&newest.fingerprint, now, timing)) {
        return Action::Reissue;
    }
    let needed = needed_record(stored, me, now, timing);
    match stored.replicas.get(&me.id) {
        Some(r) if r.cas == needed && r.until - now > timing.lease() / 2 => {}
        _ => return Action::Record(needed),
    }
    let in_use =
        |ca: &Ca| ca.fingerprint == leaf.issuer || stored.replicas.values().any(|r| r.until > now && r.cas.contains(&ca.fingerprint));
    let dropped: Vec<String> = stored.cas[..stored.cas.len() - 1]
        .iter()
        .filter(|ca| ca.not_after <= now || !in_use(ca))
        .map(|ca| ca.fingerprint.clone())
        .collect();
    if !dropped.is_empty() {
        return Action::Drop(dropped);
    }
    Action::Wait
}

/// The serving certificate this replica switches to, if any: the stored one, once its record
/// in the Secret allows it (written before serving, so the CA cannot leave the bundle under
/// it) and the webhooks trust its CA.
pub fn choose<'a>(stored: &'a Stored, me: &Replica, serving_cert: Option<&str>, now: i64, timing: &Timing) -> Option<&'a Leaf> {
    let leaf = &stored.leaf;
    if serving_cert == Some(leaf.cert_pem.as_str()) || !acceptable(stored, me, now, timing) {
        return None;
    }
    let recorded = stored.replicas.get(&me.id).is_some_and(|r| r.until > now && r.cas.contains(&leaf.issuer));
    (recorded || me.serving.as_deref() == Some(&leaf.issuer)).then_some(leaf)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the stored CA key does not load")]
    CaKey,
}

/// Key pairs and certificates: ECDSA P-256, as cert-manager's chart default.
fn new_key() -> Result<rcgen::KeyPair, Error> {
    Ok(rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?)
}

/// Sets a certificate's validity from ms since the epoch (whole seconds), in rcgen's time type
/// without naming the time crate.
fn set_validity(params: &mut rcgen::CertificateParams, from: i64, to: i64) {
    let at = |ms: i64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(u64::try_from(ms.div_euclid(1000)).unwrap_or(0));
    params.not_before = at(from);
    params.not_after = at(to);
}

/// Backdating of notBefore, for clocks a little behind the API server's.
const BACKDATE_MS: i64 = 60_000;

fn ca_params(common_name: &str) -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages =
        vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign, rcgen::KeyUsagePurpose::DigitalSignature];
    params
}

/// A new CA valid from now for `timing.validity`: (certificate PEM, key PEM).
fn new_ca(now: i64, timing: &Timing) -> Result<(Ca, String), Error> {
    let key = new_key()?;
    // The CN carries the time, so each CA's subject (which its certificates name as issuer) is
    // its own.
    let mut params = ca_params(&format!("confighistory-ca-{now}"));
    set_validity(&mut params, now - BACKDATE_MS, now + timing.validity);
    let cert = params.self_signed(&key)?;
    let der = cert.der().to_vec();
    let ca =
        Ca { pem: to_pem("CERTIFICATE", &der), fingerprint: fingerprint(&der), not_after: (now + timing.validity).div_euclid(1000) * 1000 };
    Ok((ca, to_pem("PRIVATE KEY", &key.serialize_der())))
}

/// A serving certificate for `names` signed by `ca`, valid until the CA's own expiry at most.
fn issue(ca: &Ca, ca_key: &str, names: &[String], now: i64, timing: &Timing) -> Result<Leaf, Error> {
    let key_der = PrivateKeyDer::from_pem_slice(ca_key.as_bytes()).map_err(|_| Error::CaKey)?;
    let ca_key = rcgen::KeyPair::try_from(&key_der).map_err(|_| Error::CaKey)?;
    let ca_der = pem_certs(&ca.pem).into_iter().next().map(|(_, d)| d).ok_or(Error::CaKey)?;
    let cn = cert_names(&ca_der).and_then(|n| n.into_iter().next()).ok_or(Error::CaKey)?;
    let issuer = rcgen::Issuer::new(ca_params(&cn), ca_key);
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, names.first().cloned().unwrap_or_else(|| "confighistory".into()));
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let not_after = (now + timing.validity).min(ca.not_after);
    set_validity(&mut params, now - BACKDATE_MS, not_after);
    let key = new_key()?;
    let cert = params.signed_by(&key, &issuer)?;
    let der = cert.der().to_vec();
    Ok(Leaf {
        cert_pem: to_pem("CERTIFICATE", &der),
        key_pem: to_pem("PRIVATE KEY", &key.serialize_der()),
        issuer: ca.fingerprint.clone(),
        not_after: self::not_after(&der).unwrap_or_default() * 1000,
        names: names.to_vec(),
    })
}

/// The Secret content after `action` (None for [`Action::Wait`]). Records that lapsed are
/// dropped on every write.
pub fn apply(
    stored: Option<&Stored>,
    action: &Action,
    me: &str,
    now: i64,
    timing: &Timing,
    names: &[String],
) -> Result<Option<Stored>, Error> {
    let mut next = match (action, stored) {
        (Action::Wait, _) => return Ok(None),
        (Action::Create, _) | (_, None) => {
            let (ca, ca_key) = new_ca(now, timing)?;
            let leaf = issue(&ca, &ca_key, names, now, timing)?;
            let generation = stored.map_or(0, |s| s.generation) + 1;
            let added = BTreeMap::from([(ca.fingerprint.clone(), now)]);
            Stored { cas: vec![ca], ca_key, leaf, generation, replicas: BTreeMap::new(), added }
        }
        (Action::AddCa, Some(s)) => {
            let mut next = s.clone();
            let (ca, ca_key) = new_ca(now, timing)?;
            next.added.insert(ca.fingerprint.clone(), now);
            next.cas.push(ca);
            next.ca_key = ca_key;
            next.generation += 1;
            next
        }
        (Action::Reissue, Some(s)) => {
            let mut next = s.clone();
            next.leaf = issue(s.newest(), &s.ca_key, names, now, timing)?;
            next
        }
        (Action::Record(cas), Some(s)) => {
            let mut next = s.clone();
            next.replicas.insert(me.to_owned(), Record { cas: cas.clone(), until: now + timing.lease() });
            next
        }
        (Action::Drop(fingerprints), Some(s)) => {
            let mut next = s.clone();
            next.cas.retain(|c| !fingerprints.contains(&c.fingerprint));
            next.added.retain(|f, _| !fingerprints.contains(f));
            next.generation += 1;
            next
        }
    };
    next.replicas.retain(|_, r| r.until > now);
    Ok(Some(next))
}

/// Where the managed certificate source (`webhook::tls::managed::run`) reads and writes.
#[derive(Clone, Debug)]
pub struct Target {
    pub namespace: String,
    pub secret: String,
    /// Names of the Mutating- and ValidatingWebhookConfigurations whose caBundle is managed
    /// (each name is looked up as both kinds; a kind without it is skipped).
    pub configurations: Vec<String>,
    pub names: Vec<String>,
    pub replica: String,
    pub timing: Timing,
}

/// The webhook configurations as read: per object, whether it exists, its generation, and the
/// CA fingerprints each of its webhooks trusts.
pub struct Configuration {
    pub kind: &'static str,
    pub name: String,
    pub resource_version: Option<String>,
    pub generation: u64,
    /// Per webhook: its name and its caBundle.
    pub hooks: Vec<(String, Vec<u8>)>,
}

impl Configuration {
    pub fn from_json(kind: &'static str, object: &serde_json::Value) -> Configuration {
        let meta = &object["metadata"];
        let generation = meta["annotations"][GENERATION_ANNOTATION].as_str().and_then(|g| g.parse().ok()).unwrap_or(0);
        let hooks = object["webhooks"]
            .as_array()
            .map(|hooks| {
                hooks
                    .iter()
                    .map(|h| {
                        let bundle = h["clientConfig"]["caBundle"].as_str().unwrap_or_default();
                        let pem = base64_simd::STANDARD.decode_to_vec(bundle).unwrap_or_default();
                        (h["name"].as_str().unwrap_or_default().to_owned(), pem)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Configuration {
            kind,
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            resource_version: meta["resourceVersion"].as_str().map(str::to_owned),
            generation,
            hooks,
        }
    }
}

/// The lowest bundle generation the Secret may carry, from the bundle it holds and what each
/// webhook carries (generation, bundle): never behind a generation the webhooks carry, and above
/// every one they carry with another bundle. So a generation never stands for two bundles: after a
/// start-over (the Secret deleted, as the runbook for a lost or garbled one says), a restore of an
/// older copy, or a Secret made while the webhooks could not be read, a generation counted from the
/// Secret alone would re-use or lower one the webhooks carry; [`needs_bundle`] would then never write
/// the new CA into them, or a replica still holding the old Secret would write the old bundle back
/// over the new one of the same number.
pub fn generation_floor(bundle: &[u8], carried: &[(u64, Vec<u8>)]) -> u64 {
    carried.iter().map(|(generation, pem)| if pem.as_slice() == bundle { *generation } else { generation + 1 }).max().unwrap_or(0)
}

/// `next` renumbered up to `floor` ([`generation_floor`]); `None` when it needs no other number.
pub fn above_carried(next: &Stored, floor: u64) -> Option<Stored> {
    (next.generation < floor).then(|| Stored { generation: floor, ..next.clone() })
}

/// Whether a replica that read `stored` writes its bundle into `configuration`: it differs, and
/// the configuration does not carry a newer generation (a replica that read an older Secret
/// must not undo a newer bundle).
pub fn needs_bundle(stored: &Stored, configuration_generation: u64, hooks: &[(String, Vec<u8>)]) -> bool {
    configuration_generation <= stored.generation
        && (configuration_generation < stored.generation || hooks.iter().any(|(_, pem)| pem != stored.bundle().as_bytes()))
}

/// CAs every webhook of every configuration trusts (None: no configuration found).
pub fn trusted_by_all(configurations: &[Configuration]) -> Option<BTreeSet<String>> {
    let mut hooks = configurations.iter().flat_map(|c| c.hooks.iter());
    let first = bundle_fingerprints(&hooks.next()?.1);
    Some(hooks.fold(first, |acc, (_, pem)| acc.intersection(&bundle_fingerprints(pem)).cloned().collect()))
}

// X.509 fields read from certificates: the authority's own, and the clients' names the TLS
// edge pins (docs/behaviour.md 9a.3).

/// notAfter of an X.509 certificate, in seconds since the epoch (RFC 5280 §4.1); None when it
/// does not parse.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The subject's common names and the SAN extension's DNS names of an X.509 certificate
/// (RFC 5280 §4.1.2.6, §4.2.1.6); None when the structure does not parse. A common name that is
/// not text (a BMPString) matches no pinned name: skipped.
pub fn cert_names(der: &[u8]) -> Option<Vec<String>> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut names: Vec<String> = cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok().map(str::to_owned)).collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests;
