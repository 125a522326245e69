//! docs/behaviour.md §5: snapshot name collisions, API server faults and dry runs.

use confighistory::cache::Writer as _;
use confighistory::cluster::{ApiError, MemoryCluster};
use confighistory::model::ids::{SourceId, SourceKind};
use confighistory::model::kinds::Kind;
use confighistory::model::snapshot;
use serde_json::{json, Value};

use crate::common::{review, NS};
use crate::fixture::{annotation, configmap, content, cronjob_and_job, deployment, pin_of, snap, Fixture, A, B};

#[tokio::test]
async fn a_squatted_snapshot_name_is_never_reused() {
    let f = Fixture::new().source("pricing-config", A);
    let squatter = configmap(&snap("pricing-config", A), &[("evil", "1")]);
    f.cluster.insert(squatter.clone());
    let d = deployment("pricing:4.11", "pricing-config");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    let next = snapshot::name("pricing-config", &content(A).hash(), 1);
    assert_eq!(pin_of(&a.patched(&d)).0, next);
    assert!(a.warnings().iter().any(|w| w.contains("taken")), "{:?}", a.warnings());
    assert_eq!(f.cluster.get(NS, &snap("pricing-config", A)).unwrap(), squatter, "squatter untouched");
    assert!(snapshot::validate(&f.cluster.get(NS, &next).unwrap()).is_ok());
}

/// The collision is said on the source too: one Event naming the squatted name and
/// the one the snapshot took, written after the answer; a dry run writes none (docs/behaviour.md §6.5).
#[tokio::test]
async fn a_collision_records_one_event_on_the_source_and_a_dry_run_none() {
    let f = Fixture::new().source("pricing-config", A);
    let squatted = snap("pricing-config", A);
    f.cluster.insert(configmap(&squatted, &[("evil", "1")]));
    let d = deployment("pricing:4.11", "pricing-config");
    let mut dry = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    dry["request"]["dryRun"] = json!(true);
    let a = f.send("/mutate", dry).await;
    assert!(a.warnings().iter().any(|w| w.contains("taken")), "the dry run meets the collision: {:?}", a.warnings());

    f.mutate_deployment("CREATE", &d, None).await;
    let next = snapshot::name("pricing-config", &content(A).hash(), 1);
    for _ in 0..200 {
        if !f.cluster.events().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let events = f.cluster.events();
    assert_eq!(events.len(), 1, "one Event, none for the dry run: {events:?}");
    let e = &events[0];
    assert_eq!((e.reason, e.action, e.warning), ("SnapshotCollision", "Snapshot", true));
    let r = &e.regarding;
    assert_eq!(
        (r.kind.as_str(), r.namespace.as_str(), r.name.as_str(), r.uid.as_str()),
        ("ConfigMap", NS, "pricing-config", "uid-pricing-config")
    );
    assert!(e.note.contains(&format!("{squatted} (")) && e.note.contains(&format!("the snapshot is {next}")), "{}", e.note);
}

#[tokio::test]
async fn api_server_failure_denies_with_a_retry_hint() {
    let f = Fixture::new().source("pricing-config", A);
    *f.cluster.fail.lock().unwrap() =
        Some(("", ApiError { code: None, reason: "Unavailable".into(), message: "connection refused".into() }));
    let a = f.mutate_deployment("CREATE", &deployment("x:1", "pricing-config"), None).await;
    assert!(!a.allowed());
    assert!(a.message().contains("connection refused") && a.message().contains("retrying is safe"), "{}", a.message());
}

fn unavailable() -> Option<(&'static str, ApiError)> {
    Some(("", ApiError { code: None, reason: "Unavailable".into(), message: "connection refused".into() }))
}

#[tokio::test]
async fn an_undo_goes_through_when_the_api_server_fails() {
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", B).workload(&rev2).revision(&rev1, 1).revision(&rev2, 2);
    let mut source = configmap("pricing-config", B);
    source["metadata"]["annotations"] = json!({"confighistory.io/head": content(B).hash()});
    f.state.write().apply_configmap(&source);
    *f.cluster.fail.lock().unwrap() = unavailable();
    let a = f.mutate_deployment("UPDATE", &rev1, Some(&rev2)).await;
    assert!(a.allowed(), "{}", a.message());
    let out = a.patched(&rev1);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A), "the revision's own snapshot, as sent");
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"), "held, judged from the caches");
    assert!(a.warnings().iter().any(|w| w.contains("left as sent") && w.contains("connection refused")), "{:?}", a.warnings());
    let v = f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&out), Some(&rev2))).await;
    assert!(v.allowed(), "{}", v.message());
    // The same failure denies a release, with a retry hint.
    let release = deployment("pricing:4.13", "pricing-config");
    assert!(!f.mutate_deployment("UPDATE", &release, Some(&rev2)).await.allowed());
}

#[tokio::test]
async fn an_undo_whose_snapshot_cannot_be_written_goes_through_as_sent() {
    // Revision 1 predates confighistory and has no adoption record: the undo goes to the head,
    // whose snapshot a full quota forbids.
    let rev1 = deployment("pricing:4.11", "pricing-config");
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", A).workload(&rev2).revision(&rev1, 1).revision(&rev2, 2);
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: configmaps=1".into() },
    ));
    let a = f.mutate_deployment("UPDATE", &rev1, Some(&rev2)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&rev1)), ("pricing-config".to_owned(), "pricing-config".to_owned()));
    assert!(a.warnings().iter().any(|w| w.contains("left as sent") && w.contains("exceeded quota")), "{:?}", a.warnings());
}

#[tokio::test]
async fn a_cronjobs_job_is_never_denied_when_the_api_server_fails() {
    let (cronjob, job) = cronjob_and_job(&snap("pricing-config", A));
    let f = Fixture::new().source("pricing-config", A).snapshot("pricing-config", A, &[]);
    f.state.write().apply_workload(Kind::CronJob, &cronjob);
    *f.cluster.fail.lock().unwrap() = unavailable();
    let m = f.send("/mutate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await;
    assert!(m.allowed(), "{}", m.message());
    let v = f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await;
    assert!(v.allowed(), "{}", v.message());
    assert!(v.warnings().iter().any(|w| w.contains("connection refused")), "{:?}", v.warnings());
}

#[tokio::test]
async fn quota_refusals_are_explained() {
    let f = Fixture::new().source("pricing-config", A);
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: count/configmaps=1".into() },
    ));
    let a = f.mutate_deployment("CREATE", &deployment("x:1", "pricing-config"), None).await;
    assert!(!a.allowed());
    assert!(a.message().contains("exceeded quota") && a.message().contains("ResourceQuota"), "{}", a.message());
}

#[tokio::test]
async fn a_full_quota_does_not_deny_a_release_whose_snapshot_exists() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    let f = Fixture::new().source("pricing-config", A).snapshot("pricing-config", A, &[]).workload(&old);
    // The API server's quota admission refuses any ConfigMap POST, even of a name that exists.
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: configmaps=1".into() },
    ));
    let new = deployment("pricing:4.12", "pricing-config");
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", A));
    assert!(!f.calls().iter().any(|c| c.starts_with("create")), "read before create: {:?}", f.calls());
}

/// A writer that records its own adoption between our read and our patch (another replica's
/// admission, the controller's resync): its record must survive ours.
struct RacingAdopter {
    inner: MemoryCluster,
    raced: std::sync::atomic::AtomicBool,
}

impl confighistory::cluster::Cluster for RacingAdopter {
    fn get_source<'a>(
        &'a self,
        ns: &'a str,
        id: &'a SourceId,
    ) -> futures::future::BoxFuture<'a, confighistory::cluster::Result<Option<Value>>> {
        self.inner.get_source(ns, id)
    }
    fn create_source<'a>(
        &'a self,
        ns: &'a str,
        kind: SourceKind,
        obj: &'a Value,
        dry_run: bool,
    ) -> futures::future::BoxFuture<'a, confighistory::cluster::Result<confighistory::cluster::Created>> {
        self.inner.create_source(ns, kind, obj, dry_run)
    }
    fn patch_source<'a>(
        &'a self,
        ns: &'a str,
        id: &'a SourceId,
        patch: &'a Value,
    ) -> futures::future::BoxFuture<'a, confighistory::cluster::Result<()>> {
        Box::pin(async move {
            if !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let mut other = self.inner.get(ns, &id.name).unwrap();
                other["metadata"]["annotations"][confighistory::model::names::ADOPTED] = json!("t-other");
                other["metadata"]["resourceVersion"] = json!("2");
                self.inner.insert(other);
            }
            self.inner.patch_source(ns, id, patch).await
        })
    }
}

#[tokio::test]
async fn adoption_records_written_concurrently_are_all_kept() {
    let c = content(A);
    let name = snapshot::name("pricing-config", &c.hash(), 0);
    let mut obj = snapshot::object(NS, "pricing-config", &name, &c, &[]);
    obj["metadata"]["resourceVersion"] = json!("1");
    let cluster = RacingAdopter { inner: MemoryCluster::default(), raced: Default::default() };
    cluster.inner.insert(obj);
    let (got, _) = confighistory::store::ensure(
        &cluster,
        NS,
        &SourceId::configmap("pricing-config"),
        &c,
        &["t-mine".to_owned()],
        &Default::default(),
        false,
    )
    .await
    .unwrap();
    assert_eq!(got, name);
    let adopted = annotation(&cluster.inner.get(NS, &name).unwrap(), confighistory::model::names::ADOPTED).unwrap();
    assert_eq!(adopted, "t-other,t-mine", "the concurrent record is kept");
}

#[tokio::test]
async fn dry_run_answers_the_same_and_writes_nothing() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let mut r = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    r["request"]["dryRun"] = json!(true);
    let a = f.send("/mutate", r).await;
    assert_eq!(pin_of(&a.patched(&d)).0, snap("pricing-config", A));
    assert!(f.cluster.get(NS, &snap("pricing-config", A)).is_none(), "no snapshot written");
    assert!(f.calls().iter().any(|c| c.contains("(dry run)")));
}
