//! skewer's controllers: what every reconciler shares (`runtime`: outcomes, the [`runtime::context::Context`],
//! the controller wiring, reports), where objects go (`targets`, `clusters`), self-heal
//! (`drift`), who holds an object (`ownership`), webhooks (`webhook`), the reconcilers that
//! turn skewer's objects into calls to the `sources` and `appliers` libraries
//! (`reconcilers`), what they fetch and serve (`appsource`, `artifacts`, `storage`), and the
//! daemon's edges (`leader`, `metrics`, `http`). ARCHITECTURE.md at the top of the repository
//! walks the layers.

pub use skewer_api as api;
pub mod appsource;
pub mod artifacts;
pub mod clusters;
pub mod drift;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod notify;
pub mod ownership;
pub mod reconcilers;
pub mod runtime;
pub mod shards;
pub mod storage;
pub mod targets;
pub mod webhook;
