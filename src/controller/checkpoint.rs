//! The re-hash's checkpoint: what the leader's re-hash already confirmed, kept beside its Lease so
//! that the next leader does not read every source again (docs/behaviour.md §7.8;
//! docs/performance.md, "Rolling restart under load").
//!
//! A re-hash reads a referenced source and finds its content named by its `head`; any later
//! write changes the source's resourceVersion, which the metadata watch shows. So "namespace N's
//! sources were confirmed at these resourceVersions" stays true until one of them changes, and a
//! new leader whose cache shows the same resourceVersions need not read them again. At 10,000
//! sources that is 17 minutes of GETs at the default resync rate, during which adoption and
//! repair wait, after every rolling restart of the release.
//!
//! What is kept: per namespace, a digest of its confirmed ConfigMap sources' names and
//! resourceVersions (no content, no hash of content), in the ConfigMap `<lease>-resync` of the
//! Lease's namespace. A namespace whose digest does not match what the new leader's cache shows
//! (a source changed, appeared or went, or was not confirmed) is read in full, as before. Only
//! the release namespace's writers (the admin, and confighistory itself) can write it.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use crate::cache::SourceKey;
use crate::cluster::Created;
use crate::model::digest::{Digest as _, Sha256};
use crate::model::ids::{SourceId, SourceKind};
use crate::model::sourcekinds::Naming;

use super::Ctx;

/// The key of the checkpoint's data.
const KEY: &str = "verified";
/// The first line of the data: the format, so that a later one is not misread.
const HEADER: &str = "confighistory resync checkpoint v1";
/// At most this many bytes of data (a ConfigMap holds 1 MiB): namespaces past it, in name order,
/// are not kept and a new leader reads them.
const MAX_BYTES: usize = 900 * 1024;

/// The digest of one namespace's confirmed sources: SHA-256 over the (name, resourceVersion)
/// pairs in name order, 64 bits in hex.
pub fn digest<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut entries: Vec<(&str, &str)> = entries.into_iter().collect();
    entries.sort_unstable();
    let mut h = Sha256::default();
    for (name, rv) in entries {
        // Names and resourceVersions hold no NUL or newline: the framing is unambiguous.
        h.update(name.as_bytes());
        h.update(&[0]);
        h.update(rv.as_bytes());
        h.update(b"\n");
    }
    crate::model::digest::hex(&h.finish()[..8])
}

/// The digests of the confirmed ConfigMap sources (`verified`: source -> resourceVersion read),
/// per namespace.
pub fn digests(verified: &HashMap<SourceKey, String>) -> BTreeMap<String, String> {
    let mut by_ns: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for ((ns, id), rv) in verified {
        if id.kind.def().naming == Naming::Hash {
            by_ns.entry(ns.as_str()).or_default().push((id.name.as_str(), rv.as_str()));
        }
    }
    by_ns.into_iter().map(|(ns, entries)| (ns.to_owned(), digest(entries))).collect()
}

/// The checkpoint's data: the header, then `<namespace> <digest>` per line, up to [`MAX_BYTES`].
pub fn encode(digests: &BTreeMap<String, String>) -> String {
    let mut out = format!("{HEADER}\n");
    for (ns, d) in digests {
        if out.len() + ns.len() + d.len() + 2 > MAX_BYTES {
            break;
        }
        out.push_str(ns);
        out.push(' ');
        out.push_str(d);
        out.push('\n');
    }
    out
}

/// The digests in a checkpoint's data; nothing for another format. Malformed lines are skipped
/// (their namespaces are read, as without a checkpoint).
pub fn decode(data: &str) -> BTreeMap<String, String> {
    let mut lines = data.lines();
    if lines.next() != Some(HEADER) {
        return BTreeMap::new();
    }
    lines
        .filter_map(|l| {
            let (ns, d) = l.split_once(' ')?;
            let ok = !ns.is_empty() && d.len() == 16 && d.bytes().all(|b| b.is_ascii_hexdigit());
            ok.then(|| (ns.to_owned(), d.to_owned()))
        })
        .collect()
}

/// The sources of `candidates` (source -> the resourceVersion the cache shows) that the
/// checkpoint confirms: all of a namespace's ConfigMap candidates when their digest is the one
/// kept, none of it otherwise.
pub fn confirmed<'a>(
    candidates: impl IntoIterator<Item = (&'a SourceKey, &'a str)>,
    kept: &BTreeMap<String, String>,
) -> Vec<(SourceKey, String)> {
    let mut by_ns: BTreeMap<&str, Vec<(&SourceKey, &str)>> = BTreeMap::new();
    for (key, rv) in candidates {
        if key.1.kind.def().naming == Naming::Hash && !rv.is_empty() {
            by_ns.entry(key.0.as_str()).or_default().push((key, rv));
        }
    }
    by_ns
        .into_iter()
        .filter(|(ns, entries)| kept.get(*ns).is_some_and(|d| *d == digest(entries.iter().map(|(k, rv)| (k.1.name.as_str(), *rv)))))
        .flat_map(|(_, entries)| entries.into_iter().map(|(k, rv)| (k.clone(), rv.to_owned())))
        .collect()
}

fn id(ctx: &Ctx) -> SourceId {
    SourceId::configmap(format!("{}-resync", ctx.args.lease_name))
}

/// The checkpoint the last leader left; empty when there is none or it cannot be read (then
/// every source is read, as without one).
pub async fn load(ctx: &Ctx) -> BTreeMap<String, String> {
    let ns = ctx.lease_namespace();
    match ctx.cluster.get_source(&ns, &id(ctx)).await {
        Ok(Some(obj)) => decode(obj["data"][KEY].as_str().unwrap_or_default()),
        Ok(None) => BTreeMap::new(),
        Err(e) => {
            tracing::warn!(namespace = %ns, name = %id(ctx), error = %e, "could not read the resync checkpoint; every source is read");
            BTreeMap::new()
        }
    }
}

/// Writes `data` as the checkpoint (a merge patch, or a create the first time). Best effort: a
/// failure costs the next leader reads, nothing else.
pub async fn save(ctx: &Ctx, data: &str) -> bool {
    let (ns, id) = (ctx.lease_namespace(), id(ctx));
    let patch = json!({"data": {KEY: data}});
    let result = match ctx.cluster.patch_source(&ns, &id, &patch).await {
        Err(e) if e.code == Some(404) => {
            let obj: Value = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": id.name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": crate::model::names::MANAGER}},
                "data": {KEY: data},
            });
            match ctx.cluster.create_source(&ns, SourceKind::ConfigMap, &obj, false).await {
                Ok(Created::Created) => Ok(()),
                // Another leader's (a moment ago): patched next time.
                Ok(Created::AlreadyExists) => return false,
                Err(e) => Err(e),
            }
        }
        other => other,
    };
    if let Err(e) = &result {
        tracing::warn!(namespace = %ns, name = %id, error = %e, "could not write the resync checkpoint; the next leader reads every source");
    }
    result.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> SourceKey {
        (ns.into(), SourceId::configmap(name))
    }

    #[test]
    fn a_namespace_is_confirmed_only_when_every_source_is_at_the_resource_version_confirmed() {
        let verified: HashMap<SourceKey, String> = [(key("a", "cfg"), "10"), (key("a", "db"), "11"), (key("b", "cfg"), "12")]
            .into_iter()
            .map(|(k, rv)| (k, rv.to_owned()))
            .collect();
        let kept = decode(&encode(&digests(&verified)));
        assert_eq!(kept.len(), 2);
        let (a_cfg, a_db, b_cfg, b_new) = (key("a", "cfg"), key("a", "db"), key("b", "cfg"), key("b", "new"));
        let now = [(&a_cfg, "10"), (&a_db, "11"), (&b_cfg, "12")];
        let mut got: Vec<String> = confirmed(now, &kept).into_iter().map(|((ns, id), rv)| format!("{ns}/{} {rv}", id.name)).collect();
        got.sort();
        assert_eq!(got, ["a/cfg 10", "a/db 11", "b/cfg 12"]);
        // A write since (a new resourceVersion): its namespace is read again, the other is not.
        let changed = [(&a_cfg, "10"), (&a_db, "15"), (&b_cfg, "12")];
        assert_eq!(confirmed(changed, &kept), [(b_cfg.clone(), "12".to_owned())]);
        // A source the last leader did not confirm (new, or its read failed): read, with its namespace.
        let more = [(&b_cfg, "12"), (&b_new, "13")];
        assert!(confirmed(more, &kept).is_empty());
        // A source gone (or no longer referenced): the digest differs, so the namespace is read.
        assert!(confirmed([(&a_cfg, "10")], &kept).is_empty());
    }

    #[test]
    fn secrets_are_never_confirmed_by_a_checkpoint() {
        let secret: SourceKey = ("a".into(), SourceId::new(SourceKind::Secret, "db"));
        let verified: HashMap<SourceKey, String> = [(secret.clone(), "10".to_owned())].into_iter().collect();
        assert!(digests(&verified).is_empty());
        let kept = [("a".to_owned(), digest([("db", "10")]))].into_iter().collect();
        assert!(confirmed([(&secret, "10")], &kept).is_empty());
    }

    #[test]
    fn another_format_or_a_malformed_line_confirms_nothing() {
        let d = digest([("cfg", "1")]);
        assert!(decode(&format!("confighistory resync checkpoint v2\na {d}\n")).is_empty());
        assert!(decode(&format!("a {d}\n")).is_empty(), "no header");
        let kept = decode(&format!("{HEADER}\na {d}\nb nothex!nothex!!\nc\n {d}\n"));
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_checkpoint_stays_inside_a_configmap() {
        let verified: HashMap<SourceKey, String> =
            (0..40_000).map(|i| (key(&format!("team-{i:05}-{}", "x".repeat(40)), "cfg"), i.to_string())).collect();
        let data = encode(&digests(&verified));
        assert!(data.len() <= MAX_BYTES, "{}", data.len());
        let kept = decode(&data);
        assert!(kept.len() > 10_000 && kept.len() < 40_000, "{}", kept.len());
        assert!(kept.contains_key(&format!("team-00000-{}", "x".repeat(40))), "the first namespaces in name order are kept");
    }
}
