//! `skewer create`: one of skewer's objects written from flags, as Flux's and Argo CD's command
//! lines write theirs. It is checked as the daemon would check it (the binary hands in the
//! daemon's judgement, as for `migrate`), then applied server-side as `skewer-cli`, or, with
//! `--export`, printed as YAML to keep in Git. Building the object is pure.

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Map, Value, json};

use skewer_view::named::{ControlError, Kind};

/// The field manager of what `skewer create` applies.
pub const FIELD_MANAGER: &str = "skewer-cli";

/// A GitRepository: `ref` from one of branch, tag, semver, commit (default: branch `main`).
#[derive(clap::Args)]
pub struct GitSource {
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub branch: Option<String>,
    #[arg(long)]
    pub tag: Option<String>,
    #[arg(long)]
    pub semver: Option<String>,
    #[arg(long)]
    pub commit: Option<String>,
    /// A Secret of the namespace with the credentials (username/password, identity, …).
    #[arg(long = "secret-ref")]
    pub secret: Option<String>,
    #[arg(long, default_value = "1m")]
    pub interval: String,
}

/// An OCIRepository: `ref` from one of tag, semver, digest (default: tag `latest`).
#[derive(clap::Args)]
pub struct OciSource {
    /// oci://host/repository
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub tag: Option<String>,
    #[arg(long)]
    pub semver: Option<String>,
    #[arg(long)]
    pub digest: Option<String>,
    /// A kubernetes.io/dockerconfigjson Secret of the namespace.
    #[arg(long = "secret-ref")]
    pub secret: Option<String>,
    #[arg(long, default_value = "5m")]
    pub interval: String,
}

/// A Kustomization of `source` (`GitRepository/NAME`, `OCIRepository/NAME`, or a bare name: a
/// GitRepository).
#[derive(clap::Args)]
pub struct Ks {
    /// `GitRepository/<name>`, `OCIRepository/<name>`, or a GitRepository's name.
    #[arg(long)]
    pub source: String,
    #[arg(long, default_value = "./")]
    pub path: String,
    #[arg(long, default_value = "10m")]
    pub interval: String,
    /// Delete what leaves the source.
    #[arg(long)]
    pub prune: bool,
    /// Ready only once every applied object is healthy.
    #[arg(long)]
    pub wait: bool,
    #[arg(long)]
    pub target_namespace: Option<String>,
    /// Apply as this ServiceAccount of the namespace (a tenant).
    #[arg(long)]
    pub service_account: Option<String>,
    /// Kustomizations of the namespace that must be Ready first.
    #[arg(long)]
    pub depends_on: Vec<String>,
    #[arg(long)]
    pub timeout: Option<String>,
}

/// An Application, as `argocd app create` writes one.
#[derive(clap::Args)]
pub struct App {
    /// The repository: a Git URL, or oci://host/repository.
    #[arg(long)]
    pub repo: String,
    #[arg(long, default_value = "")]
    pub path: String,
    /// A branch, tag, commit or version range (default HEAD).
    #[arg(long)]
    pub revision: Option<String>,
    /// The destination cluster's API server URL (default: the hub, `in-cluster`).
    #[arg(long, conflicts_with = "dest_name")]
    pub dest_server: Option<String>,
    /// The destination cluster's registered name.
    #[arg(long)]
    pub dest_name: Option<String>,
    #[arg(long)]
    pub dest_namespace: Option<String>,
    /// Sync on every change (`syncPolicy.automated`).
    #[arg(long)]
    pub automated: bool,
    /// Automated, deleting what leaves the source.
    #[arg(long)]
    pub auto_prune: bool,
    /// Automated, repairing drift.
    #[arg(long)]
    pub self_heal: bool,
    /// `CreateNamespace=true`, `ServerSideApply=true`, … (repeat).
    #[arg(long = "sync-option")]
    pub sync_options: Vec<String>,
    /// Apply as this ServiceAccount of the namespace (a tenant).
    #[arg(long)]
    pub service_account: Option<String>,
}

pub enum What {
    Git(GitSource),
    Oci(OciSource),
    Kustomization(Ks),
    Application(App),
}

/// Inserts `value` under `key` when there is one.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.into(), v);
    }
}

/// The one reference among `choices` given (`(field, value)`), or `default`; more than one is
/// refused, naming the flags.
fn one_ref(choices: &[(&str, &Option<String>)], default: (&str, &str)) -> Result<Value, String> {
    let given: Vec<(&str, &String)> = choices
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
        .collect();
    match given.as_slice() {
        [] => Ok(json!({ default.0: default.1 })),
        [(k, v)] => Ok(json!({ *k: v })),
        many => Err(format!(
            "give one of --{}, not {}",
            choices
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", --"),
            many.iter()
                .map(|(k, _)| format!("--{k}"))
                .collect::<Vec<_>>()
                .join(" and ")
        )),
    }
}

/// `what` named `name` in `namespace`, as skewer's object (JSON), or why the flags cannot make
/// one.
pub fn object(what: &What, name: &str, namespace: &str) -> Result<Value, String> {
    let (kind, spec) = match what {
        What::Git(g) => {
            let reference = one_ref(
                &[
                    ("branch", &g.branch),
                    ("tag", &g.tag),
                    ("semver", &g.semver),
                    ("commit", &g.commit),
                ],
                ("branch", "main"),
            )?;
            let mut spec = Map::new();
            spec.insert("url".into(), json!(g.url));
            spec.insert("ref".into(), reference);
            spec.insert("interval".into(), json!(g.interval));
            put(
                &mut spec,
                "secretRef",
                g.secret.as_ref().map(|s| json!({"name": s})),
            );
            ("GitRepository", spec)
        }
        What::Oci(o) => {
            let reference = one_ref(
                &[
                    ("tag", &o.tag),
                    ("semver", &o.semver),
                    ("digest", &o.digest),
                ],
                ("tag", "latest"),
            )?;
            let mut spec = Map::new();
            spec.insert("url".into(), json!(o.url));
            spec.insert("ref".into(), reference);
            spec.insert("interval".into(), json!(o.interval));
            put(
                &mut spec,
                "secretRef",
                o.secret.as_ref().map(|s| json!({"name": s})),
            );
            ("OCIRepository", spec)
        }
        What::Kustomization(k) => {
            let (source_kind, source_name) = match k.source.split_once('/') {
                Some((kind, name)) => (kind_of_source(kind)?, name),
                None => ("GitRepository", k.source.as_str()),
            };
            let mut spec = Map::new();
            spec.insert(
                "sourceRef".into(),
                json!({"kind": source_kind, "name": source_name}),
            );
            spec.insert("path".into(), json!(k.path));
            spec.insert("interval".into(), json!(k.interval));
            spec.insert("prune".into(), json!(k.prune));
            if k.wait {
                spec.insert("wait".into(), json!(true));
            }
            put(
                &mut spec,
                "targetNamespace",
                k.target_namespace.as_ref().map(|n| json!(n)),
            );
            put(
                &mut spec,
                "serviceAccountName",
                k.service_account.as_ref().map(|n| json!(n)),
            );
            put(&mut spec, "timeout", k.timeout.as_ref().map(|t| json!(t)));
            if !k.depends_on.is_empty() {
                let deps: Vec<Value> = k.depends_on.iter().map(|d| json!({"name": d})).collect();
                spec.insert("dependsOn".into(), Value::Array(deps));
            }
            ("Kustomization", spec)
        }
        What::Application(a) => {
            let mut destination = Map::new();
            put(
                &mut destination,
                "server",
                a.dest_server.as_ref().map(|s| json!(s)),
            );
            put(
                &mut destination,
                "name",
                a.dest_name.as_ref().map(|s| json!(s)),
            );
            if destination.is_empty() {
                destination.insert("name".into(), json!("in-cluster"));
            }
            put(
                &mut destination,
                "namespace",
                a.dest_namespace.as_ref().map(|s| json!(s)),
            );
            let mut source = Map::new();
            source.insert("repoURL".into(), json!(a.repo));
            source.insert("path".into(), json!(a.path));
            put(
                &mut source,
                "targetRevision",
                a.revision.as_ref().map(|r| json!(r)),
            );
            let mut policy = Map::new();
            if a.automated || a.auto_prune || a.self_heal {
                policy.insert(
                    "automated".into(),
                    json!({"prune": a.auto_prune, "selfHeal": a.self_heal}),
                );
            }
            if !a.sync_options.is_empty() {
                policy.insert("syncOptions".into(), json!(a.sync_options));
            }
            let mut spec = Map::new();
            spec.insert("source".into(), Value::Object(source));
            spec.insert("destination".into(), Value::Object(destination));
            if !policy.is_empty() {
                spec.insert("syncPolicy".into(), Value::Object(policy));
            }
            put(
                &mut spec,
                "serviceAccountName",
                a.service_account.as_ref().map(|n| json!(n)),
            );
            ("Application", spec)
        }
    };
    Ok(json!({
        "apiVersion": format!("{}/{}", skewer_api::GROUP, skewer_api::VERSION),
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
}

fn kind_of_source(kind: &str) -> Result<&'static str, String> {
    match kind.to_ascii_lowercase().as_str() {
        "gitrepository" | "git" => Ok("GitRepository"),
        "ocirepository" | "oci" => Ok("OCIRepository"),
        _ => Err(format!(
            "--source {kind}/…: name a GitRepository/<name> or OCIRepository/<name>"
        )),
    }
}

/// Applies `object` server-side as [`FIELD_MANAGER`]; says whether it was created or changed.
pub async fn apply(client: &Client, object: &Value) -> Result<String, ControlError> {
    let kind =
        Kind::parse(object["kind"].as_str().unwrap_or_default()).map_err(ControlError::Refused)?;
    let (name, namespace) = (
        object["metadata"]["name"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kind.resource());
    let existed = api.get_opt(name).await?.is_some();
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Apply(object),
    )
    .await?;
    Ok(format!(
        "{}/{name}: {}",
        kind.word(),
        if existed { "configured" } else { "created" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git() -> GitSource {
        GitSource {
            url: "https://git.example/fleet.git".into(),
            branch: None,
            tag: None,
            semver: None,
            commit: None,
            secret: Some("fleet-auth".into()),
            interval: "1m".into(),
        }
    }

    #[test]
    fn flags_make_the_objects_flux_and_argo_cd_users_write() {
        let obj = object(&What::Git(git()), "fleet", "apps").unwrap();
        skewer_view::golden!("create-git.yaml", &serde_saphyr::to_string(&obj).unwrap());
        let two = GitSource {
            tag: Some("v1".into()),
            semver: Some("1.x".into()),
            ..git()
        };
        let refused = object(&What::Git(two), "fleet", "apps").unwrap_err();
        assert_eq!(
            refused,
            "give one of --branch, --tag, --semver, --commit, not --tag and --semver"
        );

        let ks = Ks {
            source: "oci/platform".into(),
            path: "./apps".into(),
            interval: "10m".into(),
            prune: true,
            wait: true,
            target_namespace: Some("web".into()),
            service_account: None,
            depends_on: vec!["infra".into()],
            timeout: None,
        };
        let obj = object(&What::Kustomization(ks), "apps", "flux-system").unwrap();
        skewer_view::golden!("create-ks.yaml", &serde_saphyr::to_string(&obj).unwrap());

        let app = App {
            repo: "https://git.example/guestbook.git".into(),
            path: "guestbook".into(),
            revision: None,
            dest_server: None,
            dest_name: None,
            dest_namespace: Some("guestbook".into()),
            automated: false,
            auto_prune: true,
            self_heal: true,
            sync_options: vec!["CreateNamespace=true".into()],
            service_account: None,
        };
        let obj = object(&What::Application(app), "guestbook", "argocd").unwrap();
        skewer_view::golden!("create-app.yaml", &serde_saphyr::to_string(&obj).unwrap());
        assert!(kind_of_source("helmrepository").is_err());
    }
}
