//! The one fetch path: a source object's and an Application's own source go through the same
//! Git ([`git`]) and OCI ([`oci`]) fetches, with one deadline over each, verification before
//! anything is stored, ignore rules, and provenance kept with the artifact.

pub mod git;
pub mod oci;

use std::collections::BTreeMap;

/// A new artifact, stored.
pub struct Got {
    pub revision: String,
    pub stored: skewer_sources::Artifact,
    /// What the artifact's metadata records (a commit's author and message; an OCI manifest's
    /// annotations).
    pub metadata: BTreeMap<String, String>,
    /// What passed verification, for `SourceVerified`.
    pub verified: Option<String>,
}
