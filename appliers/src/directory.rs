//! Which files of a directory an Argo CD-shaped Application reads: its own files, or with
//! `recurse` those of its subdirectories too; `exclude` checked first, then `include`. Both
//! are globs over the path relative to the directory: `*` matches any run of characters
//! (`/` included, as Argo CD matches them), `?` one character, `[abc]` / `[a-z]` a class, and
//! `{a,b}` any of a list (the form Argo CD users write: `'{catalog-info.yaml,docs/*}'`).
//! Pure.

use thiserror::Error;

use crate::load::SourceFile;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: '{pattern}': {why}")]
pub struct GlobError {
    pub field: &'static str,
    pub pattern: String,
    pub why: String,
}

/// A glob: the alternatives of its `{…}` lists expanded, each a sequence of tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    alternatives: Vec<Vec<Token>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    One,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// At most this many alternatives per glob: `{a,b}{c,d}…` multiplies.
const MAX_ALTERNATIVES: usize = 1024;
/// At most this many bytes of pattern as written.
pub const MAX_PATTERN: usize = 1024;
/// At most this many characters in all alternatives together once `{…}` lists are expanded:
/// the bound on a glob's memory (a few hundred KiB of tokens) and on the work of matching one
/// path (this many steps per character of the path).
pub const MAX_EXPANDED: usize = 8192;

impl Glob {
    pub fn parse(field: &'static str, pattern: &str) -> Result<Self, GlobError> {
        let fail = |why: &str| GlobError {
            field,
            // A pattern refused for its size is not quoted whole.
            pattern: match pattern.char_indices().nth(64) {
                Some((cut, _)) => format!("{}…", &pattern[..cut]),
                None => pattern.to_string(),
            },
            why: why.to_string(),
        };
        if pattern.len() > MAX_PATTERN {
            return Err(fail(&format!(
                "{} bytes, more than the {MAX_PATTERN} a pattern may have",
                pattern.len()
            )));
        }
        let expanded = expand(pattern).map_err(|w| fail(&w))?;
        let alternatives = expanded
            .iter()
            .map(|p| tokens(p))
            .collect::<Result<_, String>>()
            .map_err(|w| fail(&w))?;
        Ok(Self { alternatives })
    }

    pub fn matches(&self, path: &str) -> bool {
        let text: Vec<char> = path.chars().collect();
        self.alternatives.iter().any(|t| match_tokens(t, &text))
    }
}

/// Expands `{a,b}` lists (not nested) into every combination.
fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let mut out = vec![String::new()];
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or("a '{' is not closed")?;
        let inner = &rest[open + 1..close];
        if inner.contains('{') {
            return Err("nested '{' lists are not supported".into());
        }
        let prefix = &rest[..open];
        let choices: Vec<&str> = inner.split(',').collect();
        let mut next = Vec::with_capacity(out.len() * choices.len());
        for o in &out {
            for c in &choices {
                next.push(format!("{o}{prefix}{c}"));
            }
        }
        if next.len() > MAX_ALTERNATIVES {
            return Err(format!("more than {MAX_ALTERNATIVES} alternatives"));
        }
        rest = &rest[close + 1..];
        check_expanded(next.iter().map(String::len).sum())?;
        out = next;
    }
    if rest.contains('}') {
        return Err("a '}' has no '{'".into());
    }
    // The literal tail goes on every alternative: counted before it is copied.
    let tail = out.len().saturating_mul(rest.len());
    check_expanded(
        out.iter()
            .map(String::len)
            .sum::<usize>()
            .saturating_add(tail),
    )?;
    Ok(out.into_iter().map(|o| o + rest).collect())
}

/// `total` characters of alternatives, within [`MAX_EXPANDED`]. Each step of [`expand`] holds
/// at most [`MAX_ALTERNATIVES`] strings of at most [`MAX_PATTERN`] bytes while it is checked.
fn check_expanded(total: usize) -> Result<(), String> {
    if total > MAX_EXPANDED {
        return Err(format!(
            "its '{{…}}' lists expand to more than {MAX_EXPANDED} characters"
        ));
    }
    Ok(())
}

fn tokens(pattern: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' => {
                // `**` is `*`: both cross `/`.
                while chars.peek() == Some(&'*') {
                    chars.next();
                }
                Token::Any
            }
            '?' => Token::One,
            '\\' => Token::Char(chars.next().ok_or("it ends in '\\'")?),
            '[' => {
                let negated = matches!(chars.peek(), Some('!' | '^'));
                if negated {
                    chars.next();
                }
                let mut ranges = Vec::new();
                loop {
                    let c = chars.next().ok_or("a '[' is not closed")?;
                    if c == ']' && !ranges.is_empty() {
                        break;
                    }
                    if chars.peek() == Some(&'-') {
                        chars.next();
                        match chars.next() {
                            Some(']') => {
                                ranges.push((c, c));
                                ranges.push(('-', '-'));
                                break;
                            }
                            Some(end) => ranges.push((c, end)),
                            None => return Err("a '[' is not closed".into()),
                        }
                    } else {
                        ranges.push((c, c));
                    }
                }
                Token::Class { negated, ranges }
            }
            c => Token::Char(c),
        });
    }
    Ok(out)
}

/// Matches without backtracking blow-up: the set of positions reachable after each token.
fn match_tokens(tokens: &[Token], text: &[char]) -> bool {
    let mut at = vec![false; text.len() + 1];
    let mut next = vec![false; text.len() + 1];
    at[0] = true;
    for t in tokens {
        next.fill(false);
        match t {
            Token::Any => {
                if let Some(first) = at.iter().position(|b| *b) {
                    next[first..].iter_mut().for_each(|b| *b = true);
                }
            }
            _ => {
                for i in 0..text.len() {
                    if at[i] && one(t, text[i]) {
                        next[i + 1] = true;
                    }
                }
            }
        }
        std::mem::swap(&mut at, &mut next);
        if !at.iter().any(|b| *b) {
            return false;
        }
    }
    at[text.len()]
}

fn one(t: &Token, c: char) -> bool {
    match t {
        Token::Char(x) => *x == c,
        Token::One => true,
        Token::Any => true,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
        }
    }
}

/// An Application's `directory`: which files under its path it reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Directory {
    pub recurse: bool,
    pub include: Option<Glob>,
    pub exclude: Option<Glob>,
}

impl Directory {
    /// `include` and `exclude` as written (an empty one is absent).
    pub fn parse(
        recurse: bool,
        include: Option<&str>,
        exclude: Option<&str>,
    ) -> Result<Self, GlobError> {
        let glob = |field, p: Option<&str>| {
            p.filter(|p| !p.is_empty())
                .map(|p| Glob::parse(field, p))
                .transpose()
        };
        Ok(Self {
            recurse,
            include: glob("spec.source.directory.include", include)?,
            exclude: glob("spec.source.directory.exclude", exclude)?,
        })
    }

    /// Whether the file at `rel` (relative to the directory) is read: a manifest (`.yaml`,
    /// `.yml`, `.json`), in the directory itself unless recursing, not excluded, included.
    /// `kustomization.yaml` files are not manifests here: a directory is read as it is.
    pub fn keeps(&self, rel: &str) -> bool {
        let manifest = [".yaml", ".yml", ".json"].iter().any(|e| rel.ends_with(e));
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let kustomization = crate::kustomize::KUSTOMIZATION_FILES.contains(&name);
        manifest
            && !kustomization
            && (self.recurse || !rel.contains('/'))
            && !self.exclude.as_ref().is_some_and(|g| g.matches(rel))
            && self.include.as_ref().is_none_or(|g| g.matches(rel))
    }

    /// The files of `dir` (a normalized path, `` for the root) this directory reads.
    pub fn filter(&self, files: Vec<SourceFile>, dir: &str) -> Vec<SourceFile> {
        files
            .into_iter()
            .filter(|f| {
                let rel = if dir.is_empty() {
                    Some(f.path.as_str())
                } else {
                    f.path.strip_prefix(dir).and_then(|r| r.strip_prefix('/'))
                };
                rel.is_some_and(|r| self.keeps(r))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> Glob {
        Glob::parse("f", p).unwrap()
    }

    #[test]
    fn globs_match_as_argo_cd_users_write_them() {
        assert!(g("{catalog-info.yaml}").matches("catalog-info.yaml"));
        assert!(!g("{catalog-info.yaml}").matches("deploy.yaml"));
        assert!(g("*.yaml").matches("a.yaml"));
        assert!(g("*.yaml").matches("sub/a.yaml"), "* crosses /");
        assert!(g("{a.yaml,docs/*}").matches("docs/x/y.json"));
        assert!(g("{a,b}-{1,2}.yaml").matches("b-2.yaml"));
        assert!(!g("{a,b}-{1,2}.yaml").matches("c-2.yaml"));
        assert!(g("v?.yaml").matches("v1.yaml"));
        assert!(g("[a-c]*.yaml").matches("b.yaml"));
        assert!(!g("[!a-c]*.yaml").matches("b.yaml"));
        assert!(g("**").matches("any/thing"));
        // Long inputs do not backtrack exponentially.
        let long = "a".repeat(5000);
        assert!(!g("*a*a*a*a*a*a*a*b").matches(&long));
    }

    #[test]
    fn bad_globs_name_the_field() {
        for bad in ["{a,b", "a}", "[abc", "{a,{b}}", "x\\"] {
            let e = Glob::parse("spec.source.directory.exclude", bad).unwrap_err();
            assert!(
                e.to_string().starts_with("spec.source.directory.exclude: "),
                "{e}"
            );
        }
        let e = Glob::parse("f", &"{,a}".repeat(20)).unwrap_err();
        assert!(e.why.contains("more than 1024 alternatives"), "{e}");
    }

    #[test]
    fn a_glob_is_bounded_before_it_is_expanded() {
        // What the issue found: ten lists of two, then literal text, multiply 1,024 times.
        let hostile = format!("{}{}", "{a,b}".repeat(10), "x".repeat(900));
        let e = Glob::parse("spec.source.directory.include", &hostile).unwrap_err();
        assert!(e.why.contains("more than 8192 characters"), "{e}");
        assert!(e.pattern.chars().count() <= 65, "not quoted whole: {e}");
        let long = "x".repeat(60_000);
        let e = Glob::parse("spec.source.directory.include", &long).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "spec.source.directory.include: '{}…': 60000 bytes, more than the 1024 a pattern may have",
                "x".repeat(64)
            )
        );
        // Lists that stay within the bound still work.
        let g = Glob::parse("f", &format!("{}*.yaml", "{a,b}".repeat(8))).unwrap();
        assert!(g.matches("abababab-x.yaml") && !g.matches("c.yaml"));
    }

    fn file(path: &str) -> SourceFile {
        SourceFile {
            path: path.into(),
            data: Vec::new(),
        }
    }

    #[test]
    fn a_directory_reads_its_own_manifests_unless_told_otherwise() {
        let files = || {
            [
                "team/app.yaml",
                "team/catalog-info.yaml",
                "team/README.md",
                "team/kustomization.yaml",
                "team/sub/more.yaml",
                "other/x.yaml",
            ]
            .map(file)
            .to_vec()
        };
        let paths = |d: &Directory| -> Vec<String> {
            d.filter(files(), "team")
                .into_iter()
                .map(|f| f.path)
                .collect()
        };
        let d = Directory::parse(false, None, Some("{catalog-info.yaml}")).unwrap();
        assert_eq!(paths(&d), ["team/app.yaml"]);
        let d = Directory::parse(true, None, None).unwrap();
        assert_eq!(
            paths(&d),
            [
                "team/app.yaml",
                "team/catalog-info.yaml",
                "team/sub/more.yaml"
            ]
        );
        let d = Directory::parse(true, Some("sub/*"), Some("")).unwrap();
        assert_eq!(paths(&d), ["team/sub/more.yaml"]);
        let root = Directory::parse(false, None, None).unwrap();
        assert!(root.filter(files(), "").is_empty(), "nothing at the root");
    }
}
