//! `skewer get clusters` and the dashboard's clusters page: one row per registered cluster (and
//! the hub), as the controller's probe fills it, and the rows as a table.

use serde::Serialize;

/// One row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub name: String,
    pub server: String,
    /// `namespace/name` of its Secret; empty for the hub.
    pub secret: String,
    pub version: Option<String>,
    pub reachable: bool,
    pub kustomizations: usize,
    pub last_error: Option<String>,
}

/// The name the hub goes by in the listing.
pub const HUB: &str = "(hub)";

/// The rows as a table, kubectl-style.
pub fn table(rows: &[ClusterRow]) -> String {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.server.clone(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                if r.reachable { "yes" } else { "no" }.into(),
                r.kustomizations.to_string(),
                r.last_error
                    .as_deref()
                    .map(one_line)
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "SERVER",
        "VERSION",
        "REACHABLE",
        "KUSTOMIZATIONS",
        "LAST ERROR",
    ];
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: Vec<&str>| {
        let mut out = String::new();
        for (i, c) in cols.iter().enumerate() {
            if i + 1 == cols.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &cells {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A message on one line, at most 120 characters.
fn one_line(s: &str) -> String {
    crate::table::cut(s, 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_and_keeps_errors_on_one_line() {
        let rows = vec![
            ClusterRow {
                name: HUB.into(),
                server: "https://127.0.0.1:6443".into(),
                secret: String::new(),
                version: Some("v1.20.15".into()),
                reachable: true,
                kustomizations: 3,
                last_error: None,
            },
            ClusterRow {
                name: "spoke-b".into(),
                server: "https://10.0.0.2:443".into(),
                secret: "skewer-system/vcluster-b".into(),
                version: None,
                reachable: false,
                kustomizations: 12,
                last_error: Some("error trying to connect:\n  connection refused".into()),
            },
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME      SERVER"));
        assert!(lines[1].contains("v1.20.15") && lines[1].contains("yes"));
        assert!(lines[2].ends_with("error trying to connect: connection refused"));
        let col = lines[0].find("REACHABLE").unwrap();
        assert_eq!(&lines[2][col..col + 2], "no");
        assert_eq!(one_line(&"x".repeat(300)).chars().count(), 120);
    }
}
