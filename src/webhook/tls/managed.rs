//! The managed certificate source (docs/behaviour.md §10.3): reads and writes the CA authority's
//! Secret and the webhook configurations' bundle, and serves the certificate the authority's
//! rules choose (`store::authority`). A direct kube client, like the Lease's: nothing else
//! reads these objects (docs/architecture.md "What goes through the port").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::cluster::clock::Clock;
use crate::store::authority::{
    above_carried, apply, choose, decide, generation_floor, needs_bundle, trusted_by_all, Action, Configuration, Replica, Stored, Target,
    FIELD_MANAGER, GENERATION_ANNOTATION,
};

use super::Reloading;

struct Kube {
    secrets: Api<Secret>,
    mutating: Api<MutatingWebhookConfiguration>,
    validating: Api<ValidatingWebhookConfiguration>,
}

impl Kube {
    async fn read_secret(&self, name: &str) -> Result<Option<(Option<Stored>, String)>, kube::Error> {
        let Some(secret) = self.secrets.get_opt(name).await? else { return Ok(None) };
        let data: BTreeMap<String, Vec<u8>> = secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
        Ok(Some((Stored::parse(&data), secret.metadata.resource_version.unwrap_or_default())))
    }

    async fn write_secret(&self, target: &Target, stored: &Stored, resource_version: Option<&str>) -> Result<(), kube::Error> {
        let mut secret = Secret::default();
        secret.metadata.name = Some(target.secret.clone());
        secret.metadata.namespace = Some(target.namespace.clone());
        secret.metadata.labels = Some(BTreeMap::from([("app.kubernetes.io/managed-by".to_owned(), "confighistory".to_owned())]));
        secret.type_ = Some("Opaque".into());
        secret.data = Some(stored.data().into_iter().map(|(k, v)| (k, ByteString(v))).collect());
        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match resource_version {
            None => self.secrets.create(&params, &secret).await.map(drop),
            Some(rv) => {
                secret.metadata.resource_version = Some(rv.to_owned());
                self.secrets.replace(&target.secret, &params, &secret).await.map(drop)
            }
        }
    }

    async fn configurations(&self, names: &[String]) -> Result<Vec<Configuration>, kube::Error> {
        let mut out = Vec::new();
        for name in names {
            if let Some(c) = self.mutating.get_opt(name).await? {
                out.push(Configuration::from_json("MutatingWebhookConfiguration", &serde_json::to_value(c).unwrap_or_default()));
            }
            if let Some(c) = self.validating.get_opt(name).await? {
                out.push(Configuration::from_json("ValidatingWebhookConfiguration", &serde_json::to_value(c).unwrap_or_default()));
            }
        }
        Ok(out)
    }

    /// Server-side apply of the bundle into every webhook of `c`, preconditioned on the
    /// resourceVersion read.
    async fn write_bundle(&self, c: &Configuration, stored: &Stored) -> Result<Configuration, kube::Error> {
        let bundle = base64_simd::STANDARD.encode_to_string(stored.bundle());
        let hooks: Vec<serde_json::Value> =
            c.hooks.iter().map(|(name, _)| serde_json::json!({"name": name, "clientConfig": {"caBundle": bundle}})).collect();
        let patch = serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": c.kind,
            "metadata": {
                "name": c.name,
                "resourceVersion": c.resource_version,
                "annotations": {GENERATION_ANNOTATION: stored.generation.to_string()},
            },
            "webhooks": hooks,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let written = match c.kind {
            "MutatingWebhookConfiguration" => serde_json::to_value(self.mutating.patch(&c.name, &params, &Patch::Apply(&patch)).await?),
            _ => serde_json::to_value(self.validating.patch(&c.name, &params, &Patch::Apply(&patch)).await?),
        };
        Ok(Configuration::from_json(c.kind, &written.unwrap_or_default()))
    }
}

/// Keeps the Secret, the webhooks' bundle and the served certificate as [`decide`] and
/// [`choose`] say, until the process ends. `ready` turns true once a certificate is served.
pub async fn run(client: kube::Client, clock: Arc<Clock>, target: Target, resolver: Arc<Reloading>, ready: Arc<AtomicBool>) {
    let kube = Kube {
        secrets: Api::namespaced(client.clone(), &target.namespace),
        mutating: Api::all(client.clone()),
        validating: Api::all(client),
    };
    let timing = target.timing;
    let mut me = Replica { id: target.replica.clone(), serving: None, trusted: None };
    let mut serving_cert: Option<String> = None;
    let mut log = Warnings { secret: format!("{}/{}", target.namespace, target.secret), last: None, this_round: false };
    // Rounds that changed something follow each other at once; a run of them (which the rules
    // never make, but a clock could) is slowed to the poll interval.
    let mut writes_in_a_row = 0;
    loop {
        log.this_round = false;
        if writes_in_a_row >= 8 {
            tokio::time::sleep(timing.poll()).await;
        }
        let now = clock.now_ms();
        let (stored, resource_version) = match kube.read_secret(&target.secret).await {
            Ok(Some((stored, rv))) => (stored, Some(rv)),
            Ok(None) => (None, None),
            Err(e) => {
                log.warn("cannot read the Secret (the chart's Role grants get on it)", &e);
                tokio::time::sleep(timing.poll()).await;
                continue;
            }
        };
        // The webhooks: bring their bundle up to the Secret's, then see what they trust.
        let mut carried: Vec<(u64, Vec<u8>)> = Vec::new();
        match kube.configurations(&target.configurations).await {
            Ok(mut configurations) => {
                if let Some(stored) = &stored {
                    for c in configurations.iter_mut() {
                        if needs_bundle(stored, c.generation, &c.hooks) {
                            match kube.write_bundle(c, stored).await {
                                Ok(written) => {
                                    tracing::info!(configuration = %c.name, kind = c.kind, generation = stored.generation, "wrote the CA bundle");
                                    *c = written;
                                }
                                // Another replica wrote a bundle first (the write is preconditioned
                                // on what was read): the next round reads it. A lost race, not an
                                // error to report (the rotation soak saw it once a rotation or so).
                                Err(kube::Error::Api(s)) if s.code == 409 => {
                                    tracing::debug!(configuration = %c.name, "another replica wrote the CA bundle first")
                                }
                                Err(e) => log.warn(
                                    "cannot write the webhook configurations' caBundle (the chart's ClusterRole grants patch on them)",
                                    &e,
                                ),
                            }
                        }
                    }
                }
                carried = configurations.iter().flat_map(|c| c.hooks.iter().map(|(_, pem)| (c.generation, pem.clone()))).collect();
                if configurations.is_empty() {
                    log.warn("no webhook configuration to write the CA bundle into", &format!("none named {:?}", target.configurations));
                }
                let trusted = trusted_by_all(&configurations).unwrap_or_default();
                let mut since = me.trusted.take().unwrap_or_default();
                since.retain(|ca, _| trusted.contains(ca));
                for ca in trusted {
                    since.entry(ca).or_insert(now);
                }
                me.trusted = Some(since);
            }
            Err(e) => {
                log.warn("cannot read the webhook configurations (the chart's ClusterRole grants get on them)", &e);
                me.trusted = None;
            }
        }
        let action = decide(stored.as_ref(), &me, now, &timing, &target.names);
        // A Secret at or behind a generation the webhooks carry with another bundle (a start-over,
        // a restored older copy) is renumbered even when nothing else is to change, so its bundle
        // reaches them.
        let floor = |s: &Stored| generation_floor(s.bundle().as_bytes(), &carried);
        let renumber = action == Action::Wait && stored.as_ref().is_some_and(|s| s.generation < floor(s));
        if action != Action::Wait || renumber {
            let next = if renumber { Ok(stored.clone()) } else { apply(stored.as_ref(), &action, &me.id, now, &timing, &target.names) };
            let next = next.map(|n| n.map(|n| above_carried(&n, floor(&n)).unwrap_or(n)));
            let written = match next {
                Ok(Some(next)) => kube.write_secret(&target, &next, resource_version.as_deref()).await,
                Ok(None) => Ok(()),
                Err(e) => {
                    log.warn("cannot make a certificate", &e);
                    tokio::time::sleep(timing.poll()).await;
                    continue;
                }
            };
            writes_in_a_row += 1;
            match written {
                Ok(()) => {
                    if !matches!(action, Action::Record(_)) {
                        tracing::info!(?action, "managed certificates: changed the Secret");
                    }
                }
                // Another replica wrote first: read again.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    log.warn("cannot write the Secret (the chart's Role grants create, and update on it)", &e);
                    tokio::time::sleep(timing.poll()).await;
                }
            }
            continue;
        }
        if let Some(stored) = &stored {
            if let Some(leaf) = choose(stored, &me, serving_cert.as_deref(), now, &timing) {
                match super::certified_key(leaf.cert_pem.as_bytes(), leaf.key_pem().as_bytes()) {
                    Ok(ck) => {
                        resolver.set(ck);
                        tracing::info!(issuer = %leaf.issuer, "managed certificates: serving a new certificate");
                        me.serving = Some(leaf.issuer.clone());
                        serving_cert = Some(leaf.cert_pem.clone());
                        ready.store(true, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) => log.warn("the stored serving certificate does not load", &e),
                }
            }
        }
        writes_in_a_row = 0;
        log.end_round();
        tokio::time::sleep(timing.poll()).await;
    }
}

/// Logs a failure when it starts or changes, not on every round, and once when rounds work again.
struct Warnings {
    secret: String,
    last: Option<String>,
    this_round: bool,
}

impl Warnings {
    fn warn(&mut self, what: &str, e: &dyn std::fmt::Display) {
        self.this_round = true;
        let text = format!("{what}: {e}");
        if self.last.as_deref() != Some(&text) {
            tracing::warn!(secret = %self.secret, "managed certificates: {text}");
            self.last = Some(text);
        }
    }

    fn end_round(&mut self) {
        if !self.this_round && self.last.take().is_some() {
            tracing::info!(secret = %self.secret, "managed certificates: working again");
        }
    }
}
