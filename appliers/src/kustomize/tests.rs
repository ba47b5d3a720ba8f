//! Whole builds, for what `kubectl kustomize` cannot be asked (Flux's handling of directories
//! without a kustomization) and for the errors skewer gives. Equality with kustomize itself is
//! tested in `tests/tests/kustomize_conformance.rs`.

use super::*;

use crate::load::files as tree;

fn cm(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n")
}

fn names(ms: &[Manifest]) -> Vec<String> {
    let mut n: Vec<String> = ms.iter().map(|m| m.name().to_string()).collect();
    n.sort();
    n
}

fn error(files: &[(&str, &str)], path: &str) -> String {
    render(&tree(files), path).unwrap_err().to_string()
}

#[test]
fn a_directory_without_a_kustomization_is_built_as_flux_builds_it() {
    let files = tree(&[
        ("apps/plain.yaml", &cm("plain")),
        ("apps/nested/deeper.yaml", &cm("deeper")),
        (
            "apps/kustomized/kustomization.yaml",
            "namePrefix: k-\nresources: [a.yaml]\nconfigMapGenerator:\n- {name: gen, literals: [a=1]}\n",
        ),
        ("apps/kustomized/a.yaml", &cm("a")),
        ("apps/kustomized/ignored.yaml", &cm("not-listed")),
        ("apps/README.md", "# notes"),
        ("elsewhere.yaml", &cm("outside")),
    ]);
    let got = render(&files, "./apps").unwrap();
    assert_eq!(names(&got), ["deeper", "k-a", "k-gen-h29d89cmmt", "plain"]);
}

#[test]
fn plain_paths_keep_kubectls_reading_and_kustomized_ones_kustomizes() {
    let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {}\nspec: {flag: yes}\n";
    let plain = render(&tree(&[("c.yaml", doc)]), "").unwrap();
    assert_eq!(plain[0].object["spec"]["flag"], true);
    let built = render(
        &tree(&[
            ("c.yaml", doc),
            ("kustomization.yaml", "resources: [c.yaml]\n"),
        ]),
        "",
    )
    .unwrap();
    assert_eq!(built[0].object["spec"]["flag"], "yes");
}

#[test]
fn bases_outside_the_path_are_read_from_the_source() {
    let files = tree(&[
        ("base/kustomization.yaml", "resources: [cm.yaml]\n"),
        ("base/cm.yaml", &cm("shared")),
        (
            "overlays/dev/kustomization.yaml",
            "nameSuffix: -dev\nresources: [../../base]\n",
        ),
    ]);
    assert_eq!(
        names(&render(&files, "overlays/dev").unwrap()),
        ["shared-dev"]
    );
}

#[test]
fn what_cannot_be_built_is_named_by_file_and_field() {
    assert_eq!(
        error(
            &[("app/kustomization.yaml", "resources: [../../../etc]\n")],
            "app"
        ),
        "app/kustomization.yaml: resources[0]: '../../../etc' leads outside the source"
    );
    assert_eq!(
        error(&[("kustomization.yaml", "resources: [missing.yaml]\n")], ""),
        "kustomization.yaml: resources[0]: 'missing.yaml' does not exist in the source"
    );
    assert!(
        error(
            &[(
                "kustomization.yaml",
                "resources: ['https://github.com/org/repo//deploy?ref=v1']\n"
            )],
            ""
        )
        .contains(
            "resources[0]: 'https://github.com/org/repo//deploy?ref=v1' is a remote resource"
        )
    );
    assert_eq!(
        error(&[("kustomization.yaml", "helmCharts: [{name: x}]\n")], ""),
        "kustomization.yaml: helmCharts: Helm charts are not rendered by skewer: render the chart into the repository"
    );
    assert_eq!(
        error(
            &[
                ("kustomization.yaml", "resources: [sub]\n"),
                ("sub/cm.yaml", &cm("x"))
            ],
            ""
        ),
        "kustomization.yaml: resources[0]: 'sub' is a directory without a kustomization file"
    );
    assert!(
        error(
            &[("kustomization.yaml", "patches:\n- path: nope.yaml\n")],
            ""
        )
        .contains("patches[0]: patch file 'nope.yaml' does not exist in the source")
    );
    let broken = error(
        &[
            ("kustomization.yaml", "resources: [bad.yaml]\n"),
            ("bad.yaml", "kind: [unclosed\n"),
        ],
        "",
    );
    assert!(broken.starts_with("bad.yaml: line "), "{broken}");
}

#[test]
fn a_cycle_between_bases_is_named() {
    let files = [
        ("a/kustomization.yaml", "resources: [../b]\n"),
        ("b/kustomization.yaml", "resources: [../a]\n"),
    ];
    let err = error(&files, "a");
    assert!(err.contains("'a' includes itself: a -> b -> a"), "{err}");
}

#[test]
fn components_only_where_components_belong() {
    let files = [
        ("kustomization.yaml", "resources: [comp]\n"),
        ("comp/kustomization.yaml", "kind: Component\n"),
    ];
    assert!(error(&files, "").contains("a Component is listed under `components`"));
    let files = [
        ("kustomization.yaml", "components: [plain]\n"),
        ("plain/kustomization.yaml", "resources: []\n"),
    ];
    assert!(error(&files, "").contains("components[0]: 'plain' is not a Component"));
}

#[test]
fn a_generator_that_collides_needs_a_behavior() {
    let files = [(
        "kustomization.yaml",
        "configMapGenerator:\n- {name: a, literals: [x=1]}\n- {name: a, literals: [y=1]}\n",
    )];
    assert!(error(&files, "").contains(
        "configMapGenerator[1]: ConfigMap 'a' already exists; say behavior: merge or replace"
    ));
    let files = [(
        "kustomization.yaml",
        "configMapGenerator:\n- {name: a, behavior: merge, literals: [x=1]}\n",
    )];
    assert!(
        error(&files, "")
            .contains("configMapGenerator[0].behavior: there is no ConfigMap 'a' to merge")
    );
}
