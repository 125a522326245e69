//! The GC loop (docs/behaviour.md §8): every GC interval, a sweep of every namespace holding
//! snapshots ([`gc::sweep_namespace`], which [`gc::plan`] decides), from fresh lists; and
//! `confighistory gc`, the same sweep once, printing every verdict.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::{wait_synced, Ctx, Error, Result};
use super::ratelimit::Limiter;
use super::{gc, propagate};
use crate::cache;
use crate::cluster::Cluster;
use crate::metrics::METRICS;
use crate::model::selector::Selector;
use crate::model::sourcekinds::Naming;

pub(crate) async fn gc_loop(ctx: Arc<Ctx>) {
    wait_synced(&ctx).await;
    let interval = Duration::from_secs(ctx.args.gc_interval.max(1));
    let settings = gc::Settings { keep: ctx.args.gc_keep, grace: Duration::from_secs(ctx.args.gc_grace) };
    loop {
        tokio::time::sleep(interval).await;
        if !ctx.leadership.is_leader() {
            continue;
        }
        gc_pass(&ctx, settings).await;
    }
}

/// One sweep of every namespace holding snapshots (from the cache) that GC may act in; Secret
/// snapshots too where the loops act on Secrets ([`propagate::kinds_in`]).
pub(crate) async fn gc_pass(ctx: &Ctx, settings: gc::Settings) {
    let start = Instant::now();
    let keys = ctx.shared.policy.secrets.keys.get();
    let keys = keys.as_deref();
    let namespaces: Vec<(String, bool)> = cache::pass(&ctx.shared.state, |state| {
        let policy = &ctx.shared.policy;
        let mut v: Vec<(String, bool)> = state
            .sources()
            .filter(|((ns, id), cm)| propagate::kinds_in(state, policy, ns).contains(id.kind) && cm.snapshot_of(&id.name).is_some())
            .map(|((ns, _), _)| ns.to_string())
            .filter(|ns| gc_namespace_allowed(state, policy, &ctx.selector, ns))
            .map(|ns| {
                let secrets = propagate::kinds_in(state, policy, &ns).has_opt_in();
                (ns, secrets)
            })
            .collect();
        v.sort();
        v.dedup();
        v
    });
    let (mut deleted, mut total) = (0, 0);
    for (ns, secrets) in namespaces {
        if !ctx.leadership.is_leader() {
            break;
        }
        let keys = keys.filter(|_| secrets);
        // At the resync rate: a sweep lists each namespace's snapshots in full, and 1,000 of them
        // back to back took the API server and this replica from the admissions beside them
        // (docs/performance.md, "Scale on a real cluster").
        Limiter::acquire(&ctx.reads, &ns).await;
        match gc::sweep_namespace(ctx.cluster.as_ref(), &ctx.shared.clock, &ns, settings, false, keys).await {
            Ok(report) => {
                METRICS.set_gauge("confighistory_snapshots", &ns, report.snapshots as f64);
                METRICS.set_gauge("confighistory_snapshot_bytes", &ns, report.bytes as f64);
                deleted += report.deleted.len();
                total += report.snapshots;
                for e in &report.errors {
                    tracing::warn!(namespace = %ns, error = %e, "gc");
                }
            }
            Err(e) => tracing::warn!(namespace = %ns, error = %e, "gc sweep failed; retried next interval"),
        }
    }
    tracing::info!(snapshots = total, deleted, elapsed = ?start.elapsed(), "gc sweep done");
    METRICS.gc_pass(start.elapsed());
}

/// GC acts in namespaces that are not excluded, not off, not being deleted (the namespace's own
/// deletion removes everything) and selected.
fn gc_namespace_allowed(state: &crate::cache::State, policy: &crate::model::policy::Policy, selector: &Selector, ns: &str) -> bool {
    policy.in_scope(selector, ns, state.namespace(ns)).is_some_and(|m| m != crate::model::policy::Mode::Off)
}

/// `confighistory gc`: one sweep, printing every verdict; the same code as the periodic sweep.
/// `clock`: the API server's time, read off the responses of `cluster`'s client.
pub async fn run_gc_command(
    cluster: &dyn Cluster,
    clock: &crate::cluster::clock::Clock,
    policy: crate::model::policy::Policy,
    args: crate::cli::GcArgs,
) -> Result<()> {
    let settings = gc::Settings { keep: args.keep, grace: Duration::from_secs(args.grace) };
    // Secret snapshots where Secrets are on and the keys were read (docs/behaviour.md §4a).
    let keys = policy.secrets.keys.get();
    let keys = keys.as_deref();
    let namespaces = match &args.namespace_filter {
        Some(ns) => vec![ns.clone()],
        None => {
            let mut all = Vec::new();
            for kind in policy.acted_on().iter().filter(|k| k.def().naming != Naming::KeyedMac || keys.is_some()) {
                all.extend(cluster.namespaces_with_snapshots(kind).await.map_err(Error::Namespaces)?);
            }
            all.sort();
            all.dedup();
            all
        }
    };
    let (mut deleting, mut kept, mut errors) = (0, 0, 0);
    let start = Instant::now();
    for ns in namespaces {
        if policy.excluded_namespaces.contains(&ns) {
            continue;
        }
        let secrets = match keys {
            Some(keys) if !policy.secrets.namespaces.is_empty() => {
                let obj = cluster.get_namespace(&ns).await.map_err(|source| Error::Sweep { namespace: ns.clone(), source })?;
                policy.source_kinds(obj.as_ref()).has_opt_in().then_some(keys)
            }
            keys => keys,
        };
        let report = gc::sweep_namespace(cluster, clock, &ns, settings, args.dry_run, secrets)
            .await
            .map_err(|source| Error::Sweep { namespace: ns.clone(), source })?;
        print!("{report}");
        deleting += report.items.iter().filter(|i| matches!(i.verdict, gc::Verdict::Delete(_))).count();
        kept += report.items.iter().filter(|i| matches!(i.verdict, gc::Verdict::Keep(_))).count();
        errors += report.errors.len();
    }
    println!(
        "{}: {deleting} to delete, {kept} kept, {errors} errors, in {:.2}s",
        if args.dry_run { "dry run" } else { "done" },
        start.elapsed().as_secs_f64()
    );
    if errors > 0 {
        return Err(Error::Unfinished(errors));
    }
    Ok(())
}
