#![forbid(unsafe_code)]
//! confighistory: gives ConfigMaps a rollout history, so `kubectl rollout undo` restores the
//! configuration a revision ran with along with its image.
//!
//! - [`admission`]: the decisions of SPEC §6, pure functions of a request and a view.
//! - [`snapshot`]: content hashing, names and validity of snapshots (§5).
//! - [`template`]: pod templates and their ConfigMap references (§4).
//! - [`state`]: the in-memory view fed by watches; [`cluster`]: API-server I/O.
//! - [`server`]: the HTTPS router, TLS reload, health and metrics; [`serve`] wires it up.
//! - [`controller`]: propagation, adoption, repair and GC (§7–9).

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod json;
pub mod names;
pub mod plugin;
pub mod policy;
pub mod serve;
pub mod server;
pub mod snapshot;
pub mod state;
pub mod template;
