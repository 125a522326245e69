//! What confighistory keeps in the cluster besides its caches' view of it, each through reads and
//! writes with the resourceVersion read (docs/architecture.md "Stores"):
//! - [`snapshots`]: the snapshots of sources (ConfigMaps and Secrets), made sure of by content;
//! - [`keys`]: the cluster keys Secret that names Secret snapshots (docs/behaviour.md §4a);
//! - [`authority`]: the webhook's own CA and serving certificate, in a Secret its replicas share,
//!   and the bundle its webhook configurations carry (docs/behaviour.md §10.3).
//!
//! The snapshot store's functions are this module's too (`store::ensure`), as they always were.

pub mod authority;
pub mod keys;
pub mod snapshots;

pub use snapshots::*;
