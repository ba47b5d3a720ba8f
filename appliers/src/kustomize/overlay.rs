//! Flux's Kustomization fields that are kustomize's own (`namePrefix`, `nameSuffix`,
//! `components`, `images`), written into the kustomization at the path before it is built, as
//! Flux does: so references follow renamed objects and a component sees the whole build. When
//! the path has no kustomization, one is made listing what the path holds (its manifests, and
//! each directory below with a kustomization of its own), as Flux generates it. Pure: files in,
//! files out.

use serde_json::{Map, Value, json};

use super::tree::{self, Tree};
use super::{Error, KUSTOMIZATION_FILES, is_manifest};
use crate::load::{SourceFile, normalize_path};

/// One entry of Flux's `images`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    pub name: String,
    pub new_name: Option<String>,
    pub new_tag: Option<String>,
    pub digest: Option<String>,
}

/// What a Flux Kustomization adds to the kustomization at its path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    pub name_prefix: Option<String>,
    pub name_suffix: Option<String>,
    /// Directories relative to the path, each a kustomize Component.
    pub components: Vec<String>,
    /// Leave out components whose directory does not exist.
    pub ignore_missing_components: bool,
    pub images: Vec<Image>,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.name_prefix.is_none()
            && self.name_suffix.is_none()
            && self.components.is_empty()
            && self.images.is_empty()
    }
}

/// Writes `overlay` into the kustomization at `path` among `files` (made when there is none).
pub fn apply(files: &mut Vec<SourceFile>, path: &str, overlay: &Overlay) -> Result<(), Error> {
    if overlay.is_empty() {
        return Ok(());
    }
    let dir = normalize_path(path);
    let (file, mut k) = {
        let tree = Tree::new(files);
        match tree.kustomization_in(&dir) {
            Some(file) => {
                let k = read(&file, tree.file(&file).unwrap_or_default())?;
                (file, k)
            }
            // A path that is not there stays not there: the build says so.
            None if !tree.is_dir(&dir) => return Ok(()),
            None => (
                tree::join_raw(&dir, KUSTOMIZATION_FILES[0]),
                generated(&tree, &dir),
            ),
        }
    };
    let field = |name: &str, v: &Option<String>, k: &mut Map<String, Value>| {
        if let Some(v) = v {
            k.insert(name.into(), v.clone().into());
        }
    };
    field("namePrefix", &overlay.name_prefix, &mut k);
    field("nameSuffix", &overlay.name_suffix, &mut k);
    let exists = |c: &str| {
        let at = normalize_path(&tree::join_raw(&dir, c));
        at.is_empty() || files.iter().any(|f| f.path.starts_with(&format!("{at}/")))
    };
    let components: Vec<Value> = overlay
        .components
        .iter()
        .filter(|c| !overlay.ignore_missing_components || exists(c))
        .map(|c| Value::from(c.as_str()))
        .collect();
    if !components.is_empty() {
        list(&mut k, "components", &file)?.extend(components);
    }
    let images = list(&mut k, "images", &file)?;
    for image in &overlay.images {
        merge_image(images, image);
    }
    if images.is_empty() {
        k.remove("images");
    }
    let data = serde_json::to_vec(&Value::Object(k)).unwrap_or_default();
    match files.iter_mut().find(|f| f.path == file) {
        Some(f) => f.data = data,
        None => files.push(SourceFile { path: file, data }),
    }
    Ok(())
}

fn read(file: &str, data: &[u8]) -> Result<Map<String, Value>, Error> {
    let text = std::str::from_utf8(data).map_err(|_| Error::new(file, "", "not UTF-8".into()))?;
    match crate::load::parse_yaml(text).map_err(|e| Error::new(file, "", e))? {
        Value::Object(k) => Ok(k),
        Value::Null => Ok(Map::new()),
        _ => Err(Error::new(file, "", "not a mapping".into())),
    }
}

/// The list `name` of `k`, made when missing.
fn list<'a>(
    k: &'a mut Map<String, Value>,
    name: &str,
    file: &str,
) -> Result<&'a mut Vec<Value>, Error> {
    let v = k.entry(name).or_insert_with(|| Value::Array(Vec::new()));
    if v.is_null() {
        *v = Value::Array(Vec::new());
    }
    v.as_array_mut()
        .ok_or_else(|| Error::new(file, name, "not a list".into()))
}

/// Flux's rule: an image already listed takes the fields set (a tag or digest replacing both);
/// another is added.
fn merge_image(images: &mut Vec<Value>, image: &Image) {
    let existing = images
        .iter_mut()
        .find(|i| i.get("name").and_then(Value::as_str) == Some(image.name.as_str()));
    let Some(Value::Object(e)) = existing else {
        let mut out = Map::new();
        out.insert("name".into(), image.name.clone().into());
        for (k, v) in [
            ("newName", &image.new_name),
            ("newTag", &image.new_tag),
            ("digest", &image.digest),
        ] {
            if let Some(v) = v {
                out.insert(k.into(), v.clone().into());
            }
        }
        images.push(Value::Object(out));
        return;
    };
    if let Some(n) = &image.new_name {
        e.insert("newName".into(), n.clone().into());
    }
    if image.new_tag.is_some() || image.digest.is_some() {
        for (k, v) in [("newTag", &image.new_tag), ("digest", &image.digest)] {
            match v {
                Some(v) => e.insert(k.into(), v.clone().into()),
                None => e.remove(k),
            };
        }
    }
}

/// The kustomization Flux makes for a path without one: its manifests, and each directory
/// below that has a kustomization (whose own directories are then its business), in name
/// order; the manifests of directories without one, listed file by file.
fn generated(tree: &Tree, dir: &str) -> Map<String, Value> {
    let mut resources = Vec::new();
    collect(tree, dir, dir, &mut resources);
    let mut k = Map::new();
    k.insert(
        "apiVersion".into(),
        "kustomize.config.k8s.io/v1beta1".into(),
    );
    k.insert("kind".into(), "Kustomization".into());
    k.insert("resources".into(), json!(resources));
    k
}

fn collect(tree: &Tree, root: &str, dir: &str, out: &mut Vec<String>) {
    let relative = |p: &str| match root.is_empty() {
        true => p.to_string(),
        false => p.strip_prefix(&format!("{root}/")).unwrap_or(p).to_string(),
    };
    for path in tree.files_in(dir) {
        if is_manifest(path) && !KUSTOMIZATION_FILES.contains(&tree::base_name(path)) {
            out.push(relative(path));
        }
    }
    for sub in tree.dirs_in(dir) {
        match tree.kustomization_in(sub) {
            Some(_) => out.push(relative(sub)),
            None => collect(tree, root, sub, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kustomize::render;

    fn files(pairs: &[(&str, &str)]) -> Vec<SourceFile> {
        crate::load::files(pairs)
    }

    fn names(files: &[SourceFile], path: &str) -> Vec<String> {
        render(files, path)
            .unwrap()
            .iter()
            .map(|m| format!("{}/{}", m.kind(), m.name()))
            .collect()
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n";
    const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: web, image: nginx:1.0, envFrom: [{configMapRef: {name: settings}}]}\n";

    #[test]
    fn a_path_without_a_kustomization_is_renamed_with_its_references() {
        let mut f = files(&[("apps/cm.yaml", CM), ("apps/sub/deploy.yaml", DEPLOY)]);
        let overlay = Overlay {
            name_prefix: Some("prod-".into()),
            name_suffix: Some("-v2".into()),
            images: vec![Image {
                name: "nginx".into(),
                new_tag: Some("1.25".into()),
                ..Image::default()
            }],
            ..Overlay::default()
        };
        apply(&mut f, "./apps", &overlay).unwrap();
        let built = render(&f, "./apps").unwrap();
        let deploy = built.iter().find(|m| m.kind() == "Deployment").unwrap();
        assert_eq!(deploy.name(), "prod-web-v2");
        let container = &deploy.object["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "nginx:1.25");
        assert_eq!(
            container["envFrom"][0]["configMapRef"]["name"], "prod-settings-v2",
            "the reference follows the renamed ConfigMap"
        );
        assert_eq!(names(&f, "./apps").len(), 2);
    }

    #[test]
    fn an_existing_kustomization_keeps_its_fields_and_takes_flux_s() {
        let k = "resources: [cm.yaml, deploy.yaml]\nnamePrefix: dev-\nimages:\n- {name: nginx, newName: registry.local/nginx, digest: 'sha256:aaaa'}\n- {name: redis, newTag: '7'}\n";
        let component = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncommonLabels: {tier: web}\n";
        let mut f = files(&[
            ("apps/kustomization.yaml", k),
            ("apps/cm.yaml", CM),
            ("apps/deploy.yaml", DEPLOY),
            ("components/label/kustomization.yaml", component),
        ]);
        let overlay = Overlay {
            name_prefix: Some("prod-".into()),
            components: vec!["../components/label".into(), "../components/missing".into()],
            ignore_missing_components: true,
            images: vec![Image {
                name: "nginx".into(),
                new_tag: Some("1.25".into()),
                ..Image::default()
            }],
            ..Overlay::default()
        };
        apply(&mut f, "apps", &overlay).unwrap();
        let built = render(&f, "apps").unwrap();
        let deploy = built.iter().find(|m| m.kind() == "Deployment").unwrap();
        assert_eq!(
            deploy.name(),
            "prod-web",
            "Flux's namePrefix replaces the file's"
        );
        assert_eq!(
            deploy.object["metadata"]["labels"]["tier"], "web",
            "the component"
        );
        assert_eq!(
            deploy.object["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.local/nginx:1.25",
            "newName kept; the tag replaced the digest"
        );

        let mut strict = f.clone();
        let missing = Overlay {
            components: vec!["../components/missing".into()],
            ..Overlay::default()
        };
        apply(&mut strict, "apps", &missing).unwrap();
        let e = render(&strict, "apps").unwrap_err().to_string();
        assert!(e.contains("components/missing"), "{e}");
    }

    #[test]
    fn a_broken_kustomization_is_named() {
        let mut f = files(&[("apps/kustomization.yaml", "- a\n- b\n")]);
        let overlay = Overlay {
            name_prefix: Some("p-".into()),
            ..Overlay::default()
        };
        let e = apply(&mut f, "apps", &overlay).unwrap_err();
        assert_eq!(e.file, "apps/kustomization.yaml");
        assert!(
            apply(&mut f, "apps", &Overlay::default()).is_ok(),
            "nothing to do"
        );
        let mut plain = files(&[("apps/cm.yaml", CM)]);
        apply(&mut plain, "./typo", &overlay).unwrap();
        let e = render(&plain, "./typo").unwrap_err().to_string();
        assert!(e.contains("typo"), "a missing path is still named: {e}");
    }
}
