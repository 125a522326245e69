//! Signals: the logs and metrics operators read.

use std::sync::Arc;

use axum::http::StatusCode;
use confighistory::cache::Writer as _;
use confighistory::model::policy::Mode;
use serde_json::json;

use crate::common::{self, review, Logs, NS};
use crate::fixture::{configmap, deployment, in_namespace, snap, Fixture, A};

/// The value of one sample in a scrape (0 when absent).
fn sample(scrape: &str, series: &str) -> u64 {
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0)
}

/// Every log line of an admission, down to its effects' (the snapshot it creates), carries the
/// request's uid, kind, namespace, name and operation.
#[tokio::test]
async fn every_log_line_of_an_admission_carries_its_uid() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let f = Fixture::new().source("pricing-config", A);
    let mut r = review("Deployment", "apps", "v1", "CREATE", Some(&deployment("pricing:4.11", "pricing-config")), None);
    r["request"]["uid"] = json!("uid-of-the-span\"test");
    let a = f.post("/mutate", serde_json::to_vec(&r).unwrap()).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let lines = logs.lines();
    let created = lines.iter().find(|l| l.contains("created snapshot")).unwrap_or_else(|| panic!("{lines:#?}"));
    for field in [r#"uid="uid-of-the-span\"test""#, "kind=Deployment", "namespace=shop", "name=pricing", "operation=\"CREATE\""] {
        assert!(created.contains(field), "{field} missing from {created}");
    }
    // The decision's own summary line too.
    assert!(lines.iter().any(|l| l.contains("uid-of-the-span") && l.contains("reason=")), "{lines:#?}");
}

/// docs/behaviour.md §3: a namespace asking for a mode the admin refuses is logged, once (not per request).
#[tokio::test]
async fn a_refused_mode_label_is_logged_once_per_namespace() {
    let logs = Logs::default();
    let _guard = logs.capture();
    // Its own namespace: the once-only memory is process-wide and other tests use "shop".
    let ns = "signals-refused";
    let mut f = Fixture::new();
    f.policy.allowed_modes = vec![Mode::Rewrite];
    f.state.write().apply_namespace(&json!({"metadata": {"name": ns, "labels": {"confighistory.io/mode": "audit"}}}));
    for i in 0..3 {
        let r = in_namespace(review("ConfigMap", "", "v1", "CREATE", Some(&configmap(&format!("cm-{i}"), A)), None), ns);
        assert!(f.post("/mutate", serde_json::to_vec(&r).unwrap()).await.body["response"]["allowed"] == json!(true));
    }
    let warned: Vec<String> = logs.lines().into_iter().filter(|l| l.contains("asks for mode audit")).collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(warned[0].contains("WARN") && warned[0].contains(ns) && warned[0].contains("using rewrite"), "{}", warned[0]);
    // Another refused value is news: logged again, once.
    f.state.write().apply_namespace(&json!({"metadata": {"name": ns, "labels": {"confighistory.io/mode": "off"}}}));
    for _ in 0..2 {
        let r = in_namespace(review("ConfigMap", "", "v1", "CREATE", Some(&configmap("cm-x", A)), None), ns);
        f.post("/mutate", serde_json::to_vec(&r).unwrap()).await;
    }
    assert_eq!(logs.lines().iter().filter(|l| l.contains("asks for mode off")).count(), 1);
}

/// What audit mode lets through but enforce mode would refuse is counted (and logged); what
/// enforce mode refuses is counted as a decision with its reason.
#[tokio::test]
async fn audit_mode_violations_and_decision_reasons_are_counted() {
    let metrics = &confighistory::metrics::METRICS;
    let audit = "confighistory_audit_violations_total{kind=\"Deployment\"}";
    let denied = "confighistory_admission_requests_total{endpoint=\"validate\",kind=\"Deployment\",operation=\"CREATE\",decision=\"denied\",reason=\"mutable-config\"}";
    let before = metrics.render();
    let d = deployment("x:1", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).namespace_mode("audit");
    assert!(f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.allowed());
    let after = metrics.render();
    assert!(sample(&after, audit) > sample(&before, audit), "{after}");
    let f = Fixture::new().source("pricing-config", A).namespace_mode("enforce");
    assert!(!f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.allowed());
    let last = metrics.render();
    assert!(sample(&last, denied) > sample(&after, denied), "{last}");
}

/// docs/performance.md, "Admissions beside the controller's passes": an admission is answered while
/// a long pass holds the cache and a watch event waits to write it; it does not queue behind the
/// waiting writer (`cache::admission_read`).
#[tokio::test]
async fn an_admission_does_not_wait_behind_a_writer_waiting_for_a_pass() {
    let f = Fixture::new().source("pricing-config", A);
    let pass = f.state.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        confighistory::cache::pass(&pass, |_| {
            held_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(3));
        })
    });
    held_rx.recv().unwrap();
    let event = f.state.clone();
    let writer = std::thread::spawn(move || drop(confighistory::cache::write(&event)));
    // The writer is parked on the lock by now, for longer than it lets admissions' reads go
    // ahead of it: a pass, not admissions, keeps it out.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let started = std::time::Instant::now();
    let a = f.mutate_deployment("CREATE", &deployment("pricing:4.11", "pricing-config"), None).await;
    let took = started.elapsed();
    assert!(a.allowed());
    assert!(took < std::time::Duration::from_secs(1), "the admission waited {took:?} for the pass");
    reader.join().unwrap();
    writer.join().unwrap();
}

/// docs/performance.md, "Admissions beside the controller's passes": the webhook's reads of the
/// cache do not queue behind a waiting writer, so admissions on several threads whose reads
/// overlap without a gap could keep a watch event out of the cache for as long as they flood
/// (a tenant's big ConfigMap updates, each hashed under the read lock). A writer that has waited
/// past a short bound while no pass holds the cache makes new admissions queue behind it.
#[test]
fn a_watch_event_gets_in_while_admissions_flood_on_several_threads() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    let big = "x".repeat(512 * 1024);
    let f = Fixture::new().source("big", &[("blob", "small")]).workload(&deployment("x:1", &snap("big", &[("blob", "small")])));
    let old = configmap("big", &[("blob", &big)]);
    let new = configmap("big", &[("blob", &format!("{big}y"))]);
    let body = serde_json::to_vec(&review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).unwrap();
    let app = f.app();
    let (stop, admitted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (app, body, stop, admitted) = (app.clone(), body.clone(), stop.clone(), admitted.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    while !stop.load(Ordering::Relaxed) {
                        let a = common::post(&app, "/mutate", body.clone()).await;
                        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
        })
        .collect();
    while admitted.load(Ordering::Relaxed) < 4 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut worst = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let labels = json!({"metadata": {"name": NS, "labels": {"n": i.to_string()}}});
        confighistory::cache::write(&f.state).apply_namespace(&labels);
        worst = worst.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    senders.into_iter().for_each(|s| s.join().unwrap());
    assert!(worst < Duration::from_millis(500), "a watch event waited {worst:?} for the admissions' reads");
}
