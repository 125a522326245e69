//! The re-hash step of the resync loop (docs/behaviour.md §7.8): referenced sources read fresh
//! (one by one, or a first pass's pages of a cluster-wide list) and compared with their head; a
//! change made while the webhook was away gets a no-op touch the webhook records. What it
//! confirmed is kept between passes and leaders ([`super::checkpoint`]).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde_json::json;

use super::checkpoint;
use super::context::Ctx;
use super::propagate;
use super::ratelimit::Limiter;
use super::resync::{ResyncState, CHECKPOINT_EVERY};
use super::shared::learn_immutability;
use crate::cache::{self, SourceKey, Writer};
use crate::model::ids::{SourceId, SourceKind};
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::sourcekinds::Naming;
use crate::store::SourceContent;

/// Re-hashes every referenced source (rate-limited GETs). A stored head that does not match the
/// content means a change the webhook missed: touching the source lets the webhook record it as a
/// change first seen now (missed changes, docs/how-it-works.md). A source without a head is compared with the
/// snapshots its workloads are pinned to ([`propagate::rehash_sources`]); its touch names one of
/// them as the head, which the webhook takes from confighistory alone.
pub(crate) async fn rehash(ctx: &Ctx, st: &mut ResyncState) {
    if st.checkpoint.is_none() {
        st.checkpoint = Some(checkpoint::load(ctx).await);
    }
    let kept = st.checkpoint.as_ref().filter(|k| !k.is_empty());
    let verified = &mut st.verified;
    let sources = cache::pass(&ctx.shared.state, |state| {
        let sources = propagate::rehash_sources(state, &ctx.shared.policy, &ctx.selector);
        let listed: HashSet<&SourceKey> = sources.iter().map(|(k, _)| k).collect();
        verified.retain(|k, _| listed.contains(k));
        if let Some(kept) = kept {
            // What the last leader confirmed and the cache shows unchanged (the sources with a
            // head, the ones a re-hash confirms).
            let candidates = sources.iter().filter_map(|(k, _)| {
                let c = state.source_at(k).filter(|c| c.annotation(names::HEAD).is_some())?;
                Some((k, c.resource_version.as_str()))
            });
            verified.extend(checkpoint::confirmed(candidates, kept));
        }
        let unchanged = |k: &SourceKey| {
            verified.get(k).is_some_and(|rv| state.source_at(k).is_some_and(|c| c.resource_version.as_str() == rv.as_str()))
        };
        sources.into_iter().filter(|(k, _)| !unchanged(k)).collect::<Vec<_>>()
    });
    // Used once: later passes know from the watch what changed.
    st.checkpoint = Some(Default::default());
    let mut saved_at = Instant::now();
    // Many ConfigMaps to read (a first pass, or a lost checkpoint): pages of a cluster-wide list
    // instead of one GET each (docs/behaviour.md §7.8). What the list does not deliver as the cache
    // knows it, and Secrets, are read one by one as before.
    let (listable, mut one_by_one): (Vec<_>, Vec<_>) = sources.into_iter().partition(|((_, id), _)| id.kind == SourceKind::ConfigMap);
    if listable.len() >= LIST_AT_LEAST {
        let mut pending: HashMap<SourceKey, Vec<propagate::PinnedTo>> = listable.into_iter().collect();
        if !rehash_listed(ctx, st, &mut pending, &mut saved_at).await {
            return;
        }
        let mut rest: Vec<_> = pending.into_iter().collect();
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        one_by_one.extend(rest);
    } else {
        one_by_one.extend(listable);
    }
    for ((ns, name), pins) in one_by_one {
        if !ctx.leadership.is_leader() {
            return;
        }
        if saved_at.elapsed() >= CHECKPOINT_EVERY {
            save_checkpoint(ctx, st).await;
            saved_at = Instant::now();
        }
        Limiter::acquire(&ctx.reads, &ns).await;
        let obj = match ctx.cluster.get_source(&ns, &name).await {
            Ok(Some(o)) => o,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(namespace = %ns, source = %name, error = %e, "re-hash: read failed");
                continue;
            }
        };
        rehash_one(ctx, &mut st.verified, ns, name, &pins, &obj).await;
    }
    save_checkpoint(ctx, st).await;
}

/// From how many ConfigMap sources to re-hash a pass lists them instead of reading each.
pub const LIST_AT_LEAST: usize = 64;

/// The most objects a re-hash list page asks for.
pub const LIST_PAGE_MAX: u32 = 500;

/// The most bytes of a re-hash list page's body: a longer one is asked again in pages half the
/// size, so a page of large ConfigMaps costs at most this and its parse.
pub const LIST_PAGE_BYTES: usize = 8 << 20;

/// The list path of [`rehash`]: pages of every ConfigMap that is not a snapshot, each taking a
/// token of the resync rate, hashed and dropped as they come. A listed object is re-hashed here
/// when it is one of `pending` at the resourceVersion the cache knows (so a page never tells an
/// older content than the watch has delivered) and taken out of `pending`; what stays there is
/// read one by one after. False when this replica stopped leading.
async fn rehash_listed(
    ctx: &Ctx,
    st: &mut ResyncState,
    pending: &mut HashMap<SourceKey, Vec<propagate::PinnedTo>>,
    saved_at: &mut Instant,
) -> bool {
    let mut token: Option<String> = None;
    let mut limit = LIST_PAGE_MAX;
    let (mut pages, mut listed) = (0usize, 0usize);
    let started = Instant::now();
    loop {
        if !ctx.leadership.is_leader() {
            return false;
        }
        if saved_at.elapsed() >= CHECKPOINT_EVERY {
            save_checkpoint(ctx, st).await;
            *saved_at = Instant::now();
        }
        // One token per page, from the bucket shared by every namespace.
        Limiter::acquire(&ctx.reads, "").await;
        let page = match ctx.cluster.list_configmaps_page(token.as_deref(), limit, LIST_PAGE_BYTES).await {
            Ok(page) => page,
            Err(e) if e.reason == crate::cluster::TOO_LARGE && limit > 1 => {
                limit = (limit / 2).max(1);
                continue;
            }
            Err(e) => {
                // Expired continue token (410), no list permission, an outage: what is left is
                // read one by one.
                tracing::info!(error = %e, pages, "re-hash: listing ConfigMaps failed; reading the rest one by one");
                return true;
            }
        };
        pages += 1;
        for obj in page.items {
            let meta = &obj["metadata"];
            let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else { continue };
            let key: SourceKey = (ns.into(), SourceId::configmap(name));
            // Most of a page is no source to re-hash: looked up before the cache's lock is taken.
            if !pending.contains_key(&key) {
                continue;
            }
            let rv = meta["resourceVersion"].as_str().unwrap_or_default();
            let known = cache::read(&ctx.shared.state).source_at(&key).is_some_and(|c| c.resource_version.as_str() == rv);
            if !known {
                continue;
            }
            let Some(pins) = pending.remove(&key) else { continue };
            listed += 1;
            let (ns, id) = key;
            rehash_one(ctx, &mut st.verified, ns, id, &pins, &obj).await;
        }
        // Pages that come back small may grow again.
        limit = (limit * 2).min(LIST_PAGE_MAX);
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    tracing::info!(pages, listed, left = pending.len(), elapsed = ?started.elapsed(), "re-hash: listed ConfigMaps");
    true
}

/// Re-hashes one source read fresh (`obj`): confirmed by its head at its resourceVersion, or a
/// change made while the webhook was away, recorded now with a no-op write of its head.
pub(crate) async fn rehash_one(
    ctx: &Ctx,
    verified: &mut HashMap<SourceKey, String>,
    ns: compact_str::CompactString,
    name: SourceId,
    pins: &[propagate::PinnedTo],
    obj: &serde_json::Value,
) {
    cache::write(&ctx.shared.state).learn_source(&ns, &name, obj);
    if obj.immutable() {
        return; // made immutable after it was a source: never touched (docs/behaviour.md §3)
    }
    let keys = ctx.shared.policy.secrets.keys.get();
    let keys = keys.as_deref();
    let content = match SourceContent::from_object(name.kind, obj) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(namespace = %ns, source = %name, error = %e, "re-hash: not a source's content");
            return;
        }
    };
    let Some(actual) = content.snap(obj, &ns, &name.name, keys).map(|s| s.hash(&ns, &name.name)) else { return };
    let stored = match crate::admission::annotation(obj, names::HEAD) {
        Some(head) => (!content.is_named_by(&ns, &name.name, head, keys)).then(|| head.to_owned()),
        None => propagate::missed_change(pins, &actual).map(str::to_owned),
    };
    let rv = obj["metadata"]["resourceVersion"].as_str().unwrap_or_default();
    let Some(stored) = stored else {
        // Named by its head at this resourceVersion: not read again until it changes. Only
        // ConfigMaps with a head: whether a Secret's head names it depends on the keys kept,
        // and a source without one is compared with pins, which change without it.
        if name.kind.def().naming == Naming::Hash && crate::admission::annotation(obj, names::HEAD).is_some() && !rv.is_empty() {
            verified.insert((ns, name), rv.to_owned());
        }
        return;
    };
    tracing::info!(namespace = %ns, source = %name, stored = %stored, actual = %actual, "source changed while the webhook was away; recording the change now");
    // A no-op write (or, without a head, one naming the pin): the webhook sees a stale head and
    // records the change as first seen now. At the resourceVersion read: a source written since
    // is not given a head from before that write (409, read again next pass).
    let mut patch = json!({"metadata": {"annotations": {names::HEAD: stored}}});
    if !rv.is_empty() {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    if let Err(e) = ctx.cluster.patch_source(&ns, &name, &patch).await {
        tracing::warn!(namespace = %ns, source = %name, error = %e, "could not touch the source");
    }
}

/// Writes what the re-hash confirmed as the checkpoint ([`checkpoint`]), when it changed since
/// this replica last wrote it.
async fn save_checkpoint(ctx: &Ctx, st: &mut ResyncState) {
    let data = checkpoint::encode(&checkpoint::digests(&st.verified));
    if st.saved.as_ref() == Some(&data) || !ctx.leadership.is_leader() {
        return;
    }
    // A failure costs the next leader reads only: tried again at the next save.
    if checkpoint::save(ctx, &data).await {
        st.saved = Some(data);
    }
}

/// Touches the sources whose versioning the admin's selector changed without a write of theirs
/// ([`propagate::versioning_touches`]), rate-limited: the webhook records the change, and
/// propagation moves their workloads (to the plain name, or back to snapshots) once.
pub(crate) async fn touch_versioning(ctx: &Ctx) {
    let plan = || cache::pass(&ctx.shared.state, |state| propagate::versioning_touches(state, &ctx.shared.policy, &ctx.selector));
    let (mut touches, unknown) = plan();
    if !unknown.is_empty() {
        learn_immutability(ctx, unknown.iter(), Some(&ctx.reads)).await;
        touches = plan().0;
    }
    for (ns, name) in touches {
        if !ctx.leadership.is_leader() {
            return;
        }
        // Without a head (never written while a workload named it), the touch names a pin as
        // the head confighistory last knew, which the webhook takes from it alone.
        let head = {
            let state = cache::read(&ctx.shared.state);
            let head = state.source(&ns, &name).and_then(|c| c.annotation(names::HEAD)).map(str::to_owned);
            head.or_else(|| propagate::pinned_hash(&state, &ctx.shared.policy, &ns, &name))
        };
        let Some(head) = head else { continue };
        Limiter::acquire(&ctx.reads, &ns).await;
        tracing::info!(namespace = %ns, source = %name, "the excluded-sources selector changed this source's versioning; recording the change now");
        // A no-op write: the webhook sees the versioning the source was recorded with differ.
        let patch = json!({"metadata": {"annotations": {names::HEAD: head}}});
        if let Err(e) = ctx.cluster.patch_source(&ns, &name, &patch).await {
            tracing::warn!(namespace = %ns, source = %name, error = %e, "could not touch the source");
        }
    }
}
