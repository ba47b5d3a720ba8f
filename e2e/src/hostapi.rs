//! A Git host's REST API on loopback over HTTPS, as the notification tests need it: GitHub's
//! commit statuses (`POST [/api/v3]/repos/{owner}/{repo}/statuses/{sha}`, `Authorization:
//! Bearer`), GitLab's (`POST /api/v4/projects/{id}/statuses/{sha}`, `PRIVATE-TOKEN`), and a
//! webhook (`POST /hook/...`) that checks Flux's `X-Signature: sha256=<hex>` HMAC. Every
//! request is recorded with whether its credentials and signature held; a request with wrong
//! credentials is answered 401 as the hosts do. A host that is down: `/fail/...` answers 500,
//! `/hang/...` never answers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::git::{serve_on_free_port, stop_with_children};

const SERVER: &str = r#"
import hashlib, hmac, http.server, json, re, ssl, sys, time
port, cert, key, log, token, hmac_key = sys.argv[1:7]

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        path = self.path
        github = re.fullmatch(r"(/api/v3)?/repos/[^/]+/[^/]+/statuses/[0-9a-f]{40}", path)
        gitlab = re.fullmatch(r"/api/v4/projects/[^/]+/statuses/[0-9a-f]{40}", path)
        if github:
            authorized = self.headers.get("Authorization") == "Bearer " + token
        elif gitlab:
            authorized = self.headers.get("PRIVATE-TOKEN") == token
        else:
            want = "sha256=" + hmac.new(hmac_key.encode(), body, hashlib.sha256).hexdigest()
            authorized = hmac.compare_digest(self.headers.get("X-Signature", ""), want)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        with open(log, "a") as f:
            f.write(json.dumps({"path": path, "authorized": authorized, "body": parsed}) + "\n")
        if path.startswith("/hang/"):
            time.sleep(3600)
        if path.startswith("/fail/"):
            self.send_response(500)
            answer = b'{"message": "down for maintenance"}'
        elif not authorized:
            self.send_response(401)
            answer = b'{"message": "Bad credentials"}'
        elif github or gitlab or path.startswith("/hook/"):
            self.send_response(201)
            answer = body
        else:
            self.send_response(404)
            answer = b'{"message": "Not Found"}'
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// One request the server received.
#[derive(Deserialize, Debug, Clone)]
pub struct Received {
    pub path: String,
    /// Its token (GitHub, GitLab) or HMAC signature (`/hook/`) was the right one.
    pub authorized: bool,
    pub body: serde_json::Value,
}

pub struct HostApi {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The CA that signed the server's certificate, PEM.
    pub ca_pem: String,
    log: PathBuf,
    child: Child,
    _root: tempfile::TempDir,
}

impl HostApi {
    /// Starts the server: `token` is the API token it accepts, `hmac_key` the webhook's key.
    pub fn start(token: &str, hmac_key: &str) -> Result<Self> {
        let root = tempfile::tempdir()?;
        let (cert, key, ca_pem) = crate::git::tls_files(root.path())?;
        let log = root.path().join("requests.jsonl");
        let script = root.path().join("server.py");
        std::fs::write(&script, SERVER)?;
        let (child, port) = serve_on_free_port(|port| {
            Command::new("python3")
                .arg(&script)
                .arg(port.to_string())
                .args([&cert, &key, &log])
                .args([token, hmac_key])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting the host API (python3)")
        })?;
        Ok(Self {
            url: format!("https://127.0.0.1:{port}"),
            ca_pem,
            log,
            child,
            _root: root,
        })
    }

    /// What it received so far, oldest first.
    pub fn received(&self) -> Vec<Received> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for HostApi {
    fn drop(&mut self) {
        stop_with_children(&mut self.child);
    }
}
