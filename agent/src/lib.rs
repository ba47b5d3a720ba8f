//! The top of skewer: the daemon (`daemon`), which `skewer run` starts and which ties the
//! controllers (`skewer-controller`), the webhook and artifact servers and the dashboard
//! (`skewer-ui`) together. The binary (`src/bin/skewer`) parses arguments and dispatches to
//! the daemon and to the command line (`skewer-cli`). ARCHITECTURE.md at the top of the
//! repository walks the layers.

pub mod daemon;
