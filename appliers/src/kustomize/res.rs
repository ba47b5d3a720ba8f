//! An object while kustomize builds it: its document, where it came from, and the names and
//! namespaces it had before (references to any of them follow it).

use serde_json::Value;

use crate::patch::Patchable;

/// An object being built, and the names it had before its current one.
#[derive(Debug, Clone)]
pub struct Res {
    pub object: Value,
    /// Where it came from, like `base/deploy.yaml#1` or
    /// `app/kustomization.yaml#configMapGenerator[0]`.
    pub origin: String,
    /// Earlier names, oldest first: references to any of them follow it.
    pub previous_names: Vec<String>,
    /// Earlier namespaces, oldest first: references naming it there follow it too.
    pub previous_namespaces: Vec<String>,
    /// A generated object whose name gets a content hash at the end.
    pub hash: bool,
}

impl Res {
    pub fn new(object: Value, origin: String, hash: bool) -> Self {
        Self {
            object,
            origin,
            previous_names: Vec::new(),
            previous_namespaces: Vec::new(),
            hash,
        }
    }

    pub fn api_version(&self) -> &str {
        text(&self.object["apiVersion"])
    }

    pub fn kind(&self) -> &str {
        text(&self.object["kind"])
    }

    pub fn name(&self) -> &str {
        text(&self.object["metadata"]["name"])
    }

    pub fn namespace(&self) -> &str {
        text(&self.object["metadata"]["namespace"])
    }

    /// Whether it is, or once was, called `name`.
    pub fn is_named(&self, name: &str) -> bool {
        self.name() == name || self.previous_names.iter().any(|n| n == name)
    }

    /// Moves it to `namespace`, remembering the old one.
    pub fn set_namespace(&mut self, namespace: &str) {
        let old = self.namespace().to_string();
        if old != namespace {
            self.previous_namespaces.push(old);
            self.object["metadata"]["namespace"] = Value::String(namespace.to_string());
        }
    }

    /// Renames it, remembering the old name.
    pub fn rename(&mut self, name: String) {
        let old = self.name().to_string();
        if old != name {
            self.previous_names.push(old);
            self.object["metadata"]["name"] = Value::String(name);
        }
    }
}

impl Patchable for Res {
    fn object(&self) -> &Value {
        &self.object
    }
    fn object_mut(&mut self) -> &mut Value {
        &mut self.object
    }
    fn earlier_names(&self) -> &[String] {
        &self.previous_names
    }
    fn renamed_from(&mut self, old: String) {
        self.previous_names.push(old);
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}
