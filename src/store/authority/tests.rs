use super::*;
use rustls::client::danger::ServerCertVerifier as _;
use std::sync::Arc;

const T0: i64 = 1_900_000_000_000;

fn timing() -> Timing {
    Timing::new(Duration::from_secs(30))
}

fn names() -> Vec<String> {
    vec!["confighistory.confighistory.svc".into(), "127.0.0.1".into()]
}

fn replica(id: &str) -> Replica {
    Replica { id: id.into(), serving: None, trusted: Some(BTreeMap::new()) }
}

fn created(now: i64) -> Stored {
    apply(None, &Action::Create, "a", now, &timing(), &names()).unwrap().unwrap()
}

/// The Secret's data survives a round trip through `data` and `parse`.
fn round_trip(s: &Stored) -> Stored {
    Stored::parse(&s.data()).expect("parses")
}

/// A PEM certificate's notAfter, in ms since the epoch.
fn not_after_ms(pem: &str) -> i64 {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("a PEM certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("a certificate");
    cert.validity().not_after.timestamp() * 1000
}

fn trusting(mut r: Replica, stored: &Stored, since: i64) -> Replica {
    r.trusted = Some(stored.cas.iter().map(|c| (c.fingerprint.clone(), since)).collect());
    r
}

/// A deleted Secret or a re-created webhook configuration is noticed within seconds, whatever the
/// validity (90 days by default).
#[test]
fn replicas_look_every_few_seconds_at_most() {
    assert_eq!(Timing::new(Duration::from_secs(90 * 24 * 3600)).poll(), Duration::from_secs(2));
    assert_eq!(Timing::new(Duration::from_secs(30)).poll(), Duration::from_millis(1000));
    assert_eq!(Timing::new(Duration::from_secs(3)).poll(), Duration::from_millis(200));
}

/// docs/operations.md "The rotation's timings": the waits at the validities the project names,
/// and, at every validity from 60 s to a year, a rotation with two failed writes finishing before
/// the certificate it replaces expires, after the API servers had far longer than they need to
/// load the new bundle.
#[test]
fn a_rotation_fits_before_expiry_at_every_validity_from_a_minute() {
    let at = |secs: u64| Timing::new(Duration::from_secs(secs));
    let row = |t: Timing| (t.poll().as_millis() as i64, t.settle(), t.renew_before(), t.lease());
    assert_eq!(row(at(60)), (2_000, 4_000, 20_000, 10_000));
    assert_eq!(row(at(90)), (2_000, 6_000, 30_000, 15_000));
    let day = 24 * 3600 * 1000;
    assert_eq!(row(at(90 * 24 * 3600)), (2_000, 900_000, 30 * day, 300_000));
    // What the API servers need: well under a second to load a written configuration.
    let lag = 1_000;
    let mut secs = 60;
    while secs <= 366 * 24 * 3600 {
        let t = at(secs);
        let poll = t.poll().as_millis() as i64;
        assert!(t.settle() >= 4 * lag, "{secs} s: settle {} ms", t.settle());
        assert!(
            t.rotation() + Timing::RETRIES * poll <= t.renew_before(),
            "{secs} s: a rotation ({} ms) and {} retries do not fit in {} ms",
            t.rotation(),
            Timing::RETRIES,
            t.renew_before()
        );
        secs = secs * 11 / 10 + 1;
    }
}

#[test]
fn a_missing_or_expired_secret_is_made_anew() {
    let t = timing();
    assert_eq!(decide(None, &replica("a"), T0, &t, &names()), Action::Create);
    let s = round_trip(&created(T0));
    assert_eq!(s.cas.len(), 1);
    assert_eq!(s.generation, 1);
    assert_eq!(s.leaf.issuer, s.cas[0].fingerprint);
    assert_eq!(decide(Some(&s), &replica("a"), T0 + t.validity + 1, &t, &names()), Action::Create);
}

/// Replicas down longer than the validity: every CA and the serving certificate expired, and the
/// Secret still names replicas that are gone (records that, by a clock's skew, have not lapsed).
/// A starting replica makes a new Secret at once, without those records, and serves from it.
#[test]
fn after_a_downtime_longer_than_the_validity_a_replica_starts_at_once() {
    let t = timing();
    let mut s = created(T0);
    let fp = s.cas[0].fingerprint.clone();
    for gone in ["old-1", "old-2"] {
        s.replicas.insert(gone.into(), Record { cas: [fp.clone()].into(), until: T0 + 10 * t.validity });
    }
    let s = round_trip(&s);
    let later = T0 + t.validity + 1;
    let fresh = replica("new-1");
    assert_eq!(decide(Some(&s), &fresh, later, &t, &names()), Action::Create);
    let next = apply(Some(&s), &Action::Create, "new-1", later, &t, &names()).unwrap().unwrap();
    assert!(next.replicas.is_empty(), "{next:?}");
    assert!(next.generation > s.generation);
    assert!(next.newest().not_after > later && next.leaf.not_after > later);
    // Then its record, then it serves: no settle, no lapse of anyone's record.
    let action = decide(Some(&next), &fresh, later, &t, &names());
    assert_eq!(action, Action::Record([next.leaf.issuer.clone()].into()));
    let recorded = apply(Some(&next), &action, "new-1", later, &t, &names()).unwrap().unwrap();
    assert_eq!(decide(Some(&recorded), &fresh, later, &t, &names()), Action::Wait);
    assert_eq!(choose(&recorded, &fresh, None, later, &t), Some(&recorded.leaf));
}

/// The served certificate verifies against the bundle for every name, as the API server checks.
#[test]
fn the_serving_certificate_verifies_against_the_bundle() {
    let s = round_trip(&created(T0));
    let mut roots = rustls::RootCertStore::empty();
    for (_, der) in pem_certs(&s.bundle()) {
        roots.add(CertificateDer::from(der)).unwrap();
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::new(rustls::crypto::ring::default_provider()))
            .build()
            .unwrap();
    let leaf = CertificateDer::from(pem_certs(&s.leaf.cert_pem).remove(0).1);
    let at = rustls::pki_types::UnixTime::since_unix_epoch(Duration::from_millis((T0 + 1000) as u64));
    for name in names() {
        let server = rustls::pki_types::ServerName::try_from(name.clone()).unwrap();
        verifier.verify_server_cert(&leaf, &[], &server, &[], at).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = rustls::pki_types::ServerName::try_from("other.example").unwrap();
    assert!(verifier.verify_server_cert(&leaf, &[], &other, &[], at).is_err());
    // And rustls accepts the pair to serve: the key loads and belongs to the certificate.
    let key = PrivateKeyDer::from_pem_slice(s.leaf.key_pem().as_bytes()).unwrap();
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).unwrap();
    rustls::sign::CertifiedKey::new(vec![leaf], signing).keys_match().unwrap();
}

#[test]
fn debug_output_shows_no_key() {
    let s = created(T0);
    let text = format!("{s:?} {:?}", s.leaf);
    assert!(!text.contains("PRIVATE KEY") && !text.contains(&s.ca_key[30..60]) && !text.contains(&s.leaf.key_pem[30..60]), "{text}");
}

#[test]
fn a_ca_that_is_due_gets_a_successor_in_the_bundle_first() {
    let t = timing();
    let s = created(T0);
    let due = T0 + t.validity - t.renew_before();
    assert_eq!(decide(Some(&s), &replica("a"), due, &t, &names()), Action::AddCa);
    let next = apply(Some(&s), &Action::AddCa, "a", due, &t, &names()).unwrap().unwrap();
    assert_eq!(next.cas.len(), 2);
    assert_eq!(next.cas[0], s.cas[0]);
    assert_eq!(next.generation, s.generation + 1);
    assert_eq!(next.leaf, s.leaf, "nothing serves with the new CA yet");
}

/// The serving certificate moves to the new CA only once the webhooks have trusted it for the
/// settle time.
#[test]
fn the_serving_certificate_is_reissued_only_once_the_webhooks_trust_the_new_ca() {
    let t = timing();
    let s = created(T0);
    let due = T0 + t.validity - t.renew_before();
    let s = apply(Some(&s), &Action::AddCa, "a", due, &t, &names()).unwrap().unwrap();
    let mut a = replica("a");
    a.serving = Some(s.cas[0].fingerprint.clone());
    let s = apply(Some(&s), &Action::Record([s.cas[0].fingerprint.clone()].into()), "a", due, &t, &names()).unwrap().unwrap();
    // The webhooks trust the old CA only.
    a.trusted = Some(BTreeMap::from([(s.cas[0].fingerprint.clone(), T0)]));
    assert_eq!(decide(Some(&s), &a, due + 10, &t, &names()), Action::Wait);
    // Both, but only just.
    let a = trusting(a, &s, due + 10);
    assert_eq!(decide(Some(&s), &a, due + 10, &t, &names()), Action::Wait);
    assert_eq!(decide(Some(&s), &a, due + 10 + t.settle(), &t, &names()), Action::Reissue);
    let r = apply(Some(&s), &Action::Reissue, "a", due + 10 + t.settle(), &t, &names()).unwrap().unwrap();
    assert_eq!(r.leaf.issuer, s.cas[1].fingerprint);
}

#[test]
fn a_replica_records_a_ca_before_it_serves_with_it_and_an_old_ca_leaves_once_no_record_names_it() {
    let t = timing();
    let s = created(T0);
    let (old, now) = (s.cas[0].fingerprint.clone(), T0 + t.validity - t.renew_before());
    let s = apply(Some(&s), &Action::AddCa, "a", now, &t, &names()).unwrap().unwrap();
    let new = s.cas[1].fingerprint.clone();
    let mut s = apply(Some(&s), &Action::Reissue, "a", now, &t, &names()).unwrap().unwrap();
    s.replicas.insert("a".into(), Record { cas: [old.clone()].into(), until: now + t.lease() });
    s.replicas.insert("b".into(), Record { cas: [old.clone()].into(), until: now + t.lease() });
    let mut a = trusting(replica("a"), &s, T0);
    a.serving = Some(old.clone());
    // Not recorded yet: no switch; the record comes first, naming both.
    assert_eq!(choose(&s, &a, Some("the old certificate"), now, &t), None);
    let both: BTreeSet<String> = [old.clone(), new.clone()].into();
    assert_eq!(decide(Some(&s), &a, now, &t, &names()), Action::Record(both.clone()));
    let s = apply(Some(&s), &Action::Record(both), "a", now, &t, &names()).unwrap().unwrap();
    assert_eq!(choose(&s, &a, Some("the old certificate"), now, &t), Some(&s.leaf));
    a.serving = Some(new.clone());
    // Serving the new one: the record drops the old CA; b still names it, so it stays.
    assert_eq!(decide(Some(&s), &a, now, &t, &names()), Action::Record([new.clone()].into()));
    let s = apply(Some(&s), &Action::Record([new.clone()].into()), "a", now, &t, &names()).unwrap().unwrap();
    assert_eq!(decide(Some(&s), &a, now, &t, &names()), Action::Wait);
    // b's record lapses (b is gone): the old CA leaves, the bundle's generation moves on.
    let later = now + t.lease() + 1;
    let mut a2 = a.clone();
    a2.trusted = a.trusted.clone();
    let s = apply(Some(&s), &Action::Record([new.clone()].into()), "a", later, &t, &names()).unwrap().unwrap();
    assert!(!s.replicas.contains_key("b"), "lapsed records are dropped on a write");
    assert_eq!(decide(Some(&s), &a2, later, &t, &names()), Action::Drop(vec![old.clone()]));
    let d = apply(Some(&s), &Action::Drop(vec![old]), "a", later, &t, &names()).unwrap().unwrap();
    assert_eq!(d.cas.iter().map(|c| c.fingerprint.clone()).collect::<Vec<_>>(), [new]);
    assert_eq!(d.generation, s.generation + 1);
}

#[test]
fn a_changed_name_reissues_the_certificate() {
    let t = timing();
    let s = created(T0);
    let a = trusting(replica("a"), &s, T0);
    let other = vec!["renamed.confighistory.svc".to_owned()];
    assert_eq!(decide(Some(&s), &a, T0 + t.settle(), &t, &other), Action::Reissue);
}

#[test]
fn a_replica_that_read_an_older_secret_never_writes_its_bundle_over_a_newer_one() {
    let s = created(T0);
    let hooks = vec![("w".to_owned(), b"another bundle".to_vec())];
    assert!(needs_bundle(&s, 0, &hooks), "no generation yet");
    assert!(needs_bundle(&s, s.generation, &hooks), "same generation, wiped or replaced by a tool");
    assert!(!needs_bundle(&s, s.generation + 1, &hooks), "newer");
    assert!(!needs_bundle(&s, s.generation, &[("w".to_owned(), s.bundle().into_bytes())]), "already there");
}

/// Two replicas and the webhooks, stepped in turn through years of rotations: at every moment
/// each replica serves a certificate whose CA the webhooks have trusted for the settle time (so
/// no admission fails), and the two never serve different certificates for more than a few
/// rounds.
#[test]
fn replicas_rotate_through_many_cas_without_serving_an_untrusted_or_expired_certificate() {
    for secs in [30, 60, 90, 600] {
        rotate_through_many_cas(Timing::new(Duration::from_secs(secs)));
    }
}

fn rotate_through_many_cas(t: Timing) {
    let poll = t.poll().as_millis() as i64;
    let mut secret: Option<Stored> = None;
    // The webhooks: generation, bundle PEM, and since when each CA was in it.
    let (mut live_gen, mut live_bundle, mut live_since) = (0u64, String::new(), BTreeMap::<String, i64>::new());
    let mut reps = [replica("a"), replica("b")];
    let mut serving: [Option<String>; 2] = [None, None];
    let mut now = T0;
    let mut cas_seen = BTreeSet::new();
    let mut differ_since: Option<i64> = None;
    let mut longest_difference = 0;
    while now < T0 + 10 * t.validity {
        for (i, me) in reps.iter_mut().enumerate() {
            // A round: read, act, and read again after a write (as `run` does), a few times.
            for _ in 0..5 {
                let stored = secret.as_ref().map(round_trip);
                if let Some(s) = &stored {
                    if needs_bundle(s, live_gen, &[("w".into(), live_bundle.clone().into_bytes())]) {
                        live_gen = s.generation;
                        live_bundle = s.bundle();
                        let fps = bundle_fingerprints(live_bundle.as_bytes());
                        live_since.retain(|f, _| fps.contains(f));
                        for f in fps {
                            live_since.entry(f).or_insert(now);
                        }
                    }
                }
                // What the replica sees: the webhooks' bundle, from when it first saw each CA.
                let mut since = me.trusted.take().unwrap_or_default();
                since.retain(|f, _| live_since.contains_key(f));
                for f in live_since.keys() {
                    since.entry(f.clone()).or_insert(now);
                }
                me.trusted = Some(since);
                let action = decide(stored.as_ref(), me, now, &t, &names());
                if action != Action::Wait {
                    secret = apply(stored.as_ref(), &action, &me.id, now, &t, &names()).unwrap();
                    continue;
                }
                let s = stored.expect("a secret after the first round");
                if let Some(leaf) = choose(&s, me, serving[i].as_deref(), now, &t) {
                    me.serving = Some(leaf.issuer.clone());
                    serving[i] = Some(leaf.cert_pem.clone());
                    cas_seen.insert(leaf.issuer.clone());
                }
                break;
            }
        }
        // The invariant: what is served, the API server has trusted for the settle time, and
        // the certificate has not expired.
        // (From the second round on: at the start, any certificate beats none.)
        for (i, me) in reps.iter().enumerate().filter(|_| now > T0 + poll) {
            let issuer = me.serving.as_ref().expect("serving");
            let since = live_since.get(issuer).unwrap_or_else(|| panic!("{} serves with a CA not in the bundle at {}", me.id, now - T0));
            assert!(now - since >= t.settle() || *since == T0, "{} serves with a CA trusted since {} at {}", me.id, since - T0, now - T0);
            let pem = serving[i].as_deref().expect("a certificate");
            let not_after = not_after_ms(pem);
            assert!(not_after - now >= poll, "{} serves a certificate expiring at {} at {}", me.id, not_after - T0, now - T0);
        }
        if serving[0] != serving[1] {
            let start = *differ_since.get_or_insert(now);
            longest_difference = longest_difference.max(now - start);
        } else {
            differ_since = None;
        }
        now += poll;
    }
    assert!(cas_seen.len() >= 10, "rotated through {} CAs in ten lifetimes", cas_seen.len());
    assert!(longest_difference <= 3 * poll, "the replicas served different certificates for {longest_difference} ms");
    let s = secret.unwrap();
    assert!(s.cas.len() <= 2, "old CAs leave the bundle: {s:?}");
}

/// Webhook configurations nobody can write (missing, or not among --webhook-configurations):
/// the CAs still rotate, and once the old CA has expired and left the bundle the replica moves to
/// the certificate of the new one instead of serving an expired certificate for good.
#[test]
fn without_webhooks_to_trust_it_a_replica_still_leaves_an_expired_ca() {
    let t = timing();
    let mut s = created(T0);
    let mut a = replica("a");
    let (mut now, mut serving, mut served_until) = (T0, None::<String>, 0);
    // The webhooks trust nothing (never written).
    while now < T0 + 3 * t.validity {
        let action = decide(Some(&s), &a, now, &t, &names());
        if action != Action::Wait {
            s = apply(Some(&s), &action, "a", now, &t, &names()).unwrap().unwrap();
            continue;
        }
        if let Some(leaf) = choose(&s, &a, serving.as_deref(), now, &t) {
            a.serving = Some(leaf.issuer.clone());
            serving = Some(leaf.cert_pem.clone());
            served_until = leaf.not_after;
        }
        // At most a round past the expiry of what it serves.
        assert!(served_until + 1000 >= now, "serves a certificate expired at {} at {}", served_until - T0, now - T0);
        now += 1000;
    }
    assert_eq!(a.serving.as_ref(), Some(&s.leaf.issuer));
}

#[test]
fn the_webhooks_trust_only_what_every_webhook_carries() {
    let s = created(T0);
    let other = created(T0 + 1);
    let both = format!("{}{}", s.bundle(), other.bundle());
    let c = |hooks: Vec<(&str, &str)>| Configuration {
        kind: "MutatingWebhookConfiguration",
        name: "x".into(),
        resource_version: None,
        generation: 1,
        hooks: hooks.into_iter().map(|(n, p)| (n.to_owned(), p.as_bytes().to_vec())).collect(),
    };
    let trusted = trusted_by_all(&[c(vec![("a", &both)]), c(vec![("b", &s.bundle()), ("c", &both)])]).unwrap();
    assert_eq!(trusted, BTreeSet::from([s.cas[0].fingerprint.clone()]));
    assert_eq!(trusted_by_all(&[]), None);
    let read = Configuration::from_json(
        "ValidatingWebhookConfiguration",
        &serde_json::json!({"metadata": {"name": "x", "resourceVersion": "7", "annotations": {GENERATION_ANNOTATION: "4"}},
            "webhooks": [{"name": "w", "clientConfig": {"caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s.bundle())}}]}),
    );
    assert_eq!((read.generation, read.resource_version.as_deref()), (4, Some("7")));
    assert_eq!(bundle_fingerprints(&read.hooks[0].1), BTreeSet::from([s.cas[0].fingerprint.clone()]));
}

/// The start-over runbook (the Secret deleted): the webhooks carry generation 7 of the old
/// Secret's bundle. The new Secret's generation is above it, so its CA is written into them; a
/// generation counted from the new Secret alone (1) re-used one they carried and was never
/// written. A Secret restored from an older copy is renumbered the same way.
#[test]
fn a_start_over_never_reuses_or_lowers_a_generation_the_webhooks_carry() {
    let fresh = created(T0);
    assert_eq!(fresh.generation, 1);
    let old = vec![(7, b"old CA bundle".to_vec())];
    let hooks = vec![("m".to_owned(), b"old CA bundle".to_vec())];
    assert!(!needs_bundle(&fresh, 7, &hooks), "as counted from the Secret alone, never written");
    let floor = generation_floor(fresh.bundle().as_bytes(), &old);
    assert_eq!(floor, 8);
    let next = above_carried(&fresh, floor).expect("renumbered");
    assert_eq!(next.generation, 8);
    assert!(needs_bundle(&next, 7, &hooks), "the new CA reaches the webhooks");
    assert_eq!(round_trip(&next).generation, 8);
    assert!(above_carried(&next, floor).is_none(), "above already: unchanged");
    // Once the webhooks carry it, a write that keeps the bundle (a replica's record) keeps the
    // generation: no bundle write for it, no churn.
    let carrying = vec![(8, next.bundle().into_bytes()), (8, next.bundle().into_bytes())];
    assert_eq!(generation_floor(next.bundle().as_bytes(), &carrying), 8);
    assert!(above_carried(&next, 8).is_none(), "a record at the carried generation stays");
    // One configuration written, the other not yet (or not writable): above the other's too.
    let half = vec![(8, next.bundle().into_bytes()), (7, b"old CA bundle".to_vec())];
    assert_eq!(generation_floor(next.bundle().as_bytes(), &half), 8);
    assert_eq!(generation_floor(b"yet another", &half), 9);
    // Nothing read: no floor.
    assert_eq!(generation_floor(next.bundle().as_bytes(), &[]), 0);
}

/// A start-over while the webhook configurations could not be read: the new Secret got
/// generation 1 (nothing to go above). Its next write, a replica's record, once they read again,
/// must go above the 7 they carry with the old bundle: at 7 (never behind the webhooks), the same
/// number stood for two bundles, and a replica still holding the old Secret (generation 7, the
/// webhooks' bundle) wrote the old bundle back over the new one.
#[test]
fn a_generation_never_stands_for_two_bundles() {
    let t = timing();
    let fresh = created(T0);
    let old = created(T0 - 1000);
    let old = Stored { generation: 7, ..old };
    let carried = vec![(7, old.bundle().into_bytes())];
    let a = trusting(replica("a"), &old, T0);
    let action = decide(Some(&fresh), &a, T0, &t, &names());
    assert!(matches!(action, Action::Record(_)), "{action:?}");
    let record = apply(Some(&fresh), &action, "a", T0, &t, &names()).unwrap().unwrap();
    let record = above_carried(&record, generation_floor(record.bundle().as_bytes(), &carried)).unwrap_or(record);
    assert!(record.generation > 7, "generation {} of a new bundle, the webhooks carry 7 of another", record.generation);
    let hooks = vec![("m".to_owned(), old.bundle().into_bytes())];
    assert!(needs_bundle(&record, 7, &hooks), "the new bundle is written");
    // Once it is, the replica that still holds the old Secret leaves it.
    let written = vec![("m".to_owned(), record.bundle().into_bytes())];
    assert!(!needs_bundle(&old, record.generation, &written), "the old Secret's bundle never goes back");
}

#[test]
fn pem_is_written_as_the_stored_bundles_were() {
    // Bundles are compared as text (`Stored::bundle`, the webhooks' caBundle): 64-character lines,
    // `\n`, the label around them, as the hand-written writer before the `pem` crate wrote them.
    for len in [1usize, 47, 48, 49, 1000] {
        let der: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der);
        let mut expected = "-----BEGIN CERTIFICATE-----\n".to_owned();
        for line in b64.as_bytes().chunks(64) {
            expected.push_str(std::str::from_utf8(line).unwrap());
            expected.push('\n');
        }
        expected.push_str("-----END CERTIFICATE-----\n");
        assert_eq!(to_pem("CERTIFICATE", &der), expected, "{len} bytes");
    }
    // A stored bundle splits into its certificates and joins back to the same text.
    let s = created(T0);
    assert_eq!(pem_certs(&s.bundle()).into_iter().map(|(p, _)| p).collect::<String>(), s.bundle());
    assert!(s.leaf.key_pem.starts_with("-----BEGIN PRIVATE KEY-----\n") && !s.leaf.key_pem.contains('\r'));
}

/// A certificate with `cn` and DNS `sans`, valid until `not_after` (seconds since the epoch).
fn certificate(cn: &str, sans: &[&str], not_after: u64) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after);
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

#[test]
fn names_and_expiry_are_read_from_the_certificate() {
    // 2049-12-31T23:59:59Z (the last UTCTime) and 2050-01-01T00:00:00Z (the first GeneralizedTime).
    for until in [2_524_607_999u64, 2_524_608_000, 1_900_000_000] {
        let der = certificate("kube-apiserver", &["apiserver.example", "admission.example"], until);
        assert_eq!(not_after(&der), Some(until as i64));
        assert_eq!(cert_names(&der).unwrap(), ["kube-apiserver", "apiserver.example", "admission.example"]);
    }
    let der = certificate("only-a-cn", &[], 1_900_000_000);
    assert_eq!(cert_names(&der).unwrap(), ["only-a-cn"]);
    assert_eq!((not_after(b"not a certificate"), cert_names(b"not a certificate")), (None, None));
    assert_eq!(cert_names(&der[..der.len() / 2]), None, "a cut-off certificate does not parse");
}
