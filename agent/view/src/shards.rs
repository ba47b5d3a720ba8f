//! `skewer get shards`: the Leases of `skewer run --shards`, as a table: each replica (how many
//! shards it holds) and each shard (who holds it, renewed how long ago, expired or free). Pure:
//! the daemon's Leases in, rows out.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use serde::Serialize;

/// The label every Lease of a shard group carries; its value is the group.
pub const GROUP_LABEL: &str = "skewer.dev/shards";
/// `replica` or `shard`.
pub const ROLE_LABEL: &str = "skewer.dev/shard-role";

/// One Lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRow {
    pub lease: String,
    /// `replica` or `shard`.
    pub role: String,
    /// Empty when free.
    pub holder: String,
    /// `held`, `expired` or `free`.
    pub state: String,
    /// Seconds since the last renewal.
    pub renewed_seconds_ago: Option<i64>,
    /// For a replica: the shards it holds now.
    pub shards: Option<usize>,
}

/// The rows of `leases`: replicas first, then shards by number.
pub fn rows(leases: &[Lease], now: Timestamp) -> Vec<ShardRow> {
    let mut rows: Vec<ShardRow> = leases
        .iter()
        .map(|l| {
            let spec = l.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.unwrap_or_default();
            let renewed = spec.renew_time.map(|t| t.0);
            let ago = renewed.map(|r| now.as_second().saturating_sub(r.as_second()).max(0));
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
            let state = match ago {
                _ if holder.is_empty() => "free",
                Some(a) if a < duration => "held",
                _ => "expired",
            };
            ShardRow {
                lease: l.metadata.name.clone().unwrap_or_default(),
                role: l
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|m| m.get(ROLE_LABEL))
                    .cloned()
                    .unwrap_or_default(),
                holder,
                state: state.into(),
                renewed_seconds_ago: ago,
                shards: None,
            }
        })
        .collect();
    let held: Vec<(String, String)> = rows
        .iter()
        .filter(|r| r.role == "shard" && r.state == "held")
        .map(|r| (r.holder.clone(), r.lease.clone()))
        .collect();
    for r in rows.iter_mut().filter(|r| r.role == "replica") {
        r.shards = Some(held.iter().filter(|(h, _)| *h == r.holder).count());
    }
    let number = |lease: &str| {
        lease
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    };
    rows.sort_by(|a, b| {
        (a.role != "replica", number(&a.lease), &a.lease).cmp(&(
            b.role != "replica",
            number(&b.lease),
            &b.lease,
        ))
    });
    rows
}

/// The rows as a table.
pub fn table(rows: &[ShardRow]) -> String {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.lease.clone(),
                r.role.clone(),
                if r.holder.is_empty() {
                    "-".into()
                } else {
                    r.holder.clone()
                },
                r.state.clone(),
                r.renewed_seconds_ago
                    .map(|s| format!("{s}s ago"))
                    .unwrap_or_else(|| "-".into()),
                r.shards
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    crate::table::aligned(
        &["LEASE", "ROLE", "HOLDER", "STATE", "RENEWED", "SHARDS"],
        cells,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(name: &str, role: &str, holder: &str, ago: i64, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(ROLE_LABEL.to_string(), role.to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
                renew_time: Some(MicroTime(now - jiff::SignedDuration::from_secs(ago))),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn replicas_then_shards_with_their_holders() {
        let now = Timestamp::from_second(1_800_000_000).expect("a time");
        let leases = [
            lease("skewer-shard-10", "shard", "skewer-b-2", 1, now),
            lease("skewer-shard-2", "shard", "skewer-a-1", 3, now),
            lease("skewer-shard-1", "shard", "", 30, now),
            lease("skewer-shard-0", "shard", "skewer-c-3", 40, now),
            lease("skewer-replica-skewer-b-2", "replica", "skewer-b-2", 2, now),
            lease("skewer-replica-skewer-a-1", "replica", "skewer-a-1", 0, now),
            lease(
                "skewer-replica-skewer-c-3",
                "replica",
                "skewer-c-3",
                40,
                now,
            ),
        ];
        crate::golden!("shards.txt", &table(&rows(&leases, now)));
    }
}
