//! Admission places for API-bound work, shared fairly between namespaces (docs/behaviour.md §9a),
//! and the gate through which a request being decided takes one.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Admission places for API-bound work, shared fairly between namespaces: any namespace may
/// take a free place, but while requests wait, a freed place goes first to the oldest waiter
/// whose namespace holds fewer than [`Places::share`], so one namespace's flood queues behind
/// itself rather than in front of everyone (docs/behaviour.md §9a).
pub struct Places {
    sched: Mutex<Sched>,
    share: usize,
}

#[derive(Default)]
struct Sched {
    free: usize,
    held: std::collections::HashMap<String, usize>,
    queue: std::collections::VecDeque<Waiter>,
}

struct Waiter {
    namespace: String,
    grant: tokio::sync::oneshot::Sender<Place>,
}

/// One place, given back when dropped.
pub struct Place {
    places: Arc<Places>,
    namespace: String,
}

impl Places {
    /// `total` places; a namespace is served first while it holds fewer than half of them.
    pub fn new(total: usize) -> Arc<Places> {
        let total = total.max(1);
        Arc::new(Places { sched: Mutex::new(Sched { free: total, ..Sched::default() }), share: total.div_ceil(2) })
    }

    /// How many places a namespace holds before others waiting are served first.
    pub fn share(&self) -> usize {
        self.share
    }

    /// A place for a request of `namespace` ("" for cluster-scoped), when one is free and no
    /// one waits, else once the queue gives it one.
    pub async fn take(self: &Arc<Places>, namespace: &str) -> Place {
        let waiting = {
            let mut sched = self.sched.lock().expect("places lock");
            if sched.free > 0 && sched.queue.is_empty() {
                sched.free -= 1;
                *sched.held.entry(namespace.to_owned()).or_default() += 1;
                None
            } else {
                let (grant, granted) = tokio::sync::oneshot::channel();
                sched.queue.push_back(Waiter { namespace: namespace.to_owned(), grant });
                Some(granted)
            }
        };
        match waiting {
            None => Place { places: self.clone(), namespace: namespace.to_owned() },
            Some(granted) => granted.await.expect("a waiter is granted or dropped with its place"),
        }
    }

    /// Places held by `namespace` now.
    pub fn held(&self, namespace: &str) -> usize {
        self.sched.lock().expect("places lock").held.get(namespace).copied().unwrap_or(0)
    }

    fn give_back(self: &Arc<Places>, namespace: &str) {
        let mut grants = Vec::new();
        {
            let mut sched = self.sched.lock().expect("places lock");
            if let Some(n) = sched.held.get_mut(namespace) {
                *n -= 1;
                if *n == 0 {
                    sched.held.remove(namespace);
                }
            }
            sched.free += 1;
            while sched.free > 0 && !sched.queue.is_empty() {
                // The oldest waiter whose namespace is under its share; else the oldest.
                let under = sched.queue.iter().position(|w| sched.held.get(&w.namespace).copied().unwrap_or(0) < self.share);
                let waiter = sched.queue.remove(under.unwrap_or(0)).expect("a waiter");
                if waiter.grant.is_closed() {
                    continue; // gave up waiting (its deadline passed)
                }
                sched.free -= 1;
                *sched.held.entry(waiter.namespace.clone()).or_default() += 1;
                grants.push(waiter);
            }
        }
        // Outside the lock: a place whose waiter gave up meanwhile comes back through Drop.
        for waiter in grants {
            let place = Place { places: self.clone(), namespace: waiter.namespace };
            let _ = waiter.grant.send(place);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.places.give_back(&self.namespace);
    }
}

tokio::task_local! {
    /// The places of the request being decided on this task, for work that calls the API
    /// server ([`api_place`]); absent when the router is driven without [`crate::webhook::serve::limited`].
    static GATE: Gate;
}

/// What a request decided under [`crate::webhook::serve::limited`] needs to take a place, and how long
/// it waited for one.
#[derive(Clone)]
pub struct Gate {
    places: Arc<Places>,
    wait: Arc<Mutex<Wait>>,
}

/// Whether a request asked for a place, and how long it waited.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Wait {
    /// Decided from memory: never asked.
    #[default]
    NotAsked,
    /// Still waiting, since then.
    Waiting(Instant),
    Got(Duration),
}

impl Gate {
    pub fn new(places: Arc<Places>) -> Gate {
        Gate { places, wait: Arc::default() }
    }

    /// Runs `f` (the request's handler) with this gate for [`api_place`].
    pub async fn scope<F: Future>(&self, f: F) -> F::Output {
        GATE.scope(self.clone(), f).await
    }

    pub fn wait(&self) -> Wait {
        *self.wait.lock().expect("wait lock")
    }
}

/// A place for work that calls the API server, taken by the request being decided on this task
/// (fairly by its `namespace`, "" for cluster-scoped, as the decision parsed it: no second
/// look at the body); `None` outside [`crate::webhook::serve::limited`] (tests, tools), unlimited.
/// Decisions from memory never take one, so they never queue behind API-bound ones.
pub async fn api_place(namespace: &str) -> Option<Place> {
    let gate = GATE.try_with(Gate::clone).ok()?;
    let asked = Instant::now();
    *gate.wait.lock().expect("wait lock") = Wait::Waiting(asked);
    let place = gate.places.take(namespace).await;
    *gate.wait.lock().expect("wait lock") = Wait::Got(asked.elapsed());
    Some(place)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_place_goes_first_to_a_namespace_under_its_share() {
        let places = Places::new(2);
        let (a1, a2) = (places.take("a").await, places.take("a").await);
        assert_eq!(places.held("a"), 2);
        // a's third waits first, then b's.
        let (p, q) = (places.clone(), places.clone());
        let a3 = tokio::spawn(async move { p.take("a").await });
        tokio::task::yield_now().await;
        let b1 = tokio::spawn(async move { q.take("b").await });
        tokio::task::yield_now().await;
        drop(a1);
        let b1 = tokio::time::timeout(Duration::from_secs(1), b1).await.expect("b served first").unwrap();
        assert!(!a3.is_finished(), "a, at its share, waits while b is served");
        assert_eq!((places.held("a"), places.held("b")), (1, 1));
        drop(b1);
        let a3 = tokio::time::timeout(Duration::from_secs(1), a3).await.expect("then a").unwrap();
        drop((a2, a3));
        assert_eq!(places.held("a"), 0);
        assert!(places.sched.lock().unwrap().held.is_empty(), "no namespace kept once it holds none");
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_loses_no_place() {
        let places = Places::new(1);
        let held = places.take("a").await;
        let p = places.clone();
        let gave_up = tokio::time::timeout(Duration::from_millis(20), async move { p.take("b").await }).await;
        assert!(gave_up.is_err());
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(1), places.take("c")).await.expect("the place came back");
        drop(again);
        assert_eq!(places.sched.lock().unwrap().free, 1);
    }
}
