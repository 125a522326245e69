//! The in-memory view of the cluster that admission decisions read (docs/behaviour.md §10: metadata,
//! extracted references and template hashes only, never a source's data: sources are listed
//! and watched as metadata, so not even a page of the initial list carries their content).
//!
//! kube-runtime's reflector shape, over the records this crate keeps instead of whole objects:
//! - [`records`]: the record of one object ([`SourceInfo`], [`WorkloadInfo`], ...), built from
//!   the object as its watch delivers it;
//! - [`State`]: the read-only store: private records and indexes, answered through queries that
//!   let an unrelated source write be answered in microseconds;
//! - [`Writer`]: the one way in for changes, [`Writer::apply`] of an [`Event`];
//! - [`Readiness`]: which watches have delivered their first list, and whether all have;
//! - [`lock`]: the lock the watches, the webhook and the controller's passes share, and its
//!   discipline ([`admission_read`], [`pass`], [`read`], [`write`]).

pub mod lock;
mod readiness;
pub mod records;
mod state;
mod watched;
mod writer;

pub use lock::{admission_read, blocking, pass, read, write, Lock};
pub use readiness::{Readiness, Ready};
pub use records::{
    controller_owner, Key, NamespaceInfo, ObjectKey, Pairs, RefCount, Referenced, RevisionInfo, SourceInfo, SourceKey, WorkloadInfo,
    PARTIAL_OBJECT_METADATA,
};
pub use state::State;
pub use watched::Watched;
pub use writer::{Event, Writer};
