//! The keys Secret snapshot names are MAC'd under (docs/behaviour.md §4a): a cluster key with an
//! id, kept in a Secret in confighistory's namespace; from it, one key per namespace, so the same
//! content in two namespaces gets unrelated names. A rotation adds a key and makes it current;
//! the old ones are kept for validation, so existing snapshots stay valid while their key is.
//!
//! Pure: the bytes of a new cluster key (randomness) and the Secret that holds the keys (I/O) are
//! the caller's. No `Debug` here prints key bytes.

use std::collections::BTreeMap;

use super::digest::{HmacSha256, Mac};

/// The shortest cluster key accepted: 256 bits.
pub const MIN_KEY_BYTES: usize = 32;
/// What a namespace key is derived under (with the namespace): a new derivation gets a new label.
const NAMESPACE_KEY_LABEL: &[u8] = b"confighistory namespace key v1\0";

/// A cluster key's id: a decimal number, written in the key-id label of every snapshot MAC'd
/// under it, so validation finds the key and a rotation sees which old keys are still needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub u32);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Only the form [`KeyId`]'s `Display` writes (digits, no sign, no leading zero), so a label
/// names one id one way.
impl std::str::FromStr for KeyId {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<KeyId, KeyError> {
        let canonical = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
        match s.parse() {
            Ok(n) if canonical => Ok(KeyId(n)),
            _ => Err(KeyError::BadId(s.chars().take(16).collect())),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key {0} is {1} bytes long: at least {MIN_KEY_BYTES} are needed")]
    TooShort(KeyId, usize),
    #[error("{0:?} is not a key id (a decimal number)")]
    BadId(String),
    #[error("the current key's entry does not hold a key id")]
    BadCurrent,
    #[error("no {CURRENT_ENTRY:?} entry naming the current key")]
    NoCurrentEntry,
    #[error("key id {0} is held twice")]
    Duplicate(KeyId),
    #[error("the current key {0} is not among the keys")]
    NoCurrent(KeyId),
    #[error("unexpected entry {0:?} among the keys")]
    Unexpected(String),
}

/// The cluster key: its id and bytes. Its `Debug` prints the id and the length, never a byte;
/// it has no `Display`, no `Serialize` and no accessor of its bytes outside this module.
#[derive(Clone)]
pub struct ClusterKey {
    id: KeyId,
    bytes: Vec<u8>,
    derived: Derived,
}

/// At most this many namespace keys are kept per cluster key ([`ClusterKey::namespace_key`]); past
/// it the cache starts again empty, so a tenant creating namespaces costs derivations, never
/// memory without bound (about 100 bytes each: under half a MiB per cluster key).
pub const MAX_CACHED_NAMESPACE_KEYS: usize = 4096;

/// The namespace keys derived from one cluster key, by namespace. It lives and dies with its
/// cluster key: the keyring a server holds is replaced whole when the keys Secret is read again
/// after a rotation (`KeySlot::set`), so a derivation under an old ring is never served for a new
/// one. A clone starts empty.
#[derive(Default)]
struct Derived(std::sync::Mutex<std::collections::HashMap<String, [u8; 32]>>);

impl Clone for Derived {
    fn clone(&self) -> Derived {
        Derived::default()
    }
}

impl ClusterKey {
    pub fn new(id: KeyId, bytes: Vec<u8>) -> Result<ClusterKey, KeyError> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort(id, bytes.len()));
        }
        Ok(ClusterKey { id, bytes, derived: Derived::default() })
    }

    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The key of `namespace`: HMAC-SHA256 under the cluster key of a fixed label, the
    /// namespace's length and the namespace (unambiguous: the label ends in NUL, the length is
    /// fixed-width). Unrelated between namespaces for anyone without the cluster key. Derived
    /// once per namespace and kept (at most [`MAX_CACHED_NAMESPACE_KEYS`]): every Secret review
    /// and every Secret reference of a workload asks for it.
    pub fn namespace_key(&self, namespace: &str) -> NamespaceKey {
        let mut derived = self.derived.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bytes) = derived.get(namespace) {
            return NamespaceKey { id: self.id, bytes: *bytes };
        }
        let bytes = self.derive(namespace);
        if derived.len() >= MAX_CACHED_NAMESPACE_KEYS {
            derived.clear();
        }
        derived.insert(namespace.to_owned(), bytes);
        NamespaceKey { id: self.id, bytes }
    }

    fn derive(&self, namespace: &str) -> [u8; 32] {
        let mut m = HmacSha256::new(&self.bytes);
        m.update(NAMESPACE_KEY_LABEL);
        m.update(&(namespace.len() as u64).to_be_bytes());
        m.update(namespace.as_bytes());
        m.finish()
    }

    /// How many namespace keys are kept now.
    pub fn cached_namespace_keys(&self) -> usize {
        self.derived.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterKey").field("id", &self.id).field("bytes", &format_args!("<{} bytes>", self.bytes.len())).finish()
    }
}

/// One namespace's key under one cluster key: what its Secret snapshots' names are MAC'd with.
/// Its `Debug` prints the key id only.
#[derive(Clone)]
pub struct NamespaceKey {
    id: KeyId,
    bytes: [u8; 32],
}

impl NamespaceKey {
    /// The id of the cluster key it was derived from (the snapshot's key-id label).
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// A MAC under this key, to feed.
    pub fn mac(&self) -> HmacSha256 {
        HmacSha256::new(&self.bytes)
    }
}

impl std::fmt::Debug for NamespaceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceKey").field("id", &self.id).finish_non_exhaustive()
    }
}

/// The cluster keys kept: the current one, which new snapshots are MAC'd under, and the older
/// ones a rotation kept, which existing snapshots are still validated under. Its `Debug` prints
/// ids only.
#[derive(Clone)]
pub struct Keyring {
    current: KeyId,
    keys: BTreeMap<KeyId, ClusterKey>,
}

/// The keyring a server holds: shared by every clone of its policy and replaced whole when the
/// keys Secret changes (a rotation, docs/operations.md "Secrets' cluster key"), so a running
/// server takes a rotation without a restart. Each reader takes an `Arc` of the ring it acts on.
/// Empty while Secrets are off or before the keys are known. Its `Debug` prints key ids only.
#[derive(Clone, Default)]
pub struct KeySlot(std::sync::Arc<std::sync::RwLock<Option<std::sync::Arc<Keyring>>>>);

impl KeySlot {
    /// A slot holding `ring`.
    pub fn new(ring: Keyring) -> KeySlot {
        let slot = KeySlot::default();
        slot.set(ring);
        slot
    }

    /// The keyring now (`None`: not loaded).
    pub fn get(&self) -> Option<std::sync::Arc<Keyring>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Replaces the keyring for every holder of this slot.
    pub fn set(&self, ring: Keyring) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::sync::Arc::new(ring));
    }

    pub fn is_loaded(&self) -> bool {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).is_some()
    }
}

impl std::fmt::Debug for KeySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(ring) => f.debug_tuple("KeySlot").field(&ring).finish(),
            None => f.write_str("KeySlot(not loaded)"),
        }
    }
}

/// The entry of [`Keyring::to_data`] naming the current key's id.
pub const CURRENT_ENTRY: &str = "current";
/// The prefix of [`Keyring::to_data`]'s entry holding a key (`key-2`).
pub const KEY_ENTRY_PREFIX: &str = "key-";

impl Keyring {
    /// `current` and the older keys kept beside it.
    pub fn new(current: ClusterKey, kept: impl IntoIterator<Item = ClusterKey>) -> Result<Keyring, KeyError> {
        let mut keys = BTreeMap::new();
        let id = current.id;
        for key in std::iter::once(current).chain(kept) {
            let key_id = key.id;
            if keys.insert(key_id, key).is_some() {
                return Err(KeyError::Duplicate(key_id));
            }
        }
        Ok(Keyring { current: id, keys })
    }

    /// The keyring after a rotation to `new`: it becomes current, every key held stays (dropped
    /// later, with [`Self::without`], once no snapshot carries its id).
    pub fn rotate(&self, new: ClusterKey) -> Result<Keyring, KeyError> {
        let current = self.keys[&self.current].clone();
        let kept = self.keys.values().filter(|k| k.id != self.current).cloned();
        Keyring::new(new, std::iter::once(current).chain(kept))
    }

    /// The keyring without the old key `id` (the current key is never dropped).
    pub fn without(&self, id: KeyId) -> Keyring {
        let mut out = self.clone();
        if id != self.current {
            out.keys.remove(&id);
        }
        out
    }

    pub fn current(&self) -> &ClusterKey {
        &self.keys[&self.current]
    }

    /// The key of `id`, when it is kept.
    pub fn get(&self, id: KeyId) -> Option<&ClusterKey> {
        self.keys.get(&id)
    }

    /// The kept keys, the current one first.
    pub fn kept(&self) -> impl Iterator<Item = &ClusterKey> + '_ {
        std::iter::once(self.current()).chain(self.keys.values().filter(|k| k.id != self.current))
    }

    pub fn ids(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.keys.keys().copied()
    }

    /// The keyring as the `data` of the Secret that holds it: `current` → the current id,
    /// `key-<id>` → each key's bytes.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out: BTreeMap<String, Vec<u8>> =
            self.keys.values().map(|k| (format!("{KEY_ENTRY_PREFIX}{}", k.id), k.bytes.clone())).collect();
        out.insert(CURRENT_ENTRY.to_owned(), self.current.to_string().into_bytes());
        out
    }

    /// Reads [`Self::to_data`]'s form back; anything else in it is refused (errors name entries
    /// and ids, never bytes).
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Keyring, KeyError> {
        let mut current = None;
        let mut keys = Vec::new();
        for (entry, bytes) in data {
            if entry == CURRENT_ENTRY {
                // Not echoed when it is no id: it could be key bytes put in the wrong entry.
                let text = std::str::from_utf8(bytes).map_err(|_| KeyError::BadCurrent)?;
                current = Some(text.trim().parse::<KeyId>().map_err(|_| KeyError::BadCurrent)?);
            } else if let Some(id) = entry.strip_prefix(KEY_ENTRY_PREFIX) {
                keys.push(ClusterKey::new(id.parse()?, bytes.clone())?);
            } else {
                return Err(KeyError::Unexpected(entry.chars().take(64).collect()));
            }
        }
        let current = current.ok_or(KeyError::NoCurrentEntry)?;
        let at = keys.iter().position(|k| k.id == current).ok_or(KeyError::NoCurrent(current))?;
        let now = keys.remove(at);
        Keyring::new(now, keys)
    }
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("current", &self.current).field("ids", &self.keys.keys().collect::<Vec<_>>()).finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::digest;

    /// A cluster key of id `id` whose bytes are `fill` repeated.
    pub(crate) fn key(id: u32, fill: u8) -> ClusterKey {
        ClusterKey::new(KeyId(id), vec![fill; MIN_KEY_BYTES]).unwrap()
    }

    fn mac_of(k: &NamespaceKey, bytes: &[u8]) -> [u8; 32] {
        let mut m = k.mac();
        m.update(bytes);
        m.finish()
    }

    #[test]
    fn namespace_keys_are_derived_per_namespace_and_cluster_key() {
        let (k1, k1_again, k2) = (key(1, 7), key(1, 7), key(2, 8));
        let (a, b) = (k1.namespace_key("shop"), k1.namespace_key("billing"));
        assert_eq!(mac_of(&a, b"x"), mac_of(&k1_again.namespace_key("shop"), b"x"), "same cluster key, same namespace: same key");
        assert_ne!(mac_of(&a, b"x"), mac_of(&b, b"x"));
        assert_ne!(mac_of(&a, b"x"), mac_of(&k2.namespace_key("shop"), b"x"));
        assert_eq!((a.id(), k2.namespace_key("shop").id()), (KeyId(1), KeyId(2)));
        // The derivation is HMAC(cluster key, label || len || namespace), as documented.
        let mut framed = NAMESPACE_KEY_LABEL.to_vec();
        framed.extend_from_slice(&4u64.to_be_bytes());
        framed.extend_from_slice(b"shop");
        let derived = digest::mac(&[7; MIN_KEY_BYTES], &framed);
        assert_eq!(mac_of(&a, b"x"), digest::mac(&derived, b"x"));
    }

    /// The namespace keys are kept per cluster key, bounded: a tenant creating namespaces makes
    /// derivations, not memory; a key read from the cache is the key derived.
    #[test]
    fn namespace_keys_are_cached_per_cluster_key_and_bounded() {
        let k = key(1, 7);
        let first = mac_of(&k.namespace_key("shop"), b"x");
        assert_eq!(k.cached_namespace_keys(), 1);
        assert_eq!(mac_of(&k.namespace_key("shop"), b"x"), first, "from the cache: the same key");
        assert_eq!(k.cached_namespace_keys(), 1);
        for n in 0..MAX_CACHED_NAMESPACE_KEYS + 10 {
            k.namespace_key(&format!("tenant-{n}"));
            assert!(k.cached_namespace_keys() <= MAX_CACHED_NAMESPACE_KEYS, "bounded after {n}");
        }
        assert_eq!(mac_of(&k.namespace_key("shop"), b"x"), first, "derived again after the cache started anew");
        assert_eq!(mac_of(&key(1, 7).namespace_key("tenant-5000"), b"x"), mac_of(&k.namespace_key("tenant-5000"), b"x"));
        assert_eq!(k.clone().cached_namespace_keys(), 0, "a clone derives anew");
        assert!(!format!("{k:?}").contains("shop"), "Debug names no namespace: {k:?}");
    }

    #[test]
    fn keys_are_long_enough_and_ids_are_canonical() {
        assert_eq!(ClusterKey::new(KeyId(1), vec![0; 31]).unwrap_err(), KeyError::TooShort(KeyId(1), 31));
        assert_eq!("12".parse::<KeyId>(), Ok(KeyId(12)));
        for bad in ["", "01", "+1", "-1", "1a", " 1", "99999999999"] {
            assert!(bad.parse::<KeyId>().is_err(), "{bad:?}");
        }
        assert_eq!(KeyId(3).to_string().parse::<KeyId>(), Ok(KeyId(3)));
    }

    #[test]
    fn a_rotation_keeps_the_old_keys_until_dropped() {
        let ring = Keyring::new(key(1, 1), []).unwrap();
        let rotated = ring.rotate(key(2, 2)).unwrap();
        assert_eq!(rotated.current().id(), KeyId(2));
        assert_eq!(rotated.ids().collect::<Vec<_>>(), [KeyId(1), KeyId(2)]);
        assert!(rotated.rotate(key(1, 9)).is_err(), "an id is never reused");
        let dropped = rotated.without(KeyId(1));
        assert!(dropped.get(KeyId(1)).is_none() && dropped.get(KeyId(2)).is_some());
        assert_eq!(dropped.without(KeyId(2)).current().id(), KeyId(2), "the current key stays");
        assert_eq!(Keyring::new(key(1, 1), [key(1, 2)]).unwrap_err(), KeyError::Duplicate(KeyId(1)));
    }

    #[test]
    fn the_keyring_reads_back_from_its_secret_data() {
        let ring = Keyring::new(key(1, 1), []).unwrap().rotate(key(2, 2)).unwrap();
        let data = ring.to_data();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["current", "key-1", "key-2"]);
        let back = Keyring::from_data(&data).unwrap();
        assert_eq!(back.current().id(), KeyId(2));
        for id in [KeyId(1), KeyId(2)] {
            let (a, b) = (ring.get(id).unwrap().namespace_key("ns"), back.get(id).unwrap().namespace_key("ns"));
            assert_eq!(mac_of(&a, b"x"), mac_of(&b, b"x"));
        }
        let mut no_current = data.clone();
        no_current.insert("current".into(), b"3".to_vec());
        assert_eq!(Keyring::from_data(&no_current).unwrap_err(), KeyError::NoCurrent(KeyId(3)));
        let mut no_entry = data.clone();
        no_entry.remove("current");
        assert_eq!(Keyring::from_data(&no_entry).unwrap_err(), KeyError::NoCurrentEntry);
        assert_eq!(KeyError::NoCurrentEntry.to_string(), "no \"current\" entry naming the current key");
        let mut stray = data.clone();
        stray.insert("password".into(), b"x".to_vec());
        assert!(matches!(Keyring::from_data(&stray), Err(KeyError::Unexpected(_))));
        let mut short = data;
        short.insert("key-3".into(), vec![1; 8]);
        assert_eq!(Keyring::from_data(&short).unwrap_err(), KeyError::TooShort(KeyId(3), 8));
    }
}
