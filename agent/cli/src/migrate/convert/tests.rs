use super::*;
use skewer_appliers::load::parse_yaml_documents;

/// Objects as a cluster running Flux and Argo CD returns them (status and server fields
/// included), in the shapes their documentation shows.
const LIVE: &str = r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: apps
  namespace: flux-system
  uid: 0b7c2f4e-1111-2222-3333-444455556666
  resourceVersion: "4711"
  generation: 3
  finalizers: [finalizers.fluxcd.io]
  labels: {team: web}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"spec":{}}'
    reconcile.fluxcd.io/requestedAt: "2024-01-01T00:00:00Z"
  managedFields: [{manager: kubectl, operation: Update}]
spec:
  interval: 10m
  path: ./apps
  prune: true
  sourceRef: {kind: GitRepository, name: fleet, apiVersion: source.toolkit.fluxcd.io/v1}
  postBuild:
    substitute: {cluster: prod}
status:
  inventory:
    entries:
    - {id: apps_web_apps_Deployment, v: v1}
    - {id: _apps__Namespace, v: v1}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: fleet, namespace: flux-system}
spec:
  interval: 1m
  url: https://github.com/acme/fleet
  ref: {branch: main}
  gitImplementation: go-git
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {name: github, namespace: flux-system}
spec:
  type: github
  events: [push]
  secretRef: {name: webhook-token}
  resources:
  - {apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: fleet}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: guestbook
  namespace: argocd
  finalizers: [resources-finalizer.argocd.argoproj.io]
spec:
  project: default
  source: {repoURL: https://github.com/argoproj/argocd-example-apps.git, targetRevision: HEAD, path: guestbook}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
operation:
  sync: {revision: HEAD}
status:
  resources:
  - {version: v1, kind: Service, namespace: guestbook, name: guestbook-ui, status: Synced}
  - {group: apps, version: v1, kind: Deployment, namespace: guestbook, name: guestbook-ui, status: Synced}
---
apiVersion: v1
kind: Secret
metadata:
  name: prod
  namespace: argocd
  labels: {argocd.argoproj.io/secret-type: cluster}
stringData: {name: prod, server: https://prod.example:6443}
---
apiVersion: v1
kind: Secret
metadata: {name: unrelated, namespace: argocd}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: argocd}
"#;

fn plan(yaml: &str, judge: Judge) -> Plan {
    convert(parse_yaml_documents(yaml).unwrap(), judge)
}

fn takes_all(_: &Value) -> Option<String> {
    None
}

fn find<'a>(plan: &'a Plan, kind: &str) -> &'a Converted {
    plan.converted
        .iter()
        .find(|c| c.from.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", plan.converted))
}

#[test]
fn fluxs_and_argo_cds_objects_come_along_whole() {
    let plan = plan(LIVE, &takes_all);
    let kinds: Vec<&str> = plan
        .converted
        .iter()
        .map(|c| c.from.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        ["Application", "GitRepository", "Kustomization", "Receiver"]
    );
    assert!(plan.whole(), "{:?}", plan.converted);
    for c in &plan.converted {
        assert_eq!(c.object["apiVersion"], SKEWER_API);
        assert!(c.lost.is_empty(), "{}: {:?}", c.from, c.lost);
        assert!(c.object.get("status").is_none() && c.object.get("operation").is_none());
    }

    let ks = find(&plan, "Kustomization");
    assert_eq!(
        ks.object["metadata"],
        serde_json::json!({"name": "apps", "namespace": "flux-system", "labels": {"team": "web"},
            "annotations": {"reconcile.fluxcd.io/requestedAt": "2024-01-01T00:00:00Z"}}),
        "server fields, finalizers and kubectl's last-applied record are left behind"
    );
    assert_eq!(ks.object["spec"]["sourceRef"]["apiVersion"], SKEWER_API);
    assert_eq!(
        ks.object["spec"]["postBuild"]["substitute"]["cluster"],
        "prod"
    );
    let live: Vec<String> = ks
        .live
        .entries
        .iter()
        .map(|(id, v)| format!("{id} {v}"))
        .collect();
    assert_eq!(
        live,
        ["_apps__Namespace v1", "apps_web_apps_Deployment apps/v1"]
    );

    let rcv = find(&plan, "Receiver");
    assert_eq!(rcv.object["spec"]["resources"][0]["apiVersion"], SKEWER_API);
    assert!(
        rcv.notes[0].contains("webhook URL changes"),
        "{:?}",
        rcv.notes
    );

    let app = find(&plan, "Application");
    assert_eq!(app.tool, Tool::ArgoCd);
    assert_eq!(app.live.len(), 2);
    assert!(
        app.live
            .entries
            .iter()
            .any(|(id, v)| id.kind == "Deployment" && v == "apps/v1")
    );
    let notes = app.notes.join("\n");
    assert!(notes.contains("resources-finalizer.argocd.argoproj.io is not carried"));
    assert!(notes.contains("operation"));

    let skipped: Vec<String> = plan
        .skipped
        .iter()
        .map(|(o, why)| format!("{o}: {why}"))
        .collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].starts_with("Secret argocd/prod (v1): read by skewer as it is"));
}

#[test]
fn what_does_not_come_along_is_named_with_why() {
    let yaml = r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 10m
  path: ./apps
  sourceRef: {kind: GitRepository, name: fleet}
  aFieldFromTheFuture: {x: 1}
  postBuild: {substitute: {a: b}, somethingElse: true}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: exprs, namespace: flux-system}
spec:
  interval: 10m
  path: ./apps
  sourceRef: {kind: GitRepository, name: fleet}
  healthCheckExprs: [{apiVersion: x/v1, kind: X, current: "true"}]
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: podinfo, namespace: flux-system}
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: team-a, namespace: argocd}
"#;
    let judge = |o: &Value| {
        o.pointer("/spec/healthCheckExprs")
            .map(|_| "spec.healthCheckExprs is not supported by skewer".to_string())
    };
    let plan = plan(yaml, &judge);
    assert!(!plan.whole());
    let lost = |name: &str| {
        plan.converted
            .iter()
            .find(|c| c.from.name == name)
            .map(|c| c.lost.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        lost("apps"),
        [
            "spec.aFieldFromTheFuture: skewer's schema has no such field (the API server would drop it)",
            "spec.postBuild.somethingElse: skewer's schema has no such field (the API server would drop it)"
        ]
    );
    assert_eq!(
        lost("exprs"),
        ["refused by skewer: spec.healthCheckExprs is not supported by skewer"]
    );
    let skipped: Vec<String> = plan
        .skipped
        .iter()
        .map(|(o, why)| format!("{} {}: {why}", o.kind, o.name))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped
            .iter()
            .any(|s| s.starts_with("AppProject team-a: projects are not carried"))
    );
    assert!(skipped.contains(&"HelmRelease podinfo: skewer has no HelmRelease".to_string()));
}

#[test]
fn a_spec_that_does_not_read_is_named_not_dropped() {
    let yaml = r#"
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: fleet, namespace: flux-system}
spec: {url: 42, interval: 1m}
"#;
    let plan = plan(yaml, &takes_all);
    let lost = &plan.converted[0].lost;
    assert_eq!(lost.len(), 1);
    assert!(
        lost[0].starts_with("not readable as skewer's GitRepository: "),
        "{lost:?}"
    );
}

#[test]
fn an_original_migrate_stopped_is_written_as_it_was() {
    let yaml = r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: apps
  namespace: flux-system
  annotations:
    skewer.dev/migrated-to: skewer.dev/v1alpha1 Kustomization flux-system/apps
    skewer.dev/stopped-was: '{"suspend":false}'
spec: {interval: 10m, path: ./, suspend: true, sourceRef: {kind: GitRepository, name: fleet}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: guestbook
  namespace: argocd
  annotations:
    team: web
    skewer.dev/stopped-was: '{"automated":{"prune":true}}'
spec:
  project: default
  source: {repoURL: https://git.example/r.git, path: guestbook}
  destination: {server: https://kubernetes.default.svc}
  syncPolicy: {}
"#;
    let plan = plan(yaml, &takes_all);
    let ks = find(&plan, "Kustomization");
    assert!(ks.object["spec"].get("suspend").is_none(), "{}", ks.object);
    assert!(ks.object["metadata"].get("annotations").is_none());
    let app = find(&plan, "Application");
    assert_eq!(
        app.object["spec"]["syncPolicy"]["automated"],
        serde_json::json!({"prune": true})
    );
    assert_eq!(
        app.object["metadata"]["annotations"],
        serde_json::json!({"team": "web"})
    );
}

#[test]
fn every_refused_field_is_named_not_only_the_first() {
    // A judge that, like the daemon, stops at the first field it refuses.
    let judge = |o: &Value| {
        [
            "/spec/source/helm",
            "/spec/sources",
            "/spec/syncPolicy/syncOptions/0",
        ]
        .iter()
        .find(|p| o.pointer(p).is_some())
        .map(|p| {
            format!(
                "{}: not supported",
                p[1..].replace('/', ".").replace(".0", "[0]")
            )
        })
    };
    let yaml = r#"
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: everything, namespace: argocd}
spec:
  project: default
  source: {repoURL: https://git.example/r.git, helm: {releaseName: x}}
  sources: [{repoURL: https://git.example/s.git}]
  destination: {server: https://kubernetes.default.svc}
  syncPolicy: {syncOptions: [Replace=maybe]}
"#;
    let plan = plan(yaml, &judge);
    assert_eq!(
        plan.converted[0].lost,
        [
            "refused by skewer: spec.source.helm: not supported",
            "refused by skewer: spec.sources: not supported",
            "refused by skewer: spec.syncPolicy.syncOptions[0]: not supported"
        ]
    );
    assert!(
        plan.converted[0]
            .object
            .pointer("/spec/source/helm")
            .is_some(),
        "the object written keeps every field; only the judged copy loses them"
    );
}

#[test]
fn an_application_set_comes_along_and_the_applications_it_generated_are_left_to_it() {
    let yaml = r#"
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: fleet, namespace: argocd, uid: u-1}
spec:
  goTemplate: true
  goTemplateOptions: [missingkey=error]
  generators:
  - clusters: {selector: {matchLabels: {env: dev}}}
  template:
    metadata: {name: '{{.name}}-web'}
    spec:
      project: default
      source: {repoURL: 'https://git.example/r', path: web, targetRevision: main}
      destination: {server: '{{.server}}', namespace: web}
  strategy:
    type: RollingSync
    rollingSync:
      steps: [{matchExpressions: [{key: env, operator: In, values: [dev]}], maxUpdate: 25%}]
status:
  conditions: [{type: ResourcesUpToDate, status: "True", message: ok, reason: ApplicationSetUpToDate}]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: dev-web
  namespace: argocd
  ownerReferences: [{apiVersion: argoproj.io/v1alpha1, kind: ApplicationSet, name: fleet, uid: u-1, controller: true}]
spec:
  project: default
  source: {repoURL: 'https://git.example/r', path: web}
  destination: {server: 'https://dev:6443', namespace: web}
"#;
    let plan = plan(yaml, &takes_all);
    let set = find(&plan, "ApplicationSet");
    assert!(set.lost.is_empty(), "{:?}", set.lost);
    assert_eq!(set.object["apiVersion"], SKEWER_API);
    assert_eq!(
        set.object["spec"]["strategy"]["rollingSync"]["steps"][0]["maxUpdate"],
        "25%"
    );
    assert_eq!(
        plan.converted.len(),
        1,
        "the generated Application is not written"
    );
    let (from, why) = &plan.skipped[0];
    assert_eq!(from.name, "dev-web");
    assert!(
        why.starts_with("generated by ApplicationSet fleet"),
        "{why}"
    );
    assert!(plan.whole());
    let blocked = super::super::handover::blocked(&plan).expect("not handed over in place");
    assert!(
        blocked.contains("ApplicationSets are written, not handed over"),
        "{blocked}"
    );
}
