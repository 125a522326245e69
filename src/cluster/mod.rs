//! The API-server side of admission: fresh reads of sources and snapshot writes, behind a small
//! trait so the edge can be exercised without a cluster for fault cases.
//!
//! port.rs: the [`Cluster`] trait and its error and values; [`KubeCluster`] (kube.rs): the real
//! thing; [`MemoryCluster`] (memory.rs): the in-memory stand-in of the tests. Their items are
//! re-exported here, so `crate::cluster::{Cluster, KubeCluster, MemoryCluster, ...}` name them.

pub mod calls;
pub mod clock;
mod kube;
mod memory;
mod port;
pub mod raw;
pub mod watch;

pub use self::kube::KubeCluster;
pub use memory::{MemoryCluster, WorkloadKey};
pub use port::{source_metadata, source_resource, ApiError, Cluster, Created, Event, ObjectRef, Result, SourcePage, TOO_LARGE};
