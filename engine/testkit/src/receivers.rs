//! Test helpers: a local HTTP receiver that records requests (and can be told to fail), policies compiled by
//! the real core, intents, secrets in a temporary directory, a self-signed certificate, the Python
//! interpreter for the SMTP server, and the SMTP server itself (aiosmtpd, engine/notify/tests/smtp_server.py).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use trainwarden_core::CompiledPolicy;
use trainwarden_core::ScriptEngine;
use trainwarden_core::{ActionIntent, Reason, Savings};
use trainwarden_core::{ActionSpec, Mode, NotifyAction, SuspendAction};
use trainwarden_core::{JobKey, Timestamp};

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Request {
    /// The request path (with the query).
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request body.
    pub body: Bytes,
}

impl Request {
    /// The body as JSON (panics if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

#[derive(Default)]
struct ReceiverState {
    requests: Mutex<Vec<Request>>,
    /// Answers for the next requests (then 200).
    script: Mutex<VecDeque<StatusCode>>,
    delay_ms: AtomicU32,
}

/// A local HTTP server on 127.0.0.1 that records every request.
#[derive(Clone)]
pub struct HttpReceiver {
    /// Where it listens (loopback).
    pub addr: SocketAddr,
    state: Arc<ReceiverState>,
}

impl HttpReceiver {
    /// Starts a receiver on a free loopback port.
    pub async fn start() -> HttpReceiver {
        let state = Arc::new(ReceiverState::default());
        let handler_state = state.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = handler_state.clone();
            async move {
                // Recorded on arrival, so a test can tell a request is in flight while its answer is delayed.
                state.requests.lock().unwrap().push(Request { path: uri.path().to_string(), headers, body });
                let delay = state.delay_ms.load(Ordering::Relaxed);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(u64::from(delay))).await;
                }
                let status = state.script.lock().unwrap().pop_front().unwrap_or(StatusCode::OK);
                (status, if status.is_success() { "ok" } else { "scripted failure" })
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        HttpReceiver { addr, state }
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next answers, in order (then 200 again).
    pub fn fail_with(&self, statuses: &[u16]) {
        let mut script = self.state.script.lock().unwrap();
        script.extend(statuses.iter().map(|s| StatusCode::from_u16(*s).unwrap()));
    }

    /// Forgets the scripted answers not yet given: 200 from now on.
    pub fn heal(&self) {
        self.state.script.lock().unwrap().clear();
    }

    /// Answers every request after `d` from now on.
    pub fn delay(&self, d: Duration) {
        self.state.delay_ms.store(d.as_millis() as u32, Ordering::Relaxed);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The requests received so far to `path`.
    pub fn requests_to(&self, path: &str) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.path == path).collect()
    }

    /// Waits until at least `n` requests reached `path`, or panics after `timeout`.
    pub async fn wait_for(&self, path: &str, n: usize, timeout: Duration) -> Vec<Request> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self.requests_to(path);
            if got.len() >= n {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "expected {n} request(s) to {path} within {timeout:?}, got {}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Compiles a policy document with the real validator; panics with every error.
pub fn policy(yaml: &str) -> CompiledPolicy {
    let docs = trainwarden_core::parse_documents(yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}"));
    trainwarden_core::compile(&docs[0], &ScriptEngine::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// A secrets root laid out as `<root>/<namespace>/<name>/<key>`, removed on drop.
pub struct SecretsDir(pub PathBuf);

impl SecretsDir {
    /// A fresh directory for the test `test`.
    pub fn new(test: &str) -> SecretsDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tw-notify-{test}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        SecretsDir(dir)
    }

    /// Writes one Secret key as a file, as a mounted Secret would be.
    pub fn put(&self, namespace: &str, name: &str, key: &str, value: &str) {
        let dir = self.0.join(namespace).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(key), value).unwrap();
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SecretsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The wall clock (notification tests deliver for real).
pub fn now() -> Timestamp {
    Timestamp::now()
}

/// An intent of rule `rule` on job `fraud/<job>` of the policy, fired at `at`.
pub fn intent(p: &CompiledPolicy, rule: &str, job: &str, at: Timestamp, action: ActionSpec) -> ActionIntent {
    ActionIntent {
        id: format!("{}:{rule}:{job}:{}", p.reference, at.as_second()),
        at,
        job: JobKey::new("fraud", job),
        policy: p.reference.clone(),
        rule: rule.into(),
        action,
        mode: Mode::Enforce,
        reason: Reason {
            summary: format!("{rule}: loss has not improved by more than 0.001 for 2h"),
            values: [("best".to_string(), 0.6117), ("last".to_string(), 0.6121)].into(),
            kind: None,
            resolution: None,
        },
        savings: None,
        snoozed_until: None,
    }
}

/// A `notify: {to}` action with a message.
pub fn notify(to: &str) -> ActionSpec {
    ActionSpec::Notify(NotifyAction { to: to.into(), message: Some("please have a look".into()) })
}

/// `i` as a suspension whose savings are the Friday example's (8 GPUs, 262.36 GPU-hours, $1,803.73).
pub fn suspend_with_savings(mut i: ActionIntent) -> ActionIntent {
    i.action = ActionSpec::Suspend(SuspendAction::default());
    i.savings = Some(Savings {
        until: i.at,
        basis: trainwarden_core::SavingsBasis::EstimatedEnd,
        gpus: 8.0,
        gpu_hours: 262.36,
        dollars: Some(1803.73),
    });
    i
}

/// The Python with aiosmtpd: `TRAINWARDEN_PYTHON`, else ~/.cache/trainwarden/venv/bin/python. `None` (after
/// printing why) when missing outside CI; under `CI=true` a missing interpreter or module fails the test.
pub fn python_with_aiosmtpd() -> Option<PathBuf> {
    let candidate =
        std::env::var_os("TRAINWARDEN_PYTHON").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/trainwarden/venv/bin/python"))
        });
    let problem = match &candidate {
        None => "no TRAINWARDEN_PYTHON and no HOME".to_string(),
        Some(p) => match std::process::Command::new(p).args(["-c", "import aiosmtpd"]).output() {
            Ok(out) if out.status.success() => return candidate,
            Ok(out) => format!(
                "{} cannot import aiosmtpd: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!("{}: {e}", p.display()),
        },
    };
    let ci = crate::ci();
    if ci {
        panic!(
            "the SMTP tests need Python with aiosmtpd (CI=true, so this fails): {problem}; run tests/python/setup-venv.sh"
        );
    }
    eprintln!("SKIPPED: the SMTP tests need Python with aiosmtpd: {problem}; run tests/python/setup-venv.sh");
    None
}

/// A self-signed certificate for `localhost` and 127.0.0.1: (certificate PEM, key PEM).
pub fn self_signed() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("self-signed certificate");
    (cert.cert.pem(), cert.signing_key.serialize_pem())
}

/// A free TCP port on 127.0.0.1, bound and released: a server started on it must cope with losing it to
/// another process in between (see [`SmtpServer::start`]).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running aiosmtpd (engine/notify/tests/smtp_server.py) with a self-signed certificate and one accepted login
/// (`user`, `password`); stopped (stdin closed, then killed) on drop. Used by the notifier's SMTP tests and
/// the controller's end-to-end notification test.
pub struct SmtpServer {
    child: std::process::Child,
    /// Its loopback port.
    pub port: u16,
    messages: Arc<Mutex<Vec<serde_json::Value>>>,
    _files: SecretsDir,
    /// Its self-signed certificate (PEM), for a client to trust.
    pub cert_pem: String,
}

impl SmtpServer {
    /// `mode` is `starttls` or `implicit`. `None` (after saying why) without Python + aiosmtpd outside CI;
    /// under `CI=true` that fails (see [`python_with_aiosmtpd`]).
    pub fn start(mode: &str, user: &str, password: &str) -> Option<SmtpServer> {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let python = python_with_aiosmtpd()?;
        let files = SecretsDir::new(&format!("smtp-{mode}"));
        let (cert_pem, key_pem) = self_signed();
        let cert = files.path().join("cert.pem");
        let key = files.path().join("key.pem");
        std::fs::write(&cert, &cert_pem).unwrap();
        std::fs::write(&key, key_pem).unwrap();
        // The script lives with the notifier's tests (this crate is engine/testkit).
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../notify/tests/smtp_server.py");
        // A free port is bound and released here, so another process may take it before the server binds
        // it: then the server says so and another port is tried.
        let mut attempts = 0;
        let (child, port, lines) = loop {
            attempts += 1;
            let port = free_port();
            let mut child = Command::new(&python)
                .arg(&script)
                .arg(port.to_string())
                .arg(mode)
                .arg(&cert)
                .arg(&key)
                .args([user, password])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start the SMTP server");
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            match lines.next() {
                Some(Ok(line)) if line == "READY" => break (child, port, lines),
                Some(Ok(line)) if line.starts_with("PORT-TAKEN") && attempts < 5 => {
                    let _ = child.wait();
                }
                other => panic!("the SMTP server did not start on port {port}: {other:?}"),
            }
        };
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = messages.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(serde_json::from_str(&line).expect("a JSON line"));
            }
        });
        Some(SmtpServer { child, port, messages, _files: files, cert_pem })
    }

    /// The messages received so far (JSON, as smtp_server.py prints them).
    pub fn messages(&self) -> Vec<serde_json::Value> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits up to 10 s for at least `n` messages.
    pub async fn wait_for(&self, n: usize) -> Vec<serde_json::Value> {
        for _ in 0..500 {
            let got = self.messages();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("expected {n} message(s), got {:?}", self.messages());
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
