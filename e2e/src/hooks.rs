//! Webhook requests as the tests and benchmarks send them: HMAC signatures, and raw HTTP/1.1
//! POSTs on loopback (no client library, so that a thousand at once stay cheap).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The hex HMAC of `body` under `key` with digest `M`.
pub fn hmac_hex<M: Mac + hmac::digest::KeyInit>(key: &str, body: &[u8]) -> String {
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key.as_bytes()).expect("any key");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// GitHub's `X-Hub-Signature-256` of `body` under `token`.
pub fn github_signature(token: &str, body: &[u8]) -> String {
    format!("sha256={}", hmac_hex::<Hmac<Sha256>>(token, body))
}

/// POSTs `body` with `headers` to `http://<addr><path>`; the status code, or 0 when the
/// connection failed.
pub async fn raw_post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    if s.write_all(req.as_bytes()).await.is_err() || s.write_all(body).await.is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    if s.read_exact(&mut head).await.is_err() {
        return 0;
    }
    String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0)
}
