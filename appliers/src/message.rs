//! Messages for people, bounded: an object's status and Events must stay within what the API
//! server accepts (an Event's note is at most 1,024 bytes; a whole object about 1.5 MB), and a
//! condition saying what went wrong must stay readable when ten thousand things did.

/// At most this many objects are named in one message; the rest are counted.
pub const NAMED: usize = 5;
/// One object's part of a message is cut at this many bytes.
pub const PER_OBJECT: usize = 512;

/// `s` cut to at most `max` bytes (on a character boundary), ending in `…` when cut.
pub fn bounded(s: &str, max: usize) -> String {
    const MORE: &str = "…";
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max.saturating_sub(MORE.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{MORE}", &s[..cut])
}

/// One line per object, joined: all of them when there are few; else how many, the first
/// [`NAMED`], and where the rest are.
pub fn summarize(lines: &[String]) -> String {
    let named: Vec<String> = lines
        .iter()
        .take(NAMED)
        .map(|l| bounded(l, PER_OBJECT))
        .collect();
    if lines.len() <= NAMED {
        return named.join("; ");
    }
    format!(
        "{} objects: {}; and {} more (each is in skewer's log)",
        lines.len(),
        named.join("; "),
        lines.len() - NAMED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_includes_its_ellipsis_and_keeps_characters_whole() {
        let long = "é".repeat(1000);
        let cut = bounded(&long, 1024);
        assert!(cut.len() <= 1024, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short", 1024), "short");
    }

    #[test]
    fn many_lines_are_counted_not_listed() {
        let few: Vec<String> = (0..3).map(|i| format!("ConfigMap/ns/c{i}: no")).collect();
        assert_eq!(
            summarize(&few),
            "ConfigMap/ns/c0: no; ConfigMap/ns/c1: no; ConfigMap/ns/c2: no"
        );
        let many: Vec<String> = (0..10_000)
            .map(|i| format!("ConfigMap/ns/c{i}: namespaces \"gone\" not found"))
            .collect();
        let s = summarize(&many);
        assert!(s.starts_with("10000 objects: ConfigMap/ns/c0: "), "{s}");
        assert!(
            s.ends_with("; and 9995 more (each is in skewer's log)"),
            "{s}"
        );
        assert!(s.len() < 2048, "{}", s.len());
        let huge = vec!["x".repeat(100_000)];
        assert!(summarize(&huge).len() <= PER_OBJECT);
    }
}
