//! The loops against the in-memory cluster: what a pass writes, what it leaves alone, and how it
//! takes a failed write.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::gc_loop::gc_pass;
use super::propagate::tests::{h, snap, source, workload, T0};
use super::propagation::{propagation_pass, PropagationState};
use super::rehash::{rehash, rehash_one};
use super::resync::{resync_pass, ResyncState};
use super::*;
use crate::cache::{State, Writer};
use crate::cli::ControllerArgs;
use crate::cluster::{ApiError, MemoryCluster};
use crate::context::Context;
use crate::model::ids::SourceId;
use crate::model::kinds::Kind;
use crate::model::names;
use crate::model::policy::Policy;
use crate::model::snapshot;

#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    controller: ControllerArgs,
}

fn args(extra: &[&str]) -> ControllerArgs {
    use clap::Parser as _;
    Args::parse_from(std::iter::once("test").chain(extra.iter().copied())).controller
}

fn ctx(cluster: &MemoryCluster, state: State, args: ControllerArgs) -> Ctx {
    ctx_with(cluster, state, args, Policy::default())
}

fn ctx_with(cluster: &MemoryCluster, state: State, args: ControllerArgs, policy: Policy) -> Ctx {
    let shared = Arc::new(Context::synced(policy, Arc::new(crate::cache::Lock::new(state)), Arc::new(cluster.clone())));
    // Used for the Lease only, which these tests never touch: nothing listens there.
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    Ctx::new(client, shared, args, crate::model::kinds::Registry::builtin(), "test".into(), leader::Leadership::always()).unwrap()
}

#[tokio::test]
async fn a_bad_namespace_selector_names_its_flag_and_what_it_takes() {
    let shared = Arc::new(Context::synced(Policy::default(), Default::default(), Arc::new(MemoryCluster::default())));
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let Err(e) = Ctx::new(
        client,
        shared,
        args(&["--controller-namespace-selector", "team in shop"]),
        crate::model::kinds::Registry::builtin(),
        "t".into(),
        Default::default(),
    ) else {
        panic!("a selector that does not parse is refused")
    };
    let e = e.to_string();
    assert!(e.starts_with("--controller-namespace-selector (CONFIGHISTORY_CONTROLLER_NAMESPACE_SELECTOR) \"team in shop\""), "{e}");
    assert!(e.contains("give a label selector"), "{e}");
}

/// Backoffs short enough for a test to wait out.
fn quick() -> PropagationState {
    PropagationState::with_backoff(Duration::from_millis(10), Duration::from_millis(100))
}

/// Source `cfg` changed from a to b long ago (settled); `stale` pins a, `held` pins a under a hold.
fn propagation_world() -> (MemoryCluster, State) {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    let old = snapshot::name("cfg", &h('a'), 0);
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    for obj in [source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0)]), snap("ns", "cfg", &h('a')), snap("ns", "cfg", &h('b'))] {
        state.apply_configmap(&obj);
        cluster.insert(obj);
    }
    for obj in [workload("ns", "stale", &[&old], &[]), workload("ns", "held", &[&old], &[(names::HELD, "cfg")])] {
        state.apply_workload(Kind::Deployment, &obj);
        cluster.insert_workload(Kind::Deployment, obj);
    }
    (cluster, state)
}

fn trigger_of(cluster: &MemoryCluster, name: &str) -> Option<String> {
    cluster.workload(Kind::Deployment, "ns", name).unwrap()["metadata"]["annotations"][names::PROPAGATE].as_str().map(str::to_owned)
}

#[tokio::test]
async fn a_propagation_pass_triggers_the_pinned_workload_and_records_the_change_once_it_moved() {
    let (cluster, state) = propagation_world();
    let ctx = ctx(&cluster, state, args(&[]));
    let mut st = quick();

    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), Some(format!("cfg={}", h('b'))));
    assert_eq!(trigger_of(&cluster, "held"), None, "a held pin is not touched");
    let events = cluster.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].reason, events[0].regarding.name.as_str(), events[0].warning), ("ConfigPropagated", "stale", false));
    assert_eq!(events[0].regarding.uid, "uid-stale");

    // Not patched again while the cache catches up.
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(cluster.calls.lock().unwrap().iter().filter(|c| c.starts_with("patch Deployment")).count(), 1);

    // The webhook re-pinned it (as the watch delivers): the change is recorded on the source, once.
    let new = snapshot::name("cfg", &h('b'), 0);
    ctx.shared.state.write().apply_workload(Kind::Deployment, &workload("ns", "stale", &[&new], &[]));
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(crate::admission::annotation(&cluster.get("ns", "cfg").unwrap(), names::PROPAGATED), Some(h('b').as_str()));
    let events = cluster.events();
    let last = events.last().unwrap();
    assert_eq!((last.reason, last.regarding.kind.as_str(), last.regarding.name.as_str()), ("Propagated", "ConfigMap", "cfg"));
    assert_eq!(last.note, format!("Propagated {} to 1 workload", h('b')));
    assert_eq!(last.regarding.uid, "uid-cfg");
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(cluster.events().len(), 2, "recorded once");
}

/// The propagation SLI (docs/operations.md "Metrics"): measured on the API server's clock from
/// the change's `changed-at` to the pass that finds its last workload re-pinned, once; the
/// change counts as pending (and ages) from the end of its settle window until then.
#[tokio::test]
async fn a_propagation_is_measured_once_from_its_admission_to_its_last_workload_on_the_api_servers_clock() {
    use crate::cluster::clock::{Clock, Sample};
    use std::sync::atomic::AtomicI64;
    let (cluster, state) = propagation_world(); // changed at T0, settle window 10 s
    let t0 = super::propagate::parse_time_ms(T0).unwrap();
    // This replica's clock is an hour behind the API server's.
    let local = Arc::new(AtomicI64::new(t0 - 3_600_000 + 40_000));
    let clock = {
        let local = local.clone();
        Arc::new(Clock::with_local(move || local.load(Ordering::Relaxed)))
    };
    clock.record(Sample { sent_ms: t0 - 3_600_000 + 39_990, received_ms: t0 - 3_600_000 + 40_000, date_ms: t0 + 40_000 });
    let mut ctx = ctx(&cluster, state, args(&[]));
    ctx.shared =
        Arc::new(Context::synced(Policy::default(), ctx.shared.state.clone(), ctx.shared.cluster.clone()).with_clock(clock.clone()));
    let mut st = quick();

    propagation_pass(&ctx, &mut st).await; // the server's T0 + 40 s: triggers `stale`
    assert_eq!(trigger_of(&cluster, "stale"), Some(format!("cfg={}", h('b'))));
    assert_eq!(st.sli.latest().count(), 0, "a workload is still behind");
    assert_eq!(st.sli.len(), 1);

    local.store(t0 - 3_600_000 + 72_000, Ordering::Relaxed);
    let new = snapshot::name("cfg", &h('b'), 0);
    ctx.shared.state.write().apply_workload(Kind::Deployment, &workload("ns", "stale", &[&new], &[]));
    propagation_pass(&ctx, &mut st).await;
    let server_clock = clock.now_ms() - t0;
    assert!((71_000..=73_000).contains(&server_clock), "{server_clock}");
    let samples: Vec<Duration> = st.sli.latest().copied().collect();
    assert_eq!(samples.len(), 1, "{samples:?}");
    assert!(samples[0].as_millis().abs_diff(server_clock as u128) < 5, "{samples:?}, the server's clock says {server_clock} ms");

    // Recorded as propagated (the cache catches up): nothing more measured, nothing followed.
    let recorded = cluster.get("ns", "cfg").unwrap();
    ctx.shared.state.write().apply_configmap(&recorded);
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(st.sli.latest().count(), 1, "once");
    assert!(st.sli.is_empty());
}

/// docs/behaviour.md §7.9: the revision a propagation makes explains itself in `kubectl rollout
/// history`: the trigger's patch sets `kubernetes.io/change-cause` (naming the source and who
/// changed it) with confighistory's record of it; a change-cause of the user's own is never
/// overwritten, and one confighistory wrote before is replaced.
#[tokio::test]
async fn a_propagation_explains_its_revision_and_never_overwrites_a_users_change_cause() {
    let (cluster, mut state) = propagation_world();
    let old = snapshot::name("cfg", &h('a'), 0);
    let src = source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0), (names::CHANGED_BY, "alice")]);
    state.apply_configmap(&src);
    cluster.insert(src);
    let earlier = "config cfg changed by bob";
    for obj in [
        workload("ns", "mine", &[&old], &[(names::CHANGE_CAUSE, "release 4.12 by carol")]),
        workload("ns", "ours", &[&old], &[(names::CHANGE_CAUSE, earlier), (names::CHANGE_CAUSE_OWN, earlier)]),
    ] {
        state.apply_workload(Kind::Deployment, &obj);
        cluster.insert_workload(Kind::Deployment, obj);
    }
    let ctx = ctx(&cluster, state, args(&[]));
    propagation_pass(&ctx, &mut quick()).await;
    let annotations = |name: &str| cluster.workload(Kind::Deployment, "ns", name).unwrap()["metadata"]["annotations"].clone();
    for name in ["stale", "ours"] {
        let a = annotations(name);
        assert_eq!(trigger_of(&cluster, name), Some(format!("cfg={}", h('b'))), "{name}");
        assert_eq!(
            (&a[names::CHANGE_CAUSE], &a[names::CHANGE_CAUSE_OWN]),
            (&json!("config cfg changed by alice"), &json!("config cfg changed by alice")),
            "{name}"
        );
    }
    let mine = annotations("mine");
    assert_eq!(trigger_of(&cluster, "mine"), Some(format!("cfg={}", h('b'))), "moved all the same");
    assert_eq!((&mine[names::CHANGE_CAUSE], mine.get(names::CHANGE_CAUSE_OWN)), (&json!("release 4.12 by carol"), None), "the user's own");
}

/// docs/behaviour.md §7.9: the change-cause says what changed between the snapshot the workload
/// ran and the content it moves to (the incident's renamed setting), read fresh and checked
/// against the names; a source changed again since the plan, or a snapshot whose content is not
/// what its name says, gives no summary rather than a wrong one.
#[tokio::test]
async fn a_propagations_change_cause_says_which_settings_changed() {
    use crate::model::snapshot::Content;
    let content = |yaml: &str| Content { data: [("config.yaml".to_owned(), yaml.to_owned())].into(), ..Default::default() };
    let a = content("currency: EUR\ndiscount_rules_path: /etc/d.yaml\n");
    let b = content("currency: EUR\nrules:\n  discount_path: /etc/d.yaml\n");
    let world = |source_content: &Content, snapshot_content: &Content| {
        let (cluster, mut state) = (MemoryCluster::default(), State::default());
        state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
        let ran = snapshot::name("cfg", &a.hash(), 0);
        let mut src = source("ns", "cfg", &b.hash(), &[(names::CHANGED_AT, T0), (names::CHANGED_BY, "alice")]);
        src["data"] = json!(source_content.data);
        let snap = snapshot::object("ns", "cfg", &ran, snapshot_content, &[]);
        for obj in [src, snap] {
            state.apply_configmap(&obj);
            cluster.insert(obj);
        }
        let w = workload("ns", "stale", &[&ran], &[]);
        state.apply_workload(Kind::Deployment, &w);
        cluster.insert_workload(Kind::Deployment, w);
        (cluster, state)
    };
    let cause_after = |cluster: MemoryCluster, state: State| async move {
        let ctx = ctx(&cluster, state, args(&[]));
        propagation_pass(&ctx, &mut quick()).await;
        assert!(trigger_of(&cluster, "stale").is_some(), "moved");
        cluster.workload(Kind::Deployment, "ns", "stale").unwrap()["metadata"]["annotations"][names::CHANGE_CAUSE].clone()
    };
    let (cluster, state) = world(&b, &a);
    assert_eq!(
        cause_after(cluster, state).await,
        json!("config cfg changed by alice: settings removed [discount_rules_path], added [rules.discount_path]")
    );
    let later = content("currency: USD\n");
    let (cluster, state) = world(&later, &a);
    assert_eq!(cause_after(cluster, state).await, json!("config cfg changed by alice"), "changed again since the plan");
    let (cluster, state) = world(&b, &later);
    assert_eq!(cause_after(cluster, state).await, json!("config cfg changed by alice"), "a snapshot not holding its name's content");
}

/// A change made after the hold an undo took moves the held pin (docs/behaviour.md §2), and the workload's
/// owner is told why it moved: an Event `HoldReleased` beside `ConfigPropagated`.
#[tokio::test]
async fn a_pin_held_before_a_later_change_moves_and_says_its_hold_was_released() {
    let (cluster, mut state) = propagation_world();
    let old = snapshot::name("cfg", &h('a'), 0);
    let heads = format!("{{\"cfg\":\"{}\"}}", h('x')); // held while an earlier head x was current
    let obj = workload("ns", "held", &[&old], &[(names::HELD, "cfg"), (names::HELD_HEADS, &heads)]);
    state.apply_workload(Kind::Deployment, &obj);
    cluster.insert_workload(Kind::Deployment, obj);
    let ctx = ctx(&cluster, state, args(&[]));
    propagation_pass(&ctx, &mut quick()).await;
    assert_eq!(trigger_of(&cluster, "held"), Some(format!("cfg={}", h('b'))));
    let events: Vec<(&str, String)> = cluster.events().iter().map(|e| (e.reason, e.regarding.name.clone())).collect();
    assert!(events.contains(&("HoldReleased", "held".to_owned())), "{events:?}");
    assert!(!events.contains(&("HoldReleased", "stale".to_owned())), "an unheld pin releases nothing: {events:?}");
}

#[tokio::test]
async fn a_failed_trigger_is_reported_once_and_retried_after_its_backoff() {
    let (cluster, state) = propagation_world();
    let ctx = ctx(&cluster, state, args(&[]));
    let mut st = quick();
    let error = ApiError { code: Some(500), reason: "InternalError".into(), message: "etcdserver: request timed out".into() };
    *cluster.fail.lock().unwrap() = Some(("patch Deployment", error));
    let attempts = || cluster.calls.lock().unwrap().iter().filter(|c| c.starts_with("patch Deployment ns/stale")).count();

    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), None);
    let events = cluster.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].reason, events[0].warning), ("ConfigPropagationFailed", true));
    assert!(events[0].note.contains("etcdserver: request timed out"), "{}", events[0].note);

    propagation_pass(&ctx, &mut st).await;
    assert_eq!(attempts(), 1, "not retried within the backoff");

    tokio::time::sleep(Duration::from_millis(30)).await;
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(attempts(), 2, "retried after it");
    assert_eq!(cluster.events().len(), 1, "a run of failures is reported once");

    *cluster.fail.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_millis(50)).await;
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), Some(format!("cfg={}", h('b'))));
}

/// A valid snapshot of `cfg` with content `k`, created at `created`, last used at `last_used`.
fn snapshot_object(k: &str, created: &str, last_used: Option<&str>) -> (String, serde_json::Value) {
    let content = snapshot::Content::from_object(&json!({"data": {"k": k}}));
    let name = snapshot::name("cfg", &content.hash(), 0);
    let mut obj = snapshot::object("ns", "cfg", &name, &content, &[]);
    obj["metadata"]["uid"] = json!(format!("uid-{name}"));
    obj["metadata"]["resourceVersion"] = json!("1");
    obj["metadata"]["creationTimestamp"] = json!(created);
    if let Some(t) = last_used {
        obj["metadata"]["annotations"][names::LAST_USED] = json!(t);
    }
    (name, obj)
}

#[tokio::test]
async fn a_gc_pass_deletes_an_unreferenced_snapshot_past_retention_and_keeps_referenced_ones() {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    let (old, old_obj) = snapshot_object("1", "2025-01-01T00:00:00Z", Some(T0));
    let (used, used_obj) = snapshot_object("2", "2025-01-02T00:00:00Z", Some(T0));
    let (head, head_obj) = snapshot_object("3", "2025-01-03T00:00:00Z", None);
    let head_hash = head_obj["metadata"]["labels"][names::HASH_LABEL].as_str().unwrap().to_owned();
    let src = json!({"metadata": {"namespace": "ns", "name": "cfg", "uid": "uid-cfg", "annotations": {names::HEAD: head_hash}}, "data": {"k": "3"}});
    for obj in [old_obj, used_obj, head_obj, src] {
        state.apply_configmap(&obj);
        cluster.insert(obj);
    }
    cluster.insert_workload(Kind::Deployment, workload("ns", "app", &[&used], &[]));
    let ctx = ctx(&cluster, state, args(&["--gc-keep", "1", "--gc-grace", "600"]));

    gc_pass(&ctx, gc::Settings { keep: 1, grace: Duration::from_secs(600) }).await;
    assert!(cluster.get("ns", &old).is_none(), "unreferenced, not the head, not the newest, unused past the grace period");
    assert!(cluster.get("ns", &head).is_some(), "the head");
    let used_now = cluster.get("ns", &used).expect("referenced by a Deployment");
    assert_eq!(crate::admission::annotation(&used_now, names::LAST_USED), None, "in use again: the last-use record is cleared");
    assert!(cluster.calls.lock().unwrap().iter().any(|c| c == &format!("delete ns/{old}")));
}

/// docs/behaviour.md §10 in the sweep too: a namespace's sources are read as metadata and only its snapshots
/// whole, so a namespace of large ConfigMaps (dashboards beside a pinned app) costs the leader
/// nothing per byte of them. Failed before: the sweep listed every ConfigMap whole.
#[tokio::test]
async fn a_gc_pass_reads_sources_as_metadata_and_only_snapshots_whole() {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    let (old, old_obj) = snapshot_object("1", "2025-01-01T00:00:00Z", Some(T0));
    let (head, head_obj) = snapshot_object("3", "2025-01-03T00:00:00Z", None);
    let head_hash = head_obj["metadata"]["labels"][names::HASH_LABEL].as_str().unwrap().to_owned();
    let src = json!({"metadata": {"namespace": "ns", "name": "cfg", "uid": "uid-cfg", "annotations": {names::HEAD: head_hash}}, "data": {"k": "3"}});
    let dashboard =
        json!({"metadata": {"namespace": "ns", "name": "dashboard", "uid": "uid-d"}, "data": {"d.json": "x".repeat(900 * 1024)}});
    for obj in [old_obj, head_obj, src, dashboard] {
        state.apply_configmap(&obj);
        cluster.insert(obj);
    }
    let ctx = ctx(&cluster, state, args(&[]));

    gc_pass(&ctx, gc::Settings { keep: 0, grace: Duration::from_secs(600) }).await;
    assert!(cluster.get("ns", &old).is_none(), "swept as before");
    assert!(cluster.get("ns", &head).is_some(), "the head, told from the source's metadata");
    let calls = cluster.calls.lock().unwrap().clone();
    let lists: Vec<&String> =
        calls.iter().filter(|c| c.starts_with("list ") && c.contains("onfig") || c.starts_with("list snapshots")).collect();
    assert_eq!(lists, ["list ConfigMap metadata ns", "list snapshots ns"], "{calls:?}");
}

#[tokio::test]
async fn a_gc_pass_keeps_what_it_cannot_list() {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    let (old, old_obj) = snapshot_object("1", "2025-01-01T00:00:00Z", Some(T0));
    state.apply_configmap(&old_obj);
    cluster.insert(old_obj);
    let error = ApiError { code: Some(503), reason: "ServiceUnavailable".into(), message: "unavailable".into() };
    *cluster.fail.lock().unwrap() = Some(("list Deployment", error));
    let ctx = ctx(&cluster, state, args(&[]));
    gc_pass(&ctx, gc::Settings { keep: 0, grace: Duration::ZERO }).await;
    assert!(cluster.get("ns", &old).is_some(), "references unknown: nothing is deleted");
}

#[tokio::test]
async fn a_resync_pass_adopts_templates_seen_before_and_repairs_new_plain_ones() {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    let mut src = json!({"metadata": {"namespace": "ns", "name": "cfg", "uid": "uid-cfg", "annotations": {}}, "data": {"k": "1"}});
    let hash = snapshot::Content::from_object(&src).hash();
    src["metadata"]["annotations"][names::HEAD] = json!(hash);
    state.apply_configmap(&src);
    cluster.insert(src);
    for name in ["old", "new"] {
        let obj = workload("ns", name, &["cfg"], &[]);
        state.apply_workload(Kind::Deployment, &obj);
        cluster.insert_workload(Kind::Deployment, obj);
    }
    let template = |name: &str| state.workload(&(Kind::Deployment, "ns".into(), name.into())).unwrap().template_hash.clone();
    let (old_t, new_t) = (template("old"), template("new"));
    // "old" was there when this replica started leading; "new" was admitted while the webhook was away.
    let seen: adopt::Seen = [("ns".to_owned(), old_t.clone())].into();
    let ctx = ctx(&cluster, state, args(&[]));
    let mut st = ResyncState::default();

    resync_pass(&ctx, &seen, &mut st).await;
    let snapshot = cluster.get("ns", &snapshot::name("cfg", &hash, 0)).expect("the snapshot of the current content");
    let record = crate::admission::annotation(&snapshot, names::ADOPTED).unwrap_or_default().to_owned();
    assert!(record.contains(old_t.as_str()), "adopted: {record}");
    assert!(record.contains(new_t.as_str()), "the repaired template's content is recorded before its trigger: {record}");
    assert_eq!(trigger_of(&cluster, "old"), None, "an adopted workload is not restarted");
    assert_eq!(trigger_of(&cluster, "new"), Some(format!("cfg={hash}")));
    let events = cluster.events();
    assert_eq!(events.iter().map(|e| (e.reason, e.regarding.name.as_str())).collect::<Vec<_>>(), [("ConfigRepaired", "new")]);

    // The next pass writes nothing new while the cache catches up.
    let writes = |c: &MemoryCluster| c.calls.lock().unwrap().iter().filter(|c| !c.starts_with("get")).count();
    let before = writes(&cluster);
    resync_pass(&ctx, &seen, &mut st).await;
    assert_eq!(writes(&cluster), before, "{:?}", cluster.calls.lock().unwrap());
}

fn content_hash(k: &str) -> String {
    snapshot::Content::from_object(&json!({"data": {"k": k}})).hash()
}

/// Source `name` holding `k`, whose stored head is the hash of `stored`: when they differ, the
/// source was edited while the webhook was away.
fn source_holding(name: &str, k: &str, stored: &str) -> serde_json::Value {
    json!({"metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"), "resourceVersion": "1",
        "annotations": {names::HEAD: content_hash(stored)}}, "data": {"k": k}})
}

/// Puts the sources in the cluster and the cache, and the workloads (each naming `cms` plainly).
fn resync_world(sources: &[serde_json::Value], workloads: &[(&str, &[&str])]) -> (MemoryCluster, State) {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    for src in sources {
        state.apply_configmap(src);
        cluster.insert(src.clone());
    }
    for (name, cms) in workloads {
        let obj = workload("ns", name, cms, &[]);
        state.apply_workload(Kind::Deployment, &obj);
        cluster.insert_workload(Kind::Deployment, obj);
    }
    (cluster, state)
}

/// docs/behaviour.md §7, missed changes: a referenced source whose content no longer matches its stored head
/// gets a no-op write, and the webhook, admitting that write, records the change as first seen
/// then. Sources whose head matches, and sources no workload references, are not written.
#[tokio::test]
async fn a_resync_pass_touches_a_source_changed_while_the_webhook_was_away_and_the_webhook_records_it() {
    let sources = [source_holding("cfg", "2", "1"), source_holding("same", "1", "1"), source_holding("unref", "2", "1")];
    let (cluster, state) = resync_world(&sources, &[("app", &["cfg", "same"])]);
    let seen = adopt::current_templates(&state);
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    let touched: Vec<String> = cluster
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| ["patch ns/cfg", "patch ns/same", "patch ns/unref"].contains(&c.as_str()))
        .cloned()
        .collect();
    assert_eq!(touched, ["patch ns/cfg"]);
    let after = cluster.get("ns", "cfg").unwrap();
    assert_eq!(after["metadata"]["resourceVersion"], "2", "written");
    assert_eq!(
        crate::admission::annotation(&after, names::HEAD),
        Some(content_hash("1").as_str()),
        "the stale head is left for the webhook"
    );

    // The webhook admitting that write: a change of cfg, first seen now.
    let now = "2026-12-03T12:00:00Z";
    let req = crate::admission::Request {
        kind: crate::admission::review::GroupVersionKind { group: "".into(), version: "v1".into(), kind: "ConfigMap".into() },
        operation: crate::admission::review::Operation::Update,
        namespace: "ns".into(),
        name: "cfg".into(),
        object: Some(after),
        old_object: Some(sources[0].clone()),
        ..Default::default()
    };
    let state = ctx.shared.state.read();
    let (fresh, failed) = (crate::admission::Fresh::new(), crate::admission::Failed::new());
    let view = crate::admission::View { policy: &ctx.shared.policy, state: &state, fresh: &fresh, failed: &failed, now, namespace: None };
    let crate::admission::Outcome::Done(d) = crate::admission::configmap::decide(&req, &view) else { panic!("no read expected") };
    assert_eq!(d.reason, crate::admission::Reason::SourceChanged);
    let set = |key: &str| {
        d.response
            .patch
            .iter()
            .find(|op| op["path"].as_str().is_some_and(|p| p.ends_with(&key.replace('/', "~1"))))
            .map(|op| op["value"].clone())
    };
    assert_eq!(set(names::HEAD), Some(json!(content_hash("2"))));
    assert_eq!(set(names::CHANGED_AT), Some(json!(now)));
}

/// A source no write through the webhook ever gave a `head` (it existed before any
/// workload named it, then a workload was pinned to it) and that was edited while the webhook was
/// away: its pinned workloads are behind a change nobody recorded. The re-hash covers it: it
/// compares the content with what workloads are pinned to, and touches it naming that pin, which
/// the webhook (from confighistory only) takes as the head it missed. A source only plain-name
/// workloads use (installing confighistory) and one whose content is what its workloads are pinned
/// to are not written: nothing is restarted that did not change.
#[tokio::test]
async fn a_resync_pass_touches_a_source_edited_while_away_before_it_ever_had_a_head() {
    let unheaded = |name: &str, k: &str| json!({"metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"), "resourceVersion": "1"}, "data": {"k": k}});
    let pin = |name: &str, k: &str| snapshot::name(name, &content_hash(k), 0);
    let (missed, kept) = (pin("missed", "1"), pin("kept", "1"));
    let sources = [unheaded("missed", "2"), unheaded("kept", "1"), unheaded("plain", "2")];
    let (cluster, mut state) = resync_world(&sources, &[("app", &[&missed, &kept]), ("old", &["plain"])]);
    for (src, k) in [("missed", "1"), ("kept", "1")] {
        let snap = snapshot::object("ns", src, &pin(src, k), &snapshot::Content::from_object(&json!({"data": {"k": k}})), &[]);
        state.apply_configmap(&snap);
        cluster.insert(snap);
    }
    let seen = adopt::current_templates(&state);
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    let touched: Vec<String> = cluster.calls.lock().unwrap().iter().filter(|c| c.starts_with("patch ns/")).cloned().collect();
    assert_eq!(touched, ["patch ns/missed"]);
    let after = cluster.get("ns", "missed").unwrap();
    assert_eq!(crate::admission::annotation(&after, names::HEAD), Some(content_hash("1").as_str()), "names the pin");

    // The webhook admitting that write from confighistory: a change first seen now. From anyone
    // else, the same head in the request is not taken: no change, no changed-at.
    let now = "2026-12-03T12:00:00Z";
    let decide = |user: &str| {
        let req = crate::admission::Request {
            kind: crate::admission::review::GroupVersionKind { group: "".into(), version: "v1".into(), kind: "ConfigMap".into() },
            operation: crate::admission::review::Operation::Update,
            namespace: "ns".into(),
            name: "missed".into(),
            object: Some(after.clone()),
            old_object: Some(sources[0].clone()),
            user_info: crate::admission::review::UserInfo { username: user.into(), ..Default::default() },
            ..Default::default()
        };
        let state = ctx.shared.state.read();
        let (fresh, failed) = (crate::admission::Fresh::new(), crate::admission::Failed::new());
        let view =
            crate::admission::View { policy: &ctx.shared.policy, state: &state, fresh: &fresh, failed: &failed, now, namespace: None };
        let crate::admission::Outcome::Done(d) = crate::admission::configmap::decide(&req, &view) else { panic!("no read expected") };
        let mut stored = after.clone();
        json_patch::patch(&mut stored, &serde_json::from_value::<json_patch::Patch>(json!(d.response.patch)).unwrap()).unwrap();
        (d.reason, stored)
    };
    let (reason, stored) = decide(&ctx.shared.policy.identity.clone());
    assert_eq!(reason, crate::admission::Reason::SourceChanged);
    assert_eq!(crate::admission::annotation(&stored, names::HEAD), Some(content_hash("2").as_str()));
    assert_eq!(crate::admission::annotation(&stored, names::CHANGED_AT), Some(now));
    let (reason, stored) = decide("alice");
    assert_eq!(reason, crate::admission::Reason::Source);
    assert_eq!(crate::admission::annotation(&stored, names::CHANGED_AT), None);
}

/// docs/behaviour.md §9, repair: a workload admitted while the webhook was away names a source edited since
/// (its stored head is stale), so the content that revision ran with is unknown: no adoption
/// record is written for it, the workload gets a ConfigUnknown warning Event, and it is still
/// repaired.
#[tokio::test]
async fn a_repair_whose_source_changed_since_the_outage_says_its_config_is_unknown() {
    let (cluster, state) = resync_world(&[source_holding("cfg", "2", "1")], &[("new", &["cfg"])]);
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &adopt::Seen::new(), &mut ResyncState::default()).await;
    let published = cluster.events();
    let events: Vec<(&str, &str, bool)> = published.iter().map(|e| (e.reason, e.regarding.name.as_str(), e.warning)).collect();
    assert_eq!(events, [("ConfigUnknown", "new", true), ("ConfigRepaired", "new", false)]);
    let note = &published[0].note;
    assert!(note.contains("(cfg) is unknown") && note.contains("changed while confighistory was away"), "{note}");
    assert!(
        !cluster.calls.lock().unwrap().iter().any(|c| c.starts_with("create ns/")),
        "no snapshot records a content it did not run with"
    );
    assert!(trigger_of(&cluster, "new").is_some(), "repaired all the same");
}

/// The GC race (docs/behaviour.md §8: a snapshot being pinned right now is never swept). An old
/// snapshot that nothing uses, past its grace period: `old` (content "1", recorded unused at T0).
/// The source's head is content "3", and no workload references `old`.
fn race_world() -> (MemoryCluster, String, snapshot::Content) {
    let cluster = MemoryCluster::default();
    let (old, old_obj) = snapshot_object("1", "2025-01-01T00:00:00Z", Some(T0));
    let (_, head_obj) = snapshot_object("3", "2025-01-03T00:00:00Z", None);
    let head_hash = head_obj["metadata"]["labels"][names::HASH_LABEL].as_str().unwrap().to_owned();
    let src = json!({"metadata": {"namespace": "ns", "name": "cfg", "uid": "uid-cfg", "annotations": {names::HEAD: head_hash}}, "data": {"k": "3"}});
    for obj in [old_obj, head_obj, src] {
        cluster.insert(obj);
    }
    (cluster, old, snapshot::Content::from_object(&json!({"data": {"k": "1"}})))
}

const SWEEP_NOW: &str = "2025-02-01T00:00:00Z";

fn sweep(cluster: &MemoryCluster) -> tokio::task::JoinHandle<Result<gc::Report, ApiError>> {
    let cluster = cluster.clone();
    let settings = gc::Settings { keep: 0, grace: Duration::from_secs(600) };
    let now = super::propagate::parse_time_ms(SWEEP_NOW).unwrap();
    tokio::spawn(async move { gc::sweep_namespace_at(&cluster, "ns", settings, false, None, now).await })
}

/// GC lists (`old` unused) → an admission pins `old` (a release or propagation to a content whose
/// snapshot exists: read, found, reused) → GC deletes with the resourceVersion it listed. The
/// admission's use of the snapshot must make that delete fail. Failed before the fix: the store
/// reused the snapshot without writing to it, and the delete went through.
#[tokio::test]
async fn a_snapshot_pinned_between_the_sweeps_list_and_its_delete_is_not_deleted() {
    let (cluster, old, content) = race_world();
    let (reached, resume) = cluster.pause(&format!("delete ns/{old}"), false);
    let gc = sweep(&cluster);
    reached.await.expect("the sweep decided to delete it");

    let (name, _) =
        crate::store::ensure(&cluster, "ns", &SourceId::configmap("cfg"), &content, &[], &Default::default(), false).await.expect("pinned");
    assert_eq!(name, old, "the existing snapshot is reused");
    cluster.insert_workload(Kind::Deployment, workload("ns", "app", &[&old], &[]));

    resume.send(()).unwrap();
    let report = gc.await.unwrap().expect("sweep");
    assert!(cluster.get("ns", &old).is_some(), "a snapshot being pinned is never swept; report:\n{report}");
    assert!(report.deleted.is_empty(), "{report}");
    assert!(report.errors.is_empty(), "a snapshot used again since the list is kept, not an error:\n{report}");
    assert!(report.to_string().contains(&format!("keep    ns/{old}")), "{report}");
}

/// GC lists (`old` unused, not the head) → the source goes back to `old`'s content, so `old` is
/// the head again, which changes nothing on `old` itself → GC deletes with the resourceVersion it
/// listed, and snapshot protection refuses. That refusal is the race lost, not a failed sweep: kept,
/// no error (a `gc` run exits 0). Any other refusal (RBAC, another policy) stays an error. Found by
/// CI: e2e `a_snapshot_being_pinned_is_never_swept` failed a sweep on exactly this.
#[tokio::test]
async fn a_delete_refused_because_the_snapshot_is_in_use_again_keeps_it_without_an_error() {
    let refusal = |reason: &str| ApiError {
        code: Some(403),
        reason: reason.into(),
        message: "admission webhook \"snapshot-deletes.confighistory.io\" denied the request: snapshot is still part of rollout history"
            .into(),
    };
    let (cluster, old, _) = race_world();
    *cluster.fail.lock().unwrap() = Some(("delete ", refusal(names::REASON_SNAPSHOT_IN_USE)));
    let report = sweep(&cluster).await.unwrap().expect("sweep");
    assert!(cluster.get("ns", &old).is_some());
    assert!(report.errors.is_empty(), "{report}");
    assert!(report.deleted.is_empty(), "{report}");
    assert!(report.to_string().contains(&format!("keep    ns/{old}: in use again since this sweep listed it")), "{report}");

    let (cluster, old, _) = race_world();
    *cluster.fail.lock().unwrap() = Some(("delete ", refusal("Forbidden")));
    let report = sweep(&cluster).await.unwrap().expect("sweep");
    assert_eq!(report.errors.len(), 1, "any other refusal is an error:\n{report}");
    assert!(report.errors[0].starts_with(&format!("delete {old}:")), "{report}");
}

/// A snapshot deleted (another sweep, a person) or replaced by another object of its name
/// (the uid precondition) between this sweep's list and its record of last use: nothing to
/// record, not an error. A record refused for any other reason is one.
#[tokio::test]
async fn a_snapshot_gone_before_its_last_use_is_recorded_is_not_an_error() {
    let api = |code: u16, reason: &str| ApiError { code: Some(code), reason: reason.into(), message: format!("{reason} (test)") };
    let (cluster, _, _) = race_world();
    // `old` is past its grace period (deleted); the head gets no record either. A snapshot seen
    // unused for the first time does: make one.
    let (fresh, fresh_obj) = snapshot_object("2", "2025-01-02T00:00:00Z", None);
    cluster.insert(fresh_obj);
    for (error, is_error) in [(api(404, "NotFound"), false), (api(409, "Conflict"), false), (api(500, "InternalError"), true)] {
        *cluster.fail.lock().unwrap() = Some(("patch ", error.clone()));
        let report = sweep(&cluster).await.unwrap().expect("sweep");
        assert_eq!(report.errors.len(), usize::from(is_error), "{error:?}:\n{report}");
        assert!(report.errors.iter().all(|e| e.contains(&fresh)), "{report}");
    }
}

/// The other order: the admission reads the snapshot (there, unused) → GC lists and deletes it
/// → the admission goes on. The pin must not name a deleted snapshot: it is made again. Failed
/// before the fix: the admission answered with the name of a snapshot that no longer existed.
#[tokio::test]
async fn a_snapshot_deleted_while_an_admission_pins_it_is_made_again() {
    let (cluster, old, content) = race_world();
    let (reached, resume) = cluster.pause(&format!("get ns/{old}"), true);
    let admission = {
        let (cluster, content) = (cluster.clone(), content.clone());
        tokio::spawn(async move {
            crate::store::ensure(&cluster, "ns", &SourceId::configmap("cfg"), &content, &[], &Default::default(), false).await
        })
    };
    reached.await.expect("the admission read the snapshot");

    let report = sweep(&cluster).await.unwrap().expect("sweep");
    assert_eq!(report.deleted, std::slice::from_ref(&old), "{report}");

    resume.send(()).unwrap();
    let (name, _) = admission.await.unwrap().expect("pinned");
    assert_eq!(name, old);
    let again = cluster.get("ns", &old).expect("the pinned snapshot exists");
    assert_eq!(snapshot::validate(&again).ok(), Some(content.hash()), "a valid snapshot of the same content");
}

/// Re-pinning a snapshot that GC has not recorded as unused writes nothing (the common case:
/// a snapshot in use, or one GC has not looked at yet), and a dry run never writes.
#[tokio::test]
async fn reusing_a_snapshot_writes_only_when_gc_recorded_it_unused() {
    let (cluster, old, content) = race_world();
    let writes = |c: &MemoryCluster| c.calls.lock().unwrap().iter().filter(|c| !c.starts_with("get")).cloned().collect::<Vec<_>>();
    crate::store::ensure(&cluster, "ns", &SourceId::configmap("cfg"), &content, &[], &Default::default(), true).await.expect("dry run");
    assert_eq!(writes(&cluster), Vec::<String>::new(), "a dry run writes nothing");

    crate::store::ensure(&cluster, "ns", &SourceId::configmap("cfg"), &content, &[], &Default::default(), false).await.expect("pinned");
    assert_eq!(writes(&cluster), [format!("patch ns/{old}")], "one write: the last-use record goes");
    assert_eq!(crate::admission::annotation(&cluster.get("ns", &old).unwrap(), names::LAST_USED), None);

    crate::store::ensure(&cluster, "ns", &SourceId::configmap("cfg"), &content, &[], &Default::default(), false)
        .await
        .expect("pinned again");
    assert_eq!(writes(&cluster).len(), 1, "in use: nothing more to write");
}

/// A snapshot chosen by name (`store::keep`), deleted by a sweep between the admission's read and
/// its write: made again, the same snapshot under the same name.
#[tokio::test]
async fn a_chosen_snapshot_deleted_while_being_kept_is_made_again() {
    let (cluster, old, content) = race_world();
    let (reached, resume) = cluster.pause(&format!("get ns/{old}"), true);
    let admission = {
        let (cluster, old) = (cluster.clone(), old.clone());
        tokio::spawn(async move { crate::store::keep(&cluster, "ns", &SourceId::configmap(&old), None, false).await })
    };
    reached.await.expect("the admission read the snapshot");
    assert_eq!(sweep(&cluster).await.unwrap().expect("sweep").deleted, std::slice::from_ref(&old));
    resume.send(()).unwrap();
    admission.await.unwrap().expect("kept");
    let again = cluster.get("ns", &old).expect("the chosen snapshot exists");
    assert_eq!(snapshot::validate(&again).ok(), Some(content.hash()));
    assert_eq!(crate::admission::annotation(&again, names::LAST_USED), None);
}

/// An adoption that meets a squatted snapshot name says so on the source, as admission does.
#[tokio::test]
async fn an_adoption_past_a_squatted_snapshot_name_records_a_collision_event() {
    let (cluster, state) = resync_world(&[source_holding("cfg", "1", "1")], &[("app", &["cfg"])]);
    let squatted = snapshot::name("cfg", &content_hash("1"), 0);
    cluster.insert(json!({"metadata": {"namespace": "ns", "name": squatted}, "data": {"evil": "1"}}));
    let seen = adopt::current_templates(&state);
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    let next = snapshot::name("cfg", &content_hash("1"), 1);
    assert!(crate::admission::annotation(&cluster.get("ns", &next).expect("adopted under the next name"), names::ADOPTED).is_some());
    let events = cluster.events();
    assert_eq!(events.iter().map(|e| (e.reason, e.regarding.name.as_str())).collect::<Vec<_>>(), [("SnapshotCollision", "cfg")]);
    assert!(events[0].note.contains(&squatted) && events[0].note.contains(&next), "{}", events[0].note);
    assert_eq!(events[0].regarding.uid, "uid-cfg");
}

/// The cache knows ConfigMaps by their metadata only (docs/behaviour.md §10): a pass reads a changed source
/// before it acts on the change, and leaves one that the read shows immutable alone.
#[tokio::test]
async fn a_propagation_pass_reads_a_source_known_by_metadata_before_acting_and_never_touches_an_immutable_one() {
    let (cluster, mut state) = propagation_world();
    let metadata = |mut obj: Value| {
        obj.as_object_mut().unwrap().retain(|k, _| k == "metadata");
        obj["kind"] = json!(crate::cache::PARTIAL_OBJECT_METADATA);
        obj
    };
    let mut cfg = source("ns", "cfg", &h('b'), &[(names::CHANGED_AT, T0)]);
    cfg["metadata"]["resourceVersion"] = json!("3");
    cluster.insert(cfg.clone());
    state.apply_configmap(&metadata(cfg));
    // A former source, made immutable inside its settle window, and a workload still on it.
    let mut imm = source("ns", "imm", &h('c'), &[(names::CHANGED_AT, T0)]);
    imm["metadata"]["resourceVersion"] = json!("4");
    imm["immutable"] = json!(true);
    cluster.insert(imm.clone());
    state.apply_configmap(&metadata(imm));
    let on_imm = workload("ns", "on-imm", &["imm"], &[]);
    state.apply_workload(Kind::Deployment, &on_imm);
    cluster.insert_workload(Kind::Deployment, on_imm);
    let ctx = ctx(&cluster, state, args(&[]));
    let mut st = quick();

    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), None, "nothing moves on a change of a source not known mutable");
    let reads: Vec<String> = cluster.calls.lock().unwrap().iter().filter(|c| c.starts_with("get ")).cloned().collect();
    assert_eq!(reads.len(), 2, "{reads:?}");
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), Some(format!("cfg={}", h('b'))));
    assert_eq!(trigger_of(&cluster, "on-imm"), None);
    for _ in 0..3 {
        propagation_pass(&ctx, &mut st).await;
    }
    let calls = cluster.calls.lock().unwrap().clone();
    assert!(!calls.iter().any(|c| c.contains("ns/imm") && !c.starts_with("get")), "the immutable ConfigMap is never written: {calls:?}");
    // The snapshot the workload ran is read for the change-cause, once (docs/behaviour.md §7.9).
    let source_reads = calls.iter().filter(|c| c.starts_with("get ") && !c.starts_with("get ns/cfg-")).count();
    assert_eq!(source_reads, 2, "each read once: {calls:?}");
}

/// `changed-at` is the API server's time (the admitting replica reads it off its responses), so
/// the settle window must be counted on the API server's clock too. A leader whose own clock is
/// 30 s ahead would otherwise see a change made 5 s ago as 35 s old and propagate it inside its
/// 10 s window. Failed when the pass took the replica's own clock.
#[tokio::test]
async fn the_settle_window_is_counted_on_the_api_servers_clock() {
    use crate::cluster::clock::{Clock, Sample};
    use std::sync::atomic::AtomicI64;
    let (cluster, state) = propagation_world(); // changed at T0, settle window 10 s
    let t0 = super::propagate::parse_time_ms(T0).unwrap();
    let local = Arc::new(AtomicI64::new(t0 + 35_000)); // the server says T0 + 5 s
    let clock = {
        let local = local.clone();
        Arc::new(Clock::with_local(move || local.load(Ordering::Relaxed)))
    };
    clock.record(Sample { sent_ms: t0 + 34_990, received_ms: t0 + 35_000, date_ms: t0 + 5_000 });
    let mut ctx = ctx(&cluster, state, args(&[]));
    ctx.shared =
        Arc::new(Context::synced(Policy::default(), ctx.shared.state.clone(), ctx.shared.cluster.clone()).with_clock(clock.clone()));
    let mut st = quick();

    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), None, "5 s after the change on the API server's clock: inside the window");

    local.store(t0 + 41_500, Ordering::Relaxed); // the server's T0 + 11.5 s
    propagation_pass(&ctx, &mut st).await;
    assert_eq!(trigger_of(&cluster, "stale"), Some(format!("cfg={}", h('b'))), "past the window: propagated");
}

/// docs/behaviour.md §9 with §6.2.1: a workload from before the install ran with content "1" (its snapshot's
/// adoption record lists its plain template), was released on "2" (pinned), then `rollout undo`
/// brought the plain template back while the webhook was away. Repair sends it back to the
/// config that revision ran with, not the head: its trigger names that snapshot, no adoption
/// record is written on the head's, and the Event says it is held.
#[tokio::test]
async fn a_plain_undo_admitted_during_an_outage_is_repaired_to_the_snapshot_its_adoption_record_names() {
    let plain = workload("ns", "app", &["cfg"], &[]);
    let tpl = crate::model::template::template_hash(&plain["spec"]["template"]);
    let (a, b) = (content_hash("1"), content_hash("2"));
    let mut adopted = snap("ns", "cfg", &a);
    adopted["metadata"]["annotations"][names::ADOPTED] = json!(tpl);
    let (cluster, mut state) =
        resync_world(&[source_holding("cfg", "2", "2"), adopted, snap("ns", "cfg", &b)], &[("app", &["cfg"]), ("before", &["cfg"])]);
    let rs = |name: &str, cm: &str, revision: &str| {
        let mut obj = workload("ns", "app", &[cm], &[]);
        obj["metadata"] = json!({"namespace": "ns", "name": name, "annotations": {"deployment.kubernetes.io/revision": revision},
            "ownerReferences": [{"kind": "Deployment", "uid": "uid-app", "controller": true}]});
        obj
    };
    state.apply_revision(Kind::ReplicaSet, &rs("app-1", "cfg", "3"));
    state.apply_revision(Kind::ReplicaSet, &rs("app-2", &snapshot::name("cfg", &b, 0), "2"));
    // "before" runs the same adopted template and was never pinned: left alone.
    let seen = adopt::current_templates(&state);
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "app"), Some(format!("cfg={a}")), "the undo's config, not the head");
    assert_eq!(trigger_of(&cluster, "before"), None, "an adopted workload is not restarted");
    let head_snapshot = cluster.get("ns", &snapshot::name("cfg", &b, 0)).unwrap();
    assert_eq!(crate::admission::annotation(&head_snapshot, names::ADOPTED), None, "the head did not run that revision");
    let events = cluster.events();
    let repaired: Vec<&str> = events.iter().filter(|e| e.reason == "ConfigRepaired").map(|e| e.note.as_str()).collect();
    assert_eq!(repaired.len(), 1, "{repaired:?}");
    assert!(repaired[0].contains(&format!("cfg back to its config {a}, held (the current config is {b})")), "{}", repaired[0]);
}

/// The same outage undo, but the cache knows the source by its metadata only and no read of it
/// succeeds (under load): nothing is triggered until a read shows it mutable (an immutable
/// source would leave the trigger unanswered, retried for ever). Failed before: triggered.
#[tokio::test]
async fn a_plain_undo_during_an_outage_waits_for_a_read_of_a_source_known_by_metadata() {
    let plain = workload("ns", "app", &["cfg"], &[]);
    let tpl = crate::model::template::template_hash(&plain["spec"]["template"]);
    let (a, b) = (content_hash("1"), content_hash("2"));
    let mut adopted = snap("ns", "cfg", &a);
    adopted["metadata"]["annotations"][names::ADOPTED] = json!(tpl);
    let (cluster, mut state) = resync_world(&[source_holding("cfg", "2", "2"), adopted, snap("ns", "cfg", &b)], &[("app", &["cfg"])]);
    let mut metadata = source_holding("cfg", "2", "2");
    metadata.as_object_mut().unwrap().retain(|k, _| k == "metadata");
    metadata["kind"] = json!(crate::cache::PARTIAL_OBJECT_METADATA);
    metadata["metadata"]["resourceVersion"] = json!("2");
    state.apply_configmap(&metadata);
    let mut rs = workload("ns", "app", &[&snapshot::name("cfg", &b, 0)], &[]);
    rs["metadata"] =
        json!({"namespace": "ns", "name": "app-2", "ownerReferences": [{"kind": "Deployment", "uid": "uid-app", "controller": true}]});
    state.apply_revision(Kind::ReplicaSet, &rs);
    let seen = adopt::current_templates(&state);
    *cluster.fail.lock().unwrap() =
        Some(("get ns/cfg", ApiError { code: Some(503), reason: "ServiceUnavailable".into(), message: "overloaded".into() }));
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "app"), None);
}

/// docs/behaviour.md §7, a source that stops being versioned, by the admin's selector: the server restarted
/// with `--excluded-sources-selector ca-bundle=true` finds `ca` (so labelled, versioned until
/// now, `app` pinned to its snapshot) with no write saying so. A resync pass touches it; the
/// webhook admitting the touch records the change and the exclusion; propagation moves `app` to
/// the plain name, once. Not written: a source the selector does not take, one nothing is
/// pinned to (its next write records it), one recorded already.
#[tokio::test]
async fn a_source_the_admins_selector_newly_excludes_is_propagated_once_more_to_the_plain_name() {
    let labelled = |name: &str, extra: &[(&str, &str)]| {
        let mut src = source_holding(name, "1", "1");
        src["metadata"]["labels"] = json!({"ca-bundle": "true"});
        src["metadata"]["annotations"][names::CHANGED_AT] = json!(T0);
        src["metadata"]["annotations"][names::PROPAGATED] = json!(content_hash("1"));
        for (k, v) in extra {
            src["metadata"]["annotations"][*k] = json!(v);
        }
        src
    };
    let pin = |name: &str| snapshot::name(name, &content_hash("1"), 0);
    let (ca_pin, done_pin, cfg_pin) = (pin("ca"), pin("done"), pin("cfg"));
    let sources =
        [labelled("ca", &[]), labelled("idle", &[]), labelled("done", &[(names::EXCLUDED, "true")]), source_holding("cfg", "1", "1")];
    let (cluster, state) = resync_world(&sources, &[("app", &[&ca_pin]), ("plain", &["idle"]), ("other", &[&done_pin, &cfg_pin])]);
    let policy = Policy { excluded_sources: "ca-bundle=true".parse().unwrap(), ..Policy::default() };
    let ctx = ctx_with(&cluster, state, args(&[]), policy.clone());

    resync_pass(&ctx, &adopt::Seen::new(), &mut ResyncState::default()).await;
    let written: Vec<String> = cluster.calls.lock().unwrap().iter().filter(|c| c.starts_with("patch ns/")).cloned().collect();
    assert_eq!(written, ["patch ns/ca"]);

    // The webhook admitting the touch: a change, first seen now, recorded as the selector's.
    let now = "2026-12-03T12:00:00Z";
    let touched = cluster.get("ns", "ca").unwrap();
    let req = crate::admission::Request {
        kind: crate::admission::review::GroupVersionKind { group: "".into(), version: "v1".into(), kind: "ConfigMap".into() },
        operation: crate::admission::review::Operation::Update,
        namespace: "ns".into(),
        name: "ca".into(),
        object: Some(touched.clone()),
        old_object: Some(sources[0].clone()),
        ..Default::default()
    };
    let d = {
        let state = ctx.shared.state.read();
        let (fresh, failed) = (crate::admission::Fresh::new(), crate::admission::Failed::new());
        let view = crate::admission::View { policy: &policy, state: &state, fresh: &fresh, failed: &failed, now, namespace: None };
        let crate::admission::Outcome::Done(d) = crate::admission::configmap::decide(&req, &view) else { panic!("no read expected") };
        d
    };
    assert_eq!(d.reason, crate::admission::Reason::SourceChanged);
    let mut stored = touched;
    json_patch::patch(&mut stored, &serde_json::from_value::<json_patch::Patch>(json!(d.response.patch)).unwrap()).unwrap();
    let annotation = |key| crate::admission::annotation(&stored, key).map(str::to_owned);
    assert_eq!((annotation(names::CHANGED_AT).as_deref(), annotation(names::PROPAGATED)), (Some(now), None));
    assert_eq!(annotation(names::EXCLUDED).as_deref(), Some("true"));
    cluster.insert(stored.clone());
    ctx.shared.state.write().apply_configmap(&stored);

    // Propagation, after the window: `app` goes to the plain name; nothing else moves.
    let due = {
        let state = ctx.shared.state.read();
        propagate::due_propagations(&state, &policy, &ctx.selector, propagate::parse_time_ms(now).unwrap() + 10_000, true)
    };
    let plans: Vec<(&str, String)> = due.plans.iter().map(|p| (p.name.as_str(), p.trigger_value())).collect();
    assert_eq!(plans, [("app", format!("ca={}", content_hash("1")))]);

    // Recorded: the next pass writes nothing; with the selector gone, versioning again is a change too.
    cluster.calls.lock().unwrap().clear();
    resync_pass(&ctx, &adopt::Seen::new(), &mut ResyncState::default()).await;
    assert!(!cluster.calls.lock().unwrap().iter().any(|c| c.starts_with("patch ns/")), "{:?}", cluster.calls.lock().unwrap());
    let state = ctx.shared.state.read();
    let (touches, _) = propagate::versioning_touches(&state, &Policy::default(), &ctx.selector);
    assert_eq!(touches, [("ns".into(), SourceId::configmap("ca")), ("ns".into(), SourceId::configmap("done"))]);
}

/// A workload admitted while the webhook was away, naming a source the cache knows by metadata
/// only, whose read fails (a loaded API server): the pass cannot decide it, and must not count
/// its template as seen, or the next pass would take the outage's template for one from before
/// and adopt it instead of repairing it.
#[tokio::test]
async fn a_template_left_undecided_for_want_of_a_read_is_repaired_once_the_read_succeeds() {
    let mut src = source_holding("cfg", "1", "1");
    src["kind"] = json!(crate::cache::PARTIAL_OBJECT_METADATA);
    let (cluster, mut state) = resync_world(&[], &[("new", &["cfg"])]);
    cluster.insert(source_holding("cfg", "1", "1"));
    state.apply_configmap(&src);
    let ctx = ctx(&cluster, state, args(&[]));
    *ctx.seen.lock().unwrap() = Some(adopt::Seen::new());
    let error = ApiError { code: Some(500), reason: "InternalError".into(), message: "etcdserver: request timed out".into() };
    *cluster.fail.lock().unwrap() = Some(("get ns/cfg", error));

    resync_pass(&ctx, &adopt::Seen::new(), &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "new"), None);
    assert_eq!(ctx.seen.lock().unwrap().as_ref().map(adopt::Seen::len), Some(0), "undecided: not seen");

    *cluster.fail.lock().unwrap() = None;
    let seen = ctx.seen.lock().unwrap().clone().unwrap();
    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "new"), Some(format!("cfg={}", content_hash("1"))), "repaired, not adopted");
}

/// "Seen before" is per namespace: the same manifest deployed in a namespace the loops do not act
/// in (audit mode: its templates count as seen at once) says nothing about this namespace's
/// workload admitted during an outage, which is repaired, not adopted. (Keyed by template hash
/// alone, it was adopted: the e2e outage test met it beside another test's identical manifest.)
#[tokio::test]
async fn the_same_template_in_another_namespace_does_not_make_an_outage_workload_pass_for_seen() {
    let (cluster, mut state) = resync_world(&[source_holding("cfg", "1", "1")], &[]);
    state.apply_namespace(&json!({"metadata": {"name": "audited", "labels": {names::MODE_LABEL: "audit"}}}));
    state.apply_workload(Kind::Deployment, &workload("audited", "new", &["cfg"], &[]));
    let ctx = ctx(&cluster, state, args(&[]));
    *ctx.seen.lock().unwrap() = Some(adopt::Seen::new());
    propagation_pass(&ctx, &mut quick()).await;

    let outage = workload("ns", "new", &["cfg"], &[]);
    ctx.shared.state.write().apply_workload(Kind::Deployment, &outage);
    cluster.insert_workload(Kind::Deployment, outage);
    let seen = ctx.seen.lock().unwrap().clone().unwrap();
    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "new"), Some(format!("cfg={}", content_hash("1"))), "repaired, not adopted");
}

/// docs/behaviour.md §9 with §6.2.1: `app` ran revision 1 (content unknown: adopted never) before the install,
/// was pinned since (its revision 3 names a snapshot of `cfg`), and `rollout undo --to-revision=1`
/// brought the plain template back while the webhook was away. No adoption record lists it, so
/// the config it ran with is unknown: repair takes it to the head with a ConfigUnknown warning
/// and writes no adoption record on the head's snapshot (false history). `later` went plain after
/// its pinned revision (an edit in a namespace that did not pin then): adopted, not restarted.
/// Failed before: `app` was adopted on the current content and left on the plain name.
#[tokio::test]
async fn an_outage_undo_to_a_revision_no_adoption_record_lists_is_repaired_to_the_head_as_unknown() {
    let head = content_hash("3");
    let pinned = snapshot::name("cfg", &head, 0);
    let (cluster, mut state) = resync_world(&[source_holding("cfg", "3", "3")], &[("app", &["cfg"]), ("later", &["cfg"])]);
    let rs = |owner: &str, name: &str, cm: &str, created: &str| {
        let mut obj = workload("ns", owner, &[cm], &[]);
        obj["metadata"] = json!({"namespace": "ns", "name": name, "creationTimestamp": created,
            "ownerReferences": [{"kind": "Deployment", "uid": format!("uid-{owner}"), "controller": true}]});
        obj
    };
    state.apply_revision(Kind::ReplicaSet, &rs("app", "app-1", "cfg", "2026-01-01T00:00:00Z"));
    state.apply_revision(Kind::ReplicaSet, &rs("app", "app-3", &pinned, "2026-06-01T00:00:00Z"));
    state.apply_revision(Kind::ReplicaSet, &rs("later", "later-1", &pinned, "2026-06-01T00:00:00Z"));
    state.apply_revision(Kind::ReplicaSet, &rs("later", "later-2", "cfg", "2026-07-01T00:00:00Z"));
    let seen = adopt::current_templates(&state);
    let ctx = ctx(&cluster, state, args(&[]));

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "app"), Some(format!("cfg={head}")), "repaired to the head");
    assert_eq!(trigger_of(&cluster, "later"), None, "not an undo: adopted, not restarted");
    let record = crate::admission::annotation(&cluster.get("ns", &pinned).unwrap(), names::ADOPTED).unwrap_or_default().to_owned();
    let template = |name: &str| crate::model::template::template_hash(&workload("ns", name, &["cfg"], &[])["spec"]["template"]);
    assert!(record.contains(&template("later")), "{record}");
    assert!(!record.contains(&template("app")), "the head did not run that revision: {record}");
    let published = cluster.events();
    let events: Vec<(&str, &str, bool)> = published.iter().map(|e| (e.reason, e.regarding.name.as_str(), e.warning)).collect();
    assert_eq!(events, [("ConfigUnknown", "app", true), ("ConfigRepaired", "app", false)]);
    assert!(published[0].note.contains("predates confighistory"), "{}", published[0].note);
}

/// A registered kind whose API is not served (its CRD not installed: every list of it is a 404)
/// has no objects, so the sweep goes on for the other kinds; any other failure to list it still
/// fails the sweep (nothing is deleted on a partial view). A built-in's 404 is not read that way.
#[tokio::test]
async fn a_registered_kind_not_served_does_not_stop_the_sweep() {
    use crate::model::kinds::tests::with_rollout;
    let error =
        |code| ApiError { code: Some(code), reason: "x".into(), message: "the server could not find the requested resource".into() };
    for (fails, code, swept) in
        [("list Rollout.example.io ns", 404, true), ("list Rollout.example.io ns", 500, false), ("list Deployment ns", 404, false)]
    {
        let (mut cluster, old, _) = race_world();
        cluster.kinds = Some(with_rollout());
        *cluster.fail.lock().unwrap() = Some((fails, error(code)));
        let report = sweep(&cluster).await.unwrap();
        assert_eq!(report.as_ref().map(|r| r.deleted.clone()).ok(), swept.then(|| vec![old.clone()]), "{fails} {code}: {report:?}");
        assert_eq!(cluster.get("ns", &old).is_none(), swept, "{fails} {code}");
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets (docs/behaviour.md §4a): the loops on Secret sources where the admin turned them on
// ---------------------------------------------------------------------------------------------

/// A value no output may hold: every test below looks for it (and its base64) in what the loops
/// wrote besides the snapshot itself.
const CANARY: &str = "canary-loops-5b1e";

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Secret `name` of namespace `ns` holding `password` (MAC'd under `policy`'s keys), with a
/// stored head that is the MAC of `stored`.
fn secret_holding(policy: &Policy, name: &str, password: &str, stored: &str) -> Value {
    let mut obj = json!({"kind": "Secret", "type": "Opaque",
        "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"), "resourceVersion": "1", "annotations": {}},
        "data": {"password": b64(password)}});
    obj["metadata"]["annotations"][names::HEAD] = json!(secret_mac(policy, name, stored));
    obj
}

fn secret_mac(policy: &Policy, name: &str, password: &str) -> String {
    let keys = policy.secrets.keys.get().unwrap();
    let content =
        crate::model::secret::SecretContent::from_object(&json!({"type": "Opaque", "data": {"password": b64(password)}})).unwrap();
    content.mac(&keys.current().namespace_key("ns"), name)
}

/// A Deployment that reads Secret `secret` as files.
fn secret_workload(name: &str, secret: &str) -> Value {
    let mut w = workload("ns", name, &[], &[]);
    w["spec"]["template"]["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": secret}}]);
    w
}

fn secret_world(policy: &Policy, sources: &[Value], workloads: &[Value]) -> (MemoryCluster, State) {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.set_source_kinds(policy.acted_on());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    for src in sources {
        state.apply_source(crate::model::ids::SourceKind::Secret, src);
        cluster.insert(src.clone());
    }
    for obj in workloads {
        state.apply_workload(Kind::Deployment, obj);
        cluster.insert_workload(Kind::Deployment, obj.clone());
    }
    (cluster, state)
}

/// Nothing the loops wrote but the snapshot itself holds the canary, in plain or base64: calls,
/// Events, and the patches sent.
fn assert_no_canary(cluster: &MemoryCluster) {
    let calls = format!("{:?}", cluster.calls.lock().unwrap());
    let events = format!("{:?}", cluster.events());
    for (what, text) in [("calls", calls), ("events", events)] {
        for form in [CANARY.to_owned(), b64(CANARY)] {
            assert!(!text.contains(&form), "{what} hold a Secret value");
        }
    }
}

/// docs/behaviour.md §4a with §9: where Secrets are on, a plain-name workload seen before is
/// adopted (the MAC-named snapshot of the Secret's current content, immutable, of its type,
/// records its template) and restarts nothing; one admitted while the webhook was away is
/// repaired with a `secret/` trigger; a Secret edited while the webhook was away is touched.
#[tokio::test]
async fn a_resync_pass_adopts_repairs_and_rehashes_secret_sources_where_secrets_are_on() {
    let policy = super::propagate::tests::secrets_on("");
    let db = secret_holding(&policy, "db", CANARY, CANARY);
    let edited = secret_holding(&policy, "edited", "two", "one");
    let workloads = [secret_workload("old", "db"), secret_workload("new", "db"), secret_workload("user", "edited")];
    let (cluster, state) = secret_world(&policy, &[db, edited], &workloads);
    let template = |name: &str| state.workload(&(Kind::Deployment, "ns".into(), name.into())).unwrap().template_hash.clone();
    let (old_t, new_t, user_t) = (template("old"), template("new"), template("user"));
    let seen: adopt::Seen = [("ns".to_owned(), old_t.clone()), ("ns".to_owned(), user_t)].into();
    let ctx = ctx_with(&cluster, state, args(&[]), policy.clone());

    resync_pass(&ctx, &seen, &mut ResyncState::default()).await;
    let mac = secret_mac(&policy, "db", CANARY);
    let id = crate::model::ids::SourceId::new(crate::model::ids::SourceKind::Secret, snapshot::name("db", &mac, 0));
    let snap = cluster.source("ns", &id).expect("the MAC-named snapshot of the Secret's current content");
    assert_eq!((snap["immutable"].as_bool(), snap["type"].as_str()), (Some(true), Some("Opaque")));
    assert_eq!(snap["data"]["password"], json!(b64(CANARY)), "a copy of the data");
    crate::model::secret::validate(&snap, "ns", &policy.secrets.keys.get().unwrap()).expect("a valid Secret snapshot");
    let record = crate::admission::annotation(&snap, names::ADOPTED).unwrap_or_default().to_owned();
    assert!(
        record.contains(old_t.as_str()) && record.contains(new_t.as_str()),
        "adopted, and the repaired template recorded first: {record}"
    );
    assert_eq!(trigger_of(&cluster, "old"), None, "an adopted workload is not restarted");
    assert_eq!(trigger_of(&cluster, "new"), Some(format!("secret/db={mac}")));
    let calls = cluster.calls.lock().unwrap().clone();
    assert!(calls.contains(&"patch ns/secret/edited".to_owned()), "the Secret edited while away is touched: {calls:?}");
    assert!(!calls.contains(&"patch ns/secret/db".to_owned()), "its head names its content: {calls:?}");
    assert!(calls.iter().all(|c| !c.contains("ns/secret/edited-")), "no snapshot of a Secret with a missed change: {calls:?}");
    assert_no_canary(&cluster);
}

/// With Secrets off (or on, without the keys), the loops read, write and adopt no Secret, though
/// workloads name one plainly and one was edited while away.
#[tokio::test]
async fn without_secrets_on_the_loops_never_read_or_write_a_secret() {
    let on = super::propagate::tests::secrets_on("");
    let db = secret_holding(&on, "db", CANARY, "other");
    let mut no_keys = on.clone();
    no_keys.secrets.keys = Default::default();
    for policy in [Policy::default(), no_keys, super::propagate::tests::secrets_on("team=a")] {
        let (cluster, state) = secret_world(&on, std::slice::from_ref(&db), &[secret_workload("new", "db")]);
        let ctx = ctx_with(&cluster, state, args(&[]), policy);
        resync_pass(&ctx, &Default::default(), &mut ResyncState::default()).await;
        gc_pass(&ctx, gc::Settings { keep: 0, grace: Duration::ZERO }).await;
        let calls = cluster.calls.lock().unwrap().clone();
        assert!(calls.iter().all(|c| !c.contains("secret/") && !c.contains("Secret")), "{calls:?}");
        assert_eq!(trigger_of(&cluster, "new"), None);
    }
}

/// docs/behaviour.md §8 for Secrets: an unreferenced Secret snapshot past retention is deleted
/// with its preconditions; the head and a referenced one are kept; a Secret "snapshot" whose MAC
/// does not verify under the keys is never deleted.
#[tokio::test]
async fn a_gc_pass_sweeps_secret_snapshots_where_secrets_are_on() {
    let policy = super::propagate::tests::secrets_on("");
    let keys = policy.secrets.keys.get().unwrap();
    let snapshot_of = |password: &str, created: &str| {
        let content =
            crate::model::secret::SecretContent::from_object(&json!({"type": "Opaque", "data": {"password": b64(password)}})).unwrap();
        let key = keys.current().namespace_key("ns");
        let name = crate::model::secret::snapshot_name("db", &content, &key, 0);
        let mut obj = crate::model::secret::snapshot_object("ns", "db", &name, &content, &key, &[]);
        obj["kind"] = json!("Secret");
        obj["metadata"]["uid"] = json!(format!("uid-{name}"));
        obj["metadata"]["resourceVersion"] = json!("1");
        obj["metadata"]["creationTimestamp"] = json!(created);
        obj["metadata"]["annotations"][names::LAST_USED] = json!(T0);
        (name, obj)
    };
    let (old, old_obj) = snapshot_of("1", "2025-01-01T00:00:00Z");
    let (used, used_obj) = snapshot_of("2", "2025-01-02T00:00:00Z");
    let (head, head_obj) = snapshot_of(CANARY, "2025-01-03T00:00:00Z");
    let (forged, mut forged_obj) = snapshot_of("4", "2025-01-01T00:00:00Z");
    forged_obj["data"]["password"] = json!(b64("not what its MAC says"));
    let db = secret_holding(&policy, "db", CANARY, CANARY);
    let (cluster, state) = secret_world(&policy, &[old_obj, used_obj, head_obj, forged_obj, db], &[secret_workload("app", &used)]);
    let ctx = ctx_with(&cluster, state, args(&[]), policy);

    gc_pass(&ctx, gc::Settings { keep: 0, grace: Duration::from_secs(600) }).await;
    let secret = |name: &str| cluster.source("ns", &crate::model::ids::SourceId::new(crate::model::ids::SourceKind::Secret, name));
    assert!(secret(&old).is_none(), "unreferenced, not the head, unused past the grace period");
    assert!(secret(&head).is_some(), "the head");
    assert!(secret(&used).is_some(), "referenced by a Deployment");
    assert!(secret(&forged).is_some(), "not a valid snapshot: never deleted");
    assert!(cluster.calls.lock().unwrap().contains(&format!("delete ns/secret/{old}")));
    assert_no_canary(&cluster);
}

/// The admin turns Secrets on for a namespace (its label now matches the selector) while a
/// workload there, younger than a resync pass, reads a Secret by name: it was admitted plain on
/// purpose (Secrets were off there), so it is adopted, not repaired as an outage's would be:
/// turning Secrets on restarts nothing (docs/behaviour.md §4a). Failed before: the template no
/// resync had seen yet was taken for an outage's and got a trigger.
#[tokio::test]
async fn turning_secrets_on_for_a_namespace_adopts_a_workload_newer_than_the_last_resync() {
    let policy = super::propagate::tests::secrets_on("team=a");
    let db = secret_holding(&policy, "db", CANARY, CANARY);
    let (cluster, state) = secret_world(&policy, &[db], &[secret_workload("new", "db")]);
    let template = state.workload(&(Kind::Deployment, "ns".into(), "new".into())).unwrap().template_hash.clone();
    let ctx = ctx_with(&cluster, state, args(&[]), policy.clone());
    // This replica leads since before the workload: its resync passes have not seen it.
    *ctx.seen.lock().unwrap() = Some(adopt::Seen::new());
    propagation_pass(&ctx, &mut quick()).await; // the namespace without Secrets on: noted
    ctx.shared.state.write().apply_namespace(&json!({"metadata": {"name": "ns", "labels": {"team": "a"}}}));
    resync_pass(&ctx, &adopt::Seen::new(), &mut ResyncState::default()).await;
    assert_eq!(trigger_of(&cluster, "new"), None, "not restarted");
    let id = crate::model::ids::SourceId::new(
        crate::model::ids::SourceKind::Secret,
        snapshot::name("db", &secret_mac(&policy, "db", CANARY), 0),
    );
    let snap = cluster.source("ns", &id).expect("the snapshot of its current content");
    assert_eq!(crate::admission::annotation(&snap, names::ADOPTED), Some(template.as_str()), "adopted");
}

/// At 10,000 sources, every resync pass read every source at the resync rate (17
/// minutes of GETs, over and over). A source the re-hash found named by its head is not read
/// again while the watch shows the same resourceVersion; a write (a new resourceVersion) makes
/// the next pass read it, and a change made while the webhook was away is still caught.
#[tokio::test]
async fn a_resync_pass_reads_again_only_the_sources_whose_resource_version_changed() {
    let sources = [source_holding("cfg", "1", "1"), source_holding("other", "1", "1")];
    let (cluster, state) = resync_world(&sources, &[("app", &["cfg", "other"])]);
    let seen = adopt::current_templates(&state);
    let ctx = ctx(&cluster, state, args(&[]));
    let reads = |c: &MemoryCluster| c.calls.lock().unwrap().iter().filter(|c| c.starts_with("get ")).cloned().collect::<Vec<_>>();
    let mut st = ResyncState::default();

    resync_pass(&ctx, &seen, &mut st).await;
    for source in ["get ns/cfg", "get ns/other"] {
        assert!(reads(&cluster).iter().any(|r| r == source), "the first pass reads each source: {:?}", reads(&cluster));
    }
    cluster.calls.lock().unwrap().clear();
    resync_pass(&ctx, &seen, &mut st).await;
    assert_eq!(reads(&cluster), Vec::<String>::new(), "unchanged: not read again");

    // Edited while the webhook was away: a new resourceVersion, its head now stale.
    let mut edited = source_holding("cfg", "2", "1");
    edited["metadata"]["resourceVersion"] = json!("5");
    cluster.insert(edited.clone());
    ctx.shared.state.write().apply_configmap(&edited);
    resync_pass(&ctx, &seen, &mut st).await;
    assert_eq!(reads(&cluster), ["get ns/cfg"], "only the changed one");
    assert!(
        cluster.calls.lock().unwrap().iter().any(|c| c == "patch ns/cfg"),
        "the missed change is caught: {:?}",
        cluster.calls.lock().unwrap()
    );
}

/// A new leader's first re-hash read every referenced source again, 17 minutes at
/// 10,000 sources and the default rate, with adoption and repair waiting, after every rolling
/// restart. The last leader's checkpoint spares it each namespace whose sources are still at the
/// resourceVersions it confirmed; a namespace with a write since is read in full, and its missed
/// change caught.
#[tokio::test]
async fn a_new_leader_reads_only_the_namespaces_changed_since_the_last_leaders_checkpoint() {
    let world = || {
        let (cluster, mut state) =
            resync_world(&[source_holding("cfg", "1", "1"), source_holding("other", "1", "1")], &[("app", &["cfg", "other"])]);
        state.apply_namespace(&json!({"metadata": {"name": "ns2"}}));
        for name in ["cfg", "other"] {
            let mut src = source_holding(name, "1", "1");
            src["metadata"]["namespace"] = json!("ns2");
            src["metadata"]["uid"] = json!(format!("uid2-{name}"));
            state.apply_configmap(&src);
            cluster.insert(src);
        }
        let obj = workload("ns2", "app", &["cfg", "other"], &[]);
        state.apply_workload(Kind::Deployment, &obj);
        cluster.insert_workload(Kind::Deployment, obj);
        (cluster, state)
    };
    let reads = |c: &MemoryCluster| {
        let mut r: Vec<String> = c.calls.lock().unwrap().iter().filter(|c| c.starts_with("get ns")).cloned().collect();
        r.sort();
        r
    };
    let (cluster, state) = world();
    let first = ctx(&cluster, state, args(&[]));
    rehash(&first, &mut ResyncState::default()).await;
    assert_eq!(reads(&cluster), ["get ns/cfg", "get ns/other", "get ns2/cfg", "get ns2/other"], "the first leader reads each");
    let kept =
        cluster.source("confighistory", &SourceId::configmap("confighistory-resync")).expect("the checkpoint is written beside the Lease");
    let data = kept["data"]["verified"].as_str().unwrap();
    assert!(data.contains("\nns ") && data.contains("\nns2 ") && !data.contains("cfg"), "digests per namespace, no names: {data}");

    // Edited while no leader looked: a new resourceVersion, its head stale.
    let (_, mut state) = world();
    let mut edited = source_holding("cfg", "2", "1");
    edited["metadata"]["namespace"] = json!("ns2");
    edited["metadata"]["uid"] = json!("uid2-cfg");
    edited["metadata"]["resourceVersion"] = json!("7");
    cluster.insert(edited.clone());
    state.apply_configmap(&edited);
    cluster.calls.lock().unwrap().clear();
    let next = ctx(&cluster, state, args(&[]));
    rehash(&next, &mut ResyncState::default()).await;
    assert_eq!(reads(&cluster), ["get ns2/cfg", "get ns2/other"], "only the namespace with a write since the checkpoint");
    assert!(
        cluster.calls.lock().unwrap().iter().any(|c| c == "patch ns2/cfg"),
        "its missed change is caught: {:?}",
        cluster.calls.lock().unwrap()
    );

    // A checkpoint that cannot be read costs reads, nothing else.
    cluster.calls.lock().unwrap().clear();
    *cluster.fail.lock().unwrap() =
        Some(("get confighistory/", ApiError { code: Some(500), reason: "InternalError".into(), message: "etcd".into() }));
    let (_, state) = world();
    let third = ctx(&cluster, state, args(&[]));
    rehash(&third, &mut ResyncState::default()).await;
    assert_eq!(reads(&cluster).len(), 4, "read in full: {:?}", reads(&cluster));
}

/// A GC sweep lists each namespace holding snapshots in full; at 1,000 namespaces,
/// back to back, it took the API server and the replica from the admissions beside it. It lists
/// at the resync rate: 5 namespaces at 2/s (a burst of 2) take at least 1.5 s.
#[tokio::test]
async fn a_gc_pass_lists_namespaces_at_the_resync_rate() {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    for n in 0..5 {
        let ns = format!("ns{n}");
        state.apply_namespace(&json!({"metadata": {"name": ns}}));
        let (_, mut snap) = snapshot_object("1", "2025-01-01T00:00:00Z", None);
        snap["metadata"]["namespace"] = json!(ns);
        let head = snap["metadata"]["labels"][names::HASH_LABEL].clone();
        let src = json!({"metadata": {"namespace": ns, "name": "cfg", "uid": format!("uid-{n}"), "annotations": {names::HEAD: head}}, "data": {"k": "1"}});
        for obj in [snap, src] {
            state.apply_configmap(&obj);
            cluster.insert(obj);
        }
    }
    let ctx = ctx(&cluster, state, args(&["--resync-qps", "2"]));
    let start = Instant::now();
    gc_pass(&ctx, gc::Settings { keep: 0, grace: Duration::from_secs(600) }).await;
    assert!(start.elapsed() >= Duration::from_millis(1400), "5 namespaces swept in {:?}", start.elapsed());
}

/// The leader's passes run on threads of their own (`cache::blocking`), so they overlap each
/// other and the watches. The cache's lock queues a reader behind a waiting writer, so a pass
/// that holds one of the controller's own locks while it waits for the cache, beside a pass that
/// holds the cache and wants that lock, while a watch event waits to write, stops all three for
/// good: the watches, the loops and the process's exit (found in the scale run as a server that
/// never exited). Both passes and a writer run here on a multi-threaded runtime; each pass must
/// keep completing.
#[test]
fn the_passes_and_a_watch_writer_never_stop_each_other() {
    let (cluster, mut state) = (MemoryCluster::default(), State::default());
    state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
    let pinned = snapshot::name("cfg", &h('a'), 0);
    for obj in [source("ns", "cfg", &h('a'), &[]), snap("ns", "cfg", &h('a'))] {
        state.apply_configmap(&obj);
        cluster.insert(obj);
    }
    // Enough workloads that each pass holds the cache for a while.
    for i in 0..3000 {
        state.apply_workload(Kind::Deployment, &workload("ns", &format!("w{i}"), &[&pinned], &[]));
    }
    let seen = adopt::current_templates(&state);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ctx = Arc::new(runtime.block_on(async { ctx(&cluster, state, args(&[])) }));
    *ctx.seen.lock().unwrap() = Some(seen.clone());
    let (propagations, resyncs) = (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(std::sync::atomic::AtomicUsize::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (c, n) = (ctx.clone(), propagations.clone());
        runtime.spawn(async move {
            let mut st = quick();
            loop {
                propagation_pass(&c, &mut st).await;
                n.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        let (c, n) = (ctx.clone(), resyncs.clone());
        runtime.spawn(async move {
            let mut st = ResyncState::default();
            loop {
                resync_pass(&c, &seen, &mut st).await;
                n.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
    }
    // A watch: one event after another, each waiting for the passes' reads to end.
    let writer = {
        let (ctx, stop) = (ctx.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let labels = json!({"metadata": {"name": "ns", "labels": {"n": i.to_string()}}});
                ctx.shared.state.write().apply_namespace(&labels);
            }
        })
    };
    let progress = || (propagations.load(Ordering::Relaxed), resyncs.load(Ordering::Relaxed));
    let started = Instant::now();
    let (mut last, mut moved_at) = (progress(), Instant::now());
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(50));
        let now = progress();
        if now.0 > last.0 && now.1 > last.1 {
            (last, moved_at) = (now, Instant::now());
        }
        if moved_at.elapsed() > Duration::from_secs(2) {
            // Stuck threads cannot be joined: leave them, so the failure is reported.
            stop.store(true, Ordering::Relaxed);
            runtime.shutdown_background();
            panic!("the passes stopped: (propagation, resync) passes completed {now:?}, none for 2 s");
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    runtime.shutdown_timeout(Duration::from_secs(5));
    let (p, r) = progress();
    assert!(p > 2 && r > 2, "both passes ran: {p} propagation, {r} resync");
}

/// A first pass (no checkpoint) over many sources read each with a GET at the resync rate: 17
/// minutes at 10,000 sources. It now lists the ConfigMaps that are not snapshots in pages, one
/// token of the rate each, and hashes what each page delivers (docs/behaviour.md §7.8). A page over
/// its byte bound is asked again at half the size; a source the page shows at another
/// resourceVersion than the cache (written since) is read on its own; changes made while the
/// webhook was away are caught as before, with a write that holds only at the resourceVersion read.
#[tokio::test]
async fn a_first_pass_over_many_sources_lists_them_in_pages_instead_of_reading_each() {
    let big = "x".repeat(20 << 10);
    let n = 600;
    let names: Vec<String> = (0..n).map(|i| format!("s{i:03}")).collect();
    let mut sources: Vec<serde_json::Value> = names.iter().map(|name| source_holding(name, &big, &big)).collect();
    // Edited while the webhook was away: content no longer named by the head.
    for i in [7, 300, 599] {
        sources[i] = source_holding(&names[i], "changed", &big);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (cluster, state) = resync_world(&sources, &[("app", &refs)]);
    // Written again after the cache saw it: the list shows a resourceVersion the cache does not know.
    let mut later = source_holding(&names[42], &big, &big);
    later["metadata"]["resourceVersion"] = json!("9");
    cluster.insert(later);
    // Neither a snapshot nor an unreferenced ConfigMap is a source to re-hash.
    cluster
        .insert(json!({"metadata": {"namespace": "ns", "name": "unused", "uid": "u-unused", "resourceVersion": "1"}, "data": {"k": "v"}}));
    let ctx = ctx(&cluster, state, args(&[]));
    let calls = |c: &MemoryCluster| c.calls.lock().unwrap().clone();

    let mut st = ResyncState::default();
    rehash(&ctx, &mut st).await;
    let made = calls(&cluster);
    let lists = made.iter().filter(|c| *c == "list ConfigMap page").count();
    let gets: Vec<&String> = made.iter().filter(|c| c.starts_with("get ns/")).collect();
    // 600 sources of 20 KiB: 500 (over 8 MiB, refused), 250, then the remaining 350.
    assert_eq!(lists, 3, "{made:?}");
    assert_eq!(gets, ["get ns/s042"], "only the source written since the cache saw it is read on its own");
    let mut patched: Vec<&String> = made.iter().filter(|c| c.starts_with("patch ns/")).collect();
    patched.sort();
    assert_eq!(patched, ["patch ns/s007", "patch ns/s300", "patch ns/s599"], "the missed changes are caught");
    assert_eq!(st.verified.len(), n - 3, "every unchanged source is confirmed at its resourceVersion");

    // Nothing changed since: the next pass reads nothing.
    cluster.calls.lock().unwrap().clear();
    let edited: HashSet<&str> = ["s007", "s300", "s599"].into();
    // (The three touched sources are at a new resourceVersion now: the watch would deliver them.)
    for name in &edited {
        let obj = cluster.source("ns", &SourceId::configmap(*name)).unwrap();
        ctx.shared.state.write().apply_configmap(&obj);
    }
    ctx.shared.state.write().apply_configmap(&cluster.source("ns", &SourceId::configmap("s042")).unwrap());
    rehash(&ctx, &mut st).await;
    let again = calls(&cluster);
    assert!(!again.iter().any(|c| c == "list ConfigMap page"), "a few sources are read one by one: {again:?}");
    assert!(again.iter().filter(|c| c.starts_with("get ")).all(|c| edited.iter().any(|e| c.ends_with(e))), "{again:?}");
}

/// The touch of a missed change holds only at the resourceVersion it was read at: a write in
/// between (the webhook recording a new head) is never overwritten with the head from before it.
#[tokio::test]
async fn the_touch_of_a_missed_change_is_conditional_on_what_was_read() {
    let (cluster, state) = resync_world(&[source_holding("cfg", "2", "1")], &[("app", &["cfg"])]);
    let ctx = ctx(&cluster, state, args(&[]));
    let obj = cluster.source("ns", &SourceId::configmap("cfg")).unwrap();
    // Written after the read: the stored object moves on.
    let mut newer = source_holding("cfg", "3", "3");
    newer["metadata"]["resourceVersion"] = json!("2");
    cluster.insert(newer);
    let mut verified = HashMap::new();
    rehash_one(&ctx, &mut verified, "ns".into(), SourceId::configmap("cfg"), &[], &obj).await;
    let stored = cluster.source("ns", &SourceId::configmap("cfg")).unwrap();
    assert_eq!(stored["metadata"]["annotations"][names::HEAD], json!(content_hash("3")), "the newer head stays");
}

/// The list path's outage: the list fails (an expired continue token's 410, a lost permission, the
/// API server away), and the pass reads every pending source one by one instead, so a missed
/// change is still caught (docs/behaviour.md §7.8).
#[tokio::test]
async fn a_first_pass_whose_list_fails_reads_each_source_instead() {
    let names: Vec<String> = (0..70).map(|i| format!("s{i:02}")).collect();
    let mut sources: Vec<serde_json::Value> = names.iter().map(|name| source_holding(name, "1", "1")).collect();
    sources[13] = source_holding(&names[13], "2", "1");
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (cluster, state) = resync_world(&sources, &[("app", &refs)]);
    *cluster.fail.lock().unwrap() =
        Some(("list ConfigMap page", ApiError { code: Some(410), reason: "Expired".into(), message: "continue token too old".into() }));
    let ctx = ctx(&cluster, state, args(&[]));
    let mut st = ResyncState::default();
    rehash(&ctx, &mut st).await;
    let made = cluster.calls.lock().unwrap().clone();
    assert_eq!(made.iter().filter(|c| *c == "list ConfigMap page").count(), 1, "{made:?}");
    assert_eq!(made.iter().filter(|c| c.starts_with("get ns/")).count(), 70, "each source read on its own: {made:?}");
    assert!(made.iter().any(|c| c == "patch ns/s13"), "the missed change is caught: {made:?}");
    assert_eq!(st.verified.len(), 69);
}
