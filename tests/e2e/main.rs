//! End-to-end tests: a real kube-apiserver and kube-controller-manager (`tests/e2e/cluster up`,
//! or an existing cluster with `CONFIGHISTORY_E2E_CLUSTER=external`), driven with kubectl.
//! See docs/testing.md.

mod support;

mod admission;
mod argocd;
mod certs;
mod chart;
mod controller;
mod faults;
mod gitops;
mod harness;
mod incluster;
mod modes;
mod pinning;
mod plugin;
mod protection;
mod readme;
mod rollback;
mod rollouts;
mod secrets;
mod smoke;
mod ui;
