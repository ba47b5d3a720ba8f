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

/// What a slow client trickles, one byte a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trickle {
    /// Its headers: the request line is sent, then a header line that never ends.
    Headers,
    /// Its body: whole headers announcing 4 KiB, then the body.
    Body,
}

/// A hostile client of `http://<addr><path>`: it connects and sends what `what` says one
/// byte a second, for at most `bytes` seconds or until the server closes the connection.
/// Returns whether the server closed it (or refused it) before the client was done.
pub async fn trickle(addr: &str, path: &str, what: Trickle, bytes: usize) -> bool {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return true;
    };
    let head = match what {
        Trickle::Headers => format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-Slow: "),
        Trickle::Body => format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-GitHub-Event: push\r\nContent-Length: 4096\r\n\r\n"
        ),
    };
    if s.write_all(head.as_bytes()).await.is_err() {
        return true;
    }
    for _ in 0..bytes {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if s.write_all(b"a").await.is_err() {
            return true;
        }
    }
    // Closed by the server: a read sees the end (or an answer) at once.
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(std::time::Duration::from_millis(100), s.read(&mut buf)).await,
        Ok(Ok(_) | Err(_))
    )
}

/// `n` slow clients of `http://<addr><path>`, half trickling headers and half bodies, each for
/// at most `seconds`; each task ends with whether the server cut it off.
pub fn slow_clients(
    addr: &str,
    path: &str,
    n: usize,
    seconds: usize,
) -> Vec<tokio::task::JoinHandle<bool>> {
    (0..n)
        .map(|i| {
            let (addr, path) = (addr.to_string(), path.to_string());
            let what = if i % 2 == 0 {
                Trickle::Headers
            } else {
                Trickle::Body
            };
            tokio::spawn(async move { trickle(&addr, &path, what, seconds).await })
        })
        .collect()
}
