//! `skewer why <kind>/<name>`: where an object came from. The chain is read from what skewer
//! already keeps: the object's owner labels (which Kustomization or Application), its
//! `skewer.dev/origin` annotation (which file and document of the source), the owner's source
//! and applied revision, and the source's artifact metadata (a Git commit's author and
//! message). The text is pure; the reads are a handful of GETs.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::Value;
use skewer_appliers::ObjectId;
use skewer_appliers::transform::{ORIGIN, OWNER_NAME, OWNER_NAMESPACE};

use super::named::{ControlError, Kind};
use skewer_api::{COMMIT_AUTHOR, COMMIT_MESSAGE};

/// The answer, as `-o json` prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// `Kind/namespace/name` of the object asked about.
    pub object: String,
    /// `Kustomization/ns/name` or `Application/ns/name`.
    pub owner: String,
    /// The owner's Ready condition: `Ready`, or `NotReady: reason: message`.
    pub owner_state: String,
    /// `GitRepository/ns/name` (or OCIRepository), or the Application's repository URL.
    pub source: String,
    pub url: String,
    /// The revision the owner last applied (the object is as that revision renders it).
    pub revision: String,
    /// The commit's author and message, when the source recorded them for that revision.
    pub author: Option<String>,
    pub message: Option<String>,
    /// The file within the source, and the document within the file (1-based).
    pub file: Option<String>,
    pub document: Option<u32>,
}

/// `path#n` → (path, n).
pub fn split_origin(origin: &str) -> (String, Option<u32>) {
    match origin.rsplit_once('#') {
        Some((path, n)) => match n.parse() {
            Ok(n) => (path.to_string(), Some(n)),
            Err(_) => (origin.to_string(), None),
        },
        None => (origin.to_string(), None),
    }
}

/// The answer as a person reads it.
pub fn render(p: &Provenance) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("owner", format!("{}  ({})", p.owner, p.owner_state)),
        (
            "source",
            format!("{}  {}", p.source, p.url).trim().to_string(),
        ),
        ("revision", p.revision.clone()),
    ];
    if let Some(author) = &p.author {
        let subject = p
            .message
            .as_deref()
            .and_then(|m| m.lines().next())
            .unwrap_or_default();
        rows.push(("commit", format!("{author}: {subject}")));
    }
    match (&p.file, p.document) {
        (Some(f), Some(d)) => rows.push(("file", format!("{f}, document {d}"))),
        (Some(f), None) => rows.push(("file", f.clone())),
        _ => rows.push((
            "file",
            "not recorded (applied before skewer recorded origins)".into(),
        )),
    }
    let mut out = format!("{}\n", p.object);
    for (k, v) in rows {
        out.push_str(&format!("  {k:<9} {v}\n"));
    }
    out
}

/// The resource a person names: a kind (`ConfigMap`, `configmap`), its plural (`configmaps`),
/// `plural.group`, or one of kubectl's common short names.
pub fn find_resource(discovery: &Discovery, named: &str) -> Option<(ApiResource, bool)> {
    let short: BTreeMap<&str, &str> = [
        ("cm", "configmaps"),
        ("deploy", "deployments"),
        ("svc", "services"),
        ("sa", "serviceaccounts"),
        ("ns", "namespaces"),
        ("ds", "daemonsets"),
        ("sts", "statefulsets"),
        ("ing", "ingresses"),
        ("pvc", "persistentvolumeclaims"),
        ("crd", "customresourcedefinitions"),
        ("ks", "kustomizations"),
        ("app", "applications"),
    ]
    .into();
    let lower = named.to_ascii_lowercase();
    let wanted = short.get(lower.as_str()).copied().unwrap_or(lower.as_str());
    discovery.groups().find_map(|g| {
        g.recommended_resources()
            .into_iter()
            .find_map(|(ar, caps)| {
                let full = format!("{}.{}", ar.plural, ar.group);
                let hit = ar.kind.eq_ignore_ascii_case(wanted)
                    || ar.plural == wanted
                    || full == wanted
                    || format!("{}.{}", ar.kind.to_ascii_lowercase(), ar.group) == wanted;
                hit.then(|| (ar, caps.scope == Scope::Namespaced))
            })
    })
}

fn get_value(obj: DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// Answers `skewer why KIND/NAME -n NAMESPACE`.
pub async fn why(
    client: &Client,
    namespace: &str,
    named: &str,
) -> Result<Provenance, ControlError> {
    let (kind, name) = named
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        .ok_or_else(|| {
            ControlError::Refused(format!(
                "'{named}': name it as <kind>/<name>, like configmap/settings"
            ))
        })?;
    let discovery = Discovery::new(client.clone()).run().await?;
    let (ar, namespaced) = find_resource(&discovery, kind).ok_or_else(|| {
        ControlError::Refused(format!(
            "'{kind}' is not a kind this cluster serves (`kubectl api-resources` lists them)"
        ))
    })?;
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let obj = api.get_opt(name).await?.ok_or_else(|| {
        ControlError::Refused(format!(
            "{} {name} does not exist{}",
            ar.kind,
            if namespaced {
                format!(" in namespace {namespace}")
            } else {
                String::new()
            }
        ))
    })?;
    let id = ObjectId {
        namespace: if namespaced {
            namespace.into()
        } else {
            String::new()
        },
        name: name.into(),
        group: ar.group.clone(),
        kind: ar.kind.clone(),
    };
    let labels = obj.metadata.labels.clone().unwrap_or_default();
    let (Some(owner_name), Some(owner_ns)) = (labels.get(OWNER_NAME), labels.get(OWNER_NAMESPACE))
    else {
        return Err(ControlError::Refused(format!(
            "{} is not managed by skewer (it has no {OWNER_NAME} label)",
            id.display()
        )));
    };
    let origin = obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ORIGIN))
        .map(|o| split_origin(o));
    let mut answer = Provenance {
        object: id.display(),
        file: origin.as_ref().map(|o| o.0.clone()),
        document: origin.and_then(|o| o.1),
        ..Default::default()
    };
    // The owner: the Kustomization or Application of that name whose inventory lists it.
    let id_text = id.to_string();
    let mut owner = None;
    for k in [Kind::Kustomization, Kind::Application] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), owner_ns, &k.resource());
        let Ok(Some(o)) = api.get_opt(owner_name).await else {
            continue;
        };
        let o = get_value(o);
        let listed = super::tree::inventory(&o)
            .iter()
            .any(|(i, _)| i.to_string() == id_text);
        if listed || owner.is_none() {
            owner = Some((k, o));
        }
        if listed {
            break;
        }
    }
    let Some((kind, owner)) = owner else {
        return Err(ControlError::Refused(format!(
            "{} is labeled as applied by {owner_ns}/{owner_name}, which no longer exists",
            id.display()
        )));
    };
    answer.owner_state = super::tree::owner_state(&owner);
    match kind {
        Kind::Application => {
            answer.owner = format!("Application/{owner_ns}/{owner_name}");
            answer.source = "repository".into();
            answer.url = owner["spec"]["source"]["repoURL"]
                .as_str()
                .unwrap_or_default()
                .into();
            answer.revision = owner["status"]["sync"]["revision"]
                .as_str()
                .unwrap_or_default()
                .into();
        }
        _ => {
            answer.owner = format!("Kustomization/{owner_ns}/{owner_name}");
            answer.revision = owner["status"]["lastAppliedRevision"]
                .as_str()
                .unwrap_or_default()
                .into();
            let source = &owner["spec"]["sourceRef"];
            let source_kind = source["kind"].as_str().unwrap_or_default();
            let source_name = source["name"].as_str().unwrap_or_default();
            let source_ns = source["namespace"].as_str().unwrap_or(owner_ns);
            answer.source = format!("{source_kind}/{source_ns}/{source_name}");
            let sk = match source_kind {
                "OCIRepository" => Kind::OCIRepository,
                _ => Kind::GitRepository,
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), source_ns, &sk.resource());
            if let Ok(Some(s)) = api.get_opt(source_name).await {
                let s = get_value(s);
                answer.url = s["spec"]["url"].as_str().unwrap_or_default().into();
                let artifact = &s["status"]["artifact"];
                // The metadata is the stored artifact's: trusted only for the applied revision.
                if artifact["revision"].as_str() == Some(answer.revision.as_str()) {
                    let meta = &artifact["metadata"];
                    answer.author = meta[COMMIT_AUTHOR].as_str().map(String::from);
                    answer.message = meta[COMMIT_MESSAGE].as_str().map(String::from);
                }
            }
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_split_into_file_and_document() {
        assert_eq!(
            split_origin("apps/web.yaml#2"),
            ("apps/web.yaml".into(), Some(2))
        );
        assert_eq!(
            split_origin("apps/web.yaml"),
            ("apps/web.yaml".into(), None)
        );
        assert_eq!(split_origin("a#b.yaml"), ("a#b.yaml".into(), None));
    }

    #[test]
    fn the_chain_reads_top_down() {
        let p = Provenance {
            object: "ConfigMap/team-a/settings".into(),
            owner: "Kustomization/team-a/apps".into(),
            owner_state: "Ready".into(),
            source: "GitRepository/team-a/platform".into(),
            url: "https://git.example.com/platform.git".into(),
            revision: format!("main@sha1:{}", "0a".repeat(20)),
            author: Some("Jane Doe <jane@example.com>".into()),
            message: Some("Raise the web tier to gold\n\nLonger body.".into()),
            file: Some("apps/settings.yaml".into()),
            document: Some(2),
        };
        crate::golden!("why.txt", &render(&p));
    }
}
