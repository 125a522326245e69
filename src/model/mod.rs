//! The vocabulary of docs/behaviour.md as pure functions, with no I/O: what every other layer builds on.
//! Its files form a ladder, each using only the ones below it (docs/architecture.md "model/ ladder",
//! checked by tests/layers.rs).

pub mod digest;
pub mod fold;
pub mod ids;
pub mod json;
pub mod keys;
pub mod kinds;
pub mod meta;
pub mod names;
pub mod policy;
pub mod published;
pub mod rollout;
pub mod secret;
pub mod selector;
pub mod snapshot;
pub mod source;
pub mod sourcekinds;
pub mod template;
pub mod text;
pub mod trim;
