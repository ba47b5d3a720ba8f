//! How the CLI talks to a person: colour only on a terminal and never with `NO_COLOR`, a
//! spinner on standard error only when it is a terminal, and the exit codes scripts rely on.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

/// Exit codes, documented in `skewer --help` and the README; scripts may rely on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done: in sync, Ready, applied.
    Ok = 0,
    /// The command worked and found something to report: `diff` found differences, an object
    /// waited on ended not Ready.
    Differs = 1,
    /// The command line was wrong (clap's own code).
    Usage = 2,
    /// The command could not do its work: the cluster or a repository unreachable, input
    /// refused, an object missing.
    Failed = 3,
    /// A `--wait`/`--timeout` ran out before the answer came.
    TimedOut = 4,
}

/// An error that ends the command with a particular exit code (others end with
/// [`Exit::Failed`]).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Ended {
    pub code: Exit,
    pub message: String,
}

impl Ended {
    pub fn new(code: Exit, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Asks on the terminal before `verb`ing: `deed` says in full what will be done. Refuses
/// without a terminal to ask on (then `--yes` goes on without asking), and unless the answer
/// is `yes`.
pub fn confirm(verb: &str, deed: &str) -> Result<(), Ended> {
    use std::io::{BufRead as _, Write as _};
    if !std::io::stdin().is_terminal() {
        return Err(Ended::new(
            Exit::Failed,
            format!(
                "refusing to {verb} without asking: there is no terminal to ask on. {deed} \
                 Pass --yes to {verb} without asking"
            ),
        ));
    }
    eprint!("{deed}\nType 'yes' to go on: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() || answer.trim() != "yes" {
        return Err(Ended::new(
            Exit::Failed,
            format!("did not {verb}: the answer was not 'yes'"),
        ));
    }
    Ok(())
}

/// Whether to colour what goes to standard output.
pub fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// Whether to colour what goes to standard error (error messages).
pub fn colour_on_stderr() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

#[derive(Clone, Copy)]
pub enum Paint {
    Green,
    Red,
    Yellow,
    Dim,
}

/// `text` in `paint` when `on`, else as is.
pub fn paint(on: bool, paint: Paint, text: &str) -> String {
    if !on {
        return text.to_string();
    }
    let code = match paint {
        Paint::Green => "32",
        Paint::Red => "31",
        Paint::Yellow => "33",
        Paint::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// A spinner with a message on standard error, drawn only when standard error is a
/// terminal; otherwise each new message is one plain line (so logs of scripts stay readable).
pub struct Progress {
    started: Instant,
    /// The last line printed without a terminal (a line is printed only when it changes).
    last: std::sync::Mutex<String>,
    live: Option<tokio::sync::watch::Sender<String>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub fn start(message: &str) -> Self {
        let started = Instant::now();
        if !std::io::stderr().is_terminal() {
            eprintln!("{message}");
            return Self {
                started,
                last: std::sync::Mutex::new(message.to_string()),
                live: None,
                task: None,
            };
        }
        let (tx, mut rx) = tokio::sync::watch::channel(message.to_string());
        let task = tokio::spawn(async move {
            const FRAMES: [&str; 8] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧"];
            let mut i = 0usize;
            loop {
                let text = rx.borrow_and_update().clone();
                eprint!("\r\x1b[2K{} {text}", FRAMES[i % FRAMES.len()]);
                i = i.wrapping_add(1);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    changed = rx.changed() => if changed.is_err() { break },
                }
            }
        });
        Self {
            started,
            last: std::sync::Mutex::new(String::new()),
            live: Some(tx),
            task: Some(task),
        }
    }

    /// A new message for the step under way.
    pub fn set(&self, message: &str) {
        match &self.live {
            Some(tx) => {
                let _ = tx.send(message.to_string());
            }
            None => {
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                if *last != message {
                    eprintln!("{message}");
                    *last = message.to_string();
                }
            }
        }
    }

    /// Ends the spinner with a final line (`✔ message (1.2s)`).
    pub fn done(mut self, ok: bool, message: &str) {
        self.stop();
        let mark = if ok { "✔" } else { "✘" };
        let took = self.started.elapsed().as_secs_f64();
        eprintln!("{mark} {message} ({took:.1}s)");
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            eprint!("\r\x1b[2K");
        }
        self.live = None;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paint_only_when_asked() {
        assert_eq!(paint(false, Paint::Red, "x"), "x");
        assert_eq!(paint(true, Paint::Red, "x"), "\x1b[31mx\x1b[0m");
    }
}
