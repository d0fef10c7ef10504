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
//! The proxy runs on a thread and runtime of its own, so it keeps working whatever the test's runtime does.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    connections: Arc<Mutex<u64>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (fault, fault_rx) = watch::channel(Fault::None);
        let (resets, resets_rx) = watch::channel(0u64);
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
                        tasks.spawn(relay(inbound, upstream, fault_rx.clone(), resets_rx.clone()));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
        Ok(FaultProxy { addr, fault, resets, stop: Some(stop), thread: Some(thread), connections })
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
    upstream: SocketAddr,
    mut fault: watch::Receiver<Fault>,
    mut resets: watch::Receiver<u64>,
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
    let outbound = tokio::select! {
        ok = ready => {
            if !ok { return; }
            match TcpStream::connect(upstream).await {
                Ok(s) => s,
                Err(_) => { reset_now(inbound); return; }
            }
        }
        _ = wait_reset(reset_seen) => { reset_now(inbound); return; }
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let up = pump(&mut in_read, &mut out_write, fault.clone());
    let down = pump(&mut out_read, &mut in_write, fault.clone());
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

async fn wait_reset(mut resets: watch::Receiver<u64>) {
    if resets.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Copies one direction, holding bytes back while a black hole lasts.
async fn pump(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
) {
    let mut buf = vec![0u8; 64 * 1024];
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
}
