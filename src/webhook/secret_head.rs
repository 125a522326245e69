//! A source Secret's head, recorded after a write's answer from what the API server stored
//! (docs/behaviour.md §4a, §9a): the answer to a Secret write never carries a MAC of the
//! request's content, so the head comes from a fresh read once the write landed, and is written
//! only when it differs from the one recorded (with the read's resourceVersion as precondition).
//! One round at a time per Secret (a write during a round queues one more), a few reads at once
//! for all of them, so a flood of forged reviews costs a bounded number of reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tracing::Instrument;

use super::App;
use crate::context::Context;
use crate::model::ids::SourceId;
use crate::model::json::At;
use crate::model::names;

/// Reads of one round at most: the first at once, then after 50 ms, doubling (about 1.5 s in all).
pub const ATTEMPTS: u32 = 6;
const FIRST_WAIT: Duration = Duration::from_millis(50);
/// Reads and writes of all rounds in flight at once.
const CALLS_AT_ONCE: usize = 4;
/// Secrets with a round in flight at most; past it a write's head is left to the next write, a
/// workload's pin or the controller's re-hash (docs/behaviour.md §7.8).
const MAX_PENDING: usize = 4096;

/// A round queued behind the one in flight: its `after` ([`record`]).
type Queued = Option<Option<String>>;

/// The rounds in flight, by (namespace, Secret): each with the round queued behind it, if any.
pub struct Pending {
    rounds: Mutex<HashMap<(String, String), Queued>>,
    calls: tokio::sync::Semaphore,
}

impl Default for Pending {
    fn default() -> Pending {
        Pending { rounds: Mutex::default(), calls: tokio::sync::Semaphore::new(CALLS_AT_ONCE) }
    }
}

impl Pending {
    /// Whether no round is in flight (tests).
    pub fn idle(&self) -> bool {
        self.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
    }
}

/// Records the head of Secret `source` in `ns` in the background, once its resourceVersion moved
/// past `after` (the request's oldObject's when its content changed; `None`: as soon as it exists).
pub fn record(app: &App, ns: &str, source: &SourceId, after: Option<String>) {
    let key = (ns.to_owned(), source.name.clone());
    {
        let mut rounds = app.secret_heads.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(queued) = rounds.get_mut(&key) {
            *queued = Some(after);
            return;
        }
        if rounds.len() >= MAX_PENDING {
            tracing::debug!("too many Secret heads being recorded; this one is left to the next write");
            return;
        }
        rounds.insert(key.clone(), None);
    }
    let (ctx, pending, ns, source) = (app.ctx.clone(), app.secret_heads.clone(), ns.to_owned(), source.clone());
    tokio::spawn(
        async move {
            let mut after = after;
            loop {
                round(&ctx, &pending, &ns, &source, after.as_deref()).await;
                let mut rounds = pending.rounds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match rounds.get_mut(&key).and_then(Option::take) {
                    Some(next) => after = next,
                    None => {
                        rounds.remove(&key);
                        break;
                    }
                }
            }
        }
        .instrument(tracing::Span::current()),
    );
}

/// One round: read until the write landed, then record the head of what is stored if it differs.
async fn round(ctx: &Arc<Context>, pending: &Pending, ns: &str, source: &SourceId, after: Option<&str>) {
    let mut wait = FIRST_WAIT;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        let read = {
            let _call = pending.calls.acquire().await;
            ctx.cluster.get_source(ns, source).await
        };
        let obj = match read {
            Ok(Some(obj)) => obj,
            Ok(None) => continue, // a CREATE not stored yet (or none at all: a forged review)
            Err(e) => {
                tracing::debug!(error = %e, "could not read the Secret to record its head; retrying");
                continue;
            }
        };
        let version = obj.at("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        if after.is_some_and(|a| a == version) {
            continue; // the write has not landed yet (or never will: a forged review)
        }
        let keys = ctx.policy.secrets.keys.get();
        let Some(keys) = keys.as_deref() else { return };
        let Some((head, key_id)) = crate::admission::secret::head_to_record(&obj, ns, &source.name, keys, &ctx.policy.excluded_sources)
        else {
            return; // recorded already, or no source's content to name
        };
        let patch = json!({"metadata": {"resourceVersion": version, "annotations": {names::HEAD: head, names::KEY_ID: key_id}}});
        let written = {
            let _call = pending.calls.acquire().await;
            ctx.cluster.patch_source(ns, source, &patch).await
        };
        match written {
            Ok(()) => {
                tracing::debug!(source = %source, "recorded the Secret's head from its stored content");
                return;
            }
            Err(e) if e.is_conflict() => continue, // written again meanwhile: read it again
            Err(e) => {
                tracing::warn!(source = %source, error = %e, "could not record the Secret's head; its next write records it");
                return;
            }
        }
    }
    tracing::debug!(source = %source, "no stored write to record a Secret head for");
}
