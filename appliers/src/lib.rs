//! Appliers: turn a directory of manifests into a cluster's state. [`sync::run`] is the one
//! pipeline every caller drives (build → plan → widen inventory → apply → prune → health).
//! Loading, patching, ordering, inventory diffing and health are pure functions tested
//! without a cluster; [`apply`] and [`prune`] do the I/O with server-side apply. Nothing here
//! knows about skewer's CRDs: callers pass plain options and get plain results back.

pub mod apply;
pub mod compare;
pub mod diff;
pub mod directory;
pub mod drift;
pub mod health;
pub mod inventory;
pub mod kustomize;
pub mod load;
pub mod message;
pub mod normalize;
pub mod object;
pub mod order;
pub mod patch;
pub mod policy;
pub mod prune;
pub mod resources;
pub mod scope;
pub mod secrets;
pub mod selector;
pub mod sops;
pub mod substitute;
pub mod sync;
pub mod transform;
pub mod wait;

pub use inventory::Inventory;
pub use object::{Manifest, ObjectId};
pub use sync::{HealthChecks, SyncError, SyncHooks, SyncReport, SyncRequest};
