//! Slack and webhook delivery through the whole notifier, against local HTTP receivers that record requests:
//! message content, HMAC signatures, grouping, repeat interval, resolved messages, backoff, 4xx, queue bounds
//! and secrets kept out of errors and logs.

use trainwarden_testkit::receivers as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use trainwarden_notify::delivery::RetryPolicy;
use trainwarden_notify::send::SendConfig;
use trainwarden_notify::{
    ChannelKind, ChannelStats, FileSecrets, JobProgress, Notifier, NotifierConfig, SIGNATURE_HEADER,
    SubmitError, verify_signature,
};

const HMAC_KEY: &str = "k3y-that-must-not-leak";

fn fast_config() -> NotifierConfig {
    NotifierConfig {
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(200),
            give_up_after: Duration::from_secs(30),
        },
        send: SendConfig { timeout: Duration::from_secs(5), ..SendConfig::default() },
        ..NotifierConfig::default()
    }
}

fn policy_yaml(server: &HttpReceiver, receiver_extra: &str) -> String {
    format!(
        r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {{name: weekend-safe, namespace: fraud}}
spec:
  receivers:
    - name: team
      groupWait: 300ms
      groupInterval: 500ms
      maxPerMinute: 6000
{receiver_extra}
      slack:
        urlSecret: {{name: slack, key: url}}
      webhook:
        url: "{}"
        hmacSecret: {{name: hook, key: hmac}}
  rules:
    - {{name: loss-plateau, when: "true", actions: [{{notify: {{to: team}}}}, {{suspend: {{}}}}]}}
    - {{name: late, when: "true", actions: [{{notify: {{to: team}}}}]}}
"#,
        server.url("/hook")
    )
}

fn secrets(test: &str, server: &HttpReceiver) -> SecretsDir {
    let dir = SecretsDir::new(test);
    dir.put("fraud", "slack", "url", &format!("{}\n", server.url("/services/T000/B000/XXXX")));
    dir.put("fraud", "hook", "hmac", HMAC_KEY);
    dir
}

fn plateau_again(p: &trainwarden_core::CompiledPolicy) -> trainwarden_core::ActionIntent {
    intent(p, "loss-plateau", "ft-llama", now(), notify("team"))
}

fn stats_of(n: &Notifier, channel: ChannelKind) -> ChannelStats {
    n.stats().into_iter().find(|s| s.channel == channel).expect("stats for the channel")
}

#[tokio::test]
async fn two_rules_on_one_job_become_one_slack_message_and_one_signed_webhook() {
    let server = HttpReceiver::start().await;
    let secrets = secrets("grouping", &server);
    let p = policy(&policy_yaml(&server, ""));
    let notifier = Notifier::new(Arc::new(FileSecrets::new(secrets.path())), fast_config()).unwrap();
    notifier.configure(&p);

    let at = now();
    let plateau = intent(&p, "loss-plateau", "ft-llama", at, notify("team"));
    let progress = Some(JobProgress { percent: Some(31.5), eta_seconds: Some(118_062.0) });
    assert_eq!(notifier.submit(&plateau, progress), Ok(true));
    assert_eq!(notifier.submit(&suspend_with_savings(plateau.clone()), progress), Ok(false));
    assert_eq!(notifier.submit(&intent(&p, "late", "ft-llama", at, notify("team")), progress), Ok(true));

    let slack = server.wait_for("/services/T000/B000/XXXX", 1, Duration::from_secs(5)).await;
    let hooks = server.wait_for("/hook", 1, Duration::from_secs(5)).await;
    // Give a wrongly split second message time to show up.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(server.requests_to("/services/T000/B000/XXXX").len(), 1, "one Slack message for two rules");
    assert_eq!(server.requests_to("/hook").len(), 1, "one webhook call for two rules");

    let message = slack[0].json();
    assert_eq!(message["text"], "[firing] late, loss-plateau on fraud/ft-llama");
    let blocks = message["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks.len(), 4, "header, two alerts, context: {message:#}");
    let plateau_text = blocks[2]["text"]["text"].as_str().unwrap();
    assert!(
        plateau_text.starts_with("loss-plateau [Enforce] firing on fraud/ft-llama at "),
        "{plateau_text}"
    );
    for part in [
        "loss has not improved by more than 0.001 for 2h",
        "progress 31.5%, ETA 1d8h47m42s; suspending the TrainJob; 262.4 GPU-hours ($1,803.73) at stake",
        "please have a look",
    ] {
        assert!(plateau_text.contains(part), "{part:?} not in {plateau_text:?}");
    }
    let late_text = blocks[1]["text"]["text"].as_str().unwrap();
    assert!(late_text.contains("progress 31.5%, ETA 1d8h47m42s"), "{late_text}");
    assert!(
        !late_text.contains("suspend") && !late_text.contains("at stake"),
        "late only notifies: {late_text}"
    );
    assert!(blocks[3]["elements"][0]["text"].as_str().unwrap().contains("policy fraud/weekend-safe"));

    let hook = &hooks[0];
    let signature = hook.headers.get(SIGNATURE_HEADER).expect("signature header").to_str().unwrap();
    assert!(verify_signature(HMAC_KEY.as_bytes(), &hook.body, signature), "signature verifies");
    assert!(!verify_signature(b"another key", &hook.body, signature));
    assert_eq!(hook.headers.get("content-type").unwrap(), "application/json");
    let doc = hook.json();
    assert_eq!(doc["version"], "trainwarden.dev/notification/v1");
    assert_eq!(doc["status"], "firing");
    assert_eq!(doc["repeat"], false);
    assert_eq!(doc["receiver"], "team");
    assert_eq!(doc["groupLabels"]["job"], "fraud/ft-llama");
    assert_eq!(doc["policy"]["name"], "weekend-safe");
    let alerts = doc["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 2);
    let plateau = alerts.iter().find(|a| a["rule"] == "loss-plateau").unwrap();
    assert_eq!(plateau["actions"][0]["kind"], "suspend");
    assert_eq!(plateau["savings"]["gpuHours"], 262.36);
    assert_eq!(plateau["progress"]["percent"], 31.5);
    assert_eq!(plateau["values"]["best"], 0.6117);
    assert_eq!(plateau["mode"], "Enforce");
    assert!(plateau["resolvedAt"].is_null());

    let report = notifier.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.unfinished_workers, 0);
    let sent = (stats_of(&notifier, ChannelKind::Slack).sent, stats_of(&notifier, ChannelKind::Webhook).sent);
    assert_eq!(sent, (1, 1), "the final counters outlive shutdown");
    assert_eq!(notifier.submit(&plateau_again(&p), None), Err(SubmitError::ShutDown));
}

#[tokio::test]
async fn repeat_interval_reminds_and_resolved_messages_are_sent_when_asked_for() {
    let server = HttpReceiver::start().await;
    let secrets = secrets("repeat", &server);
    let p = policy(&policy_yaml(&server, "      repeatInterval: 1s\n      sendResolved: true\n"));
    let notifier = Notifier::new(Arc::new(FileSecrets::new(secrets.path())), fast_config()).unwrap();
    notifier.configure(&p);
    let plateau = intent(&p, "loss-plateau", "ft", now(), notify("team"));
    notifier.submit(&plateau, None).unwrap();

    let first = server.wait_for("/hook", 1, Duration::from_secs(5)).await;
    assert_eq!(first[0].json()["repeat"], false);
    let second = server.wait_for("/hook", 2, Duration::from_secs(5)).await;
    assert_eq!(second[1].json()["repeat"], true, "a reminder after repeatInterval");
    assert_eq!(second[1].json()["alerts"][0]["intentId"], first[0].json()["alerts"][0]["intentId"]);

    notifier.resolved(&p.reference, "loss-plateau", &plateau.job, None);
    let all = server.wait_for("/hook", 3, Duration::from_secs(5)).await;
    let resolved = all[2].json();
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["alerts"][0]["status"], "resolved");
    assert!(resolved["alerts"][0]["resolvedAt"].is_string());
    let slack = server.wait_for("/services/T000/B000/XXXX", 3, Duration::from_secs(5)).await;
    assert!(slack[2].json()["text"].as_str().unwrap().starts_with("[resolved] loss-plateau"));
    // Resolved means done: no more reminders.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.requests_to("/hook").len(), 3);
    notifier.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_the_message_on_the_third_attempt_and_4xx_is_not_retried() {
    let server = HttpReceiver::start().await;
    let secrets = secrets("backoff", &server);
    let yaml =
        policy_yaml(&server, "").replace("      slack:\n        urlSecret: {name: slack, key: url}\n", "");
    let p = policy(&yaml);
    let notifier = Notifier::new(Arc::new(FileSecrets::new(secrets.path())), fast_config()).unwrap();
    notifier.configure(&p);

    server.fail_with(&[503, 502]);
    let started = std::time::Instant::now();
    notifier.submit(&intent(&p, "late", "a", now(), notify("team")), None).unwrap();
    server.wait_for("/hook", 3, Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while stats_of(&notifier, ChannelKind::Webhook).sent < 1 {
        assert!(std::time::Instant::now() < deadline, "{:?}", notifier.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = stats_of(&notifier, ChannelKind::Webhook);
    assert_eq!((s.sent, s.retried, s.failed, s.dropped), (1, 2, 0, 0), "{s:?}");
    // groupWait 300ms + backoffs of at least 25ms and 50ms (50ms × 2^n, jittered over [½, 1]).
    assert!(elapsed >= Duration::from_millis(375), "{elapsed:?}");
    assert!(s.last_error.as_deref().unwrap().contains("HTTP 502"), "{s:?}");
    let bodies: Vec<String> =
        server.requests_to("/hook").iter().map(|r| String::from_utf8_lossy(&r.body).into()).collect();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "every attempt sends the same document");

    server.fail_with(&[400]);
    notifier.submit(&intent(&p, "late", "b", now(), notify("team")), None).unwrap();
    server.wait_for("/hook", 4, Duration::from_secs(5)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while stats_of(&notifier, ChannelKind::Webhook).failed < 1 {
        assert!(std::time::Instant::now() < deadline, "{:?}", notifier.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for a (wrong) retry to show up.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let s = stats_of(&notifier, ChannelKind::Webhook);
    assert_eq!((s.sent, s.retried, s.failed), (1, 2, 1), "{s:?}");
    assert_eq!(server.requests_to("/hook").len(), 4, "a 400 is reported, not retried");
    assert!(s.last_error.as_deref().unwrap().contains("HTTP 400 Bad Request"), "{s:?}");
    assert!(s.last_error.as_deref().unwrap().contains("not retried"), "{s:?}");
    notifier.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_and_submitting_never_waits() {
    let server = HttpReceiver::start().await;
    // Long enough that a loaded machine still submits b and c while a is in flight.
    server.delay(Duration::from_millis(3000));
    let secrets = secrets("queue", &server);
    let yaml = policy_yaml(&server, "")
        .replace("groupWait: 300ms", "groupWait: 0s")
        .replace("      slack:\n        urlSecret: {name: slack, key: url}\n", "");
    let p = policy(&yaml);
    let config = NotifierConfig { queue_capacity: 1, ..fast_config() };
    let notifier = Notifier::new(Arc::new(FileSecrets::new(secrets.path())), config).unwrap();
    notifier.configure(&p);

    // Job a is picked up by the worker (in flight for 3 s), job b waits in the queue, job c finds it full.
    notifier.submit(&intent(&p, "late", "a", now(), notify("team")), None).unwrap();
    server.wait_for("/hook", 1, Duration::from_secs(5)).await;
    notifier.submit(&intent(&p, "late", "b", now(), notify("team")), None).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while stats_of(&notifier, ChannelKind::Webhook).queued < 2 {
        assert!(std::time::Instant::now() < deadline, "job b never reached the queue");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    let refused = notifier.submit(&intent(&p, "late", "c", now(), notify("team")), None);
    // Far below the 3 s a blocking submit would wait for the worker (a loaded CI machine can stall a thread
    // for tens of milliseconds).
    assert!(started.elapsed() < Duration::from_millis(500), "submit returned at once");
    assert!(matches!(refused, Err(SubmitError::QueueFull { .. })), "{refused:?}");
    assert_eq!(
        refused.unwrap_err().to_string(),
        "the queue of receiver \"team\" (webhook) of policy fraud/weekend-safe is full; alert dropped"
    );
    let s = stats_of(&notifier, ChannelKind::Webhook);
    assert_eq!((s.dropped, s.queued), (1, 2), "{s:?}");

    let deadline = std::time::Instant::now() + Duration::from_secs(12);
    while stats_of(&notifier, ChannelKind::Webhook).sent < 2 {
        assert!(std::time::Instant::now() < deadline, "{:?}", notifier.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.requests_to("/hook").len(), 2, "job c was dropped");
    let s = stats_of(&notifier, ChannelKind::Webhook);
    assert_eq!((s.sent, s.dropped, s.queued), (2, 1, 0), "{s:?}");

    // An unknown receiver is refused and counted too.
    let e = notifier.submit(&intent(&p, "late", "d", now(), notify("oncall")), None).unwrap_err();
    assert_eq!(e.to_string(), "policy fraud/weekend-safe has no receiver named \"oncall\"");
    assert_eq!(notifier.refused(), 1);
    notifier.shutdown(Duration::from_secs(3)).await;
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// current_thread: every task runs on this thread, so the thread-local log subscriber sees them all.
#[tokio::test(flavor = "current_thread")]
async fn secret_urls_and_keys_never_reach_errors_stats_or_logs() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // Port 1 on loopback refuses connections: a connection error whose text would name the URL.
    let secret_token = "SECRET-TOKEN-b8e1c4";
    let dir = SecretsDir::new("leak");
    dir.put("fraud", "slack", "url", &format!("http://127.0.0.1:1/services/{secret_token}"));
    dir.put("fraud", "hook", "hmac", HMAC_KEY);
    let server = HttpReceiver::start().await;
    let hook_token = "HOOK-TOKEN-77aa01";
    dir.put("fraud", "hookurl", "url", &server.url(&format!("/{hook_token}")));
    let yaml = policy_yaml(&server, "")
        .replace(&format!("url: \"{}\"", server.url("/hook")), "urlSecret: {name: hookurl, key: url}");
    let p = policy(&yaml);
    let config = NotifierConfig {
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(40),
            give_up_after: Duration::from_millis(300),
        },
        ..fast_config()
    };
    let notifier = Notifier::new(Arc::new(FileSecrets::new(dir.path())), config).unwrap();
    notifier.configure(&p);
    server.fail_with(&[404]);
    notifier.submit(&intent(&p, "late", "a", now(), notify("team")), None).unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let slack = stats_of(&notifier, ChannelKind::Slack);
        let hook = stats_of(&notifier, ChannelKind::Webhook);
        if slack.failed == 1 && hook.failed == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{slack:?} {hook:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = notifier.stats();
    let slack_error = stats_of(&notifier, ChannelKind::Slack).last_error.unwrap();
    assert!(slack_error.contains("Slack connection failed"), "{slack_error}");
    let everything = format!(
        "{stats:?}\n{}\n{}",
        serde_json::to_string(&stats).unwrap(),
        String::from_utf8_lossy(&logs.0.lock().unwrap())
    );
    assert!(everything.contains("notification not delivered"), "the logs were captured: {everything}");
    for secret in [secret_token, hook_token, HMAC_KEY] {
        assert!(!everything.contains(secret), "{secret} leaked:\n{everything}");
    }
    notifier.shutdown(Duration::from_secs(1)).await;
}
