//! The running endpoint of a real watch, spoken to over HTTPS by a real client (reqwest + rustls/ring, trusting
//! only the run's CA): malformed requests get the errors Kubeflow Trainer's status server returns, and only the
//! one valid report reaches the evaluator and the recording.
//!
//! The watched command is a shell script that hands its KUBEFLOW_TRAINER_SERVER_* variables to the test and
//! waits; the test plays the training code.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use trainwarden_core::JobKey;
use trainwarden_core::{EngineConfig, Evaluator, Event};
use trainwarden_local::supervisor::Exit;
use trainwarden_local::{Ending, Outcome, ReportOnly, WatchError, WatchOptions, watch};

const POLICY: &str = r"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: guard, namespace: ml}
spec:
  mode: Enforce
  samplingInterval: 1s
  rules:
    - {name: nan-loss, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}
    - {name: progress-over-100, when: 'progress() > 100', actions: [{suspend: {}}]}
";

/// Upstream's 403 body, from the shared fixtures (shared/ sits beside the repository).
fn forbidden() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/kubeflow/payloads/upstream-status-response.forbidden.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim_end().to_string() + "\n"
}

/// A `metav1.Status` failure as Go encodes it: field order of the struct, a trailing newline.
fn status_body(message: &str, reason: &str, code: u16) -> String {
    format!(
        "{{\"metadata\":{{}},\"status\":\"Failure\",\"message\":{},\"reason\":\"{reason}\",\"code\":{code}}}\n",
        json!(message)
    )
}

/// Up to 30 s: the watched shell starts in milliseconds, but a loaded CI machine may take seconds.
async fn wait_for(path: &Path) -> String {
    for _ in 0..600 {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} did not appear: the command did not start", path.display());
}

struct Endpoint {
    client: reqwest::Client,
    url: String,
    token: String,
    /// The run's CA certificate (PEM).
    ca: Vec<u8>,
}

impl Endpoint {
    async fn post(&self, url: &str, token: Option<&str>, body: impl Into<reqwest::Body>) -> (u16, String) {
        let mut req = self.client.post(url).header("Content-Type", "application/json").body(body);
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let resp = req.send().await.expect("the endpoint answers");
        let status = resp.status().as_u16();
        assert_eq!(
            resp.headers().get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        (status, resp.text().await.unwrap())
    }

    /// A POST to the status URL: the answer, or the error the client saw.
    async fn try_post(
        &self,
        token: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> Result<(u16, String), String> {
        let mut req = self.client.post(&self.url).body(body);
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let resp = req.send().await.map_err(|e| format!("{e:?}"))?;
        let status = resp.status().as_u16();
        Ok((status, resp.text().await.map_err(|e| format!("{e:?}"))?))
    }
}

/// A watch whose command waits for the test: the endpoint's address and credentials as the command got them.
struct Watched {
    ep: Endpoint,
    dir: PathBuf,
    done: PathBuf,
    recording: PathBuf,
    ca_file: String,
    token_file: String,
    watching: tokio::task::JoinHandle<(Result<Outcome, WatchError>, String)>,
}

async fn start(name: &str) -> Watched {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir: PathBuf = std::env::temp_dir().join(format!("trainwarden-local-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (env_file, done, recording) = (dir.join("env"), dir.join("done"), dir.join("run.jsonl"));
    let script = format!(
        r#"printf '%s\n%s\n%s\n' "$KUBEFLOW_TRAINER_SERVER_URL" "$KUBEFLOW_TRAINER_SERVER_CA_CERT" "$KUBEFLOW_TRAINER_SERVER_TOKEN" > '{0}.tmp' && mv '{0}.tmp' '{0}'
while [ ! -e '{1}' ]; do sleep 0.05; done"#,
        env_file.display(),
        done.display()
    );
    let engine = EngineConfig { eval_interval: "1s".parse().unwrap(), ..EngineConfig::default() };
    let docs = trainwarden_core::parse_documents(POLICY, "policy.yaml").unwrap();
    let policies =
        vec![trainwarden_core::compile(&docs[0], Evaluator::new(engine.clone()).scripts()).unwrap()];
    let options = WatchOptions {
        policies,
        engine,
        job: JobKey::new("ml", "train"),
        labels: BTreeMap::new(),
        gpus: None,
        grace_period: Duration::from_secs(5),
        record: Some(recording.clone()),
        listen: "127.0.0.1:0".parse().unwrap(),
        command: vec![OsString::from("sh"), OsString::from("-c"), OsString::from(script)],
        replay_hint: None,
    };
    let watching = tokio::spawn(async move {
        let mut log = Vec::new();
        let outcome = watch(options, &mut ReportOnly, &mut log).await;
        (outcome, String::from_utf8_lossy(&log).into_owned())
    });

    let env = wait_for(&env_file).await;
    let lines: Vec<&str> = env.lines().collect();
    let [url, ca_file, token_file] = lines[..] else { panic!("unexpected env file: {env:?}") };
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert!(
        url.ends_with("/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/train/status"),
        "{url}"
    );
    let ca = std::fs::read(ca_file).expect("KUBEFLOW_TRAINER_SERVER_CA_CERT is a file");
    let token = std::fs::read_to_string(token_file).expect("KUBEFLOW_TRAINER_SERVER_TOKEN is a file");
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .build()
        .unwrap();
    let ep = Endpoint { client, url: url.to_string(), token, ca };
    Watched {
        ep,
        dir,
        done,
        recording,
        ca_file: ca_file.to_string(),
        token_file: token_file.to_string(),
        watching,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_kubeflows_errors_and_never_reach_the_evaluator() {
    let Watched { ep, dir, done, recording, ca_file, token_file, watching } = start("endpoint").await;
    let (ca_file, token_file) = (ca_file.as_str(), token_file.as_str());
    let url = ep.url.as_str();
    let tok = Some(ep.token.as_str());
    let root = url.split("/apis/").next().unwrap();

    // Bad JSON, and trailing data after a valid object.
    for body in ["{not json", "{} {}", r#"{"trainerStatus": {"progressPercentage": "45"}}"#] {
        assert_eq!(
            ep.post(&ep.url, tok, body).await,
            (422, status_body("Invalid payload", "Invalid", 422)),
            "{body}"
        );
    }
    // Wrong, missing and malformed credentials, with a body that would otherwise fire the NaN rule.
    let nan_report = json!({"trainerStatus": {"metrics": [{"name": "loss", "value": "nan"}], "lastUpdatedTime": "2026-11-30T10:00:00Z"}}).to_string();
    for t in [Some("not-the-token"), None, Some("")] {
        assert_eq!(ep.post(&ep.url, t, nan_report.clone()).await, (403, forbidden()), "token {t:?}");
    }
    // Oversized, declared (rejected before authorization, as upstream's middleware does) and chunked.
    let metrics: Vec<Value> = (0..2500).map(|i| json!({"name": format!("m{i}"), "value": "nan"})).collect();
    let huge =
        json!({"trainerStatus": {"metrics": metrics, "lastUpdatedTime": "2026-11-30T10:00:00Z"}}).to_string();
    assert!(huge.len() > 64 * 1024);
    let too_large = status_body("Payload too large", "RequestEntityTooLarge", 413);
    assert_eq!(ep.post(&ep.url, tok, huge.clone()).await, (413, too_large.clone()));
    assert_eq!(ep.post(&ep.url, Some("wrong"), huge.clone()).await, (413, too_large.clone()));
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        huge.as_bytes().chunks(4096).map(|c| Ok(c.to_vec())).collect();
    let chunked = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    assert_eq!(ep.post(&ep.url, tok, chunked).await, (413, too_large));
    // What the CRD schema rejects: the API server's message, word for word.
    let over = json!({"trainerStatus": {"progressPercentage": 150, "metrics": [{"name": "loss", "value": "nan"}], "lastUpdatedTime": "2026-11-30T10:00:00Z"}});
    assert_eq!(
        ep.post(&ep.url, tok, over.to_string()).await,
        (
            422,
            status_body(
                "TrainJob.trainer.kubeflow.org \"train\" is invalid: status.trainerStatus.progressPercentage: Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100",
                "Invalid",
                422
            )
        )
    );
    // Other routes, other jobs, other methods.
    assert_eq!(
        ep.post(&format!("{root}/healthz"), tok, "{}").await,
        (404, status_body("Not found", "NotFound", 404))
    );
    let other_job = ep.url.replace("/trainjobs/train/", "/trainjobs/other/");
    assert_eq!(
        ep.post(&other_job, tok, nan_report.clone()).await,
        (404, status_body("Train job not found", "NotFound", 404))
    );
    let get =
        ep.client.get(&ep.url).header("Authorization", format!("Bearer {}", ep.token)).send().await.unwrap();
    assert_eq!(
        (get.status().as_u16(), get.text().await.unwrap()),
        (404, status_body("Not found", "NotFound", 404))
    );
    // No trainerStatus: 200, nothing recorded.
    assert_eq!(ep.post(&ep.url, tok, "{}").await, (200, "{}\n".to_string()));

    // Valid for the CRD schema (a string), so Kubeflow stores it; not a number, so it is not evaluated.
    let text_metric = json!({"trainerStatus": {"metrics": [{"name": "loss", "value": "abc"}], "lastUpdatedTime": "2026-11-30T10:00:00Z"}});
    assert_eq!(ep.post(&ep.url, tok, text_metric.to_string()).await.0, 200);

    // One valid report: echoed as stored (metav1.Time: whole seconds, UTC).
    let valid = json!({"trainerStatus": {"lastUpdatedTime": "2026-11-30T10:00:01.532918+00:00", "progressPercentage": 3,
        "metrics": [{"name": "loss", "value": "2.5"}]}});
    let stored = json!({"progressPercentage": 3, "metrics": [{"name": "loss", "value": "2.5"}], "lastUpdatedTime": "2026-11-30T10:00:01Z"});
    let (code, echo) = ep.post(&ep.url, tok, valid.to_string()).await;
    assert_eq!(
        (code, serde_json::from_str::<Value>(&echo).unwrap()),
        (200, json!({"trainerStatus": stored}))
    );

    std::fs::write(&done, "").unwrap();
    let (outcome, log) =
        tokio::time::timeout(Duration::from_secs(30), watching).await.expect("watch ends").unwrap();
    let outcome = outcome.unwrap_or_else(|e| panic!("watch failed: {}\n{log}", e.message));
    assert_eq!(outcome.ending, Ending::Finished(Exit::Code(0)), "{log}");
    assert!(log.contains("sample accepted (as Kubeflow would) but not evaluated: trainerStatus.metrics[0].value: not a number"), "{log}");
    // start, the one valid report, the end: nothing else reached the evaluator, and no rule fired.
    assert_eq!(outcome.summary.records, 3, "{log}");
    assert_eq!(outcome.summary.firings, 0, "{log}");
    assert!(!outcome.events.iter().any(|e| matches!(e, Event::Intent(_))), "{log}");
    let recorded: Vec<Value> = std::fs::read_to_string(&recording)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reports: Vec<&Value> = recorded.iter().filter_map(|r| r.get("trainerStatus")).collect();
    assert_eq!(reports, vec![&stored], "{recorded:?}");
    assert_eq!(recorded.last().unwrap()["phase"], "Complete");
    // The run's CA and token files are gone with the run.
    assert!(!Path::new(ca_file).exists() && !Path::new(token_file).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// One request on a fresh connection, sent as Python's `http.client` and curl send one: the whole request
/// is written before the answer is read. The answer's status code and body, or the I/O error (a reset).
async fn write_all_then_read(ep: &Endpoint, head: String, body: Vec<u8>) -> std::io::Result<(u16, String)> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(&ep.ca).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let authority = ep.url.trim_start_matches("https://").split('/').next().unwrap().to_string();
    let tcp = tokio::net::TcpStream::connect(&authority).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(&body).await?;
    tls.flush().await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut answer))
        .await
        .map_err(|_| std::io::Error::other("no answer within 20 s"))??;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}

/// Chunked transfer coding of `body`, in 16 KiB chunks.
fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in body.chunks(16 << 10) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Issue 14: a 3.4 MB report (far over the 256 KiB the server reads of an unread body) reset the connection
/// instead of answering 413. Now every kind of client gets the 413: one that writes its whole request first
/// (declared length or chunked) and one that reads while it writes (reqwest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_megabyte_body_gets_413_not_a_reset() {
    let Watched { ep, dir, done, watching, .. } = start("oversized").await;
    let metrics: Vec<Value> =
        (0..110_000).map(|i| json!({"name": format!("m{i}"), "value": "nan"})).collect();
    let huge = json!({"trainerStatus": {"metrics": metrics, "lastUpdatedTime": "2026-11-30T10:00:00Z"}})
        .to_string()
        .into_bytes();
    assert!((3_000_000..4_000_000).contains(&huge.len()), "{}", huge.len());
    let too_large = status_body("Payload too large", "RequestEntityTooLarge", 413);
    let path = format!("/{}", ep.url.trim_start_matches("https://").split_once('/').unwrap().1);
    let common = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n",
        ep.token
    );
    let mut answers = Vec::new();
    for round in 0..3 {
        let declared = format!("{common}Content-Length: {}\r\n\r\n", huge.len());
        let answer = write_all_then_read(&ep, declared, huge.clone()).await;
        answers.push((
            format!("Content-Length, written first, round {round}"),
            answer.map_err(|e| e.to_string()),
        ));
        let streamed = format!("{common}Transfer-Encoding: chunked\r\n\r\n");
        let answer = write_all_then_read(&ep, streamed, chunked(&huge)).await;
        answers.push((format!("chunked, written first, round {round}"), answer.map_err(|e| e.to_string())));
    }
    let tok = Some(ep.token.as_str());
    answers.push(("Content-Length, reqwest".into(), ep.try_post(tok, huge.clone()).await));
    // A client streaming a body of unknown length while it reads races the server's close after the 413:
    // in one run of the test command (of many) reqwest saw the connection end before it took the answer
    // (`IncompleteMessage`), as HTTP/1.1 allows. Such a client retries; so does this test, up to 3 times.
    let mut streamed = Err(String::new());
    for _ in 0..3 {
        let parts: Vec<Result<Vec<u8>, std::io::Error>> = huge.chunks(4096).map(|c| Ok(c.to_vec())).collect();
        let stream = reqwest::Body::wrap_stream(futures_util::stream::iter(parts));
        streamed = ep.try_post(tok, stream).await;
        if streamed.as_ref().is_ok() {
            break;
        }
    }
    answers.push(("chunked, reqwest".into(), streamed));
    // A body past what the server discards (16 MiB): a client that reads while it writes still gets the 413.
    let larger = [huge.as_slice(); 12].concat();
    answers.push(("42 MB, reqwest".into(), ep.try_post(tok, larger).await));
    let wrong: Vec<_> = answers.iter().filter(|(_, a)| a.as_ref() != Ok(&(413, too_large.clone()))).collect();
    assert!(wrong.is_empty(), "not a 413: {wrong:#?}");
    // The endpoint still serves reports.
    let valid =
        json!({"trainerStatus": {"progressPercentage": 3, "lastUpdatedTime": "2026-11-30T10:00:01Z"}});
    assert_eq!(ep.post(&ep.url, tok, valid.to_string()).await.0, 200);

    std::fs::write(&done, "").unwrap();
    let (outcome, log) =
        tokio::time::timeout(Duration::from_secs(30), watching).await.expect("watch ends").unwrap();
    let outcome = outcome.unwrap_or_else(|e| panic!("watch failed: {}\n{log}", e.message));
    assert_eq!(outcome.ending, Ending::Finished(Exit::Code(0)), "{log}");
    // start, the valid report, the end: none of the oversized reports (all NaN) was evaluated.
    assert_eq!(outcome.summary.records, 3, "{log}");
    assert_eq!(outcome.summary.firings, 0, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
