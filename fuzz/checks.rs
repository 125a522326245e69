//! Invariants shared by the fuzz targets (`fuzz/fuzz_targets/*.rs`, cargo-fuzz) and the property
//! tests (`tests/properties.rs`, which also replays the committed corpus on every `cargo test`).
//!
//! Everything goes through [`confighistory::webhook::admit`], the same edge the HTTPS router calls,
//! with an in-memory API server ([`MemoryCluster`]) holding a fixed little namespace:
//! sources (mutable, immutable, unversioned, a 253-character name), an older snapshot with an
//! adoption record, a squatter on the first snapshot name of one source, and a Deployment with
//! two revisions (so undos are recognised).
//!
//! - [`review_bytes`]: any byte string as an AdmissionReview body: parsing never panics; a parsed
//!   request gets an answer from every endpoint that serialises, echoes the uid, keeps warnings
//!   short, and whose patch applies to the object; a mutation reviewed again changes nothing.
//! - [`rewrite_bytes`]: bytes drive the *choices* of a workload request (kind, operation, caller,
//!   references in every place docs/behaviour.md §4 lists, oldObject, annotations, dry run), so the fuzzer
//!   explores reference rewriting rather than JSON syntax. On top of the above: a patch touches
//!   only reference names and metadata annotations, each changed reference names a valid snapshot
//!   (or a name the request or oldObject already used), all references to a source end on one
//!   name, the final object passes validation, and a reinvocation (with or without the new
//!   snapshots in the watch caches) is a no-op.
#![allow(dead_code)] // each includer uses part of it

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use confighistory::admission::review::{self, Request, Response, MAX_WARNING};
use confighistory::admission::Reason;
use confighistory::cache::Writer as _;
use confighistory::cache::{Lock, State};
use confighistory::cluster::MemoryCluster;
use confighistory::model::ids;
use confighistory::model::kinds::Kind;
use confighistory::model::kinds::Registry;
use confighistory::model::policy::Policy;
use confighistory::model::snapshot::{self, Content};
use confighistory::model::template;
use confighistory::webhook::{admit, from_memory, App, Endpoint};
use serde_json::{json, Value};

pub const NS: &str = "shop";
pub const ME: &str = "system:serviceaccount:confighistory:confighistory";

fn configmap(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")}, "data": data})
}

fn content(data: &[(&str, &str)]) -> Content {
    Content::from_object(&configmap("x", data))
}

const APP_NOW: &[(&str, &str)] = &[("mode", "b"), ("rules.discount_path", "/r")];
const APP_OLD: &[(&str, &str)] = &[("mode", "a"), ("discount_rules_path", "/r")];
const OTHER: &[(&str, &str)] = &[("k", "v")];

/// A 253-character source name (the longest ConfigMap name).
pub fn long_name() -> String {
    format!("l{}", "o".repeat(251)) + "g"
}

/// The fixed cluster every case starts from (objects and watch caches agree).
pub struct World {
    pub objects: Vec<Value>,
    /// Names a reference may use, some plain, some snapshots, some odd.
    pub names: Vec<String>,
    /// The Deployment the revisions belong to, and its two revisions' templates.
    pub revisions: Vec<Value>,
}

pub fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let app_old_snap = snapshot::name("app-config", &content(APP_OLD).hash(), 0);
        let app_now_snap = snapshot::name("app-config", &content(APP_NOW).hash(), 0);
        let squatted = snapshot::name("other", &content(OTHER).hash(), 0);
        let mut objects = vec![
            configmap("app-config", APP_NOW),
            configmap("other", OTHER),
            // Squatter: a mutable ConfigMap under the first snapshot name of `other`'s content.
            configmap(&squatted, &[("evil", "1")]),
            configmap(&long_name(), &[("x", "1")]),
        ];
        let mut unversioned = configmap("flags", &[("on", "yes")]);
        unversioned["metadata"]["annotations"] = json!({"confighistory.io/versioned": "false"});
        objects.push(unversioned);
        let mut frozen = configmap("frozen", &[("f", "1")]);
        frozen["immutable"] = json!(true);
        objects.push(frozen);
        let mut pending = configmap("pending", &[("p", "2")]);
        pending["metadata"]["annotations"] =
            json!({"confighistory.io/head": content(&[("p", "2")]).hash(), "confighistory.io/changed-at": "2026-12-02T10:00:00Z"});
        objects.push(pending);
        objects.push(snapshot::object(
            NS,
            "pending",
            &snapshot::name("pending", &content(&[("p", "1")]).hash(), 0),
            &content(&[("p", "1")]),
            &[],
        ));

        // Revisions of Deployment "web": 1 plain (from before the install), 2 pinned to the old content.
        let rev1 = deployment_template("img:1", &["app-config"]);
        let rev2 = deployment_template("img:2", &[&app_old_snap]);
        objects.push(snapshot::object(NS, "app-config", &app_old_snap, &content(APP_OLD), &[template::template_hash(&rev1)]));

        let names = vec![
            "app-config".to_owned(),
            "other".to_owned(),
            "flags".to_owned(),
            "frozen".to_owned(),
            "pending".to_owned(),
            "missing".to_owned(),
            "kube-root-ca.crt".to_owned(),
            long_name(),
            app_old_snap.clone(),
            app_now_snap,
            squatted,
            snapshot::name("pending", &content(&[("p", "1")]).hash(), 0),
            // Looks like a snapshot, exists nowhere.
            "app-config-0123456789ab".to_owned(),
            // Not valid names: the API server validates after mutation, so the webhook sees them.
            "A/b~c".to_owned(),
            "ünïcödé".to_owned(),
            String::new(),
        ];
        World { objects, names, revisions: vec![rev1, rev2] }
    })
}

/// A pod template with one container that mounts and reads every name in `cms`.
pub fn deployment_template(image: &str, cms: &[&str]) -> Value {
    let volumes: Vec<Value> = cms.iter().enumerate().map(|(i, n)| json!({"name": format!("v{i}"), "configMap": {"name": n}})).collect();
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"volumes": volumes, "containers": [{"name": "c", "image": image}]}})
}

fn revision_object(template: &Value, n: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("web-{n}"), "namespace": NS,
            "annotations": {"deployment.kubernetes.io/revision": n.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web", "controller": true}]},
        "spec": {"template": template}
    })
}

/// A fresh App over a fresh copy of the world. `caches` adds the snapshots the cluster holds to
/// the watch caches (as the watch delivers them a moment after they are created).
pub fn app(cluster: &MemoryCluster) -> App {
    let w = world();
    let mut state = State::default();
    for obj in &w.objects {
        cluster.insert(obj.clone());
        state.apply_configmap(obj);
    }
    for (i, t) in w.revisions.iter().enumerate() {
        state.apply_revision(Kind::ReplicaSet, &revision_object(t, i as u32 + 1));
    }
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS, "uid": "uid-web"},
        "spec": {"template": w.revisions[1]}});
    state.apply_workload(Kind::Deployment, &web);
    App::ready(Policy::default(), Arc::new(Lock::new(state)), Arc::new(cluster.clone()))
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

pub fn run(app: &App, endpoint: Endpoint, req: &Request) -> (Response, Reason) {
    // The router answers some reviews from memory alone, without the driver: whenever it may,
    // its answer is the driver's (asked first: the driver's writes change the little cluster).
    let from_memory = from_memory(app, endpoint, req);
    let answer = runtime().block_on(admit(app, endpoint, req));
    if let Some(fast) = from_memory {
        assert_eq!(fast, answer, "the answer from memory is the driver's answer");
    }
    answer
}

/// Checks that hold for any answer to any request.
pub fn check_answer(req: &Request, response: &Response) {
    // The bytes the server sends, written by hand: valid JSON for any uid, message or warning.
    let review: Value = serde_json::from_slice(&response.review_json(&req.uid)).expect("the answer is JSON");
    assert_eq!(review["response"]["uid"], json!(req.uid), "the uid is echoed");
    assert_eq!(review["response"]["allowed"], json!(response.allowed));
    for w in &response.warnings {
        assert!(w.len() <= MAX_WARNING + '…'.len_utf8(), "warning too long: {w}");
    }
    if !response.allowed {
        let message = response.message.as_deref().unwrap_or_default();
        assert!(!message.is_empty(), "a denial says why");
        assert!(response.patch.is_empty(), "a denial carries no patch");
    }
}

/// Applies a JSONPatch the way the API server does; `Err` when it does not apply.
pub fn apply_patch(obj: &Value, ops: &[Value]) -> Result<Value, String> {
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec())).map_err(|e| format!("not a JSONPatch: {e}"))?;
    let mut out = obj.clone();
    json_patch::patch(&mut out, &patch).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Any bytes as an AdmissionReview body, through every endpoint.
pub fn review_bytes(data: &[u8]) {
    // The memory model's charge (docs/reliability.md, "The memory model") bounds the tree any
    // body parses into: the one scan counts every string, array slot and map entry the parser
    // builds, whatever escapes, nesting or malformed tails the bytes hold.
    let cost = confighistory::model::json::parse_cost(data);
    assert!(cost <= confighistory::model::json::parse_bound(data.len()), "the scan's {cost} passes the length's bound");
    if let Ok(tree) = serde_json::from_slice::<Value>(data) {
        let built = confighistory::model::json::heap_size(&tree);
        assert!(built <= cost, "a body charged {cost} bytes built a tree of {built}");
    }
    let Ok(req) = review::parse(data) else { return };
    let cluster = MemoryCluster::default();
    let app = app(&cluster);
    for endpoint in [Endpoint::Mutate, Endpoint::Validate, Endpoint::Protect] {
        let (response, _) = run(&app, endpoint, &req);
        check_answer(&req, &response);
        if response.patch.is_empty() {
            continue;
        }
        assert_eq!(endpoint, Endpoint::Mutate, "only the mutating endpoint patches");
        // The API server always sends objects with metadata; only those are held to the patch.
        if !req.object().get("metadata").is_some_and(Value::is_object) {
            continue;
        }
        let patched = apply_patch(req.object(), &response.patch).unwrap_or_else(|e| panic!("patch does not apply: {e}"));
        // confighistory's own identity only ever sets the propagation trigger on an unchanged
        // template (`rewrite_bytes` covers that); arbitrary template changes under its name
        // (an undo, say) are not held to idempotence.
        if req.user_info.username == ME {
            continue;
        }
        let again = Request { object: Some(patched), ..req.clone() };
        let (second, _) = run(&app, Endpoint::Mutate, &again);
        check_answer(&again, &second);
        assert!(second.allowed, "a reinvocation is allowed: {:?}", second.message);
        assert!(second.patch.is_empty(), "a reinvocation changes nothing: {:?}", second.patch);
    }
}

/// A little decoder of choices: each call takes a byte (0 once the input runs out).
pub struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Choices<'a> {
    pub fn new(data: &'a [u8]) -> Choices<'a> {
        Choices { data, pos: 0 }
    }
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    pub fn pick(&mut self, n: usize) -> usize {
        self.byte() as usize % n.max(1)
    }
    pub fn chance(&mut self, percent: u8) -> bool {
        (self.byte() % 100) < percent
    }
    pub fn name(&mut self) -> String {
        let names = &world().names;
        // Mostly real sources, so the interesting rules run.
        let i = if self.chance(70) { self.pick(5) } else { self.pick(names.len()) };
        names[i].clone()
    }
    fn holder(&mut self) -> Value {
        let mut h = json!({"name": self.name()});
        if self.chance(15) {
            h["optional"] = json!(true);
        }
        h
    }
}

/// A pod template whose references are chosen by `c`, in every place docs/behaviour.md §4 lists.
pub fn template_from(c: &mut Choices) -> Value {
    let mut volumes = Vec::new();
    for i in 0..c.pick(4) {
        volumes.push(match c.pick(4) {
            0 => json!({"name": format!("v{i}"), "emptyDir": {}}),
            1 => {
                let sources: Vec<Value> = (0..c.pick(3) + 1)
                    .map(|_| if c.chance(80) { json!({"configMap": c.holder()}) } else { json!({"secret": {"name": "s"}}) })
                    .collect();
                json!({"name": format!("v{i}"), "projected": {"sources": sources}})
            }
            _ => json!({"name": format!("v{i}"), "configMap": c.holder()}),
        });
    }
    let mut spec = json!({"volumes": volumes, "containers": [container(c, "app")]});
    if c.chance(30) {
        spec["initContainers"] = json!([container(c, "init")]);
    }
    if c.chance(20) {
        spec["containers"].as_array_mut().expect("array").push(container(c, "sidecar"));
    }
    json!({"metadata": {"labels": {"app": "web"}}, "spec": spec})
}

fn container(c: &mut Choices, name: &str) -> Value {
    let env: Vec<Value> = (0..c.pick(3))
        .map(|e| {
            if c.chance(75) {
                let mut r = c.holder();
                r["key"] = json!("k");
                json!({"name": format!("E{e}"), "valueFrom": {"configMapKeyRef": r}})
            } else {
                json!({"name": format!("E{e}"), "value": "x"})
            }
        })
        .collect();
    let env_from: Vec<Value> = (0..c.pick(3))
        .map(|_| if c.chance(80) { json!({"configMapRef": c.holder()}) } else { json!({"secretRef": {"name": "s"}}) })
        .collect();
    let image = ["img:1", "img:2", "img:3"][c.pick(3)];
    json!({"name": name, "image": image, "env": env, "envFrom": env_from})
}

/// The workload request a byte string describes.
pub fn workload_request(data: &[u8]) -> Request {
    let mut c = Choices::new(data);
    let kinds = [("Deployment", "apps"), ("StatefulSet", "apps"), ("DaemonSet", "apps"), ("Job", "batch"), ("CronJob", "batch")];
    let (kind_name, group) = kinds[c.pick(kinds.len())];
    let kind = Registry::builtin().workload(group, kind_name).expect("a kind");
    let wrap = |template: Value, annotations: Value| {
        let mut obj = json!({"apiVersion": format!("{group}/v1"), "kind": kind_name,
            "metadata": {"name": "web", "namespace": NS, "uid": "uid-web"}, "spec": {}});
        if annotations.as_object().is_some_and(|m| !m.is_empty()) {
            obj["metadata"]["annotations"] = annotations;
        }
        let holder = if kind == Kind::CronJob {
            obj["spec"] = json!({"schedule": "* * * * *", "jobTemplate": {"spec": {}}});
            &mut obj["spec"]["jobTemplate"]["spec"]
        } else {
            &mut obj["spec"]
        };
        holder["template"] = template;
        obj
    };
    // The template: generated, or one of the Deployment's revisions (an undo), or derived below.
    let revision = (kind == Kind::Deployment && c.chance(20)).then(|| world().revisions[c.pick(2)].clone());
    let template = revision.clone().unwrap_or_else(|| template_from(&mut c));
    let update = c.chance(60);
    let mut old = None;
    if update {
        // oldObject: the same template pinned (a re-apply or partial edit), another one, or a revision.
        let old_template = match c.pick(3) {
            0 => {
                let mut t = template.clone();
                for r in template::refs(&template, ids::SourceKinds::CONFIGMAPS) {
                    if c.chance(60) {
                        if let Some(slot) = t.pointer_mut(&r.pointer) {
                            *slot = json!(c.name());
                        }
                    }
                }
                t
            }
            1 => template_from(&mut c),
            _ => world().revisions[c.pick(2)].clone(),
        };
        // Holds as admission leaves them: on sources pinned to a snapshot that is not the head.
        let mut ann = serde_json::Map::new();
        let w = world();
        let held: Vec<&str> = template::refs(&old_template, ids::SourceKinds::CONFIGMAPS)
            .iter()
            .filter_map(|r| (r.id.name == w.names[8]).then_some("app-config").or((r.id.name == w.names[11]).then_some("pending")))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|_| c.chance(50))
            .collect();
        if !held.is_empty() {
            ann.insert("confighistory.io/held".into(), json!(held.join(",")));
        }
        old = Some(wrap(old_template, Value::Object(ann)));
    }
    // confighistory's own updates only ever set the propagation trigger: same template as oldObject.
    let own = update && c.chance(20);
    let template = match (&old, own) {
        (Some(o), true) => o.pointer(kind.template_pointer()).cloned().expect("old template"),
        _ => template,
    };
    let mut ann = serde_json::Map::new();
    if c.chance(20) {
        ann.insert("confighistory.io/propagate".into(), json!(["app-config=x", "pending=y,other=z", "garbage"][c.pick(3)]));
    }
    if c.chance(10) {
        ann.insert("confighistory.io/pins".into(), json!("{\"app-config\":\"forged\"}"));
    }
    if c.chance(5) {
        ann.insert("confighistory.io/ignore".into(), json!("true"));
    }
    let object = wrap(template, Value::Object(ann));
    let mut req = json!({
        "uid": format!("fuzz-{}", c.byte()),
        "kind": {"group": group, "version": "v1", "kind": kind_name},
        "name": "web", "namespace": NS,
        "operation": if update { "UPDATE" } else { "CREATE" },
        "userInfo": {"username": if own { ME } else { "alice" }},
        "object": object, "oldObject": old, "dryRun": c.chance(15),
    });
    if !update {
        req["oldObject"] = Value::Null;
    }
    serde_json::from_value(req).expect("a well-formed request")
}

/// Source name of a reference as the cluster knows it: the snapshot's `source-name`, else itself.
fn source_of(cluster: &MemoryCluster, name: &str) -> String {
    cluster
        .get(NS, name)
        .filter(|o| snapshot::validate(o).is_ok())
        .and_then(|o| o["metadata"]["annotations"]["confighistory.io/source-name"].as_str().map(str::to_owned))
        .unwrap_or_else(|| name.to_owned())
}

/// Reference rewriting: the invariants in the module documentation.
pub fn rewrite_bytes(data: &[u8]) {
    let req = workload_request(data);
    let kind = Registry::builtin().workload(&req.kind.group, &req.kind.kind).expect("kind");
    let tpl_ptr = kind.template_pointer();
    let cluster = MemoryCluster::default();
    let app = app(&cluster);
    let (response, reason) = run(&app, Endpoint::Mutate, &req);
    check_answer(&req, &response);
    assert!(response.allowed, "reference rewriting never denies these requests: {:?} ({reason})", response.message);

    // Only reference names and annotations change.
    let original = template::refs(req.object().pointer(tpl_ptr).expect("template"), ids::SourceKinds::CONFIGMAPS);
    let ref_pointers: BTreeSet<String> = original.iter().map(|r| format!("{tpl_ptr}{}", r.pointer)).collect();
    let mut seen_names: BTreeSet<String> = original.iter().map(|r| r.id.name.clone()).collect();
    if let Some(old) = req.old_object.as_ref().and_then(|o| o.pointer(tpl_ptr)) {
        seen_names.extend(template::refs(old, ids::SourceKinds::CONFIGMAPS).into_iter().map(|r| r.id.name));
    }
    for op in &response.patch {
        let path = op["path"].as_str().expect("path");
        match op["op"].as_str() {
            Some("replace") if ref_pointers.contains(path) => {
                let to = op["value"].as_str().expect("a name");
                let valid = cluster.get(NS, to).is_some_and(|o| snapshot::validate(&o).is_ok());
                let dry_shape = req.dry_run() && snapshot::parse_name(to).is_some();
                assert!(valid || dry_shape || seen_names.contains(to), "{path} rewritten to {to}, which is no valid snapshot");
            }
            _ => assert!(path.starts_with("/metadata/annotations"), "unexpected patch operation {op}"),
        }
    }
    let patched = apply_patch(req.object(), &response.patch).unwrap_or_else(|e| panic!("patch does not apply: {e}"));

    // One name per versioned, mutable, existing source, when the template was decided afresh.
    if !req.dry_run() && matches!(reason, Reason::Pinned | Reason::Propagation | Reason::Undo) {
        let mut by_source: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in template::refs(patched.pointer(tpl_ptr).expect("template"), ids::SourceKinds::CONFIGMAPS) {
            by_source.entry(source_of(&cluster, &r.id.name)).or_default().insert(r.id.name);
        }
        for source in ["app-config", "other", "pending"] {
            let names = by_source.get(source).cloned().unwrap_or_default();
            assert!(names.len() <= 1, "references to {source} end on several names: {names:?}");
            if let Some(name) = names.iter().next() {
                assert_ne!(name, source, "{source} exists, is mutable and versioned: it is pinned");
            }
        }
    }

    // The final object passes validation (rewrite mode never leaves a mutable versioned reference).
    let final_req = Request { object: Some(patched.clone()), ..req.clone() };
    let (validated, vreason) = run(&app, Endpoint::Validate, &final_req);
    check_answer(&final_req, &validated);
    assert!(validated.allowed, "the mutated object is refused by validation ({vreason}): {:?}", validated.message);

    // Reinvocation: the API server calls again with the patched object. Nothing changes, whether
    // or not the watch has delivered the snapshots just created.
    for caches in [false, true] {
        if caches {
            let mut state = app.ctx.state.write();
            for obj in cluster.objects.lock().expect("lock").values() {
                state.apply_configmap(obj);
            }
        }
        let (second, reason2) = run(&app, Endpoint::Mutate, &final_req);
        check_answer(&final_req, &second);
        assert!(second.allowed, "reinvocation denied ({reason2}): {:?}", second.message);
        assert!(second.patch.is_empty(), "reinvocation (caches {caches}) patches again ({reason2}): {:?}", second.patch);
    }
}

/// The request behind a rewrite case, as a full AdmissionReview body (to seed the other target).
pub fn review_body(req: &Request) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": req.uid, "kind": req.kind, "name": req.name, "namespace": req.namespace,
        "operation": req.operation.as_str(), "userInfo": {"username": req.user_info.username},
        "object": req.object, "oldObject": req.old_object, "dryRun": req.dry_run()}})
}
