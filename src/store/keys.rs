//! The cluster keys Secret snapshots' names are MAC'd under (docs/behaviour.md §4a,
//! docs/operations.md "Secrets' cluster key"): a keyring (`model::keys::Keyring`) kept in a
//! Secret of the server's namespace, beside the managed certificates' (`managed`), made when
//! missing ([`ensure`]) and rotated on demand ([`rotate`]).
//!
//! [`ensure`] is called at start when the admin turns Secrets on (`--secrets`, `runtime`); the
//! keyring is then held in the policy (`Policy::secrets`).
//!
//! Replicas coordinate through the Secret alone, as the certificates' do: a create is the
//! arbiter (a replica whose create finds the Secret made meanwhile reads the winner's keys, so
//! replicas starting together converge on one key), and a rotation is a write preconditioned on
//! the resourceVersion read (a conflict reads again, [`ROTATE_ATTEMPTS`] times at most). An
//! existing Secret is never overwritten: one that does not read as a keyring is reported, by
//! name and what is wrong with it, never a byte of it, and left as it is, since a new key would
//! make every Secret snapshot MAC'd under the old ones invalid.
//!
//! Through the Kubernetes port (`cluster::Cluster`, whose source calls take Secrets), so
//! `MemoryCluster` drives it in tests and its errors keep the port's rule: the API server's
//! status, reason and message, never the object sent.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::cluster::{ApiError, Cluster, Created};
use crate::model::ids::{SourceId, SourceKind, SECRET};
use crate::model::keys::{ClusterKey, KeyError, KeyId, KeySlot, Keyring, MIN_KEY_BYTES};

/// Reads and writes a rotation makes at most while other writers keep changing the Secret.
pub const ROTATE_ATTEMPTS: usize = 5;
/// Reads [`ensure`] makes at most while the Secret keeps being created and deleted under it.
const ENSURE_ATTEMPTS: usize = 3;
/// The id of the first key.
pub const FIRST_KEY: KeyId = KeyId(1);

/// The Secret holding the keys: `secret` in `namespace` (the server's own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub secret: String,
}

impl Target {
    /// The Secret `--keys-secret` names, in `--namespace`.
    pub fn from_args(args: &crate::cli::PolicyArgs) -> Target {
        Target { namespace: args.namespace.clone(), secret: args.keys_secret.clone() }
    }

    fn id(&self) -> SourceId {
        SourceId::new(SourceKind::Secret, self.secret.clone())
    }

    /// `namespace/name`, for messages.
    fn name(&self) -> String {
        format!("{}/{}", self.namespace, self.secret)
    }
}

/// Each names the Secret and what went wrong; none holds a byte of it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster keys: Secret {secret}: {source}")]
    Api {
        secret: String,
        #[source]
        source: ApiError,
    },
    #[error(
        "cluster keys: Secret {secret} is malformed: {why}. It is left as it is: it holds the keys existing Secret snapshots are validated with (docs/operations.md, \"Secrets' cluster key\")"
    )]
    Malformed { secret: String, why: String },
    #[error("cluster keys: Secret {secret} does not exist: no keys to rotate")]
    Missing { secret: String },
    #[error("cluster keys: Secret {secret} changed under each of {attempts} attempts; try again")]
    Contended { secret: String, attempts: usize },
    #[error("cluster keys: Secret {secret}: key ids are exhausted")]
    Exhausted { secret: String },
    #[error("cluster keys: the system's random number generator failed")]
    Random,
}

/// The keyring of the Secret named `target`, made with a new key [`FIRST_KEY`] when it does not
/// exist. Never overwrites: a Secret created meanwhile (by another replica) is read and its keys
/// returned; one that is malformed is an error and stays.
pub async fn ensure(cluster: &dyn Cluster, target: &Target) -> Result<Keyring, Error> {
    let id = target.id();
    for _ in 0..ENSURE_ATTEMPTS {
        if let Some(obj) = cluster.get_source(&target.namespace, &id).await.map_err(|e| api(target, e))? {
            return read(&obj, target).map(|(ring, _)| ring);
        }
        let ring = Keyring::new(new_key(FIRST_KEY)?, []).map_err(|e| malformed(target, &e))?;
        match cluster
            .create_source(&target.namespace, SourceKind::Secret, &object(target, &ring), false)
            .await
            .map_err(|e| api(target, e))?
        {
            Created::Created => {
                tracing::info!(secret = %target.name(), key_id = %FIRST_KEY, "cluster keys: made the Secret with a new key");
                return Ok(ring);
            }
            // Another replica's create came first: its keys are the ones (read again).
            Created::AlreadyExists => {
                tracing::debug!(secret = %target.name(), "cluster keys: the Secret was made meanwhile; reading it");
            }
        }
    }
    Err(Error::Contended { secret: target.name(), attempts: ENSURE_ATTEMPTS })
}

/// The keyring of the Secret named `target`, read only (`None`: it does not exist): what a
/// command that validates Secret snapshots and writes no key uses (`confighistory gc`).
pub async fn load(cluster: &dyn Cluster, target: &Target) -> Result<Option<Keyring>, Error> {
    match cluster.get_source(&target.namespace, &target.id()).await.map_err(|e| api(target, e))? {
        Some(obj) => read(&obj, target).map(|(ring, _)| Some(ring)),
        None => Ok(None),
    }
}

/// How often a running server reads the keys Secret again: a rotation (`confighistory
/// rotate-keys`) reaches every replica within this, with no restart.
pub const RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// Reads the keys Secret again and, when its keyring differs from the one `slot` holds (a
/// rotation), puts it there for every holder of the policy. Returns whether it changed. A Secret
/// gone or malformed leaves the slot as it is: the keys held stay in use (existing snapshots are
/// validated with them) and the error says what is wrong.
pub async fn reload(cluster: &dyn Cluster, target: &Target, slot: &KeySlot) -> Result<bool, Error> {
    let Some(ring) = load(cluster, target).await? else { return Err(Error::Missing { secret: target.name() }) };
    if slot.get().is_some_and(|held| held.to_data() == ring.to_data()) {
        return Ok(false);
    }
    let kept: Vec<String> = ring.ids().map(|i| i.to_string()).collect();
    tracing::info!(secret = %target.name(), current = %ring.current().id(), kept = %kept.join(","), "cluster keys: read again after a change");
    slot.set(ring);
    Ok(true)
}

/// Adds a new key (the next id) to the Secret named `target` and makes it current; every key it
/// held stays, so snapshots MAC'd under them stay valid. The write carries the resourceVersion
/// read: when another writer came between, the Secret is read again and the rotation made anew,
/// [`ROTATE_ATTEMPTS`] times at most. Returns the keyring written.
pub async fn rotate(cluster: &dyn Cluster, target: &Target) -> Result<Keyring, Error> {
    let id = target.id();
    for _ in 0..ROTATE_ATTEMPTS {
        let obj = cluster.get_source(&target.namespace, &id).await.map_err(|e| api(target, e))?;
        let Some(obj) = obj else { return Err(Error::Missing { secret: target.name() }) };
        let (ring, resource_version) = read(&obj, target)?;
        if resource_version.is_empty() {
            return Err(Error::Malformed { secret: target.name(), why: "it has no metadata.resourceVersion to write against".into() });
        }
        let next_id = ring.ids().max().and_then(|KeyId(n)| n.checked_add(1)).ok_or_else(|| Error::Exhausted { secret: target.name() })?;
        let rotated = ring.rotate(new_key(KeyId(next_id))?).map_err(|e| malformed(target, &e))?;
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "data": encode(&rotated)});
        match cluster.patch_source(&target.namespace, &id, &patch).await {
            Ok(()) => {
                let kept: Vec<String> = rotated.ids().map(|i| i.to_string()).collect();
                tracing::info!(secret = %target.name(), from = %ring.current().id(), to = %next_id, kept = %kept.join(","), "cluster keys: rotated");
                return Ok(rotated);
            }
            Err(e) if e.is_conflict() => {
                tracing::debug!(secret = %target.name(), "cluster keys: the Secret changed since it was read; reading it again");
            }
            Err(e) => return Err(api(target, e)),
        }
    }
    Err(Error::Contended { secret: target.name(), attempts: ROTATE_ATTEMPTS })
}

/// The keyring a keys Secret holds, and its resourceVersion.
pub fn read(obj: &Value, target: &Target) -> Result<(Keyring, String), Error> {
    let bad = |why: String| Error::Malformed { secret: target.name(), why };
    let data = match obj.get("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(bad("its data is not a map".into())),
    };
    let mut decoded = BTreeMap::new();
    for (entry, value) in data {
        // The entry's name, never its value: a value that is no base64 is still a key's bytes.
        let named: String = entry.chars().take(64).collect();
        let text = value.as_str().ok_or_else(|| bad(format!("entry {named:?} is not a string")))?;
        let bytes = base64_simd::STANDARD.decode_to_vec(text).map_err(|_| bad(format!("entry {named:?} is not base64")))?;
        decoded.insert(entry, bytes);
    }
    let ring = Keyring::from_data(&decoded).map_err(|e| malformed(target, &e))?;
    let resource_version = obj["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
    Ok((ring, resource_version))
}

/// The Secret [`ensure`] creates: Opaque, labelled as confighistory's, its data the keyring's.
pub fn object(target: &Target, ring: &Keyring) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": SECRET,
        "metadata": {
            "name": target.secret,
            "namespace": target.namespace,
            "labels": {"app.kubernetes.io/managed-by": "confighistory"},
        },
        "type": crate::model::secret::OPAQUE,
        "data": encode(ring),
    })
}

/// A keyring as a Secret's `data` (base64 values).
fn encode(ring: &Keyring) -> Map<String, Value> {
    ring.to_data().into_iter().map(|(k, v)| (k, Value::String(base64_simd::STANDARD.encode_to_string(v)))).collect()
}

/// A new cluster key of `id`: [`MIN_KEY_BYTES`] from the system's CSPRNG (ring's, through rustls'
/// provider, as the TLS handshakes use).
fn new_key(id: KeyId) -> Result<ClusterKey, Error> {
    let mut bytes = vec![0u8; MIN_KEY_BYTES];
    rustls::crypto::ring::default_provider().secure_random.fill(&mut bytes).map_err(|_| Error::Random)?;
    ClusterKey::new(id, bytes).map_err(|_| Error::Random)
}

fn api(target: &Target, source: ApiError) -> Error {
    Error::Api { secret: target.name(), source }
}

fn malformed(target: &Target, e: &KeyError) -> Error {
    Error::Malformed { secret: target.name(), why: e.to_string() }
}
