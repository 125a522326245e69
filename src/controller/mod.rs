//! Controller loops (docs/behaviour.md §7–9): propagation, adoption, repair and garbage collection.
//! One replica runs them at a time ([`leader`]); every write is idempotent, so a leader change
//! half-way loses and duplicates nothing.
//!
//! The loops read the watch cache ([`crate::cache::State`]) that the admission server keeps, and
//! decide with pure functions ([`propagate::due_propagations`], [`adopt::decide`], [`gc::plan`]);
//! each loop's I/O around them is a file of its own, beside its planner:
//! - every 250 ms (the cache is event-driven, so this is the reaction time): propagation
//!   ([`propagation`], planned by [`propagate`]);
//! - every resync interval: re-hash referenced sources ([`rehash`]: rate-limited GETs; a stale
//!   head gets a no-op touch that the webhook records as a change first seen now), adoption and
//!   repair ([`resync`], planned by [`adopt`]);
//! - every GC interval: a sweep of every namespace holding snapshots, from fresh lists
//!   ([`gc_loop`], planned by [`gc`]).
//!
//! What they share: [`context`] (the loops' [`Ctx`] and [`Error`]) and [`shared`] (the trigger,
//! Events, immutability reads). This file starts them.

use std::sync::Arc;

use crate::cli::ControllerArgs;
use crate::cluster::Cluster;
use crate::context::Context;
use crate::model::kinds::Registry;

pub mod adopt;
pub mod checkpoint;
pub mod context;
pub mod gc;
pub mod gc_loop;
pub mod leader;
pub mod propagate;
pub mod propagation;
pub mod ratelimit;
pub mod rehash;
pub mod resync;
pub mod shared;
pub mod sli;

pub use context::{Ctx, Error, Result};
pub use gc_loop::run_gc_command;
pub use rehash::{LIST_AT_LEAST, LIST_PAGE_BYTES, LIST_PAGE_MAX};

/// The running loops, for a clean shutdown.
#[derive(Clone, Default)]
pub struct Handle(Arc<std::sync::OnceLock<Arc<Ctx>>>);

impl Handle {
    /// Gives the Lease up if this replica leads, so another one takes over at once.
    pub async fn shutdown(&self) {
        if let Some(ctx) = self.0.get() {
            release(ctx).await;
        }
    }
}

/// Starts the controller loops in the background; `kinds` is the registry the runtime resolved
/// once at start.
pub fn spawn(
    client: kube::Client,
    shared: Arc<Context>,
    cluster: Arc<dyn Cluster>,
    args: ControllerArgs,
    kinds: &'static Registry,
) -> Handle {
    let handle = Handle::default();
    let cell = handle.0.clone();
    tokio::spawn(async move {
        match start(client, shared, cluster, args, kinds).await {
            Ok(ctx) => {
                let _ = cell.set(ctx);
            }
            Err(e) => tracing::error!(error = %e, "controller loops did not start"),
        }
    });
    handle
}

/// Builds the shared context, starts the election and the loops; returns the context. `client`
/// and `cluster` are the loops' own (`cluster::calls::counted`: their calls are counted as the
/// controller's, docs/operations.md "Metrics"); the cache and policy are `shared`'s.
pub async fn start(
    client: kube::Client,
    shared: Arc<Context>,
    cluster: Arc<dyn Cluster>,
    args: ControllerArgs,
    kinds: &'static Registry,
) -> Result<Arc<Ctx>> {
    let identity = leader::identity();
    let lease_ns = args.leader_election_namespace.clone().unwrap_or_else(|| "confighistory".into());
    let mut ctx = Ctx::new(client.clone(), shared, args.clone(), kinds, identity.clone(), leader::Leadership::default())?;
    ctx.cluster = cluster;
    let ctx = Arc::new(ctx);
    let config = leader::Config::new(&lease_ns, &args.lease_name, identity);
    tracing::info!(identity = %config.identity, lease = %format!("{lease_ns}/{}", args.lease_name), "controller: running leader election");
    tokio::spawn(leader::run(client.clone(), config.clone(), ctx.leadership.clone()));
    tokio::spawn(propagation::propagation_loop(ctx.clone()));
    tokio::spawn(resync::resync_loop(ctx.clone()));
    tokio::spawn(gc_loop::gc_loop(ctx.clone()));
    Ok(ctx)
}

/// Gives the Lease up (on shutdown), so another replica takes over without waiting for expiry.
pub async fn release(ctx: &Ctx) {
    if ctx.leadership.resign() {
        leader::release(ctx.client.clone(), &leader::Config::new(&ctx.lease_namespace(), &ctx.args.lease_name, ctx.identity.clone())).await;
    }
}

#[cfg(test)]
mod tests;
