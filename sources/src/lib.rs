//! Sources of desired state. A source is fetched (Git today), turned into a reproducible
//! tarball whose sha256 digest names it, and kept in an [`artifact::Store`]. Nothing here knows
//! about Kubernetes: the agent turns CRDs into calls to these functions.

pub mod artifact;
pub mod auth;
pub mod dockerconfig;
pub mod git;
pub mod ignore;
pub mod oci;
pub mod reference;
pub mod repocreds;
pub mod untrusted;
pub mod verify;

pub use artifact::{Artifact, File, Store, StoreError};
pub use auth::{Auth, AuthError};
pub use git::{Access, GitError, GitFetcher, Signed, SignedPayload};
pub use reference::{GitRefSpec, RefError, RemoteRef, Resolved};
pub use verify::{Keyring, Verified, VerifyError, VerifyMode};
