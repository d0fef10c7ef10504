//! A TCP fault proxy between a client (the controller) and the API server, for the fault-injection tests:
//! real sockets, real TLS passing through, and faults applied to the bytes in flight, like toxiproxy's
//! `timeout` (black hole) and `reset_peer` toxics.
//!
//! - [`FaultProxy::black_hole`]: every connection, open or new, stops moving bytes either way (they wait
//!   in the proxy); the client sees a server that no longer answers, with its connections still open.
//! - [`FaultProxy::heal`]: bytes move again.
//! - [`FaultProxy::reset`]: every open connection is closed with a TCP reset (`SO_LINGER` 0); new ones are
//!   accepted normally.
//! - [`FaultProxy::refuse`]: new connections are reset as soon as they are accepted (a server that is
//!   down), until [`FaultProxy::heal`].
//! - [`FaultProxy::degrade`]: every chunk waits a fixed latency, each direction, and then the time its
//!   bytes take at a bandwidth limit (toxiproxy's `latency` and `bandwidth` toxics); lifted by
//!   [`FaultProxy::heal`].
//!
//! - [`FaultProxy::hold_watches`] (bridge mode only): the watches of the named resources stop moving bytes
//!   either way (their open connections, and new ones once their request names them) while everything else
//!   flows, until [`FaultProxy::release_watches`]: two watches resuming in a chosen order after a cut.
//!
//! [`FaultProxy::start_bridge`] is the proxy in bridge mode: clients speak plain HTTP/1.1 to it and it speaks
//! TLS to the API server (trusting the API server's CA), so it sees which request each connection carries.
//!
//! The proxy runs on a thread and runtime of its own, so it keeps working whatever the test's runtime does.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What the proxy does with traffic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bytes flow.
    None,
    /// Bytes stop, connections stay open.
    BlackHole,
    /// New connections are reset on accept; open ones keep flowing.
    Refuse,
    /// Bytes flow slowly: each chunk waits `latency`, then its size at `bytes_per_second`.
    Degraded {
        /// Added to every chunk, each direction.
        latency: Duration,
        /// The most bytes per second each direction of a connection carries.
        bytes_per_second: u64,
    },
}

/// A running proxy; dropped, it stops and closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    /// Bumped by [`FaultProxy::reset`]: every connection task watching it resets its sockets.
    resets: watch::Sender<u64>,
    /// The resources whose watches are held ([`FaultProxy::hold_watches`]).
    holds: watch::Sender<Vec<String>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    connections: Arc<Mutex<u64>>,
}

/// How the proxy reaches the API server.
#[derive(Clone)]
enum Upstream {
    /// Bytes as they come (TLS passes through).
    Tcp(SocketAddr),
    /// Plain HTTP from the client, TLS to the server.
    Tls(SocketAddr, tokio_rustls::TlsConnector),
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        Self::start_to(Upstream::Tcp(upstream))
    }

    /// A proxy in bridge mode: clients connect with plain HTTP/1.1 (`http://` + [`FaultProxy::addr`]), the
    /// proxy connects to `upstream` with TLS, trusting the PEM certificates `ca_pem` (the API server's CA)
    /// and naming it by its IP address. It sees each request, so it can hold chosen watches.
    pub fn start_bridge(upstream: SocketAddr, ca_pem: &[u8]) -> std::io::Result<Self> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            roots
                .add(cert.map_err(|e| invalid(format!("CA PEM: {e}")))?)
                .map_err(|e| invalid(e.to_string()))?;
        }
        let config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
        Self::start_to(Upstream::Tls(upstream, tokio_rustls::TlsConnector::from(Arc::new(config))))
    }

    fn start_to(upstream: Upstream) -> std::io::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (fault, fault_rx) = watch::channel(Fault::None);
        let (resets, resets_rx) = watch::channel(0u64);
        let (holds, holds_rx) = watch::channel(Vec::<String>::new());
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let connections = Arc::new(Mutex::new(0));
        let counter = connections.clone();
        let thread = std::thread::Builder::new().name("fault-proxy".into()).spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("fault proxy runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("fault proxy listener");
                let mut tasks = JoinSet::new();
                let accept = async {
                    loop {
                        let Ok((inbound, _)) = listener.accept().await else {
                            // Out of descriptors and the like: do not spin.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        *counter.lock().unwrap() += 1;
                        if *fault_rx.borrow() == Fault::Refuse {
                            reset_now(inbound);
                            continue;
                        }
                        let gate = Gate { target: Arc::default(), holds: holds_rx.clone() };
                        tasks.spawn(relay(
                            inbound,
                            upstream.clone(),
                            fault_rx.clone(),
                            resets_rx.clone(),
                            gate,
                        ));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
        Ok(FaultProxy { addr, fault, resets, holds, stop: Some(stop), thread: Some(thread), connections })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops every byte, both ways, on open and new connections.
    pub fn black_hole(&self) {
        self.fault.send_replace(Fault::BlackHole);
    }

    /// Resets new connections on accept (open ones keep working).
    pub fn refuse(&self) {
        self.fault.send_replace(Fault::Refuse);
    }

    /// Slows every connection, open or new: `latency` per chunk each way, at most `bytes_per_second`.
    pub fn degrade(&self, latency: Duration, bytes_per_second: u64) {
        self.fault.send_replace(Fault::Degraded { latency, bytes_per_second: bytes_per_second.max(1) });
    }

    /// Lets bytes flow again (ends a black hole, refusal or degradation).
    pub fn heal(&self) {
        self.fault.send_replace(Fault::None);
    }

    /// Bridge mode: holds the watches of these resources (plural names: `progresspolicies`), open and new,
    /// both ways, whatever the fault; everything else follows the fault as usual.
    pub fn hold_watches(&self, resources: &[&str]) {
        self.holds.send_replace(resources.iter().map(ToString::to_string).collect());
    }

    /// Lets the held watches move again (what they held arrives in order).
    pub fn release_watches(&self) {
        self.holds.send_replace(Vec::new());
    }

    /// Closes every open connection with a TCP reset.
    pub fn reset(&self) {
        self.resets.send_modify(|n| *n += 1);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        *self.connections.lock().unwrap()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn reset_now(stream: TcpStream) {
    // Linger 0: closing sends RST instead of FIN, as a crashed or reset peer does.
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn relay(
    inbound: TcpStream,
    upstream: Upstream,
    mut fault: watch::Receiver<Fault>,
    mut resets: watch::Receiver<u64>,
    gate: Gate,
) {
    resets.borrow_and_update();
    // A black hole also holds back new connections: wait before dialing.
    let ready = async {
        while *fault.borrow_and_update() == Fault::BlackHole {
            if fault.changed().await.is_err() {
                return false;
            }
        }
        true
    };
    let reset_seen = resets.clone();
    let (address, tls) = match &upstream {
        Upstream::Tcp(a) => (*a, None),
        Upstream::Tls(a, connector) => (*a, Some(connector.clone())),
    };
    let outbound = tokio::select! {
        ok = ready => {
            if !ok { return; }
            match TcpStream::connect(address).await {
                Ok(s) => s,
                Err(_) => { reset_now(inbound); return; }
            }
        }
        _ = wait_reset(reset_seen) => { reset_now(inbound); return; }
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut in_read, mut in_write) = inbound.into_split();
    match tls {
        None => {
            let (mut out_read, mut out_write) = outbound.into_split();
            let up = pump(&mut in_read, &mut out_write, fault.clone(), None);
            let down = pump(&mut out_read, &mut in_write, fault.clone(), None);
            tokio::select! {
                _ = async { tokio::join!(up, down) } => {}
                _ = wait_reset(resets) => {
                    if let (Ok(a), Ok(b)) = (in_read.reunite(in_write), out_read.reunite(out_write)) {
                        reset_now(a);
                        reset_now(b);
                    }
                }
            }
        }
        Some(connector) => {
            let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
            let Ok(secure) = connector.connect(name, outbound).await else {
                if let Ok(a) = in_read.reunite(in_write) {
                    reset_now(a);
                }
                return;
            };
            let (mut out_read, mut out_write) = tokio::io::split(secure);
            let up = pump(
                &mut in_read,
                &mut out_write,
                fault.clone(),
                Some((&gate, Some(RequestHeads::default()))),
            );
            let down = pump(&mut out_read, &mut in_write, fault.clone(), Some((&gate, None)));
            tokio::select! {
                _ = async { tokio::join!(up, down) } => {}
                _ = wait_reset(resets) => {
                    if let Ok(a) = in_read.reunite(in_write) {
                        reset_now(a);
                    }
                }
            }
        }
    }
}

/// What a bridged connection carries now and which watches are held: a connection whose current request
/// is a held watch moves no bytes.
struct Gate {
    /// The request target (`/apis/…?watch=true&…`) the connection carries now.
    target: Arc<Mutex<Option<String>>>,
    holds: watch::Receiver<Vec<String>>,
}

impl Gate {
    fn held(&self) -> bool {
        let holds = self.holds.borrow();
        let target = self.target.lock().unwrap();
        target.as_deref().is_some_and(|t| holds.iter().any(|r| is_watch_of(t, r)))
    }

    /// Waits while the connection's request is a held watch.
    async fn pass(&self) {
        let mut holds = self.holds.clone();
        while self.held() {
            if holds.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Whether request target `target` watches the collection `resource` (its path ends with it, its query
/// asks for a watch).
fn is_watch_of(target: &str, resource: &str) -> bool {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    path.strip_suffix(resource).is_some_and(|rest| rest.ends_with('/'))
        && query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1")
}

/// Finds where each HTTP/1.1 request starts in the bytes a client sends (one request at a time, as a
/// client without pipelining sends them): its head (request line, headers), then a `Content-Length` body.
#[derive(Default)]
struct RequestHeads {
    head: Vec<u8>,
    /// Body bytes still to pass before the next head.
    body: u64,
    /// A body of unknown length (chunked): heads are no longer followed.
    lost: bool,
}

impl RequestHeads {
    /// Feeds bytes; returns the target of the last request that started in them.
    fn feed(&mut self, mut bytes: &[u8]) -> Option<String> {
        let mut started = None;
        while !bytes.is_empty() && !self.lost {
            if self.body > 0 {
                let n = usize::try_from(self.body).unwrap_or(usize::MAX).min(bytes.len());
                self.body -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let before = self.head.len();
            self.head.extend_from_slice(bytes);
            let Some(end) = self.head.windows(4).position(|w| w == b"\r\n\r\n") else { return started };
            // The bytes of this chunk that belong to the head; what follows is its body or the next head.
            let consumed = end + 4 - before;
            let head = String::from_utf8_lossy(&self.head[..end]).into_owned();
            self.head.clear();
            let mut lines = head.split("\r\n");
            started = lines.next().and_then(|l| l.split(' ').nth(1)).map(str::to_string);
            for line in lines {
                let Some((name, value)) = line.split_once(':') else { continue };
                if name.eq_ignore_ascii_case("content-length") {
                    self.body = value.trim().parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
                    self.lost = true;
                }
            }
            bytes = &bytes[consumed..];
        }
        started
    }
}

async fn wait_reset(mut resets: watch::Receiver<u64>) {
    if resets.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Copies one direction, holding bytes back while a black hole lasts, and, on a bridged connection, while
/// its request is a held watch (the client's direction also learns each new request from `heads`).
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    mut fault: watch::Receiver<Fault>,
    gate: Option<(&Gate, Option<RequestHeads>)>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    let (gate, mut heads) = match gate {
        Some((g, h)) => (Some(g), h),
        None => (None, None),
    };
    loop {
        let read = from.read(&mut buf).await;
        // Nothing passes a black hole, not even the end of a connection (a server killed meanwhile).
        while *fault.borrow_and_update() == Fault::BlackHole {
            if fault.changed().await.is_err() {
                return;
            }
        }
        let n = match read {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if let (Some(gate), Some(heads)) = (gate, heads.as_mut())
            && let Some(target) = heads.feed(&buf[..n])
        {
            *gate.target.lock().unwrap() = Some(target);
        }
        if let Some(gate) = gate {
            gate.pass().await;
        }
        let shaping = *fault.borrow();
        if let Fault::Degraded { latency, bytes_per_second } = shaping {
            tokio::time::sleep(latency + Duration::from_secs_f64(n as f64 / bytes_per_second as f64)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        tokio::time::timeout(within, s.read_exact(&mut buf)).await.ok()?.ok()?;
        Some(buf.to_vec())
    }

    #[tokio::test]
    async fn bytes_flow_stop_in_a_black_hole_and_resume_when_healed() {
        let proxy = FaultProxy::start(echo_server().await).unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, Duration::from_secs(2)).await.as_deref(), Some(&b"ping"[..]));
        proxy.black_hole();
        assert_eq!(round_trip(&mut s, Duration::from_millis(300)).await, None, "nothing comes back");
        proxy.heal();
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(&buf, b"ping", "the held bytes arrive after healing");
    }

    #[tokio::test]
    async fn a_degraded_link_adds_its_latency_and_carries_at_most_its_bandwidth() {
        let proxy = FaultProxy::start(echo_server().await).unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut s, Duration::from_secs(2)).await.is_some());
        proxy.degrade(Duration::from_millis(150), 1_000_000);
        let t = std::time::Instant::now();
        assert!(round_trip(&mut s, Duration::from_secs(2)).await.is_some());
        let rtt = t.elapsed();
        assert!(rtt >= Duration::from_millis(300), "150 ms each way: {rtt:?}");
        // 4,000 bytes at 2,000 bytes/s, each direction: at least 2 s (the echo's two directions overlap).
        proxy.degrade(Duration::ZERO, 2_000);
        let t = std::time::Instant::now();
        s.write_all(&[7u8; 4000]).await.unwrap();
        let mut back = vec![0u8; 4000];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back)).await.unwrap().unwrap();
        assert!(t.elapsed() >= Duration::from_secs(2), "{:?} for 4,000 bytes at 2,000 bytes/s", t.elapsed());
        proxy.heal();
        let t = std::time::Instant::now();
        assert!(round_trip(&mut s, Duration::from_secs(2)).await.is_some());
        assert!(t.elapsed() < Duration::from_millis(250), "healed: {:?}", t.elapsed());
    }

    #[tokio::test]
    async fn a_reset_closes_open_connections_and_refusal_rejects_new_ones() {
        let proxy = FaultProxy::start(echo_server().await).unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut s, Duration::from_secs(2)).await.is_some());
        proxy.reset();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(round_trip(&mut s, Duration::from_secs(2)).await, None, "the connection is gone");
        proxy.refuse();
        // The kernel completes the handshake before the proxy accepts and resets, so the client sees the
        // reset either at its first round trip or, when it lands before the connect is polled to completion,
        // as the connect's own error (CI hit that once).
        match TcpStream::connect(proxy.addr()).await {
            Ok(mut refused) => assert_eq!(round_trip(&mut refused, Duration::from_secs(2)).await, None),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
        proxy.heal();
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut fresh, Duration::from_secs(2)).await.is_some());
        assert_eq!(proxy.connections(), 3);
    }

    #[test]
    fn request_heads_are_found_across_chunks_and_bodies() {
        let mut h = RequestHeads::default();
        assert_eq!(h.feed(b"GET /apis/x/progresspolicies?watch=true&res"), None);
        assert_eq!(
            h.feed(b"ourceVersion=5 HTTP/1.1\r\nHost: a\r\n\r\n").as_deref(),
            Some("/apis/x/progresspolicies?watch=true&resourceVersion=5")
        );
        let patch = b"PATCH /apis/t/trainjobs/j HTTP/1.1\r\nContent-Length: 12\r\n\r\n{\"spec\":{}}\nGET /b HTTP/1.1\r\n\r\n";
        assert_eq!(h.feed(patch).as_deref(), Some("/b"), "the body is skipped, the next head read");
        assert!(is_watch_of("/apis/x/namespaces/n/progresspolicies?watch=true", "progresspolicies"));
        assert!(!is_watch_of("/apis/x/namespaces/n/progresspolicies/p", "progresspolicies"));
        assert!(!is_watch_of("/apis/x/namespaces/n/progresspolicies?limit=1", "progresspolicies"));
        assert!(!is_watch_of("/apis/x/namespaces/n/clusterprogresspolicies?watch=1", "progresspolicies"));
    }

    /// The gate of a bridged connection: only a watch of a held resource waits, until released. (The bridge
    /// itself, TLS and all, is exercised by the fault suite's stale-view scenarios.)
    #[tokio::test]
    async fn only_a_held_watch_waits_and_only_until_released() {
        let proxy = FaultProxy::start(echo_server().await).unwrap();
        let gate = Gate { target: Arc::default(), holds: proxy.holds.subscribe() };
        *gate.target.lock().unwrap() = Some("/apis/x/progresspolicies?watch=true".into());
        assert!(!gate.held());
        proxy.hold_watches(&["progresspolicies"]);
        assert!(gate.held());
        *gate.target.lock().unwrap() = Some("/apis/x/progresspolicies/p".into());
        assert!(!gate.held(), "a GET of one policy is not a watch");
        *gate.target.lock().unwrap() = Some("/apis/x/progresspolicies?watch=1".into());
        let waiting = tokio::spawn(async move { gate.pass().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "held");
        proxy.release_watches();
        tokio::time::timeout(Duration::from_secs(2), waiting).await.unwrap().unwrap();
    }
}
