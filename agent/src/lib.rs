//! skewer's agent: the CRD types, the reconcilers that drive the `sources` and `appliers`
//! libraries, and the generation of skewer's own install manifests.

pub mod api;
pub mod controllers;
pub mod leader;
pub mod manifests;
pub mod metrics;
