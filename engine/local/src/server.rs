//! The HTTPS side of the status endpoint: TLS with the run's certificate, HTTP/1.1, and upstream's limits
//! (64 KiB bodies, 10 s to read a request's headers and body). Decisions are [`crate::status_api`]'s; accepted
//! updates go to the driver through a channel, in arrival order. Connections end with a lingering close
//! (`linger`), so an oversized body gets its 413 rather than a reset.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use trainwarden_core::JobKey;

use crate::status_api::{self, MAX_BODY_BYTES, Reply, Route};

const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// An accepted `trainerStatus` (in its stored form), for the evaluator.
#[derive(Debug)]
pub struct AcceptedUpdate {
    /// The `trainerStatus` object as the endpoint echoed it back to the command.
    pub trainer_status: Value,
}

struct State {
    job: JobKey,
    token: String,
    updates: mpsc::Sender<AcceptedUpdate>,
}

/// A running endpoint. Dropping it stops accepting connections.
pub struct StatusServer {
    /// The address the endpoint listens on (with the port actually bound when port 0 was asked for).
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StatusServer {
    /// Binds `listen` and serves the status endpoint for `job`, accepting only `token`.
    pub async fn start(
        listen: SocketAddr,
        tls: Arc<tokio_rustls::rustls::ServerConfig>,
        job: JobKey,
        token: String,
        updates: mpsc::Sender<AcceptedUpdate>,
    ) -> Result<StatusServer, String> {
        let listener = TcpListener::bind(listen).await.map_err(|e| format!("listening on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("listening on {listen}: {e}"))?;
        let state = Arc::new(State { job, token, updates });
        let acceptor = TlsAcceptor::from(tls);
        let task = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!("status endpoint: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, state) = (acceptor.clone(), state.clone());
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(READ_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            return tracing::debug!("status endpoint: TLS handshake with {peer}: {e}");
                        }
                        Err(_) => {
                            return tracing::debug!("status endpoint: TLS handshake with {peer} timed out");
                        }
                    };
                    let service = hyper::service::service_fn(move |req| Box::pin(handle(req, state.clone())));
                    let connection = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(READ_TIMEOUT)
                        .serve_connection(TokioIo::new(tls), service)
                        .without_shutdown();
                    // No cap on a connection's life: the SDK keeps one open and reports every few seconds.
                    match connection.await {
                        Ok(parts) => linger(parts.io.into_inner()).await,
                        Err(e) => tracing::debug!("status endpoint: connection from {peer}: {e}"),
                    }
                });
            }
        });
        Ok(StatusServer { addr, task })
    }
}

async fn handle(req: Request<Incoming>, state: Arc<State>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = decide(req, &state).await;
    if let Some(trainer_status) = reply.accepted.clone() {
        // The driver only stops listening when the watch ends; a closed channel then loses nothing.
        let _ = state.updates.send(AcceptedUpdate { trainer_status }).await;
    }
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        hyper::StatusCode::from_u16(reply.status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    Ok(response)
}

async fn decide(req: Request<Incoming>, state: &State) -> Reply {
    let (parts, body) = req.into_parts();
    // Upstream's body-size middleware wraps every route and runs before authorization.
    let declared = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return discard(body, Reply::payload_too_large()).await;
    }
    let target = match status_api::route(parts.method.as_str(), parts.uri.path()) {
        Route::Status(job) => job,
        Route::Other => return discard(body, Reply::not_found()).await,
    };
    if !status_api::authorized(
        parts.headers.get(AUTHORIZATION).map(hyper::http::HeaderValue::as_bytes),
        &state.token,
    ) {
        return discard(body, Reply::forbidden()).await;
    }
    // Read past the limit (up to what Go would discard) so the client gets its 413 rather than a reset.
    let body = match tokio::time::timeout(READ_TIMEOUT, Limited::new(body, DISCARD_LIMIT).collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Reply::payload_too_large(),
        // A body that cannot be read is one Go's decoder fails on.
        Ok(Err(_)) | Err(_) => return Reply::invalid_payload(),
    };
    if body.len() > MAX_BODY_BYTES {
        return Reply::payload_too_large();
    }
    status_api::handle_update(&state.job, &target, &body)
}

/// Go's server reads up to 256 KiB of a body its handler left unread, so the connection can be kept alive;
/// after a larger one it is closed, there as here — by [`linger`], which still lets the 413 reach the client.
const DISCARD_LIMIT: usize = 256 << 10;

/// How much of what a client still sends after the last answer [`linger`] reads and drops, and for how long.
const LINGER_BYTES: usize = 16 << 20;
const LINGER_TIME: Duration = READ_TIMEOUT;

/// Closes a connection HTTP is done with (the client closed it, or the server will not read the rest of an
/// oversized body) without resetting it: TLS `close_notify` and a TCP half-close first, then whatever the
/// client is still sending is read and dropped, undecrypted, until it closes its side — at most
/// [`LINGER_BYTES`] for at most [`LINGER_TIME`]. Closing a socket with unread data makes the kernel send a
/// reset, which destroys the answer before a client that writes its whole request before reading (Python's
/// `http.client`, curl) has read it; now such a client gets its 413 for a body of up to 16 MiB, and one that
/// reads while it writes (reqwest, Go) gets it at once, whatever the size.
async fn linger(mut tls: TlsStream<TcpStream>) {
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    // A client that is gone already makes this fail, which is fine: there is nothing to linger for.
    if !matches!(tokio::time::timeout_at(deadline, tls.shutdown()).await, Ok(Ok(()))) {
        return;
    }
    let (mut tcp, _) = tls.into_inner();
    let mut buf = vec![0; 64 << 10];
    let mut left = LINGER_BYTES;
    while left > 0 {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
}

async fn discard(body: Incoming, reply: Reply) -> Reply {
    let _ = tokio::time::timeout(READ_TIMEOUT, Limited::new(body, DISCARD_LIMIT).collect()).await;
    reply
}
