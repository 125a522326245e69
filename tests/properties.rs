//! Property tests: mutation is idempotent under reinvocation, snapshot names are
//! deterministic and independent of key order, and the hash framing is unambiguous; Secret
//! snapshot names are unrelated across namespaces and cluster keys, and no Secret value (nor a
//! form of one) shows in a `Debug`, error or warning of the Secret model. Also replays
//! the committed fuzz corpus (`fuzz/corpus/`) through the fuzz targets' checks, so every input
//! the fuzzer ever kept stays a regression test of `cargo test`.
//!
//! Deterministic: a fixed seed, a fixed number of cases, no persistence files.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::collections::BTreeMap;
use std::path::Path;

use confighistory::cache::Writer as _;
use confighistory::cluster::MemoryCluster;
use confighistory::model::snapshot::{self, Content};
use confighistory::webhook::Endpoint;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{json, Value};

/// Any constant does; a fixed one keeps every run the same.
const SEED: u64 = 0x0c0f_f1ee_5eed;

fn config(cases: u32) -> Config {
    Config { cases, rng_seed: RngSeed::Fixed(SEED), failure_persistence: None, ..Config::default() }
}

// ---------- mutation is idempotent (reinvocation), and the other rewrite invariants ----------

proptest! {
    #![proptest_config(config(768))]

    /// Any workload request the choice decoder describes: apply the patch, review again → no patch
    /// (with and without the new snapshots in the caches); plus the rest of `checks::rewrite_bytes`.
    #[test]
    fn mutation_is_idempotent_under_reinvocation(choices in prop::collection::vec(any::<u8>(), 0..96)) {
        checks::rewrite_bytes(&choices);
    }

    /// The same requests as full AdmissionReview bodies, through every endpoint, with bytes
    /// flipped here and there (mostly still JSON, sometimes not).
    #[test]
    fn any_admission_review_gets_a_well_formed_answer(
        choices in prop::collection::vec(any::<u8>(), 0..64),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        let req = checks::workload_request(&choices);
        let mut body = serde_json::to_vec(&checks::review_body(&req)).unwrap();
        for (at, byte) in flips {
            let i = at.index(body.len());
            body[i] = byte;
        }
        checks::review_bytes(&body);
    }
}

// ---------- snapshot names ----------

/// ConfigMap text with the keys of `data` written in the given order.
fn configmap_text(name: &str, data: &[(String, String)], binary: &[(String, String)]) -> String {
    let section =
        |pairs: &[(String, String)]| pairs.iter().map(|(k, v)| format!("{}:{}", json!(k), json!(v))).collect::<Vec<_>>().join(",");
    format!(
        r#"{{"binaryData":{{{}}},"metadata":{{"namespace":"{}","name":"{name}"}},"kind":"ConfigMap","data":{{{}}},"apiVersion":"v1"}}"#,
        section(binary),
        checks::NS,
        section(data)
    )
}

/// Pins a fresh Deployment to `source` as it is in a fresh cluster; returns the pinned name.
fn pinned_name(source_text: &str, source: &str) -> String {
    let cluster = MemoryCluster::default();
    let app = checks::app(&cluster);
    let obj: Value = serde_json::from_str(source_text).unwrap();
    cluster.insert(obj.clone());
    app.ctx.state.write().apply_configmap(&obj);
    let template = checks::deployment_template("img:1", &[source]);
    let req = serde_json::from_value(json!({
        "uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "name": "d", "namespace": checks::NS,
        "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": checks::NS}, "spec": {"template": template}},
    }))
    .unwrap();
    let (response, reason) = checks::run(&app, Endpoint::Mutate, &req);
    assert!(response.allowed, "{reason}: {:?}", response.message);
    let names: Vec<&str> = response.patch.iter().filter(|op| op["op"] == "replace").filter_map(|op| op["value"].as_str()).collect();
    assert_eq!(names.len(), 1, "{:?}", response.patch);
    names[0].to_owned()
}

fn unique_pairs(max: usize) -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::btree_map("[a-zA-Z0-9._-]{1,12}", ".{0,16}", 0..max).prop_map(|m| m.into_iter().collect())
}

/// A DNS-1123 subdomain of up to 253 characters, as ConfigMap names are.
fn source_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?",
        "[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,3}",
        (200usize..=253).prop_map(|n| "a".repeat(n)),
        (1usize..=60).prop_map(|n| format!("{}-{}", "b".repeat(n), "c".repeat(253 - n - 1))),
    ]
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

proptest! {
    #![proptest_config(config(256))]

    /// Same content, same name: whatever order the keys arrive in, on any replica (a fresh
    /// cluster and caches each time), through the very edge the server runs.
    #[test]
    fn snapshot_names_are_deterministic_and_independent_of_key_order(
        (data, shuffled) in unique_pairs(8).prop_flat_map(|d| (Just(d.clone()), Just(d).prop_shuffle())),
        binary in unique_pairs(3),
        reversed_binary in any::<bool>(),
    ) {
        let mut binary2 = binary.clone();
        if reversed_binary {
            binary2.reverse();
        }
        let a = configmap_text("cfg", &data, &binary);
        let b = configmap_text("cfg", &shuffled, &binary2);
        let ca = Content::from_object(&serde_json::from_str(&a).unwrap());
        let cb = Content::from_object(&serde_json::from_str(&b).unwrap());
        prop_assert_eq!(ca.hash(), cb.hash());
        let expected = snapshot::name("cfg", &ca.hash(), 0);
        prop_assert_eq!(pinned_name(&a, "cfg"), expected.clone());
        prop_assert_eq!(pinned_name(&b, "cfg"), expected);
    }

    /// Names stay valid ConfigMap names for any valid source name and index of the collision
    /// sequence, parse back to their hash and index, and the source label stays a label value.
    #[test]
    fn snapshot_names_are_valid_and_parse_back(source in source_name(), data in unique_pairs(4), index in 0u32..=snapshot::MAX_COLLISION_INDEX) {
        let content = Content { data: data.into_iter().collect(), ..Content::default() };
        let hash = content.hash();
        prop_assert!(snapshot::is_hash(&hash));
        let name = snapshot::name(&source, &hash, index);
        prop_assert_eq!(&name, &snapshot::name(&source, &hash, index), "deterministic");
        prop_assert!(is_dns_subdomain(&name), "{} is not a valid ConfigMap name", name);
        let (prefix, h, i) = snapshot::parse_name(&name).expect("parses");
        prop_assert_eq!((h, i), (hash.as_str(), index));
        prop_assert!(source.starts_with(prefix));
        let label = snapshot::source_label(&source);
        prop_assert!(is_label_value(&label), "{} is not a label value", label);
        // A valid snapshot under that name validates; the next index is another name.
        let obj = snapshot::object(checks::NS, &source, &name, &content, &[]);
        prop_assert_eq!(snapshot::validate(&obj), Ok(hash.clone()));
        prop_assert_ne!(name, snapshot::name(&source, &hash, index + 1));
    }
}

// ---------- the hash framing is unambiguous ----------

/// Reads a framing back into the one content it encodes; `None` when the bytes are not a framing.
/// That such a decoder exists (and consumes every byte) is what makes the framing injective.
fn decode(bytes: &[u8]) -> Option<Content> {
    let mut rest = bytes.strip_prefix(b"confighistory/v1\0")?;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
        rest = tail;
        Some(head)
    };
    let mut content = Content::default();
    for tag in [b'd', b'b'] {
        if take(1)? != [tag] {
            return None;
        }
        let count = u64::from_be_bytes(take(8)?.try_into().ok()?);
        let mut map = BTreeMap::new();
        for _ in 0..count {
            let klen = u64::from_be_bytes(take(8)?.try_into().ok()?) as usize;
            let key = String::from_utf8(take(klen)?.to_vec()).ok()?;
            let vlen = u64::from_be_bytes(take(8)?.try_into().ok()?) as usize;
            let value = String::from_utf8(take(vlen)?.to_vec()).ok()?;
            map.insert(key, value);
        }
        if tag == b'd' {
            content.data = map;
        } else {
            content.binary_data = map;
        }
    }
    take(0)?;
    rest.is_empty().then_some(content)
}

/// Contents built to collide if the framing were naive: keys and values made of a few
/// characters that also appear in the framing (NUL, 'd', 'b', digits).
fn tricky_content() -> impl Strategy<Value = Content> {
    let s = "[db\\x00=,:0-9]{0,5}";
    (prop::collection::btree_map(s, s, 0..4), prop::collection::btree_map(s, s, 0..3))
        .prop_map(|(data, binary_data)| Content { data, binary_data })
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn the_hash_framing_decodes_to_exactly_one_content(c in tricky_content()) {
        prop_assert_eq!(decode(&snapshot::framing(&c)), Some(c));
    }

    #[test]
    fn different_contents_never_frame_alike(a in tricky_content(), b in tricky_content()) {
        prop_assume!(a != b);
        prop_assert_ne!(snapshot::framing(&a), snapshot::framing(&b));
        prop_assert_ne!(a.hash(), b.hash());
    }
}

#[test]
fn classic_framing_ambiguities_hash_apart() {
    let c = |data: &[(&str, &str)], bin: &[(&str, &str)]| Content {
        data: data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        binary_data: bin.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let cases = [
        c(&[("ab", "c")], &[]),
        c(&[("a", "bc")], &[]),
        c(&[("a", "b"), ("c", "d")], &[]),
        c(&[("a", "b\0c\0d")], &[]),
        c(&[("a", "")], &[]),
        c(&[], &[("a", "")]),
        c(&[], &[]),
        c(&[("a", "1")], &[("b", "2")]),
        c(&[("b", "2")], &[("a", "1")]),
        c(&[("a", "1"), ("b", "2")], &[]),
    ];
    for (i, x) in cases.iter().enumerate() {
        assert_eq!(decode(&snapshot::framing(x)).as_ref(), Some(x));
        for y in &cases[i + 1..] {
            assert_ne!(x.hash(), y.hash(), "{x:?} and {y:?}");
        }
    }
}

// ---------- the fuzz corpus, replayed ----------

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten().map(|e| e.path()).collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no corpus", dir.display());
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            panic!("{} fails: {:?}", file.display(), panic.downcast_ref::<String>().map(String::as_str).unwrap_or("(panic)"));
        }
    }
}

#[test]
fn the_admission_review_corpus_replays_clean() {
    replay("admission_review", checks::review_bytes);
}

#[test]
fn the_rewrite_corpus_replays_clean() {
    replay("rewrite", checks::rewrite_bytes);
}

// ---------- reinvocation across a clock tick ----------

/// A source ConfigMap CREATE reviewed again a few milliseconds later (another webhook changed it
/// in between, so the API server reinvokes): the first pass's `changed-at` stands.
#[test]
fn a_source_reinvoked_later_keeps_its_changed_at() {
    let body = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/admission_review/configmap-create.json")).unwrap();
    let req = confighistory::admission::review::parse(&body).unwrap();
    let cluster = MemoryCluster::default();
    let app = checks::app(&cluster);
    let (first, _) = checks::run(&app, Endpoint::Mutate, &req);
    assert!(first.patch.iter().any(|op| op["path"] == "/metadata/annotations"), "{:?}", first.patch);
    let patched = checks::apply_patch(req.object(), &first.patch).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let again = confighistory::admission::review::Request { object: Some(patched), ..req };
    let (second, _) = checks::run(&app, Endpoint::Mutate, &again);
    assert!(second.patch.is_empty(), "{:?}", second.patch);
}

/// The reinvocation may reach another replica (the API server calls the Service), whose estimate
/// of the API server's time differs from the first one's by up to its uncertainty (under a second
/// once it has seen a response): a `changed-at` slightly ahead of its "now" is still the
/// first pass's. Failed before: only a time at or before "now" was taken, so the second pass wrote
/// its own time and was not a no-op.
#[test]
fn a_source_reinvoked_on_a_replica_whose_clock_estimate_lags_keeps_its_changed_at() {
    use confighistory::cluster::clock::Clock;
    use std::sync::Arc;
    let body = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/admission_review/configmap-create.json")).unwrap();
    let req = confighistory::admission::review::parse(&body).unwrap();
    let cluster = MemoryCluster::default();
    let app = checks::app(&cluster);
    let (first, _) = checks::run(&app, Endpoint::Mutate, &req);
    let patched = checks::apply_patch(req.object(), &first.patch).unwrap();
    let lagging = Clock::with_local(|| k8s_openapi::jiff::Timestamp::now().as_millisecond() - 700);
    let ctx = confighistory::context::Context::synced(app.ctx.policy.clone(), app.ctx.state.clone(), app.ctx.cluster.clone());
    let other = confighistory::webhook::App::new(Arc::new(ctx.with_clock(Arc::new(lagging))));
    let again = confighistory::admission::review::Request { object: Some(patched), ..req };
    let (second, _) = checks::run(&other, Endpoint::Mutate, &again);
    assert!(second.patch.is_empty(), "{:?}", second.patch);
}

// ---------- the plugin's `-o yaml` reads back as the model it printed ----------

/// Text a YAML writer has to take care with: indicators, quotes, reserved words of YAML 1.1 and
/// 1.2, control characters (C0, DEL, C1, the line and paragraph separators, a byte-order mark),
/// bidi controls, non-ASCII, line breaks and edge whitespace.
fn awkward_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 :#?!&*|>'\"%@`,\\[\\]{}.~_+=\\-\\\\\t\n\r\\x00-\\x1f\\x7f-\\x9f\u{2028}\u{2029}\u{feff}\u{202e}é日🎉]{0,12}",
        prop::sample::select(vec![
            "yes",
            "No",
            "ON",
            "off",
            "y",
            "n",
            "~",
            "null",
            "NULL",
            "true",
            "False",
            "1e3",
            "0o17",
            "0x1F",
            "+1",
            "-0",
            "1_000",
            "0777",
            ".NaN",
            "-.inf",
            "2024-01-01",
            "2001-12-14t21:59:43.10-05:00",
            "12:30:00",
            "<<",
            "=",
            "-",
            "---",
            "...",
            "? x",
            "- x",
            "",
            " ",
            "\n",
            "a\n",
            "\n\na",
            "a \n b ",
            "\ta\n\tb",
            "\n\tx\n",
            " \tx\ny",
            "\t",
        ])
        .prop_map(str::to_owned),
        // Long lines (a writer may fold them) with runs of spaces and tabs in awkward places.
        prop::collection::vec(("[a-z]{1,12}", "[ \t]{1,3}"), 10..60).prop_map(|words| words.into_iter().map(|(w, s)| w + &s).collect()),
    ]
}

fn awkward_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO | prop::num::f64::NEGATIVE | prop::num::f64::POSITIVE)
            .prop_map(Value::from),
        awkward_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(awkward_text(), inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// Whatever a model holds, `-o yaml` is valid YAML that reads back as the same JSON value
    /// (the model `-o json` prints), with a `kind` as the plugin adds it.
    #[test]
    fn plugin_yaml_reads_back_as_the_model(fields in prop::collection::btree_map(awkward_text(), awkward_value(), 0..6)) {
        use confighistory::plugin::{emit, output::Output};
        let mut model = Value::Object(fields.into_iter().collect());
        let yaml = emit("History", &model, &[], Output::Yaml).unwrap();
        let read: Value = serde_saphyr::from_str(&yaml).map_err(|e| TestCaseError::fail(format!("{e}\n{yaml}")))?;
        model["kind"] = "History".into();
        prop_assert_eq!(read, model, "{}", yaml);
    }
}

// ---------- Secret snapshot names (docs/behaviour.md §4a) ----------

use confighistory::model::keys::{ClusterKey, KeyId, Keyring};
use confighistory::model::secret::{self, SecretContent};

fn secret_content() -> impl Strategy<Value = SecretContent> {
    let types = prop::sample::select(vec!["Opaque", "kubernetes.io/basic-auth", "kubernetes.io/tls", "example.com/config"]);
    let data = prop::collection::btree_map("[a-zA-Z0-9._-]{1,12}", prop::collection::vec(any::<u8>(), 0..24), 0..5);
    (types, data).prop_map(|(t, d)| SecretContent::new(t, d))
}

fn cluster_key(id: u32) -> impl Strategy<Value = ClusterKey> {
    prop::collection::vec(any::<u8>(), 32..48).prop_map(move |b| ClusterKey::new(KeyId(id), b).unwrap())
}

/// A namespace name (a DNS label).
fn namespace() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,20}[a-z0-9])?"
}

proptest! {
    #![proptest_config(config(512))]

    /// The same content in two namespaces gets two names, and one namespace's names say nothing
    /// about another's: two contents named alike in one namespace (never, but if) would not be
    /// named alike elsewhere, and no content is named in `b` as another is in `a`.
    #[test]
    fn the_same_secret_in_two_namespaces_gets_unrelated_names(
        c in secret_content(), other in secret_content(), key in cluster_key(1), a in namespace(), b in namespace(),
    ) {
        prop_assume!(a != b);
        let (ka, kb) = (key.namespace_key(&a), key.namespace_key(&b));
        prop_assert_ne!(secret::snapshot_name("db", &c, &ka, 0), secret::snapshot_name("db", &c, &kb, 0));
        prop_assert_eq!(secret::snapshot_name("db", &c, &ka, 0), secret::snapshot_name("db", &c.clone(), &key.namespace_key(&a), 0));
        if other != c {
            prop_assert_ne!(c.mac(&ka, "db"), other.mac(&ka, "db"));
            prop_assert_ne!(c.mac(&ka, "db"), other.mac(&kb, "db"));
        }
    }

    /// The same content under two names in one namespace gets unrelated MACs (frame v2 binds the
    /// source's name, docs/behaviour.md §4a): what a Secret one may write is MAC'd to says nothing
    /// about another's; and no content under one name is MAC'd as another content under another.
    #[test]
    fn the_same_secret_under_two_names_gets_unrelated_macs(
        c in secret_content(), other in secret_content(), key in cluster_key(1), ns in namespace(), a in source_name(), b in source_name(),
    ) {
        prop_assume!(a != b);
        let k = key.namespace_key(&ns);
        prop_assert_ne!(c.mac(&k, &a), c.mac(&k, &b));
        prop_assert_ne!(c.mac(&k, &a), other.mac(&k, &b));
    }

    /// Under another cluster key, the same content in the same namespace gets another name.
    #[test]
    fn secret_names_differ_under_different_cluster_keys(c in secret_content(), k1 in cluster_key(1), k2 in cluster_key(2), ns in namespace()) {
        prop_assert_ne!(secret::snapshot_name("db", &c, &k1.namespace_key(&ns), 0), secret::snapshot_name("db", &c, &k2.namespace_key(&ns), 0));
    }

    /// A Secret snapshot's name is a valid object name that parses back to its MAC, and the
    /// object validates under the keyring it was made with.
    #[test]
    fn secret_snapshots_are_valid_names_and_objects(
        source in source_name(), c in secret_content(), key in cluster_key(3), ns in namespace(), index in 0u32..=snapshot::MAX_COLLISION_INDEX,
    ) {
        let k = key.namespace_key(&ns);
        let name = secret::snapshot_name(&source, &c, &k, index);
        prop_assert!(is_dns_subdomain(&name), "{} is not a valid Secret name", name);
        let mac = c.mac(&k, &source);
        prop_assert_eq!(snapshot::parse_name(&name).map(|(_, h, i)| (h, i)), Some((mac.as_str(), index)));
        let obj = secret::snapshot_object(&ns, &source, &name, &c, &k, &[]);
        let ring = Keyring::new(key, []).unwrap();
        prop_assert_eq!(secret::validate(&obj, &ns, &ring), Ok(mac));
        // Made before frame v2 (no name bound): still valid.
        let v1 = c.mac_in(&k, &source, secret::Frame::V1);
        let old = secret::snapshot_object_in(&ns, &source, &snapshot::name(&source, &v1, index), &c, &k, secret::Frame::V1, &[]);
        prop_assert_eq!(secret::validate(&old, &ns, &ring), Ok(v1));
    }
}

/// Across many contents, the names in two namespaces (and under two cluster keys) agree at a
/// position about as often as unrelated random strings do (1 in 32 per character): no structure
/// of one carries over to the other.
#[test]
fn secret_names_in_two_namespaces_agree_only_by_chance() {
    let key = ClusterKey::new(KeyId(1), (0u8..32).collect()).unwrap();
    let other_key = ClusterKey::new(KeyId(2), (32u8..64).collect()).unwrap();
    let (a, b, a2) = (key.namespace_key("shop"), key.namespace_key("billing"), other_key.namespace_key("shop"));
    let (mut same_ns, mut same_key, mut same_ns_name, mut total) = (0, 0, 0, 0);
    let agree = |x: &str, y: &str| x.bytes().zip(y.bytes()).filter(|(p, q)| p == q).count();
    for i in 0..2000u32 {
        let c = SecretContent::new("Opaque", [("password".to_owned(), i.to_string().into_bytes())].into());
        let (x, y, z, w) = (c.mac(&a, "db"), c.mac(&b, "db"), c.mac(&a2, "db"), c.mac(&a, "guess"));
        same_ns += agree(&x, &y);
        same_key += agree(&x, &z);
        same_ns_name += agree(&x, &w);
        total += x.len();
    }
    // Expected 1/32 = 0.031; a related pair (one a function of the other's low bits, say) lands far out.
    for (what, agree) in [("namespaces", same_ns), ("cluster keys", same_key), ("names", same_ns_name)] {
        let rate = agree as f64 / total as f64;
        assert!((0.02..0.045).contains(&rate), "{what}: {rate}");
    }
}

// ---------- no Secret value leaks through a Debug, an error or a warning ----------

const CANARY: &str = "canary-s3cr3t-value";

/// The canary and every form of it that must never appear: itself, its base64 (padded, and the
/// unpadded prefix a longer value would carry), its bytes as `Debug` of a `Vec<u8>` lists them
/// and in hex, its hex SHA-256 in both cases, and the unkeyed snapshot hashes a ConfigMap of it
/// would be named by.
fn canary_forms() -> Vec<(&'static str, String)> {
    use base64::Engine as _;
    use confighistory::model::digest::{digest, Sha256};
    let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    let hex: String = digest::<Sha256>(CANARY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let configmap = snapshot::Content { data: [("password".to_owned(), CANARY.to_owned())].into(), ..Content::default() };
    vec![
        ("the canary", CANARY.to_owned()),
        ("its base64", b64.clone()),
        ("its base64, unpadded prefix", b64.trim_end_matches('=')[..24].to_owned()),
        ("its bytes as Debug lists them", CANARY.bytes().map(|b| b.to_string()).collect::<Vec<_>>().join(", ")),
        ("its bytes in hex", CANARY.bytes().map(|b| format!("{b:02x}")).collect()),
        ("its SHA-256 in hex", hex.clone()),
        ("its SHA-256 in upper-case hex", hex.to_uppercase()),
        ("its short hash", snapshot::short_hash(CANARY)),
        ("the hash of a ConfigMap of it", configmap.hash()),
    ]
}

#[test]
fn no_secret_type_shows_the_canary() {
    use confighistory::model::digest::{HmacSha256, Mac};
    let forms = canary_forms();
    let mut shown: Vec<(String, String)> = Vec::new();
    let mut show = |what: &str, text: String| shown.push((what.to_owned(), text));

    let key_bytes = format!("{CANARY}{CANARY}").into_bytes();
    let key = ClusterKey::new(KeyId(1), key_bytes.clone()).unwrap();
    let ns_key = key.namespace_key("shop");
    show("ClusterKey", format!("{key:?}"));
    show("NamespaceKey", format!("{ns_key:?}"));
    let ring = Keyring::new(key.clone(), []).unwrap();
    show("Keyring", format!("{ring:?}"));
    let mut mac = HmacSha256::new(CANARY.as_bytes());
    show("HmacSha256 keyed", format!("{mac:?}"));
    mac.update(CANARY.as_bytes());
    show("HmacSha256 fed", format!("{mac:?}"));
    let short = ClusterKey::new(KeyId(2), CANARY.as_bytes().to_vec()).unwrap_err();
    show("KeyError short key", format!("{short:?} {short}"));
    let mut data = ring.to_data();
    data.insert("current".into(), key_bytes.clone());
    let bad_current = Keyring::from_data(&data).unwrap_err();
    show("KeyError key in the current entry", format!("{bad_current:?} {bad_current}"));

    let content = SecretContent::new("Opaque", [("password".to_owned(), CANARY.as_bytes().to_vec())].into());
    show("SecretContent", format!("{content:?}"));
    let from_obj = SecretContent::from_object(&json!({"data": {"password": forms[1].1}, "stringData": {"other": CANARY}})).unwrap();
    show("SecretContent from an object", format!("{from_obj:?}"));
    let malformed = SecretContent::from_object(&json!({"data": {"password": format!("{CANARY}!")}})).unwrap_err();
    show("Malformed", format!("{malformed:?} {malformed}"));
    let empty = SecretContent::new("Opaque", Default::default());
    let changes = secret::key_changes(&empty, &content);
    show("KeyChanges", format!("{changes:?}"));
    let changed = SecretContent::new("Opaque", [("password".to_owned(), b"other".to_vec())].into());
    for (old, new) in [(&empty, &content), (&content, &changed), (&changed, &content)] {
        show("update warning", secret::update_warning("secret/db", old, new).unwrap_or_default());
    }

    // The snapshot's name and labels (its data is the snapshot: base64 there is the point), and
    // every way it can be invalid.
    let name = secret::snapshot_name("db", &content, &ns_key, 0);
    let obj = secret::snapshot_object("shop", "db", &name, &content, &ns_key, &[]);
    show("snapshot name and labels", format!("{name} {}", obj["metadata"]));
    let invalid = |f: &dyn Fn(&mut Value)| {
        let mut o = obj.clone();
        f(&mut o);
        secret::validate(&o, "shop", &ring).unwrap_err()
    };
    let errors = [
        invalid(&|o| o["immutable"] = json!(false)),
        invalid(&|o| o["data"]["password"] = json!(format!("{CANARY}!"))),
        invalid(&|o| o["data"]["extra"] = json!(forms[1].1)),
        invalid(&|o| o["metadata"]["labels"]["confighistory.io/key-id"] = json!(CANARY)),
        invalid(&|o| o["metadata"]["labels"]["confighistory.io/key-id"] = json!("7")),
        invalid(&|o| o["metadata"]["name"] = json!("db-0000000000zz")),
        secret::validate(&obj, "billing", &ring).unwrap_err(),
    ];
    for e in errors {
        show("Invalid", format!("{e:?} {e}"));
    }
    for t in ["kubernetes.io/service-account-token", "Opaque"] {
        let never = secret::never_source(
            &json!({"metadata": {"annotations": {"cert-manager.io/certificate-name": CANARY}}}),
            t,
            &Default::default(),
        );
        show("NeverSource", format!("{never:?} {}", never.map(|n| n.to_string()).unwrap_or_default()));
    }

    assert_eq!(shown.len(), 24, "every form above is checked");
    for (what, text) in &shown {
        for (form, value) in &forms {
            // Said without the canary, so a failure prints none of it either.
            assert!(!text.contains(value.as_str()), "{what} shows {form} (text {} bytes long)", text.len());
        }
    }
    // The check itself sees a leak: a plain Debug of the bytes would fail it.
    assert!(format!("{:?}", String::from_utf8(key_bytes).unwrap()).contains(CANARY));
}

// ---------- a request's template, folded, hashes and reads as the whole one ----------

/// Any JSON below a template's fields: scalars (strings that could pass for folded parts among
/// them), arrays and maps, nulls, `$patch` markers.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-z\"\\\\\u{0}\u{1}\u{e9} ]{0,12}".prop_map(Value::from),
        Just(Value::from("\u{0}folded:[1,]")),
        Just(Value::from("\u{0}folded:")),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop_oneof![Just("$patch".to_string()), "[a-z]{1,6}"], inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A pod template as workloads carry them: references in volumes, env and envFrom, env entries
/// with and without `valueFrom`, and any JSON in every other place.
fn any_template() -> impl Strategy<Value = Value> {
    let name = prop_oneof![Just("cfg"), Just("cfg-0123456789ab"), Just("sec")].prop_map(Value::from);
    let env_var = prop_oneof![
        ("[A-Z]{1,4}", any_json()).prop_map(|(n, v)| json!({"name": n, "value": v})),
        ("[A-Z]{1,4}", name.clone(), any::<bool>())
            .prop_map(|(n, c, o)| json!({"name": n, "valueFrom": {"configMapKeyRef": {"name": c, "key": "k", "optional": o}}})),
        ("[A-Z]{1,4}", name.clone())
            .prop_map(|(n, c)| json!({"name": n, "valueFrom": {"secretKeyRef": {"name": c, "key": "k"}}, "x": [1]})),
        Just(json!({})),
        Just(json!({"name": "N", "valueFrom": null})),
        any_json(),
    ];
    let container = (prop::collection::vec(env_var, 0..6), any_json(), any_json(), name.clone()).prop_map(|(env, image, extra, c)| {
        json!({"name": "app", "image": image, "resources": extra, "env": env, "envFrom": [{"configMapRef": {"name": c}}]})
    });
    let volume = prop_oneof![
        name.clone().prop_map(|n| json!({"name": "v", "configMap": {"name": n}})),
        name.clone().prop_map(|n| json!({"name": "v", "projected": {"sources": [{"configMap": {"name": n}}, {"secret": {"name": n}}]}})),
        any_json().prop_map(|j| json!({"name": "v", "emptyDir": j})),
    ];
    let labels = prop::collection::btree_map(prop_oneof![Just("pod-template-hash".to_string()), "[a-z]{1,5}"], "[a-z]{0,4}", 0..4);
    (prop::collection::vec(container, 0..3), prop::collection::vec(volume, 0..3), any_json(), any_json(), labels).prop_map(
        |(containers, volumes, affinity, other, labels)| {
            json!({"metadata": {"labels": labels, "annotations": {"a": "\u{0}folded:x"}},
                   "spec": {"containers": containers, "initContainers": containers, "volumes": volumes, "affinity": affinity, "x": other},
                   "other": other})
        },
    )
}

/// The template a Deployment review of `template` parses to.
fn parsed_template(template: &Value) -> Value {
    let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "namespace": "ns", "operation": "CREATE",
        "object": {"metadata": {"name": "d"}, "spec": {"template": template}}}}))
    .unwrap();
    let req = confighistory::admission::review::parse(&body).unwrap();
    req.object()["spec"]["template"].clone()
}

proptest! {
    #![proptest_config(config(512))]

    /// A workload request's template is parsed with what no rule reads folded (`model::fold`): it
    /// hashes as the whole template does (as the watch hashes the same template in a revision), its
    /// references are the same ones at the same pointers, and two templates parse alike exactly
    /// when they are alike.
    #[test]
    fn a_folded_template_hashes_and_reads_as_the_whole_one(a in any_template(), b in any_template()) {
        use confighistory::model::ids::SourceKinds;
        use confighistory::model::kinds::Kind;
        use confighistory::model::template;
        // As the watch reads the same JSON text (a float read back may differ from the generated
        // one in its last bit, for the watch as for the webhook).
        let reread = |v: &Value| serde_json::from_str::<Value>(&v.to_string()).unwrap();
        let (a, b) = (reread(&a), reread(&b));
        let (fa, fb) = (parsed_template(&a), parsed_template(&b));
        prop_assert_eq!(Kind::Deployment.request_template_hash(&fa), Kind::Deployment.template_hash(&a));
        prop_assert_eq!(Kind::Deployment.request_template_hash(&fb), Kind::Deployment.template_hash(&b));
        let all = SourceKinds::WITH_SECRETS;
        prop_assert_eq!(template::refs(&fa, all), template::refs(&a, all));
        // Alike by the template hash's reading (null members and `$patch` markers are no content).
        let same = Kind::Deployment.template_hash(&a) == Kind::Deployment.template_hash(&b);
        prop_assert_eq!(fa == fb, same, "{} vs {}", a, b);
        prop_assert_eq!(parsed_template(&a), fa);
    }
}

/// The template hash is stored (snapshots' adoption records name it), so its definition must not
/// move: keys sorted, null members and `$patch` left out, the kind's hash label dropped, `"k":v,`
/// inside braces and `v,` inside brackets, SHA-256's first 10 bytes in hex. The value below was
/// computed from that definition outside Rust (Python's json and hashlib); the whole template and
/// the folded one a review parses must both give it.
#[test]
fn the_template_hash_is_the_stored_definitions() {
    use confighistory::model::kinds::Kind;
    let template = json!({"metadata": {"labels": {"app": "a", "pod-template-hash": "x"}, "annotations": {"z": "1", "b": null}},
        "spec": {"containers": [{"name": "c", "image": "i", "args": ["a", 1, true, null, 2.5],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cfg", "optional": null}}], "$patch": "replace"}});
    assert_eq!(Kind::Deployment.template_hash(&template), "2beb1dc0ec52fbff4cc8");
    assert_eq!(Kind::Deployment.request_template_hash(&parsed_template(&template)), "2beb1dc0ec52fbff4cc8");
}
