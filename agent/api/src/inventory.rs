//! Inventories between the API and the appliers: `status.inventory` read (skewer's `objects`,
//! or Flux's `entries` as skewer wrote them before) and written, and which of an inventory's
//! entries another owner asks for.

use std::collections::HashSet;

use skewer_appliers::{Inventory, ObjectId};

use crate::kustomization::ResourceInventory;

impl ResourceInventory {
    /// Each recorded object's id and API version, in either format. A string of `objects`
    /// without a space (only a hand edit writes one) has no version.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let objects = self
            .objects
            .iter()
            .map(|o| o.split_once(' ').unwrap_or((o.as_str(), "")));
        let entries = self.entries.iter().flatten();
        objects.chain(entries.map(|e| (e.id.as_str(), e.v.as_str())))
    }

    /// How many objects it records.
    pub fn len(&self) -> usize {
        self.objects.len() + self.entries.as_ref().map_or(0, Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Adds to `held` each entry of `inventory` (recorded by `owner`) that is `wanted`.
pub fn held_in(
    inventory: Option<&ResourceInventory>,
    wanted: &HashSet<String>,
    owner: &str,
    held: &mut Vec<(String, String)>,
) {
    let ids = inventory
        .into_iter()
        .flat_map(|i| i.iter().map(|(id, _)| id));
    for id in ids.filter(|id| wanted.contains(*id)) {
        held.push((id.to_string(), owner.to_string()));
    }
}

/// The inventory as status records it: `objects` only, so a merge patch of it also clears the
/// `entries` an older skewer wrote.
pub fn to_status(inventory: &Inventory) -> ResourceInventory {
    ResourceInventory {
        objects: inventory
            .entries
            .iter()
            .map(|(id, v)| format!("{id} {v}"))
            .collect(),
        entries: None,
    }
}

/// The inventory status records. Entries whose id does not parse are dropped (they could only
/// come from a hand edit).
pub fn from_status(inventory: Option<&ResourceInventory>) -> Inventory {
    Inventory {
        entries: inventory
            .into_iter()
            .flat_map(ResourceInventory::iter)
            .filter_map(|(id, v)| Some((ObjectId::parse(id)?, v.to_string())))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kustomization::InventoryEntry;

    #[test]
    fn inventories_round_trip_through_status() {
        let status = ResourceInventory {
            objects: vec![
                "ns_web_apps_Deployment apps/v1".into(),
                "garbage v1".into(),
                "_ns__Namespace v1".into(),
            ],
            entries: None,
        };
        let inv = from_status(Some(&status));
        assert_eq!(inv.len(), 2, "unparsable ids are dropped");
        assert_eq!(
            to_status(&inv).objects,
            ["_ns__Namespace v1", "ns_web_apps_Deployment apps/v1"]
        );
        assert!(from_status(None).is_empty());
    }

    #[test]
    fn fluxs_entries_are_read_and_the_next_write_clears_them() {
        let old: ResourceInventory = serde_json::from_value(serde_json::json!({
            "entries": [{"id": "ns_web_apps_Deployment", "v": "apps/v1"}]
        }))
        .expect("Flux's format parses");
        assert_eq!(
            old.entries,
            Some(vec![InventoryEntry {
                id: "ns_web_apps_Deployment".into(),
                v: "apps/v1".into()
            }])
        );
        let inv = from_status(Some(&old));
        assert_eq!(inv.len(), 1);
        let written = serde_json::to_value(to_status(&inv)).expect("serializes");
        assert_eq!(
            written,
            serde_json::json!({"objects": ["ns_web_apps_Deployment apps/v1"], "entries": null}),
            "a merge patch of this removes `entries`"
        );
    }

    #[test]
    fn both_formats_are_held() {
        let inv = ResourceInventory {
            objects: vec!["ns_a__ConfigMap v1".into()],
            entries: Some(vec![InventoryEntry {
                id: "ns_b__ConfigMap".into(),
                v: "v1".into(),
            }]),
        };
        let wanted: HashSet<String> = ["ns_a__ConfigMap".into(), "ns_b__ConfigMap".into()].into();
        let mut held = Vec::new();
        held_in(Some(&inv), &wanted, "ks/x", &mut held);
        assert_eq!(held.len(), 2);
        assert_eq!(inv.len(), 2);
    }
}
