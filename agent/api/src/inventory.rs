//! Inventories between the API and the appliers: `status.inventory` in Flux's format, read and
//! written, and which of an inventory's entries another owner asks for.

use std::collections::HashSet;

use skewer_appliers::{Inventory, ObjectId};

use crate::kustomization::{InventoryEntry, ResourceInventory};

/// Adds to `held` each entry of `inventory` (recorded by `owner`) that is `wanted`.
pub fn held_in(
    inventory: Option<&ResourceInventory>,
    wanted: &HashSet<String>,
    owner: &str,
    held: &mut Vec<(String, String)>,
) {
    let entries = inventory.into_iter().flat_map(|i| &i.entries);
    for e in entries.filter(|e| wanted.contains(&e.id)) {
        held.push((e.id.clone(), owner.to_string()));
    }
}

/// The inventory as status records it (Flux's format).
pub fn to_status(inventory: &Inventory) -> ResourceInventory {
    ResourceInventory {
        entries: inventory
            .entries
            .iter()
            .map(|(id, v)| InventoryEntry {
                id: id.to_string(),
                v: v.clone(),
            })
            .collect(),
    }
}

/// The inventory status records. Entries whose id does not parse are dropped (they could only
/// come from a hand edit).
pub fn from_status(inventory: Option<&ResourceInventory>) -> Inventory {
    Inventory {
        entries: inventory
            .into_iter()
            .flat_map(|i| &i.entries)
            .filter_map(|e| Some((ObjectId::parse(&e.id)?, e.v.clone())))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventories_round_trip_through_status() {
        let status = ResourceInventory {
            entries: vec![
                InventoryEntry {
                    id: "ns_web_apps_Deployment".into(),
                    v: "apps/v1".into(),
                },
                InventoryEntry {
                    id: "garbage".into(),
                    v: "v1".into(),
                },
            ],
        };
        let inv = from_status(Some(&status));
        assert_eq!(inv.len(), 1, "unparsable ids are dropped");
        assert_eq!(to_status(&inv).entries, status.entries[..1]);
        assert!(from_status(None).is_empty());
    }
}
