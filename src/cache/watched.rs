//! What one watch feeds: the identity of a watch, for the writer, readiness and the port.

use crate::model::ids::{self, SourceKind};
use crate::model::kinds::{Kind, Registry};

/// What one watch feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Watched {
    Namespaces,
    /// The objects of a source kind (sources and their snapshots).
    Sources(SourceKind),
    Workload(Kind),
    Revision(Kind),
}

impl Watched {
    pub fn name(self) -> &'static str {
        match self {
            Watched::Namespaces => "namespaces",
            Watched::Sources(k) => k.resource(),
            Watched::Workload(k) | Watched::Revision(k) => k.name(),
        }
    }

    /// Every watch: namespaces, the source kinds acted on (`sources`: `Policy::acted_on`), the
    /// registry's workloads and revisions.
    pub fn all(kinds: &Registry, sources: ids::SourceKinds) -> Vec<Watched> {
        let mut v = vec![Watched::Namespaces];
        v.extend(sources.iter().map(Watched::Sources));
        v.extend(kinds.workloads().map(Watched::Workload));
        v.extend(kinds.revisions().map(Watched::Revision));
        v
    }
}
