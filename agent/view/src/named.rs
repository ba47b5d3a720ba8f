//! What people name and what goes wrong naming it: the kinds skewer reconciles, an object as
//! `<kind>/<name>`, and the errors of reading or asking about one.

use std::time::Duration;

use kube::api::ApiResource;

use skewer_api::{
    Alert, Application, ApplicationSet, GitRepository, Kustomization, OCIRepository, Provider,
    Receiver,
};

/// The kinds people name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kustomization,
    Application,
    ApplicationSet,
    GitRepository,
    OCIRepository,
    Receiver,
    Provider,
    Alert,
}

impl Kind {
    /// The lower-case name people type and read (`kustomization/web`).
    pub fn word(self) -> &'static str {
        match self {
            Kind::Kustomization => "kustomization",
            Kind::Application => "application",
            Kind::ApplicationSet => "applicationset",
            Kind::GitRepository => "gitrepository",
            Kind::OCIRepository => "ocirepository",
            Kind::Receiver => "receiver",
            Kind::Provider => "provider",
            Kind::Alert => "alert",
        }
    }

    pub fn resource(self) -> ApiResource {
        match self {
            Kind::Kustomization => ApiResource::erase::<Kustomization>(&()),
            Kind::Application => ApiResource::erase::<Application>(&()),
            Kind::ApplicationSet => ApiResource::erase::<ApplicationSet>(&()),
            Kind::GitRepository => ApiResource::erase::<GitRepository>(&()),
            Kind::OCIRepository => ApiResource::erase::<OCIRepository>(&()),
            Kind::Receiver => ApiResource::erase::<Receiver>(&()),
            Kind::Provider => ApiResource::erase::<Provider>(&()),
            Kind::Alert => ApiResource::erase::<Alert>(&()),
        }
    }

    /// The kind a source reference names (`GitRepository`, `OCIRepository`).
    pub fn of_source(kind: &str) -> Option<Self> {
        match kind {
            "GitRepository" => Some(Kind::GitRepository),
            "OCIRepository" => Some(Kind::OCIRepository),
            _ => None,
        }
    }
}

/// An object named on the command line as `<kind>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub kind: Kind,
    pub name: String,
}

const KINDS_HELP: &str = "ks/<name>, app/<name>, appset/<name>, gitrepository/<name>, ocirepository/<name>, receiver/<name>, provider/<name>, alert/<name>";

impl std::str::FromStr for Named {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, name) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}': name it as <kind>/<name>: {KINDS_HELP}"))?;
        if name.is_empty() || name.contains('/') {
            return Err(format!("'{s}': give one name after the kind"));
        }
        Ok(Named {
            kind: Kind::parse(kind)?,
            name: name.into(),
        })
    }
}

impl Kind {
    /// A kind as people type it: `ks`, `kustomization`, `kustomizations`, `app`, …
    pub fn parse(word: &str) -> Result<Self, String> {
        Ok(match word.to_ascii_lowercase().as_str() {
            "ks" | "kustomization" | "kustomizations" => Kind::Kustomization,
            "app" | "apps" | "application" | "applications" => Kind::Application,
            "appset" | "appsets" | "applicationset" | "applicationsets" => Kind::ApplicationSet,
            "gitrepo" | "gitrepository" | "gitrepositories" | "git" => Kind::GitRepository,
            "ocirepo" | "ocirepository" | "ocirepositories" | "oci" => Kind::OCIRepository,
            "receiver" | "receivers" => Kind::Receiver,
            "provider" | "providers" => Kind::Provider,
            "alert" | "alerts" => Kind::Alert,
            other => {
                return Err(format!(
                    "'{other}' is not a kind skewer reconciles; use {KINDS_HELP}"
                ));
            }
        })
    }
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.word(), self.name)
    }
}

/// Why a request did not end well.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{0}")]
    Kube(String),
    #[error("{0} does not exist in namespace {1}")]
    Missing(Named, String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
    #[error("not done after {0:?}; where it stands: {1}")]
    Timeout(Duration, String),
}

impl From<kube::Error> for ControlError {
    fn from(e: kube::Error) -> Self {
        ControlError::Kube(skewer_appliers::apply::api_message(&e))
    }
}
