//! Every admission rule of docs/behaviour.md §6, driven through the very router the binary serves, with real
//! AdmissionReview JSON. The API server is an in-memory stand-in here (fault injection included);
//! the e2e suite repeats the important scenarios against a real kube-apiserver.
//!
//! One module per topic of docs/behaviour.md; fixture.rs holds what they share.

#[path = "../common/mod.rs"]
mod common;
mod fixture;

mod bad_input;
mod bypass;
mod faults;
mod forged;
mod protection;
mod signals;
mod sources;
mod validation;
mod workloads;
