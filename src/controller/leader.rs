//! Leader election through a coordination.k8s.io/v1 Lease (docs/behaviour.md §10: one replica runs the loops).
//!
//! Every candidate reads the Lease every `renew_every`. The holder renews it; the others take it
//! over once they have seen no renewal for the lease duration, measured on their own clock from
//! the moment they observed the last change (so clock skew between replicas does not matter).
//! A leader that cannot renew for `renew_deadline` (shorter than the lease duration) stops
//! leading before anyone else may start. Writes carry the resourceVersion they read, so two
//! candidates never both win.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// Whether this process leads, shared with the loops; and whether it has stopped standing.
#[derive(Clone, Debug, Default)]
pub struct Leadership {
    leading: Arc<AtomicBool>,
    resigned: Arc<AtomicBool>,
}

impl Leadership {
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }
    /// For tests and single-replica tools: lead without a Lease.
    pub fn always() -> Leadership {
        Leadership { leading: Arc::new(AtomicBool::new(true)), ..Default::default() }
    }
    fn set(&self, v: bool) -> bool {
        crate::metrics::METRICS.set_leader(v);
        self.leading.swap(v, Ordering::Relaxed)
    }
    /// Stops leading and standing (at shutdown, before [`release`]): the election loop writes the
    /// Lease no more, so it cannot take back a Lease just given up while the process is still
    /// exiting. Whether it was leading.
    pub fn resign(&self) -> bool {
        self.resigned.store(true, Ordering::Relaxed);
        self.set(false)
    }
    fn resigned(&self) -> bool {
        self.resigned.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub renew_every: Duration,
}

impl Config {
    pub fn new(namespace: &str, name: &str, identity: String) -> Config {
        Config {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity,
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(7),
            renew_every: Duration::from_secs(2),
        }
    }
}

/// This candidate's identity: the pod name (or host name) plus a random suffix, so two processes
/// on one host (or a restarted pod) never share it.
pub fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|s| s.trim().to_owned()))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "confighistory".into());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{host}_{:08x}", h.finish() as u32)
}

/// What the candidate last saw of the Lease, and when.
struct Observed {
    resource_version: String,
    at: Instant,
}

/// What to do with the Lease as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Renew,
    TakeOver,
    Follow,
}

/// The decision, pure: `observed_for` is how long the Lease has been seen unchanged.
pub fn step(spec: Option<&LeaseSpec>, me: &str, observed_for: Duration, default_duration: Duration) -> Step {
    let holder = spec.and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    let duration =
        spec.and_then(|s| s.lease_duration_seconds).filter(|d| *d > 0).map(|d| Duration::from_secs(d as u64)).unwrap_or(default_duration);
    if holder.is_empty() || observed_for >= duration {
        Step::TakeOver
    } else {
        Step::Follow
    }
}

/// Runs the election forever, updating `leadership`.
pub async fn run(client: kube::Client, config: Config, leadership: Leadership) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed: Option<Observed> = None;
    let mut last_renewal: Option<Instant> = None;
    let mut warned = false;
    loop {
        if leadership.resigned() {
            return;
        }
        match round(&api, &config, &mut observed, &leadership).await {
            Ok(true) => {
                last_renewal = Some(Instant::now());
                if !leadership.set(true) {
                    tracing::info!(identity = %config.identity, lease = %format!("{}/{}", config.namespace, config.name), "became leader");
                }
                warned = false;
            }
            Ok(false) => {
                if leadership.set(false) {
                    tracing::warn!(identity = %config.identity, "lost leadership");
                }
                last_renewal = None;
                warned = false;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %e, lease = %format!("{}/{}", config.namespace, config.name), "leader election: cannot read or write the Lease");
                    warned = true;
                }
                if leadership.is_leader() && last_renewal.is_none_or(|t| t.elapsed() >= config.renew_deadline) {
                    leadership.set(false);
                    tracing::warn!(identity = %config.identity, "could not renew the Lease in time; stopped leading");
                }
            }
        }
        tokio::time::sleep(config.renew_every).await;
    }
}

/// One read and, when due, one write. `Ok(true)` when this candidate holds the Lease afterwards.
async fn round(api: &Api<Lease>, config: &Config, observed: &mut Option<Observed>, leadership: &Leadership) -> Result<bool, kube::Error> {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let duration_secs = config.lease_duration.as_secs() as i32;
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta { name: Some(config.name.clone()), namespace: Some(config.namespace.clone()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    let at = match observed {
        Some(o) if o.resource_version == rv => o.at,
        _ => Instant::now(),
    };
    *observed = Some(Observed { resource_version: rv, at });
    let spec = lease.spec.get_or_insert_with(Default::default);
    match step(Some(spec), &config.identity, at.elapsed(), config.lease_duration) {
        Step::Follow => return Ok(false),
        Step::Renew => {
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(duration_secs);
        }
        Step::TakeOver => {
            tracing::info!(previous = spec.holder_identity.as_deref().unwrap_or(""), "Lease expired; taking over");
            spec.holder_identity = Some(config.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(duration_secs);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
    }
    // Resigned while this round read: a Lease released meanwhile must not be taken back.
    if leadership.resigned() {
        return Ok(false);
    }
    // replace carries the resourceVersion we read: a concurrent writer makes this a 409.
    match api.replace(&config.name, &PostParams::default(), &lease).await {
        Ok(written) => {
            *observed = Some(Observed { resource_version: written.metadata.resource_version.unwrap_or_default(), at: Instant::now() });
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the Lease up (on shutdown, after [`Leadership::resign`]), so another replica takes over
/// at once. A renewal of this replica's that was in flight makes the write a 409: read again and
/// retried, a few times.
pub async fn release(client: kube::Client, config: &Config) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    for _ in 0..3 {
        let Ok(Some(mut lease)) = api.get_opt(&config.name).await else { return };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match api.replace(&config.name, &PostParams::default(), &lease).await {
            Ok(_) => return tracing::info!("released the Lease"),
            Err(kube::Error::Api(s)) if s.code == 409 => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => return tracing::warn!(error = %e, "could not release the Lease; the others take it over once it expires"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, secs: i32) -> LeaseSpec {
        LeaseSpec { holder_identity: Some(holder.into()), lease_duration_seconds: Some(secs), ..Default::default() }
    }

    #[test]
    fn the_holder_renews_and_others_wait_for_expiry() {
        let d = Duration::from_secs(10);
        assert_eq!(step(Some(&spec("me", 10)), "me", Duration::from_secs(60), d), Step::Renew);
        assert_eq!(step(Some(&spec("other", 10)), "me", Duration::from_secs(9), d), Step::Follow);
        assert_eq!(step(Some(&spec("other", 10)), "me", Duration::from_secs(10), d), Step::TakeOver);
        assert_eq!(step(Some(&spec("", 10)), "me", Duration::ZERO, d), Step::TakeOver, "released");
        assert_eq!(step(None, "me", Duration::ZERO, d), Step::TakeOver);
        assert_eq!(step(Some(&spec("other", 0)), "me", Duration::from_secs(9), d), Step::Follow, "default duration");
    }

    #[test]
    fn identities_differ_per_process_start() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
