//! A real browser for the dashboard's tests: Debian's headless Chromium, driven through the
//! DevTools protocol over its WebSocket (evaluate, navigate, screenshot).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    socket: WebSocket<TcpStream>,
    next: u64,
}

/// A GET of Chromium's DevTools HTTP endpoint; the body. (It answers HTTP/1.1 only, and keeps
/// the connection open: the body is read by its Content-Length.)
fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut reader = BufReader::new(s);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

impl Browser {
    /// Starts Chromium (headless, 1280×900) on `url`.
    pub fn open(url: &str) -> Result<Self> {
        let profile = tempfile::tempdir()?;
        // Its own process group: Debian's `chromium` is a script that starts the browser,
        // which starts helpers; dropping the Browser ends them all.
        use std::os::unix::process::CommandExt as _;
        let mut child = Command::new("chromium")
            .process_group(0)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting chromium (apt install chromium)")?;
        let stderr = child.stderr.take().context("chromium's stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let port: u16 = loop {
            let line = lines
                .next()
                .context("chromium exited before listening for DevTools")??;
            if let Some(rest) = line.split("DevTools listening on ws://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap_or_default().parse()?;
            }
        };
        // Keep draining stderr so Chromium never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        let deadline = Instant::now() + Duration::from_secs(20);
        let page_ws = loop {
            let list: Value =
                serde_json::from_str(&http_get(port, "/json/list")?).unwrap_or_default();
            let page = list.as_array().and_then(|l| {
                l.iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(String::from))
            });
            if let Some(p) = page {
                break p;
            }
            if Instant::now() > deadline {
                bail!("chromium opened no page");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        let (socket, _) = tungstenite::client(page_ws.as_str(), stream)
            .map_err(|e| anyhow::anyhow!("DevTools handshake: {e}"))?;
        Ok(Self {
            child,
            _profile: profile,
            socket,
            next: 1,
        })
    }

    /// Calls a DevTools method and returns its result (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next;
        self.next += 1;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(Message::text(msg))?;
        loop {
            let reply = match self.socket.read()? {
                Message::Text(t) => serde_json::from_str::<Value>(t.as_str())?,
                _ => continue,
            };
            if reply["id"] == id {
                if let Some(e) = reply.get("error") {
                    bail!("{method}: {e}");
                }
                return Ok(reply["result"].clone());
            }
        }
    }

    /// Evaluates `js` in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, js: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!("{js}: {e}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Evaluates `js` until it returns something truthy (not false, null, 0 or ""), or fails
    /// after `timeout` with the last value.
    pub fn wait_for(&mut self, what: &str, js: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(js).unwrap_or(Value::Null);
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                let page = self
                    .eval("document.body.innerText.slice(0, 2000)")
                    .unwrap_or_default();
                bail!("{what}: not seen in {timeout:?} (last: {v}); the page reads: {page}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Saves a PNG of the page to `path`; returns its size in bytes.
    pub fn screenshot(&mut self, path: &Path) -> Result<usize> {
        use base64::Engine as _;
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}))?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().context("no screenshot data")?)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, &png)?;
        Ok(png.len())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}
