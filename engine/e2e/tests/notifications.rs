//! Notifications end to end, on a real kube-apiserver + etcd: an Enforce policy with a Slack-style receiver
//! (a local HTTP server that records requests; its URL, with a secret path token, in a Kubernetes Secret)
//! and an email receiver (a real aiosmtpd with STARTTLS and AUTH; the password in a Kubernetes Secret)
//! suspends a stalled TrainJob, and each receiver channel gets exactly one message about it. Neither secret
//! ever shows in the TrainJob's Events, the policy status, the TrainJob or the controller's logs.

use trainwarden_testkit::setup;

use trainwarden_testkit::receivers as common;

use trainwarden_e2e::controller::*;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use trainwarden_controller::{ControllerConfig, LAST_ACTION_ANNOTATION};

// Fixture builders: tests/fixtures (shared with tests/controller.rs), plus a Secret ---------------------------

async fn create_secret(client: &Client, ns: &str, name: &str, key: &str, value: &str) {
    let secret = Secret {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..ObjectMeta::default() },
        data: Some(BTreeMap::from([(key.to_string(), ByteString(value.as_bytes().to_vec()))])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("create Secret {ns}/{name}: {e}"));
}

/// Everything the tracing subscriber writes, kept in memory.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

const SMTP_USER: &str = "trainwarden";

fn notify_policy(name: &str, smtp_port: u16) -> String {
    let receivers = format!(
        "receivers:
  - name: team
    groupWait: 1s
    slack:
      urlSecret: {{name: slack-webhook, key: url}}
    email:
      smarthost: localhost:{smtp_port}
      tls: StartTLS
      from: Trainwarden <trainwarden@example.com>
      to: [ml-team@example.com]
      username: {SMTP_USER}
      passwordSecret: {{name: smtp, key: password}}"
    );
    live_policy(name)
        .spec(&receivers)
        .rule("{name: stalled, uses: stalled, with: {after: 3s}, actions: [{suspend: {}}, {notify: {to: team}}]}")
        .yaml()
}

/// Fails the test if `haystack` (described by `what`) holds any of the secrets.
fn assert_no_secret(what: &str, haystack: &str, secrets: &[(&str, &str)]) {
    for (name, secret) in secrets {
        assert!(!haystack.contains(secret), "the {name} ({secret:?}) leaked into {what}:\n{haystack}");
    }
}

// The test --------------------------------------------------------------------------------------------------

/// A stalled TrainJob under an Enforce policy with a Slack and an email receiver: suspended, one Slack
/// message and one email (the suspension grouped with the notify action), sent=1 per channel in the policy
/// status, and the webhook URL token and SMTP password nowhere in Events, status, the TrainJob or the logs.
#[tokio::test]
async fn a_stalled_job_is_suspended_and_notified_once_per_channel_without_leaking_secrets() {
    // The controller's logs, at trace for trainwarden's crates and debug for the rest, into a buffer. The
    // subscriber is this thread's default, and `#[tokio::test]` runs every task the controller spawns on
    // this thread.
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug,trainwarden=trace"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let ctx = setup!("controller_notifications");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let unique = ns.rsplit('-').next().unwrap_or(ns).to_string();
    let token = format!("xoxb-tw-hook-token-{unique}-7f3a9c");
    let password = format!("smtp-pa55word-{unique}-never-shown");
    let Some(smtp) = common::SmtpServer::start("starttls", SMTP_USER, &password) else { return };
    let slack = common::HttpReceiver::start().await;
    let slack_path = format!("/services/T0TRAIN/B0WARDEN/{token}");
    create_secret(c, ns, "slack-webhook", "url", &slack.url(&slack_path)).await;
    create_secret(c, ns, "smtp", "password", &password).await;

    apply_policy(c, ns, &notify_policy("notify", smtp.port)).await;
    create_trainjob(c, ns, "hung", &[]).await;
    let config =
        ControllerConfig { notification_ca_pems: vec![smtp.cert_pem.clone().into_bytes()], ..config_for(ns) };
    let controller = start(c, config);
    wait_until_watching(c, ns, "notify", 1).await;
    let t0 = std::time::Instant::now();
    report(c, ns, "hung", Timestamp::from_second(Timestamp::now().as_second()).unwrap(), "0.5", 40).await;

    // Suspended by the stall rule (3 s after the report), then one message per channel (after groupWait).
    let hung = eventually("the stall suspension", Duration::from_secs(20), || async {
        let j = job(c, ns, "hung").await;
        suspended(&j).then_some(j)
    })
    .await;
    eprintln!("suspended {:.1}s after the report", t0.elapsed().as_secs_f64());
    assert!(
        hung.annotations()[LAST_ACTION_ANNOTATION].contains("\"rule\":\"stalled\""),
        "{:?}",
        hung.annotations()
    );
    slack.wait_for(&slack_path, 1, Duration::from_secs(20)).await;
    eprintln!("Slack message {:.1}s after the report", t0.elapsed().as_secs_f64());
    eventually("the email", Duration::from_secs(20), || async {
        (!smtp.messages().is_empty()).then_some(())
    })
    .await;
    eprintln!("email {:.1}s after the report", t0.elapsed().as_secs_f64());
    let status =
        eventually("sent=1 for both channels in the policy status", Duration::from_secs(20), || async {
            let s = policy_status(c, ns, "notify").await;
            let sent = |channel: &str| {
                s.notifications.iter().find(|n| n.receiver == "team" && n.channel == channel).map(|n| n.sent)
            };
            (sent("slack") == Some(1) && sent("email") == Some(1)).then_some(s)
        })
        .await;

    // Nothing more comes: well past groupWait (1 s), still one of each.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let requests = slack.requests();
    assert_eq!(requests.len(), 1, "exactly one Slack message: {requests:?}");
    let emails = smtp.messages();
    assert_eq!(emails.len(), 1, "exactly one email: {emails:#?}");
    let status_now = policy_status(c, ns, "notify").await;
    for channel in ["slack", "email"] {
        let n = status_now
            .notifications
            .iter()
            .find(|n| n.receiver == "team" && n.channel == channel)
            .unwrap_or_else(|| panic!("no {channel} counters: {:?}", status_now.notifications));
        assert_eq!((n.sent, n.failed, n.retried, n.dropped), (1, 0, 0, 0), "{n:?}");
        assert_eq!(n.last_error, None, "{n:?}");
    }

    // The Slack message: about this job and rule, saying the TrainJob is being suspended.
    let job_name = format!("{ns}/hung");
    let slack_message = requests[0].json();
    let slack_text = slack_message.to_string();
    let title = slack_message["text"].as_str().expect("Slack text");
    assert!(title.contains(&job_name) && title.contains("stalled") && title.contains("firing"), "{title}");
    // Past tense once the executor reported the suspension (groupWait normally lets it), else "suspending".
    assert!(
        slack_text.contains("suspended the TrainJob") || slack_text.contains("suspending the TrainJob"),
        "{slack_message:#}"
    );
    assert!(slack_text.contains("stalled [Enforce] firing on"), "{slack_message:#}");
    assert!(!slack_text.contains("would "), "{slack_message:#}");

    // The email: over TLS with the login, about this job and rule, saying the same.
    let m = &emails[0];
    assert_eq!(m["tls"], true, "{m:#}");
    assert_eq!(m["auth_login"], SMTP_USER, "{m:#}");
    assert_eq!(m["rcpt_tos"], json!(["ml-team@example.com"]), "{m:#}");
    let subject = m["subject"].as_str().unwrap();
    assert!(subject.contains(&job_name) && subject.contains("stalled"), "{subject}");
    let text = m["text"].as_str().unwrap();
    assert!(text.contains("stalled [Enforce] firing on") && text.contains(&job_name), "{text}");
    assert!(text.contains("suspended the TrainJob") || text.contains("suspending the TrainJob"), "{text}");
    assert!(m["html"].as_str().unwrap().contains("the TrainJob"), "{m:#}");

    controller.stop().await;

    // Neither secret anywhere the controller writes or says.
    let secrets = [("Slack URL token", token.as_str()), ("SMTP password", password.as_str())];
    let e = events_once_there(c, ns, "hung", "Suspended", 1).await;
    assert_no_secret("the TrainJob's Events", &format!("{e:?}"), &secrets);
    let status_json = serde_json::to_string(&policy_status(c, ns, "notify").await).unwrap();
    assert!(status_json.contains("\"notifications\""), "{status_json}");
    assert_no_secret("the policy status", &status_json, &secrets);
    assert_no_secret("the policy status (earlier)", &serde_json::to_string(&status).unwrap(), &secrets);
    assert_no_secret("the TrainJob", &serde_json::to_string(&job(c, ns, "hung").await).unwrap(), &secrets);
    let log = logs.text();
    assert!(!log.is_empty(), "no logs captured");
    assert!(log.contains("notification sent"), "the notifier's debug logs are not captured:\n{log}");
    assert_no_secret("the controller's logs", &log, &secrets);
    eprintln!("checked {} lines of logs, {} Events", log.lines().count(), e.len());
}
