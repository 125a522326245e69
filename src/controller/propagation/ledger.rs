//! What the propagation pass remembers between passes (docs/behaviour.md §7): the writes it made
//! while the cache catches up with them, the failures it waits out, the workloads it moved to each
//! change (for the source's Event) and the sources it read for their immutability. Pure
//! bookkeeping over `now`, so the pass's I/O ([`super::propagation_pass`]) only asks and tells it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::super::context::IN_FLIGHT;
use super::super::propagate::{Plan, WorkloadKey};
use super::super::ratelimit::Backoff;
use crate::cache::SourceKey;
use crate::model::ids::SourceId;

/// A change of a source: (namespace, source, head), as `propagate::Propagation::done` names it.
pub(crate) type ChangeKey = (String, SourceId, String);

/// A source of unknown immutability is read once a second at most, should the watch lag behind
/// the reads.
const READ_AGAIN: Duration = Duration::from_secs(1);

pub(crate) struct Ledger {
    /// Workloads patched recently, with the trigger value and when.
    in_flight: HashMap<WorkloadKey, (String, Instant)>,
    /// Changes whose propagated head was just written, while the cache catches up.
    recorded: HashMap<ChangeKey, Instant>,
    workload_backoff: Backoff<WorkloadKey>,
    source_backoff: Backoff<ChangeKey>,
    /// Workloads this replica moved to a change, for the source's Event.
    moved: HashMap<ChangeKey, usize>,
    /// Sources read for their immutability, and when.
    read_at: HashMap<SourceKey, Instant>,
}

impl Ledger {
    /// Failed writes are tried again after `base`, doubling up to `max`.
    pub(crate) fn new(base: Duration, max: Duration) -> Ledger {
        Ledger {
            in_flight: HashMap::new(),
            recorded: HashMap::new(),
            workload_backoff: Backoff::new(base, max),
            source_backoff: Backoff::new(base, max),
            moved: HashMap::new(),
            read_at: HashMap::new(),
        }
    }

    /// Leadership lost: what is in flight may be undone by the next leader's passes.
    pub(crate) fn lost_leadership(&mut self) {
        self.in_flight.clear();
    }

    /// Of the sources of unknown immutability (`unknown`, as the plan lists them), the ones to read
    /// now, `max` at most and none read in the last second; noted as read at `now`.
    pub(crate) fn reads(&mut self, unknown: &[SourceKey], max: usize, now: Instant) -> Vec<SourceKey> {
        self.read_at.retain(|k, at| unknown.contains(k) && now.saturating_duration_since(*at) < READ_AGAIN);
        let reads: Vec<SourceKey> = unknown.iter().filter(|k| !self.read_at.contains_key(*k)).take(max).cloned().collect();
        self.read_at.extend(reads.iter().map(|k| (k.clone(), now)));
        reads
    }

    /// Before recording the changes no workload is behind on (`done`): forgets the others, and
    /// recordings the cache has had time to show.
    pub(crate) fn start_recording(&mut self, done: &[ChangeKey], now: Instant) {
        self.recorded.retain(|k, at| done.contains(k) && now.saturating_duration_since(*at) < IN_FLIGHT);
        self.source_backoff.retain(|k| done.contains(k));
    }

    /// Whether to write `key`'s propagated head now: not just written, no failure to wait out.
    pub(crate) fn should_record(&self, key: &ChangeKey, now: Instant) -> bool {
        self.source_backoff.ready(key, now) && !self.recorded.contains_key(key)
    }

    /// `key`'s propagated head was written: how many workloads this replica moved to it, once
    /// (`None` when it moved none, or said so already).
    pub(crate) fn recorded(&mut self, key: &ChangeKey, now: Instant) -> Option<usize> {
        self.source_backoff.succeeded(key);
        self.recorded.insert(key.clone(), now);
        self.moved.remove(key)
    }

    /// The source is gone: nothing to record, nothing to retry.
    pub(crate) fn record_gone(&mut self, key: &ChangeKey) {
        self.source_backoff.succeeded(key);
    }

    /// Writing `key`'s propagated head failed: the delay before it is tried again.
    pub(crate) fn record_failed(&mut self, key: &ChangeKey, now: Instant) -> Duration {
        self.source_backoff.failed(key, now)
    }

    /// Before triggering `plans`: forgets workloads no longer planned, triggers the cache has had
    /// time to show, and moves counted for changes neither done nor planned any more.
    pub(crate) fn start_triggering(&mut self, plans: &[Plan], done: &[ChangeKey], now: Instant) {
        self.moved.retain(|k, _| done.contains(k) || plans.iter().any(|p| p.namespace == k.0 && p.trigger.get(&k.1) == Some(&k.2)));
        let planned: HashSet<WorkloadKey> = plans.iter().map(Plan::key).collect();
        self.in_flight.retain(|k, (_, at)| planned.contains(k) && now.saturating_duration_since(*at) < IN_FLIGHT);
        self.workload_backoff.retain(|k| planned.contains(k));
    }

    /// Whether to set `trigger` on the workload `key` now: not just set, no failure to wait out.
    pub(crate) fn should_trigger(&self, key: &WorkloadKey, trigger: &str, now: Instant) -> bool {
        self.in_flight.get(key).is_none_or(|(t, _)| t != trigger) && self.workload_backoff.ready(key, now)
    }

    /// `p`'s trigger (`trigger`) was set: in flight, and counted for each change it moves to.
    pub(crate) fn triggered(&mut self, p: &Plan, trigger: String, now: Instant) {
        let key = p.key();
        self.workload_backoff.succeeded(&key);
        self.in_flight.insert(key, (trigger, now));
        for (source, head) in &p.trigger {
            *self.moved.entry((p.namespace.clone(), source.clone(), head.clone())).or_default() += 1;
        }
    }

    /// Setting the trigger on `key` failed: whether it is the first failure in a row (the one
    /// reported), and the delay before it is tried again.
    pub(crate) fn trigger_failed(&mut self, key: &WorkloadKey, now: Instant) -> (bool, Duration) {
        let first = self.workload_backoff.attempts(key) == 0;
        (first, self.workload_backoff.failed(key, now))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::kinds::Kind;

    fn plan(name: &str, trigger: &[(&str, &str)]) -> Plan {
        Plan {
            kind: Kind::Deployment,
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            trigger: trigger.iter().map(|(s, h)| (SourceId::configmap(*s), h.to_string())).collect::<BTreeMap<_, _>>(),
            released: vec![],
            undone: vec![],
            unknown: vec![],
        }
    }

    fn change(source: &str, head: &str) -> ChangeKey {
        ("ns".into(), SourceId::configmap(source), head.into())
    }

    #[test]
    fn a_workload_triggered_is_not_triggered_again_with_the_same_value_while_in_flight() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(Duration::from_secs(1), Duration::from_secs(300));
        let p = plan("web", &[("cfg", "b")]);
        let plans = [p.clone()];
        ledger.start_triggering(&plans, &[], t0);
        assert!(ledger.should_trigger(&p.key(), &p.trigger_value(), t0));
        ledger.triggered(&p, p.trigger_value(), t0);
        let later = t0 + Duration::from_secs(1);
        ledger.start_triggering(&plans, &[], later);
        assert!(!ledger.should_trigger(&p.key(), &p.trigger_value(), later), "in flight: the cache has not shown it yet");
        assert!(ledger.should_trigger(&p.key(), "another value", later), "a newer change is not held back");
        let past = t0 + IN_FLIGHT + Duration::from_millis(1);
        ledger.start_triggering(&plans, &[], past);
        assert!(ledger.should_trigger(&p.key(), &p.trigger_value(), past), "still planned once in flight ran out: again");
        // Planned no more, then again: not in flight any more.
        ledger.triggered(&p, p.trigger_value(), past);
        ledger.start_triggering(&[], &[], past);
        ledger.start_triggering(&plans, &[], past);
        assert!(ledger.should_trigger(&p.key(), &p.trigger_value(), past));
    }

    #[test]
    fn a_recorded_change_counts_the_workloads_moved_to_it_once() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(Duration::from_secs(1), Duration::from_secs(300));
        let (a, b) = (plan("a", &[("cfg", "h2")]), plan("b", &[("cfg", "h2"), ("other", "h9")]));
        let plans = [a.clone(), b.clone()];
        ledger.start_triggering(&plans, &[], t0);
        ledger.triggered(&a, a.trigger_value(), t0);
        ledger.triggered(&b, b.trigger_value(), t0);
        // The workloads moved: the planner says the change is done.
        let done = [change("cfg", "h2")];
        ledger.start_recording(&done, t0);
        assert!(ledger.should_record(&done[0], t0));
        assert_eq!(ledger.recorded(&done[0], t0), Some(2));
        assert!(!ledger.should_record(&done[0], t0), "written: not again while the cache catches up");
        assert_eq!(ledger.recorded(&done[0], t0), None, "the Event is said once");
        // `other` is neither done nor planned any more: its count is forgotten.
        ledger.start_triggering(&[], &done, t0);
        assert_eq!(ledger.recorded(&change("other", "h9"), t0), None);
        // Past in flight, a change still listed as done is written again (its head did not show).
        let past = t0 + IN_FLIGHT + Duration::from_millis(1);
        ledger.start_recording(&done, past);
        assert!(ledger.should_record(&done[0], past));
    }

    #[test]
    fn a_failed_write_waits_out_its_backoff_and_a_trigger_reports_its_first_failure_only() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(Duration::from_secs(1), Duration::from_secs(300));
        let p = plan("web", &[("cfg", "b")]);
        let (key, trigger) = (p.key(), p.trigger_value());
        assert_eq!(ledger.trigger_failed(&key, t0), (true, Duration::from_secs(1)));
        assert!(!ledger.should_trigger(&key, &trigger, t0 + Duration::from_millis(999)));
        assert!(ledger.should_trigger(&key, &trigger, t0 + Duration::from_secs(1)));
        assert_eq!(ledger.trigger_failed(&key, t0 + Duration::from_secs(1)), (false, Duration::from_secs(2)));
        ledger.triggered(&p, trigger.clone(), t0 + Duration::from_secs(3));
        assert!(ledger.trigger_failed(&key, t0 + Duration::from_secs(30)).0, "a success starts the count again");

        let done = [change("cfg", "b")];
        ledger.start_recording(&done, t0);
        assert_eq!(ledger.record_failed(&done[0], t0), Duration::from_secs(1));
        assert!(!ledger.should_record(&done[0], t0));
        assert!(ledger.should_record(&done[0], t0 + Duration::from_secs(1)));
        // A change no longer done forgets its failures.
        ledger.start_recording(&[], t0);
        assert!(ledger.should_record(&done[0], t0));
    }

    #[test]
    fn sources_of_unknown_immutability_are_read_a_few_a_pass_and_not_again_within_a_second() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(Duration::from_secs(1), Duration::from_secs(300));
        let unknown: Vec<SourceKey> = ["a", "b", "c"].iter().map(|s| ("ns".into(), SourceId::configmap(*s))).collect();
        assert_eq!(ledger.reads(&unknown, 2, t0), unknown[..2].to_vec());
        assert_eq!(ledger.reads(&unknown, 2, t0 + Duration::from_millis(500)), unknown[2..].to_vec(), "the rest on the next pass");
        assert_eq!(ledger.reads(&unknown, 2, t0 + Duration::from_millis(900)), vec![], "each read once a second at most");
        assert_eq!(ledger.reads(&unknown, 8, t0 + Duration::from_millis(1000)), unknown[..2].to_vec());
        // A source no longer listed (known now) is forgotten: listed again, it is read at once.
        assert_eq!(ledger.reads(&unknown[..1], 8, t0 + Duration::from_millis(1100)), vec![]);
        assert_eq!(ledger.reads(&unknown[2..], 8, t0 + Duration::from_millis(1200)), unknown[2..].to_vec());
        assert_eq!(ledger.reads(&unknown[1..2], 8, t0 + Duration::from_millis(1300)), unknown[1..2].to_vec());
    }
}
