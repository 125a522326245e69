//! The config-rollout SLI (docs/operations.md "Metrics"): how long a source change takes from
//! being admitted to the last workload using the source being on the new content, once per
//! (source, head); and how many settled changes are still pending, and since when.
//!
//! "Admitted" is the change's `changed-at`, which the webhook writes on the API server's clock
//! when it first sees the new head (a change made while it was away is first seen at the resync
//! touch); "on the new content" is the pass in which propagation finds no workload behind on
//! it any more ([`super::propagate::Propagation::done`]): every workload was re-pinned by the webhook
//! as it admitted the trigger, which starts the rollout. The settle window is part of it, as
//! users wait it too.
//!
//! A second sample follows the same change on to its pods: the pass in which every workload
//! running the new content says in its status that its rollout is complete (`model::rollout`,
//! as `kubectl rollout status` reads it). Only where that can be seen: a change used by a kind
//! whose status is not read (a Job, a registered kind) or by a StatefulSet or DaemonSet that
//! updates OnDelete gets no such sample, nor does one whose workloads all moved on (a newer
//! change, an undo) or that is not ready within [`READY_WITHIN`].
//!
//! A pure state machine over each pass's decision and the API server's time, so it is tested
//! with explicit times.

use std::collections::HashMap;
use std::time::Duration;

use super::propagate::Change;

use crate::cache::SourceKey;
use crate::model::ids::SourceId;

/// Changes followed at once. Each entry is a source key and a head (about 150 bytes); a
/// cluster with more changes pending at once than this is far past any propagation rate.
pub const CAP: usize = 10_000;

/// How long a change's pods are waited for after its last workload was re-pinned: the
/// histogram's last bucket. A rollout stuck longer (a crash loop) is an incident that
/// `kube-state-metrics` and `kubectl rollout status` show better than a late sample.
pub const READY_WITHIN: Duration = Duration::from_secs(3600);

/// What the workloads running a change's content say of their pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pods {
    /// Every one has rolled it out.
    Ready,
    /// Some are still rolling it out.
    Rolling,
    /// It cannot be seen (a kind whose status is not read, an OnDelete strategy), or no
    /// workload runs it any more.
    Unseen,
}

/// What `state` says of the pods of the workloads in `ns` that run `source`'s content `head`.
pub fn pods_on(state: &crate::cache::State, ns: &str, source: &SourceId, head: &str) -> Pods {
    let mut out = Pods::Unseen;
    for w in state.users_of_content(ns, source, head).filter(|w| !w.deleting) {
        match w.rolled_out {
            None => return Pods::Unseen,
            Some(false) => out = Pods::Rolling,
            Some(true) if out == Pods::Unseen => out = Pods::Ready,
            Some(true) => {}
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    head: String,
    /// When the change was admitted (ms since the epoch, the API server's clock).
    observed_ms: i64,
    /// Its sample was taken: not again while the source records this head as pending.
    recorded: bool,
}

/// What one pass measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    /// A sample of the SLI per change whose last workload is now on it.
    pub samples: Vec<Duration>,
    /// A sample per change whose workloads now all run it on ready pods.
    pub ready: Vec<Duration>,
    /// Settled changes (past their settle window) not every workload is on yet.
    pub pending: usize,
    /// How long ago the oldest of them settled (zero when none is pending).
    pub oldest_pending: Duration,
    /// Pending changes not followed because [`CAP`] changes are: they get no sample.
    pub untracked: usize,
}

/// The changes followed, by source.
#[derive(Debug)]
pub struct Tracker {
    entries: HashMap<SourceKey, Entry>,
    /// Changes every workload is on, waited for until their pods are: (head, admitted at, last
    /// workload on it at), in ms of the API server's clock.
    rolling: HashMap<SourceKey, (String, i64, i64)>,
    cap: usize,
    /// Samples taken so far, the latest last (a few kept, for tests and debugging).
    latest: std::collections::VecDeque<Duration>,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker::with_cap(CAP)
    }
}

impl Tracker {
    pub fn with_cap(cap: usize) -> Tracker {
        Tracker { entries: HashMap::new(), rolling: HashMap::new(), cap, latest: Default::default() }
    }

    /// Changes followed now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The latest samples taken, oldest first (at most 16).
    pub fn latest(&self) -> impl Iterator<Item = &Duration> {
        self.latest.iter()
    }

    /// Forgets everything (leadership lost: the next leader measures from the changes' own
    /// `changed-at`, so nothing is lost but a sample this replica was about to take).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.rolling.clear();
    }

    /// Changes whose pods are waited for now.
    pub fn rolling(&self) -> usize {
        self.rolling.len()
    }

    /// Takes one pass's decision at `now_ms` (the API server's time): `pending`, every change
    /// pending ([`super::propagate::Propagation::pending`]); `done`, those no workload is behind on.
    ///
    /// An entry goes when its source no longer has that change pending: recorded as propagated,
    /// deleted, out of the loops' scope, or superseded by a newer head (whose own entry starts
    /// then: the older content never reached every workload, so it has no sample). At [`CAP`],
    /// a new change is not followed (no sample, counted in [`Pass::untracked`]); the pending
    /// count and age come from the decision itself and stay whole.
    ///
    /// `pods` says what the workloads on a change say of their pods ([`pods_on`]): a change whose
    /// last workload is on it is followed on until they are all ready ([`Pass::ready`]).
    pub fn pass(
        &mut self,
        pending: &[(SourceKey, Change)],
        done: &[(String, SourceId, String)],
        now_ms: i64,
        pods: impl Fn(&SourceKey, &str) -> Pods,
    ) -> Pass {
        let mut out = Pass::default();
        let current: HashMap<&SourceKey, &Change> = pending.iter().map(|(k, c)| (k, c)).collect();
        self.entries.retain(|k, e| current.get(k).is_some_and(|c| c.head == e.head));
        for (key, change) in pending {
            if self.entries.contains_key(key) {
                continue;
            }
            if self.entries.len() >= self.cap {
                out.untracked += 1;
                continue;
            }
            // A `changed-at` that does not parse reads as 0: measured from now instead.
            let observed_ms = if change.changed_ms > 0 { change.changed_ms } else { now_ms };
            self.entries.insert(key.clone(), Entry { head: change.head.clone(), observed_ms, recorded: false });
        }
        for (ns, source, head) in done {
            let key = (ns.as_str().into(), source.clone());
            if let Some(e) = self.entries.get_mut(&key).filter(|e| e.head == *head && !e.recorded) {
                e.recorded = true;
                out.samples.push(Duration::from_millis(now_ms.saturating_sub(e.observed_ms).max(0) as u64));
                if self.rolling.len() < self.cap || self.rolling.contains_key(&key) {
                    self.rolling.insert(key, (head.clone(), e.observed_ms, now_ms));
                }
            }
        }
        let within = i64::try_from(READY_WITHIN.as_millis()).unwrap_or(i64::MAX);
        self.rolling.retain(|key, (head, observed_ms, on_ms)| match pods(key, head) {
            Pods::Ready => {
                out.ready.push(Duration::from_millis(now_ms.saturating_sub(*observed_ms).max(0) as u64));
                false
            }
            Pods::Rolling => now_ms.saturating_sub(*on_ms) < within,
            Pods::Unseen => false,
        });
        let is_done = |(ns, id): &SourceKey, head: &str| done.iter().any(|(n, s, h)| n.as_str() == ns.as_str() && s == id && h == head);
        let mut oldest_ms = 0;
        for (_, change) in pending.iter().filter(|(k, c)| c.due_ms <= now_ms && !is_done(k, &c.head)) {
            out.pending += 1;
            oldest_ms = oldest_ms.max(now_ms - change.due_ms);
        }
        out.oldest_pending = Duration::from_millis(oldest_ms.max(0) as u64);
        self.latest.extend(&out.samples);
        while self.latest.len() > 16 {
            self.latest.pop_front();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Writer;

    fn unseen(_: &SourceKey, _: &str) -> Pods {
        Pods::Unseen
    }

    fn change(head: &str, changed_ms: i64) -> Change {
        Change { head: head.into(), changed_ms, due_ms: changed_ms + 10_000, versioned: true, known_mutable: true }
    }

    fn key(name: &str) -> SourceKey {
        ("ns".into(), SourceId::configmap(name))
    }

    fn done(name: &str, head: &str) -> (String, SourceId, String) {
        ("ns".into(), SourceId::configmap(name), head.into())
    }

    #[test]
    fn a_change_is_measured_once_from_its_admission_to_its_last_workload() {
        let mut t = Tracker::default();
        let pending = [(key("cfg"), change("b", 1_000_000))];
        // Inside the settle window: nothing pending yet, nothing measured.
        let p = t.pass(&pending, &[], 1_005_000, unseen);
        assert_eq!(p, Pass::default());
        // Settled, workloads still behind: pending since it settled.
        let p = t.pass(&pending, &[], 1_070_000, unseen);
        assert_eq!((p.pending, p.oldest_pending, p.samples.len()), (1, Duration::from_secs(60), 0));
        // The last workload is on it: one sample, from the admission (settle window included).
        let p = t.pass(&pending, &[done("cfg", "b")], 1_072_500, unseen);
        assert_eq!((p.pending, p.samples.clone()), (0, vec![Duration::from_millis(72_500)]));
        // Done again while `propagated` is being written: no second sample.
        assert!(t.pass(&pending, &[done("cfg", "b")], 1_073_000, unseen).samples.is_empty());
        // Recorded as propagated: no longer pending, forgotten.
        assert_eq!(t.pass(&[], &[], 1_074_000, unseen), Pass::default());
        assert!(t.is_empty());
    }

    #[test]
    fn a_superseded_head_and_a_deleted_source_leave_no_entry_and_no_sample() {
        let mut t = Tracker::default();
        t.pass(&[(key("a"), change("1", 1_000)), (key("b"), change("1", 1_000))], &[], 2_000, unseen);
        assert_eq!(t.len(), 2);
        // `a` edited again before its workloads moved, `b` deleted.
        let pending = [(key("a"), change("2", 50_000))];
        t.pass(&pending, &[], 51_000, unseen);
        assert_eq!(t.len(), 1);
        // `done` for the old head (a stale decision) takes no sample; the new one is measured
        // from its own admission.
        assert!(t.pass(&pending, &[done("a", "1")], 52_000, unseen).samples.is_empty());
        assert_eq!(t.pass(&pending, &[done("a", "2")], 65_000, unseen).samples, [Duration::from_secs(15)]);
    }

    #[test]
    fn at_the_cap_new_changes_go_unmeasured_but_are_still_counted_pending() {
        let mut t = Tracker::with_cap(2);
        let pending: Vec<_> = ["a", "b", "c"].iter().map(|n| (key(n), change("h", 1_000))).collect();
        let p = t.pass(&pending, &[], 100_000, unseen);
        assert_eq!((t.len(), p.untracked, p.pending), (2, 1, 3), "pending counts every change, the map holds the cap");
        assert_eq!(p.oldest_pending, Duration::from_millis(100_000 - 11_000));
        // One finishes and leaves: the third is followed from then on, from its own admission.
        let rest = &pending[1..];
        t.pass(rest, &[], 101_000, unseen);
        assert_eq!(t.len(), 2);
        let all: Vec<_> = rest.iter().map(|(k, c)| (k.0.to_string(), k.1.clone(), c.head.clone())).collect();
        assert_eq!(t.pass(rest, &all, 102_000, unseen).samples, [Duration::from_millis(101_000); 2]);
    }

    #[test]
    fn a_change_is_measured_on_to_its_pods_ready_where_they_can_be_seen() {
        use std::cell::RefCell;
        let mut t = Tracker::default();
        let pods: RefCell<HashMap<String, Pods>> = RefCell::new(HashMap::new());
        let look = |k: &SourceKey, head: &str| *pods.borrow().get(&format!("{}@{head}", k.1.name)).unwrap_or(&Pods::Unseen);
        let pending = [(key("cfg"), change("b", 1_000_000)), (key("job-cfg"), change("b", 1_000_000))];
        pods.borrow_mut().insert("cfg@b".into(), Pods::Rolling);
        t.pass(&pending, &[], 1_011_000, look);
        // Every workload re-pinned: the first sample; the pods still rolling, the second waits.
        let p = t.pass(&pending, &[done("cfg", "b"), done("job-cfg", "b")], 1_012_000, look);
        assert_eq!((p.samples.len(), p.ready.len(), t.rolling()), (2, 0, 1), "job-cfg's pods cannot be seen: not followed");
        assert!(t.pass(&pending, &[done("cfg", "b")], 1_030_000, look).ready.is_empty());
        // Recorded as propagated (no longer pending): the pods are still followed.
        assert!(t.pass(&[], &[], 1_040_000, look).ready.is_empty());
        pods.borrow_mut().insert("cfg@b".into(), Pods::Ready);
        let p = t.pass(&[], &[], 1_045_000, look);
        assert_eq!(p.ready, [Duration::from_secs(45)], "from the admission to the last pod ready");
        assert_eq!((t.rolling(), t.pass(&[], &[], 1_046_000, look).ready.len()), (0, 0), "once");

        // Stuck past READY_WITHIN after its last workload was on it: dropped, no sample.
        let pending = [(key("slow"), change("c", 2_000_000))];
        pods.borrow_mut().insert("slow@c".into(), Pods::Rolling);
        t.pass(&pending, &[done("slow", "c")], 2_020_000, look);
        let end = 2_020_000 + READY_WITHIN.as_millis() as i64;
        t.pass(&[], &[], end - 1, look);
        assert_eq!(t.rolling(), 1);
        assert!(t.pass(&[], &[], end, look).ready.is_empty());
        assert_eq!(t.rolling(), 0);
        // Leadership lost: nothing followed.
        t.pass(&[(key("cfg"), change("d", 3_000_000))], &[done("cfg", "d")], 3_020_000, |_: &SourceKey, _: &str| Pods::Rolling);
        assert_eq!(t.rolling(), 1);
        t.clear();
        assert_eq!(t.rolling(), 0);
    }

    /// What the cache's records say: the workloads on a content's snapshots, by their status.
    #[test]
    fn the_pods_on_a_change_are_read_from_the_workloads_running_its_snapshots() {
        use crate::cache::State;
        use crate::model::kinds::Kind;
        use crate::model::snapshot;
        use serde_json::json;
        let content = snapshot::Content::from_object(&json!({"data": {"k": "b"}}));
        let (hash, name) = (content.hash(), snapshot::name("cfg", &content.hash(), 0));
        let mut state = State::default();
        state.apply_configmap(&snapshot::object("ns", "cfg", &name, &content, &[]));
        let workload = |kind: &str, wname: &str, generation: i64, status: serde_json::Value| {
            json!({"metadata": {"namespace": "ns", "name": wname, "uid": format!("uid-{wname}"), "generation": generation},
                   "kind": kind, "spec": {"replicas": 1, "template": {"spec": {"volumes": [{"name": "c", "configMap": {"name": name}}]}}},
                   "status": status})
        };
        let done = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
        let cfg = SourceId::configmap("cfg");
        assert_eq!(pods_on(&state, "ns", &cfg, &hash), Pods::Unseen, "no workload runs it");
        state.apply_workload(Kind::Deployment, &workload("Deployment", "web", 2, done.clone()));
        assert_eq!(pods_on(&state, "ns", &cfg, &hash), Pods::Ready);
        state.apply_workload(Kind::Deployment, &workload("Deployment", "api", 3, done.clone()));
        assert_eq!(pods_on(&state, "ns", &cfg, &hash), Pods::Rolling, "api's controller has not seen its new template yet");
        assert_eq!(pods_on(&state, "ns", &cfg, "another-hash"), Pods::Unseen);
        // A Job on it: its pods cannot be told ready from the status read here.
        state.apply_workload(Kind::Job, &workload("Job", "once", 1, json!({})));
        assert_eq!(pods_on(&state, "ns", &cfg, &hash), Pods::Unseen);
    }

    #[test]
    fn an_unparsed_change_time_is_measured_from_when_it_was_first_seen() {
        let mut t = Tracker::default();
        let pending = [(key("cfg"), Change { due_ms: 10_000, ..change("b", 0) })];
        t.pass(&pending, &[], 5_000_000, unseen);
        assert_eq!(t.pass(&pending, &[done("cfg", "b")], 5_003_000, unseen).samples, [Duration::from_secs(3)]);
    }
}
