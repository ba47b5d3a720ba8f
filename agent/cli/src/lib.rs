//! The command line's work, apart from argument parsing (`main.rs`): each module is one
//! family of commands, its rows and tables pure, its I/O against the hub or a registry.

pub mod bootstrap;
pub mod build;
pub mod check;
pub mod control;
pub mod create;
pub mod dev;
pub mod diff;
pub mod install;
pub mod logs;
pub mod migrate;
pub mod push;
pub mod term;
