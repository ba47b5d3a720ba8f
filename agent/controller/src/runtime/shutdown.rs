//! Stopping the daemon. The first SIGTERM or SIGINT asks for a stop: start-up steps (reaching
//! the API server, waiting for the CRDs or for leadership) end at once, and each controller
//! stops once its running reconciles are over. A second signal ends the process at once.
//! Signals are the process's, so the request is too.

use std::future::Future;
use std::sync::LazyLock;

use tokio::sync::watch;
use tracing::{info, warn};

static STOP: LazyLock<watch::Sender<bool>> = LazyLock::new(|| watch::channel(false).0);

/// Asks everything to stop (what a signal does).
pub fn request() {
    STOP.send_replace(true);
}

/// Ends once a stop was asked for (at once if it was already).
pub async fn requested() {
    let mut stop = STOP.subscribe();
    let _ = stop.wait_for(|stop| *stop).await;
}

/// [`requested`], as a future a controller's graceful shutdown accepts (`Send + Sync`).
pub fn trigger() -> impl Future<Output = ()> + Send + Sync + 'static {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        requested().await;
        let _ = tx.send(());
    });
    async move {
        let _ = rx.await;
    }
}

/// Listens for SIGTERM and SIGINT from now on: the first asks for a stop, the second exits with
/// status 130 without waiting for anything.
pub fn listen() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let mut received = 0u32;
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            received += 1;
            if received == 1 {
                info!(
                    signal = name,
                    "stopping: running reconciles finish, nothing new starts (again to exit at once)"
                );
                request();
            } else {
                warn!(signal = name, "exiting at once");
                std::process::exit(130);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_ends_every_wait_even_one_begun_after_it() {
        let before = tokio::spawn(requested());
        let trigger = trigger();
        tokio::task::yield_now().await;
        assert!(!before.is_finished(), "nothing asked yet");
        request();
        before.await.expect("the wait ended");
        trigger.await;
        // Asked before it began: ends at once.
        tokio::time::timeout(std::time::Duration::from_secs(1), requested())
            .await
            .expect("at once");
    }
}
