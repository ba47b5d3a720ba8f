//! Which namespaces may deploy to a registered cluster. A cluster Secret holds the platform's
//! credentials for that cluster, so a Kustomization or Application that names it acts with
//! them: without this rule any namespace on the hub could deploy anything to any spoke. The
//! Secret's annotation [`ANNOTATION`] lists the namespaces allowed (names, or patterns with
//! `*`); without it only the Secret's own namespace is. Pure.

use std::fmt;

/// The annotation on a cluster Secret listing the namespaces allowed to deploy to it.
pub const ANNOTATION: &str = "skewer.dev/allowed-namespaces";

/// At most this many entries, each at most [`MAX_PATTERN`] bytes: the platform writes the
/// annotation, but a match is made on every reconcile and must stay cheap.
const MAX_PATTERNS: usize = 256;
const MAX_PATTERN: usize = 128;

/// The namespaces allowed to deploy to one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    patterns: Vec<String>,
}

impl Allowed {
    /// Only `namespace` (the default: the namespace of the cluster Secret).
    pub fn only(namespace: &str) -> Self {
        Self {
            patterns: vec![namespace.to_string()],
        }
    }

    /// The annotation's value: comma-separated namespace names or patterns, `*` standing for
    /// any run of characters (`team-*`, `*`). Empty entries are skipped; an annotation with no
    /// entry allows no namespace at all.
    pub fn parse(value: &str) -> Result<Self, String> {
        let patterns: Vec<String> = value
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        if patterns.len() > MAX_PATTERNS {
            return Err(format!(
                "{} entries, more than the {MAX_PATTERNS} allowed",
                patterns.len()
            ));
        }
        for p in &patterns {
            if let Some(c) = p
                .chars()
                .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '*'))
            {
                return Err(format!(
                    "'{p}': '{c}' cannot be in a namespace name (a-z, 0-9, '-', and '*' for any run of characters)"
                ));
            }
            // ASCII from here on: any byte is a character boundary.
            if p.len() > MAX_PATTERN {
                return Err(format!(
                    "'{}…' is longer than {MAX_PATTERN} characters",
                    &p[..20]
                ));
            }
        }
        Ok(Self { patterns })
    }

    /// Whether a Kustomization or Application in `namespace` may deploy to the cluster.
    pub fn allows(&self, namespace: &str) -> bool {
        self.patterns.iter().any(|p| matches(p, namespace))
    }
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patterns.is_empty() {
            return f.write_str("no namespace");
        }
        f.write_str(&self.patterns.join(", "))
    }
}

/// `pattern` (with `*` for any run of characters) against the whole of `name`, in time
/// linear in their lengths: each `*` takes the earliest place its next literal fits, which is
/// never worse than a later one.
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_patterns() {
        let a = Allowed::parse("team-a, platform-*, *-ops ,,").unwrap();
        for (ns, allowed) in [
            ("team-a", true),
            ("team-ab", false),
            ("team-b", false),
            ("platform-", true),
            ("platform-x", true),
            ("x-platform-x", false),
            ("db-ops", true),
            ("ops", false),
        ] {
            assert_eq!(a.allows(ns), allowed, "{ns}");
        }
        assert!(Allowed::parse("*").unwrap().allows("anything"));
        assert!(Allowed::parse("a*b*c").unwrap().allows("abc"));
        assert!(Allowed::parse("a*b*c").unwrap().allows("axxbyybc"));
        assert!(!Allowed::parse("a*b*c").unwrap().allows("acb"));
        assert!(
            !Allowed::parse("ab*ba").unwrap().allows("aba"),
            "no overlap"
        );
        assert!(Allowed::only("skewer-system").allows("skewer-system"));
        assert!(!Allowed::only("skewer-system").allows("team-a"));
        let none = Allowed::parse(" , ").unwrap();
        assert!(!none.allows("team-a"));
        assert_eq!(none.to_string(), "no namespace");
    }

    #[test]
    fn what_no_namespace_can_be_is_refused() {
        assert!(Allowed::parse("Team-A").unwrap_err().contains("'T'"));
        assert!(Allowed::parse("team_a").unwrap_err().contains("'_'"));
        assert!(
            Allowed::parse(&"a".repeat(200))
                .unwrap_err()
                .contains("longer than 128")
        );
        let many = vec!["a"; 300].join(",");
        assert!(Allowed::parse(&many).unwrap_err().contains("300 entries"));
    }

    #[test]
    fn matching_is_linear_on_hostile_patterns() {
        let pattern = format!("{}b", "a*".repeat(60));
        let a = Allowed::parse(&pattern).unwrap();
        // Backtracking would try about 63^60 ways; this answers after one pass.
        assert!(!a.allows(&"a".repeat(63)));
        assert!(a.allows(&format!("{}b", "a".repeat(63))));
    }
}
