//! The admission driver: decides a review from memory, reads what the decision asks for (the
//! request's namespace, its sources: bounded, a few at a time, under a place), decides again,
//! and has the decision's effects run ([`super::effects`]). The router ([`super::router`]) calls
//! [`admit`] for every review it decides; so does the fuzzer.

use crate::admission::{self, review, Failed, Failure, Fresh, Outcome, Reason, Response, View};
use crate::cache::NamespaceInfo;
use crate::cluster::ApiError;
use crate::model::ids::{self, SourceId};
use crate::model::policy::Policy;
use crate::model::sourcekinds::Content;

use super::effects::{execute, failure};
use super::{limits, memory, App, Endpoint};

/// Whether a workload request must never be denied (an undo, a CronJob's run), from the caches.
pub fn never_denied(app: &App, req: &review::Request) -> bool {
    let (state, now) = (crate::cache::admission_read(&app.ctx.state), String::new());
    let view = View { policy: &app.ctx.policy, state: &state, fresh: &Fresh::new(), failed: &Failed::new(), now: &now, namespace: None };
    app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind).is_none() && admission::workload::never_denied(req, &view)
}

/// The answer to a review that memory settles with nothing to read, write or log: the steady
/// state of re-applies (an unchanged template keeps its pins), and requests left alone. `None`
/// for anything else, which [`admit`] decides inside the admission's log span. The router
/// answers these without making that span, whose fields cost about 4% of such a request
/// (docs/performance.md "The small path over the floor"). It is [`admit`]'s first pass and gives
/// the same answer (the test `the_answer_from_memory_is_the_drivers_answer`):
/// - a source write on `/mutate` is left to [`admit`]: its content is hashed ahead, a creation
///   forgets a remembered miss, and its decision has effects;
/// - a namespace the watch has listed and does not know is read first, so not from memory;
/// - a refused mode label is logged, an audit finding too, so not here;
/// - a denial is left to [`admit`], which logs it and may let it through on a replica that
///   started a moment ago (during an upgrade, docs/behaviour.md §9a.2).
pub fn from_memory(app: &App, endpoint: Endpoint, req: &review::Request) -> Option<(Response, Reason)> {
    match first_pass(app, endpoint, req) {
        FirstPass::Answered(response, reason) => Some((response, reason)),
        FirstPass::Decided(_) | FirstPass::NotTried => None,
    }
}

/// What [`first_pass`] found: an answer, or the first pass's outcome for [`admit_after`] to go on
/// from (so a review that needs reads or writes is not decided from memory twice).
pub(super) enum FirstPass {
    Answered(Response, Reason),
    /// Boxed: held across the driver's awaits, inline it would double the per-request future.
    Decided(Box<Outcome>),
    NotTried,
}

/// [`admit`]'s first pass, when its view is the cache alone (see [`from_memory`]).
pub(super) fn first_pass(app: &App, endpoint: Endpoint, req: &review::Request) -> FirstPass {
    if endpoint == Endpoint::Mutate && app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind).is_some() {
        return FirstPass::NotTried;
    }
    let state = crate::cache::admission_read(&app.ctx.state);
    if endpoint != Endpoint::Protect && state.namespace_unlisted(&req.namespace) {
        return FirstPass::NotTried;
    }
    if app.ctx.policy.namespace_mode(&req.namespace, state.namespace(&req.namespace)).1.is_some() {
        return FirstPass::NotTried;
    }
    let now = app.ctx.clock.now_rfc3339();
    let (fresh, failed) = (Fresh::new(), Failed::new());
    let view = View { policy: &app.ctx.policy, state: &state, fresh: &fresh, failed: &failed, now: &now, namespace: None };
    let outcome = match endpoint {
        Endpoint::Mutate => admission::workload::decide(req, &view),
        Endpoint::Validate => admission::validate::decide(req, &view),
        Endpoint::Protect => Outcome::Done(admission::protect::decide(req, &view)),
    };
    match outcome {
        // A denial goes through the driver: it is logged, and a replica that started a moment
        // ago may let it through (`mixed_fleet`).
        Outcome::Done(d) if d.response.allowed && d.effects.is_empty() && !matches!(d.reason, Reason::Audit | Reason::UnhandledKind) => {
            let reason = d.reason;
            FirstPass::Answered(d.finish(&Default::default()), reason)
        }
        outcome => FirstPass::Decided(Box::new(outcome)),
    }
}

/// Decides, reading sources fresh when the decision asks, runs the effects, and answers.
pub async fn admit(app: &App, endpoint: Endpoint, req: &review::Request) -> (Response, Reason) {
    admit_after(app, endpoint, req, None).await
}

/// [`admit`], its first pass already made by [`first_pass`] when `first` is given.
pub(super) async fn admit_after(
    app: &App,
    endpoint: Endpoint,
    req: &review::Request,
    mut first: Option<Box<Outcome>>,
) -> (Response, Reason) {
    // The API server's time, in milliseconds: the settle window is counted from changed-at, on
    // the leader, which uses the API server's time too (never a replica's own clock alone).
    let now = app.ctx.clock.now_rfc3339();
    let namespace = match Box::pin(read_namespace(app, endpoint, req)).await {
        Ok(namespace) => namespace,
        Err(failure) => return (failure.denial, Reason::ApiError),
    };
    // A source created through this replica is no longer remembered missing: a workload applied
    // with it a moment later reads it even before the watch delivers it (docs/behaviour.md §9a.5).
    if let (Endpoint::Mutate, Some(kind)) = (endpoint, app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind)) {
        if req.operation == review::Operation::Create && !req.dry_run() {
            app.source_reads.forget(&req.namespace, &SourceId::new(kind, req.name.as_str()));
        }
    }
    let mut fresh = Fresh::new();
    let mut failed = Failed::new();
    // Pass 0 decides from memory; a decision that needs fresh reads asks for them once, and,
    // when those reads change how a reference is classified (a name shaped like a snapshot name
    // that is in fact a source), once more. A decision that is never denied (an undo) and whose
    // snapshot write fails is made again without that source, once per source.
    let mut fetches = 0;
    // Set when a Secret read is forbidden: this replica runs with Secrets on, and the upgrade that
    // turned them off has taken its RBAC on Secrets while it still serves (the pods roll after the
    // ClusterRole is gone). It then decides as a replica with Secrets off does, leaving Secret
    // references as sent instead of refusing the release (docs/behaviour.md §9a.2).
    let mut secrets_off: Option<Box<Policy>> = None;
    let workload = ids::SourceKind::known(&req.kind.group, &req.kind.kind).is_none();
    // What the sources read for this request hold, given back with the answer.
    let mut held_reads = memory::Charge::default();
    // Taken before the first API call and kept to the answer; a decision from memory takes none
    // (docs/behaviour.md §9a: it never waits behind API-bound ones).
    let mut place = None;
    // A source's content is hashed and compared before the cache is taken (a 1 MiB one would
    // hold it for a millisecond and more), once for every pass; its outgoing content too when
    // a glance at the cache finds workloads that still run with it.
    let source_kind = app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind);
    let facts = match (endpoint, source_kind) {
        (Endpoint::Mutate, Some(kind)) if kind.def().content == Content::Data => {
            let outgoing = || {
                let id = SourceId::new(kind, req.name.as_str());
                !crate::cache::admission_read(&app.ctx.state).plain_users(&req.namespace, &id).is_empty()
            };
            admission::configmap::ContentFacts::ahead(req, &app.ctx.policy, outgoing)
        }
        _ => None,
    };
    for _ in 0..MAX_PASSES {
        let outcome = if let Some(outcome) = first.take() {
            *outcome
        } else {
            let state = crate::cache::admission_read(&app.ctx.state);
            let policy = secrets_off.as_deref().unwrap_or(&app.ctx.policy);
            let view = View { policy, state: &state, fresh: &fresh, failed: &failed, now: &now, namespace: namespace.as_deref() };
            match endpoint {
                // A source's admission is its content form's: hashed data, or confidential bytes.
                Endpoint::Mutate => match source_kind.map(|k| k.def().content) {
                    Some(Content::TypedBytes) => admission::secret::decide(req, &view),
                    Some(Content::Data) => admission::configmap::decide_with(req, &view, facts.as_ref()),
                    None => admission::workload::decide(req, &view),
                },
                Endpoint::Validate => admission::validate::decide(req, &view),
                Endpoint::Protect => Outcome::Done(admission::protect::decide(req, &view)),
            }
        };
        match outcome {
            Outcome::Done(decision) => {
                let (reason, fail_open) = (decision.reason, decision.fail_open);
                if place.is_none() && decision.effects.iter().any(|e| !e.after_answer()) {
                    place = Some(Box::pin(limits::api_place(&req.namespace)).await);
                }
                // Boxed, like every await on the API path: the future of an admission decided
                // from memory then stays small (axum boxes it per request; see the test
                // the_per_request_future_stays_small).
                match Box::pin(execute(app, req, decision, &fresh)).await {
                    Ok(mut response) => {
                        if secrets_off.is_some() {
                            response.warn("confighistory may not read Secrets here (its RBAC): Secret references left as sent".to_owned());
                        }
                        if endpoint == Endpoint::Validate && reason == Reason::MutableConfig && mixed_fleet(app, req, namespace.as_deref())
                        {
                            tracing::info!(
                                "let through a reference left unpinned while replicas of another configuration may serve (upgrade)"
                            );
                            let mut allowed = Response::allow();
                            allowed.warn("not pinned yet (confighistory is being upgraded): repair pins it".to_owned());
                            return (allowed, reason);
                        }
                        return (response, reason);
                    }
                    // A Secret snapshot confighistory may not read or write: the upgrade turning
                    // Secrets off took its RBAC while this replica still serves. Decided again
                    // as with Secrets off, as a forbidden read of a source is (below).
                    Err((source, failure))
                        if workload && failure.forbidden && source.kind == ids::SourceKind::Secret && secrets_off.is_none() =>
                    {
                        secrets_forbidden("may not write a Secret snapshot", &source.name, None);
                        secrets_off = Some(without_secrets(&app.ctx.policy));
                    }
                    Err((source, failure)) if fail_open && !failed.contains_key(&source) => {
                        failed.insert(source, failure);
                    }
                    Err((_, failure)) => return (failure.denial, Reason::ApiError),
                }
            }
            Outcome::Fetch(ids) if fetches < 2 => {
                fetches += 1;
                let unread: Vec<SourceId> = ids.into_iter().filter(|n| !fresh.contains_key(n) && !failed.contains_key(n)).collect();
                if place.is_none() {
                    place = Some(Box::pin(limits::api_place(&req.namespace)).await);
                }
                // At most MAX_SOURCES_READ distinct names per request are read (docs/behaviour.md §9a): the
                // rest count as failed reads, and the decision says whether that denies.
                let mut reads = Vec::new();
                for id in unread {
                    // A name from the request's template goes into an API path only when it is a
                    // valid object name (`../secrets/x` is not); any other cannot exist.
                    if !crate::model::names::is_dns_subdomain(&id.name) {
                        fresh.insert(id, None);
                    } else if fresh.len() + failed.len() + reads.len() >= MAX_SOURCES_READ {
                        failed.insert(id, too_many_sources(&req.namespace));
                    } else {
                        // A name the watches do not know, found missing a moment ago or past the
                        // namespace's rate: decided as missing, not read (docs/behaviour.md §9a.5).
                        let unlisted = crate::cache::admission_read(&app.ctx.state).source_unlisted(&req.namespace, &id);
                        if unlisted && !app.source_reads.allow(&req.namespace, &id) {
                            fresh.insert(id, None);
                        } else {
                            reads.push((id, unlisted));
                        }
                    }
                }
                // Read concurrently, a few at a time: one after another, N sources cost N round trips.
                // Each read is charged to the memory budget before it starts, at the most it may
                // take in flight, then at what it holds once its size is known; reads that would
                // take the request past what one request may hold are not made (docs/reliability.md,
                // "The memory model").
                use futures::StreamExt as _;
                let promised = std::sync::Mutex::new(held_reads.bytes());
                let promised = &promised;
                let results: Vec<_> = Box::pin(
                    futures::stream::iter(reads)
                        .map(|(id, unlisted)| async move {
                            {
                                let mut p = promised.lock().expect("promised lock");
                                if *p + memory::READ_IN_FLIGHT > app.memory.max_request() {
                                    return (id, unlisted, Err(Unread::Memory), memory::Charge::default());
                                }
                                *p += memory::READ_IN_FLIGHT;
                            }
                            let Ok(mut slot) = app.memory.charge(memory::READ_IN_FLIGHT).await else {
                                *promised.lock().expect("promised lock") -= memory::READ_IN_FLIGHT;
                                return (id, unlisted, Err(Unread::Memory), memory::Charge::default());
                            };
                            let read = app.ctx.cluster.get_source(&req.namespace, &id).await;
                            let holds = match &read {
                                Ok(Some(obj)) => crate::model::json::heap_size(obj).saturating_mul(memory::READ_HELD_FACTOR),
                                _ => 0,
                            };
                            slot.shrink_to(holds);
                            *promised.lock().expect("promised lock") -= memory::READ_IN_FLIGHT - slot.bytes().min(memory::READ_IN_FLIGHT);
                            (id, unlisted, read.map_err(Unread::Api), slot)
                        })
                        .buffer_unordered(READ_CONCURRENCY)
                        .collect(),
                )
                .await;
                for (id, unlisted, read, slot) in results {
                    held_reads.absorb(slot);
                    match read {
                        Ok(obj) => {
                            // A dry run's "missing" is not remembered: Flux, Argo CD and
                            // `kubectl diff` dry-run a release before creating its ConfigMaps,
                            // and the apply that follows must read them (docs/behaviour.md §9a.5).
                            if obj.is_none() && unlisted && !req.dry_run() {
                                app.source_reads.record_missing(&req.namespace, &id);
                            }
                            fresh.insert(id, obj);
                        }
                        Err(Unread::Api(e)) if workload && id.kind == ids::SourceKind::Secret && e.code == Some(403) => {
                            secrets_forbidden("may not read a Secret", &id.name, Some(&e.message));
                            crate::metrics::METRICS.error("api");
                            secrets_off.get_or_insert_with(|| without_secrets(&app.ctx.policy));
                        }
                        // The decision says whether this denies the request (docs/behaviour.md §6.2.1).
                        Err(Unread::Api(e)) => {
                            let failure = failure(&format!("read {} {}/{}", id.kind_str(), req.namespace, id.name), &e);
                            failed.insert(id, failure);
                        }
                        Err(Unread::Memory) => {
                            failed.insert(id, too_much_config(&req.namespace, app.memory.max_request()));
                        }
                    }
                }
            }
            Outcome::Fetch(_) => break,
        }
    }
    (Response::deny(500, "confighistory could not decide (sources changed while reading); retrying is safe"), Reason::Internal)
}

/// Whether a validation refusing a mutable reference is let through instead: the namespace is in
/// rewrite mode (its mutating pass pins, and repair pins what it did not: docs/behaviour.md §9.2)
/// and this replica started so recently that replicas of another configuration may still answer
/// beside it ([`super::MIXED_FLEET`]): the request's mutating call may have gone to one that does
/// not pin what this one does (Secrets, a registered workload kind). Enforce mode still refuses.
fn mixed_fleet(app: &App, req: &review::Request, namespace: Option<&NamespaceInfo>) -> bool {
    if app.mixed_fleet_until.is_none_or(|until| std::time::Instant::now() >= until) {
        return false;
    }
    let state = crate::cache::admission_read(&app.ctx.state);
    let info = namespace.or_else(|| state.namespace(&req.namespace));
    app.ctx.policy.namespace_mode(&req.namespace, info).0 == crate::model::policy::Mode::Rewrite
}

/// The request's namespace, read fresh when the namespace watch has listed and does not know it
/// (`admission::acting_mode` decides from it): one GET, before any other read, among a few at a
/// time and outside the per-namespace places; `None` when not needed, or when the namespace does
/// not exist (remembered for a while: a flood of forged reviews naming it costs one GET).
async fn read_namespace(app: &App, endpoint: Endpoint, req: &review::Request) -> Result<Option<Box<NamespaceInfo>>, Failure> {
    let ns = req.namespace.as_str();
    // Snapshot protection does not depend on the namespace's mode.
    let unlisted = || crate::cache::admission_read(&app.ctx.state).namespace_unlisted(ns);
    if endpoint == Endpoint::Protect || !unlisted() || app.namespace_reads.known_missing(ns) {
        return Ok(None);
    }
    let _turn = app.namespace_reads.turn().await;
    // While this one waited, the watch may have delivered it, or another request found it missing.
    if !unlisted() || app.namespace_reads.known_missing(ns) {
        return Ok(None);
    }
    match app.ctx.cluster.get_namespace(ns).await {
        Ok(Some(obj)) => Ok(Some(Box::new(NamespaceInfo::from_object(&obj)))),
        Ok(None) => {
            app.namespace_reads.record_missing(ns);
            Ok(None)
        }
        Err(e) => Err(failure(&format!("read Namespace {ns}"), &e)),
    }
}

/// Distinct ConfigMaps read for one request at most (docs/behaviour.md §9a): a template naming more is
/// decided as if the rest could not be read.
pub const MAX_SOURCES_READ: usize = 64;
/// Reads of one request in flight at once.
const READ_CONCURRENCY: usize = 8;

/// Why a source was not read.
enum Unread {
    Api(ApiError),
    /// Reading it would take the request past what one request may hold.
    Memory,
}

/// `policy` as a replica with Secrets off has it: what a replica whose RBAC on Secrets is gone
/// decides with (docs/behaviour.md §9a.2).
/// Says that RBAC on Secrets is gone while this replica has Secrets on: a warning at most once a
/// minute (every request that names a Secret meets it until the upgrade's new pods serve, and
/// the line would flood the log), debug otherwise.
fn secrets_forbidden(what: &str, secret: &str, error: Option<&str>) {
    static WARNED: super::OncePerMinute = super::OncePerMinute::new();
    if WARNED.due() {
        tracing::warn!(
            secret,
            error,
            "{what}: deciding as with Secrets off (RBAC on Secrets gone: Secrets being turned off?); at most one such message a minute"
        );
    } else {
        tracing::debug!(secret, error, "{what}: deciding as with Secrets off");
    }
}

fn without_secrets(policy: &Policy) -> Box<Policy> {
    let mut off = policy.clone();
    off.secrets.enabled = false;
    Box::new(off)
}

fn too_much_config(ns: &str, max: usize) -> Failure {
    let message = format!(
        "the sources this request names in {ns} are too large to read together: confighistory holds at most {} MiB of sources \
         for one request. Split the configuration into fewer or smaller ConfigMaps, or raise the server's memory limit",
        max >> 20
    );
    Failure { what: "read the request's sources".into(), cause: message.clone(), denial: Response::deny(422, message), forbidden: false }
}

fn too_many_sources(ns: &str) -> Failure {
    let message = format!(
        "the request names more than {MAX_SOURCES_READ} ConfigMaps in {ns}; confighistory reads at most {MAX_SOURCES_READ} per request"
    );
    Failure { what: "read the request's ConfigMaps".into(), cause: message.clone(), denial: Response::deny(422, message), forbidden: false }
}

/// Decisions per admission at most: three for reads, then one more per failed snapshot write of
/// a decision that is never denied.
const MAX_PASSES: usize = 3 + 8;
