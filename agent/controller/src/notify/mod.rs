//! Notifications: what happened to skewer's objects, told where people look. Events in Flux's
//! shape (`event`), the Alerts that select them (`alert`), and what each Provider type sends
//! (`provider`), all pure; and `deliver`, the queues and requests.

pub mod alert;
pub mod deliver;
pub mod event;
pub mod provider;
