//! `skewer get kustomizations|sources|receivers|providers|alerts`: skewer's objects as tables people read, like
//! `kubectl get` and `flux get`: READY, REVISION, AGE and, when not Ready, why. The rows and
//! the tables are pure, tested without a cluster; [`aligned`] lays out every table the CLI
//! prints.

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use skewer_api::Reconciled;
use skewer_api::conditions::READY;
use skewer_api::{Alert, GitRepository, Kustomization, OCIRepository, Provider, Receiver};

/// Cells under `header`, columns aligned by two spaces, trailing blanks trimmed.
pub fn aligned(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    lines.extend(rows);
    let columns = header.len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            lines
                .iter()
                .map(|l| l.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(i, w)| format!("{:<w$}", l.get(i).map_or("", String::as_str)))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Like [`aligned`], without the columns whose flag in `keep` is false (by index into the
/// full header): the NAMESPACE column without `-A`, KIND when only one kind is listed.
pub fn aligned_keeping(
    header: &[&str],
    mut rows: Vec<Vec<String>>,
    keep: &[(usize, bool)],
) -> String {
    let mut header = header.to_vec();
    let mut drop: Vec<usize> = keep.iter().filter(|(_, k)| !k).map(|(i, _)| *i).collect();
    drop.sort_unstable_by(|a, b| b.cmp(a));
    for column in drop {
        if column < header.len() {
            header.remove(column);
        }
        for r in &mut rows {
            if column < r.len() {
                r.remove(column);
            }
        }
    }
    aligned(&header, rows)
}

/// For `--watch`: the indices of the rows in `now` that are new, or changed since `before`
/// (their age aside, which changes by itself).
pub fn changed<R: Serialize>(before: &[R], now: &[R]) -> Vec<usize> {
    let key = |r: &R| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("age");
        }
        v
    };
    let before: Vec<serde_json::Value> = before.iter().map(key).collect();
    now.iter()
        .enumerate()
        .filter(|(_, r)| !before.contains(&key(r)))
        .map(|(i, _)| i)
        .collect()
}

/// `-o wide`: messages and revisions whole, for the whole process.
static WIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, tables show messages and revisions whole (`-o wide`).
pub fn widen() {
    WIDE.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn wide() -> bool {
    WIDE.load(std::sync::atomic::Ordering::Relaxed)
}

/// A message on one line, cut to what fits a table line (80 characters), with `…` where it
/// was cut (whole with `-o wide`).
pub fn short(message: &str) -> String {
    cut(message, if wide() { usize::MAX } else { 80 })
}

/// `s` on one line, at most `max` characters, the last one `…` when it was cut.
pub fn cut(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    flat.chars().take(max.saturating_sub(1)).collect::<String>() + "…"
}

/// `main@sha1:0123456789abcdef…` as `main@0123456`, `v1@sha256:89ab…` as `v1@sha256:89abcde`
/// (whole with `-o wide`).
pub fn short_revision(r: &str) -> String {
    if wide() {
        return r.to_string();
    }
    if let Some((name, hex)) = r.rsplit_once("sha1:") {
        return format!("{name}{}", hex.get(..7).unwrap_or(hex));
    }
    match r.rsplit_once("sha256:") {
        Some((name, hex)) => format!("{name}sha256:{}", hex.get(..7).unwrap_or(hex)),
        None => r.to_string(),
    }
}

/// How old something created at `created` is, as kubectl says it: `45s`, `12m`, `5h`, `3d`.
pub fn age(created: Option<jiff::Timestamp>, now: jiff::Timestamp) -> String {
    let Some(created) = created else {
        return "<unknown>".into();
    };
    let secs = now.as_second().saturating_sub(created.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// One of skewer's objects, as `get` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `True`, `False` or `Unknown` (not reconciled yet); `Suspended` when suspended.
    pub ready: String,
    pub revision: String,
    pub age: String,
    /// The Ready condition's message.
    pub message: String,
}

fn row<K: Reconciled>(
    obj: &K,
    suspended: bool,
    revision: Option<String>,
    now: jiff::Timestamp,
) -> Row {
    let ready = obj
        .status()
        .and_then(|s| K::conditions(s).iter().find(|c| c.type_ == READY).cloned());
    let created = obj
        .meta()
        .creation_timestamp
        .as_ref()
        .and_then(|t| t.0.to_string().parse::<jiff::Timestamp>().ok());
    Row {
        kind: K::KIND.into(),
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        ready: if suspended {
            "Suspended".into()
        } else {
            ready
                .as_ref()
                .map_or("Unknown".into(), |c| c.status.clone())
        },
        revision: revision.unwrap_or_default(),
        age: age(created, now),
        message: ready.map(|c| c.message).unwrap_or_default(),
    }
}

/// The rows as a table; `namespaces` adds their column, `kinds` the kind's.
pub fn table(rows: &[Row], namespaces: bool, kinds: bool) -> String {
    let header = [
        "NAMESPACE",
        "KIND",
        "NAME",
        "READY",
        "REVISION",
        "AGE",
        "MESSAGE",
    ];
    let cells = |r: &Row| {
        vec![
            r.namespace.clone(),
            r.kind.clone(),
            r.name.clone(),
            r.ready.clone(),
            short_revision(&r.revision),
            r.age.clone(),
            short(&r.message),
        ]
    };
    let lines: Vec<Vec<String>> = rows.iter().map(cells).collect();
    aligned_keeping(&header, lines, &[(0, namespaces), (1, kinds)])
}

async fn listed<K: Reconciled>(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<K>, kube::Error> {
    let api: Api<K> = skewer_api::scoped(client, namespace);
    Ok(api.list(&ListParams::default()).await?.items)
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    rows
}

pub fn kustomization_row(k: &Kustomization, now: jiff::Timestamp) -> Row {
    let revision = k
        .status
        .as_ref()
        .and_then(|s| s.last_applied_revision.clone());
    row(k, k.spec.suspend, revision, now)
}

pub async fn kustomizations(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<Row>, kube::Error> {
    let now = jiff::Timestamp::now();
    let rows = listed::<Kustomization>(client, namespace)
        .await?
        .iter()
        .map(|k| kustomization_row(k, now))
        .collect();
    Ok(sorted(rows))
}

pub async fn sources(client: &Client, namespace: Option<&str>) -> Result<Vec<Row>, kube::Error> {
    let now = jiff::Timestamp::now();
    let mut rows: Vec<Row> = listed::<GitRepository>(client, namespace)
        .await?
        .iter()
        .map(|g| git_row(g, now))
        .collect();
    rows.extend(
        listed::<OCIRepository>(client, namespace)
            .await?
            .iter()
            .map(|o| oci_row(o, now)),
    );
    Ok(sorted(rows))
}

fn stored_revision(s: Option<&skewer_api::SourceStatus>) -> Option<String> {
    s.and_then(skewer_api::SourceStatus::revision)
        .map(str::to_string)
}

pub fn git_row(g: &GitRepository, now: jiff::Timestamp) -> Row {
    row(g, g.spec.suspend, stored_revision(g.status.as_ref()), now)
}

pub fn oci_row(o: &OCIRepository, now: jiff::Timestamp) -> Row {
    row(o, o.spec.suspend, stored_revision(o.status.as_ref()), now)
}

pub async fn receivers(client: &Client, namespace: Option<&str>) -> Result<Vec<Row>, kube::Error> {
    let now = jiff::Timestamp::now();
    let rows = listed::<Receiver>(client, namespace)
        .await?
        .iter()
        .map(|r| {
            // A Receiver has no revision: its webhook path stands in that column.
            let path = r.status.as_ref().and_then(|s| s.webhook_path.clone());
            row(r, r.spec.suspend, path, now)
        })
        .collect();
    Ok(sorted(rows))
}

/// A Provider has no revision: its last delivery stands in that column.
pub fn provider_row(p: &Provider, now: jiff::Timestamp) -> Row {
    let last = p
        .status
        .as_ref()
        .and_then(|s| s.last_delivery.as_ref())
        .map(|d| format!("{} {}", d.result, d.event));
    row(p, p.spec.suspend, last, now)
}

pub async fn providers(client: &Client, namespace: Option<&str>) -> Result<Vec<Row>, kube::Error> {
    let now = jiff::Timestamp::now();
    let rows = listed::<Provider>(client, namespace).await?;
    Ok(sorted(rows.iter().map(|p| provider_row(p, now)).collect()))
}

pub async fn alerts(client: &Client, namespace: Option<&str>) -> Result<Vec<Row>, kube::Error> {
    let now = jiff::Timestamp::now();
    let rows = listed::<Alert>(client, namespace)
        .await?
        .iter()
        .map(|a| {
            // An Alert has no revision: its Provider stands in that column.
            let to = format!("to {}", a.spec.provider_ref.name);
            row(a, a.spec.suspend, Some(to), now)
        })
        .collect();
    Ok(sorted(rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewer_api::conditions::Condition;
    use skewer_api::{KustomizationSpec, KustomizationStatus};

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_long_message_is_cut_with_an_ellipsis_on_one_line() {
        let long = format!("line one\nline two {}", "x".repeat(100));
        let cut = short(&long);
        assert_eq!(cut.chars().count(), 80);
        assert!(
            cut.starts_with("line one line two x") && cut.ends_with('…'),
            "{cut}"
        );
        assert_eq!(short("fits"), "fits");
    }

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let now = ts("2026-11-23T12:00:00Z");
        assert_eq!(age(Some(ts("2026-11-23T11:59:15Z")), now), "45s");
        assert_eq!(age(Some(ts("2026-11-23T11:48:00Z")), now), "12m");
        assert_eq!(age(Some(ts("2026-11-23T07:00:00Z")), now), "5h");
        assert_eq!(age(Some(ts("2026-11-20T12:00:00Z")), now), "3d");
        assert_eq!(age(None, now), "<unknown>");
    }

    fn ks(name: &str, ready: Option<(&str, &str)>, suspend: bool) -> Kustomization {
        let spec: KustomizationSpec = serde_json::from_value(serde_json::json!({
            "sourceRef": {"kind": "GitRepository", "name": "src"}, "suspend": suspend
        }))
        .unwrap();
        let mut k = Kustomization::new(name, spec);
        k.metadata.namespace = Some("flux-system".into());
        k.status = ready.map(|(status, message)| KustomizationStatus {
            conditions: vec![Condition {
                type_: READY.into(),
                status: status.into(),
                message: message.into(),
                ..Default::default()
            }],
            last_applied_revision: Some("main@sha1:0123".into()),
            ..Default::default()
        });
        k
    }

    #[test]
    fn tables_say_ready_revision_age_and_why() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let rows: Vec<Row> = [
            ks(
                "apps",
                Some(("True", "Applied revision: main@sha1:0123")),
                false,
            ),
            ks(
                "infra",
                Some(("False", "dependency 'flux-system/apps' is not ready")),
                false,
            ),
            ks("paused", None, true),
        ]
        .iter()
        .map(|k| kustomization_row(k, now))
        .collect();
        let t = table(&rows, false, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME    READY      REVISION   AGE        MESSAGE");
        assert_eq!(
            lines[1], "apps    True       main@0123  <unknown>  Applied revision: main@sha1:0123",
            "the revision short, as `get apps` has it (whole with -o wide, and in -o yaml)"
        );
        assert!(lines[2].starts_with("infra   False") && lines[2].ends_with("is not ready"));
        assert!(lines[3].starts_with("paused  Suspended"), "{}", lines[3]);
        let wide = table(&rows, true, true);
        assert!(
            wide.starts_with("NAMESPACE    KIND           NAME"),
            "{wide}"
        );
    }
}
