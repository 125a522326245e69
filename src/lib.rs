#![forbid(unsafe_code)]
//! confighistory: gives ConfigMaps (and Secrets, where the admin turns them on: docs/behaviour.md
//! §4a) a rollout history, so `kubectl rollout undo` restores the configuration a revision ran
//! with along with its image.
//!
//! The layers, lowest first; a module imports only from its layer or those below it
//! (docs/architecture.md; tests/layers.rs checks it, and the ladders inside `model/` and `cache/`):
//! - [`model`]: the vocabulary of docs/behaviour.md as pure functions: names and annotations, snapshots (§5),
//!   pod templates and their references (§4), the policy (§3).
//! - [`cli`]: the configuration: flags and their environment variables, plain data.
//! - [`metrics`]: the process's Prometheus metrics.
//! - [`cache`]: the in-memory view of the cluster: the records the watches keep, a read-only
//!   [`cache::State`] answered through queries, one [`cache::Writer::apply`] for every change,
//!   one [`cache::Readiness`], and the lock they share.
//! - [`cluster`]: the Kubernetes port: the [`cluster::Cluster`] trait every API-server read and
//!   write of admission and the controller loops goes through, the real client, an in-memory
//!   cluster for tests, and the watches that feed the cache. Not through it: the leader's Lease
//!   (`controller::leader`), the webhook's certificate and configurations (`webhook::tls::managed`),
//!   the published effective configuration and `selftest` (`runtime`), and the plugin's reads
//!   (`plugin::gather`): each a direct kube call of its own (docs/architecture.md, "The port").
//! - [`context`]: what webhook and controller share: policy, cache, Kubernetes port, readiness, clock.
//! - [`store`]: what confighistory keeps in the cluster, each with its own errors: snapshots
//!   (docs/behaviour.md §5), the cluster keys, the webhook's CA authority (pure rules).
//! - [`admission`]: the decisions of docs/behaviour.md §6, pure functions of a request and a view.
//! - [`controller`]: propagation, adoption, repair and GC (§7–9), each loop beside its planner, and
//!   leader election.
//! - [`webhook`]: the HTTPS edge: router, limits, TLS (files reloaded, or managed certificates), health;
//!   [`webhook::serve`] serves it.
//! - [`runtime`]: builds `serve`, `controller` and `gc` (client, cache, watches, shutdown signal).
//! - [`plugin`]: `kubectl confighistory`.

pub mod admission;
pub mod cache;
pub mod cli;
pub mod cluster;
pub mod context;
pub mod controller;
pub mod metrics;
pub mod model;
pub mod plugin;
pub mod runtime;
pub mod store;
pub mod webhook;
