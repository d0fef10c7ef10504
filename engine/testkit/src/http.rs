//! A plain HTTP/1.1 GET against a local port, for tests that read the controller's `/healthz`, `/readyz`
//! and `/metrics` without an HTTP client dependency.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The whole response (status line and headers included) to `GET path` on `127.0.0.1:port`; `None` when
/// nothing listens yet or the connection fails (tests poll until it answers).
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}
