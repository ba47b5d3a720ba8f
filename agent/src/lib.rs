//! skewer's agent: the CRD types (`api`), the reconcilers that turn them into calls to the
//! `sources` and `appliers` libraries (`reconcilers`), what they share (`runtime`), where
//! objects go (`targets`), self-heal (`drift`), and the daemon's edges (`leader`, `metrics`,
//! `http`, `manifests`). ARCHITECTURE.md at the top of the repository walks the layers.

pub use skewer_api as api;
pub mod appsource;
pub mod artifacts;
pub mod cli;
pub mod clusters;
pub mod daemon;
pub mod drift;
#[doc(hidden)]
pub mod golden;
pub mod http;
pub mod inventory;
pub mod leader;
pub mod manifests;
pub mod metrics;
pub mod ownership;
pub mod reconcilers;
pub mod runtime;
pub mod spec;
pub mod storage;
pub mod targets;
pub mod ui;
pub mod view;
pub mod webhook;
