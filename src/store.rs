//! The snapshot store (SPEC §5): makes sure a valid snapshot of some content exists, through the
//! Kubernetes port. Admission and the controller's adoption both write snapshots here; each maps
//! [`Error`] to its own answer (an HTTP denial, a retried resync).

use std::sync::atomic::Ordering;

use serde_json::json;

use crate::cluster::{ApiError, Cluster, Created};
use crate::metrics::METRICS;
use crate::model::names;
use crate::model::snapshot;

/// Why no snapshot could be made sure of.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or did not answer `what` (e.g. `read ConfigMap shop/pricing-config`).
    #[error("could not {what}: {source}")]
    Api { what: String, source: ApiError },
    /// The namespace's ResourceQuota for ConfigMaps is full.
    #[error("could not create snapshot {name}: {source}")]
    Quota { name: String, source_name: String, source: ApiError },
    /// The name kept being created or changed by someone else between our calls.
    #[error("could not create snapshot {namespace}/{name}: {name} kept changing while being read")]
    Race { namespace: String, name: String },
    /// Every name of the collision sequence is taken by another object.
    #[error("could not find a free snapshot name for {source_name}: every name is taken")]
    Exhausted { source_name: String, hash: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How often [`ensure`] looks at one name again after losing a race.
const MAX_RACES: u32 = 5;

/// Makes sure a valid snapshot of `content` exists, walking the collision sequence past any
/// other object under its name, and records `adopted` templates on it. Returns the name and
/// warnings (names skipped as collisions).
pub async fn ensure(
    cluster: &dyn Cluster,
    ns: &str,
    source: &str,
    content: &snapshot::Content,
    adopted: &[String],
    dry_run: bool,
) -> Result<(String, Vec<String>)> {
    let hash = content.hash();
    let mut warnings = Vec::new();
    let read = |name: String| async move {
        cluster.get_configmap(ns, &name).await.map_err(|e| Error::Api { what: format!("read ConfigMap {ns}/{name}"), source: e })
    };
    // Races (created or deleted by someone else between two calls, a concurrent adoption record)
    // look at the same name again, a few times.
    let (mut index, mut races) = (0, 0);
    while index <= snapshot::MAX_COLLISION_INDEX {
        let name = snapshot::name(source, &hash, index);
        // Read before create: a snapshot that exists is used, never re-created (SPEC §5). A POST
        // first would be refused by a full ConfigMap quota even though the object exists, and a
        // dry run would answer differently from the real request.
        let Some(existing) = read(name.clone()).await? else {
            let obj = snapshot::object(ns, source, &name, content, adopted);
            match cluster.create_configmap(ns, &obj, dry_run).await {
                Ok(Created::Created) => {
                    if !dry_run {
                        METRICS.snapshots_created.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(namespace = ns, snapshot = %name, source, "created snapshot");
                    }
                    return Ok((name, warnings));
                }
                Ok(Created::AlreadyExists) if races < MAX_RACES => {
                    races += 1;
                    continue;
                }
                Ok(Created::AlreadyExists) => return Err(Error::Race { namespace: ns.to_owned(), name }),
                Err(e) if e.is_quota() => return Err(Error::Quota { name, source_name: source.to_owned(), source: e }),
                Err(e) => return Err(Error::Api { what: format!("create snapshot {ns}/{name}"), source: e }),
            }
        };
        match snapshot::validate(&existing) {
            Ok(h) if h == hash => {
                let have: Vec<&str> = crate::model::source::adopted(&existing).collect();
                let missing: Vec<&String> = adopted.iter().filter(|a| !have.contains(&a.as_str())).collect();
                if !missing.is_empty() && !dry_run {
                    let mut all: Vec<String> = have.iter().map(|s| s.to_string()).collect();
                    all.extend(missing.into_iter().cloned());
                    // The resourceVersion read is a precondition: a concurrent writer's record is
                    // re-read and kept, never overwritten (SPEC §9: each record is history).
                    let mut patch = json!({"metadata": {"annotations": {names::ADOPTED: all.join(",")}}});
                    if let Some(rv) = existing.pointer("/metadata/resourceVersion") {
                        patch["metadata"]["resourceVersion"] = rv.clone();
                    }
                    match cluster.patch_configmap(ns, &name, &patch).await {
                        Ok(()) => {}
                        Err(e) if (e.is_conflict() || e.code == Some(404)) && races < MAX_RACES => {
                            races += 1;
                            continue;
                        }
                        Err(e) => return Err(Error::Api { what: format!("record adoption on {ns}/{name}"), source: e }),
                    }
                }
                return Ok((name, warnings));
            }
            other => {
                let why = match other {
                    Ok(h) => format!("it is a snapshot of other content ({h})"),
                    Err(e) => e.to_string(),
                };
                METRICS.collisions.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(namespace = ns, name = %name, reason = %why, "snapshot name collision");
                warnings.push(format!("{name} is taken by a ConfigMap that is not this snapshot ({why}); using the next name"));
                index += 1;
            }
        }
    }
    Err(Error::Exhausted { source_name: source.to_owned(), hash })
}

/// The API error a lost race reads as, for callers that explain failures as API errors.
pub fn race_error(name: &str) -> ApiError {
    ApiError { code: Some(409), reason: "Conflict".into(), message: format!("{name} kept changing while being read") }
}
