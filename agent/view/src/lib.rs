//! What people read, shared by the command line and the dashboard: rows and aligned tables
//! (`table`, `apps`, `appsets`, `events`), an owner's tree of objects (`tree`), where an object came from
//! (`why`), and how objects are named (`named`). The text is pure; the reads are against the
//! hub.

pub mod apps;
pub mod appsets;
pub mod clusters;
pub mod events;
pub mod export;
#[doc(hidden)]
pub mod golden;
pub mod history;
pub mod logs;
pub mod named;
pub mod shards;
pub mod table;
pub mod tree;
pub mod why;
