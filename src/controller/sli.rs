//! The config-rollout SLI (docs/operations.md "Metrics"): how long a source change takes from
//! being admitted to the last workload using the source being on the new content, once per
//! (source, head); and how many settled changes are still pending, and since when.
//!
//! "Admitted" is the change's `changed-at`, which the webhook writes on the API server's clock
//! when it first sees the new head (a change made while it was away is first seen at the resync
//! touch); "on the new content" is the pass in which propagation finds no workload behind on
//! it any more ([`super::propagate::Propagation::done`]): every workload was re-pinned by the webhook
//! as it admitted the trigger, which starts the rollout (pods becoming ready is not seen: the
//! cache keeps no workload status). The settle window is part of it, as users wait it too.
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
        Tracker { entries: HashMap::new(), cap, latest: Default::default() }
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
    }

    /// Takes one pass's decision at `now_ms` (the API server's time): `pending`, every change
    /// pending ([`super::propagate::Propagation::pending`]); `done`, those no workload is behind on.
    ///
    /// An entry goes when its source no longer has that change pending: recorded as propagated,
    /// deleted, out of the loops' scope, or superseded by a newer head (whose own entry starts
    /// then: the older content never reached every workload, so it has no sample). At [`CAP`],
    /// a new change is not followed (no sample, counted in [`Pass::untracked`]); the pending
    /// count and age come from the decision itself and stay whole.
    pub fn pass(&mut self, pending: &[(SourceKey, Change)], done: &[(String, SourceId, String)], now_ms: i64) -> Pass {
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
            }
        }
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
        let p = t.pass(&pending, &[], 1_005_000);
        assert_eq!(p, Pass::default());
        // Settled, workloads still behind: pending since it settled.
        let p = t.pass(&pending, &[], 1_070_000);
        assert_eq!((p.pending, p.oldest_pending, p.samples.len()), (1, Duration::from_secs(60), 0));
        // The last workload is on it: one sample, from the admission (settle window included).
        let p = t.pass(&pending, &[done("cfg", "b")], 1_072_500);
        assert_eq!((p.pending, p.samples.clone()), (0, vec![Duration::from_millis(72_500)]));
        // Done again while `propagated` is being written: no second sample.
        assert!(t.pass(&pending, &[done("cfg", "b")], 1_073_000).samples.is_empty());
        // Recorded as propagated: no longer pending, forgotten.
        assert_eq!(t.pass(&[], &[], 1_074_000), Pass::default());
        assert!(t.is_empty());
    }

    #[test]
    fn a_superseded_head_and_a_deleted_source_leave_no_entry_and_no_sample() {
        let mut t = Tracker::default();
        t.pass(&[(key("a"), change("1", 1_000)), (key("b"), change("1", 1_000))], &[], 2_000);
        assert_eq!(t.len(), 2);
        // `a` edited again before its workloads moved, `b` deleted.
        let pending = [(key("a"), change("2", 50_000))];
        t.pass(&pending, &[], 51_000);
        assert_eq!(t.len(), 1);
        // `done` for the old head (a stale decision) takes no sample; the new one is measured
        // from its own admission.
        assert!(t.pass(&pending, &[done("a", "1")], 52_000).samples.is_empty());
        assert_eq!(t.pass(&pending, &[done("a", "2")], 65_000).samples, [Duration::from_secs(15)]);
    }

    #[test]
    fn at_the_cap_new_changes_go_unmeasured_but_are_still_counted_pending() {
        let mut t = Tracker::with_cap(2);
        let pending: Vec<_> = ["a", "b", "c"].iter().map(|n| (key(n), change("h", 1_000))).collect();
        let p = t.pass(&pending, &[], 100_000);
        assert_eq!((t.len(), p.untracked, p.pending), (2, 1, 3), "pending counts every change, the map holds the cap");
        assert_eq!(p.oldest_pending, Duration::from_millis(100_000 - 11_000));
        // One finishes and leaves: the third is followed from then on, from its own admission.
        let rest = &pending[1..];
        t.pass(rest, &[], 101_000);
        assert_eq!(t.len(), 2);
        let all: Vec<_> = rest.iter().map(|(k, c)| (k.0.to_string(), k.1.clone(), c.head.clone())).collect();
        assert_eq!(t.pass(rest, &all, 102_000).samples, [Duration::from_millis(101_000); 2]);
    }

    #[test]
    fn an_unparsed_change_time_is_measured_from_when_it_was_first_seen() {
        let mut t = Tracker::default();
        let pending = [(key("cfg"), Change { due_ms: 10_000, ..change("b", 0) })];
        t.pass(&pending, &[], 5_000_000);
        assert_eq!(t.pass(&pending, &[done("cfg", "b")], 5_003_000).samples, [Duration::from_secs(3)]);
    }
}
