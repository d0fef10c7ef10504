//! Email delivery to a real SMTP server: Python's aiosmtpd (tests/python/notify.txt, installed by
//! tests/python/setup-venv.sh), started by each test with a self-signed certificate, over STARTTLS and
//! implicit TLS, with authentication. Checks the message (subject, text and HTML parts, envelope), that the
//! certificate is really verified, and that a rejected login is reported and not retried.

use trainwarden_testkit::receivers as common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use trainwarden_notify::delivery::RetryPolicy;
use trainwarden_notify::send::SendConfig;
use trainwarden_notify::{ChannelKind, FileSecrets, JobProgress, Notifier, NotifierConfig};

const USER: &str = "trainwarden";
const PASSWORD: &str = "smtp-pa55word-never-logged";

fn email_policy(port: u16, tls: &str) -> String {
    format!(
        r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {{name: weekend-safe, namespace: fraud}}
spec:
  receivers:
    - name: team
      groupWait: 200ms
      maxPerMinute: 6000
      email:
        smarthost: localhost:{port}
        tls: {tls}
        from: Trainwarden <trainwarden@example.com>
        to: [ml-team@example.com, oncall@example.com]
        username: {USER}
        passwordSecret: {{name: smtp, key: password}}
        subject: "[{{{{status}}}}] {{{{rules}}}} on {{{{job}}}} ({{{{count}}}} alerts)"
  rules:
    - {{name: loss-plateau, when: "true", actions: [{{notify: {{to: team}}}}, {{suspend: {{}}}}]}}
    - {{name: late, when: "true", actions: [{{notify: {{to: team}}}}]}}
"#
    )
}

fn notifier(server: &SmtpServer, secrets: &SecretsDir, trust_server: bool, give_up: Duration) -> Notifier {
    let config = NotifierConfig {
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(100),
            give_up_after: give_up,
        },
        send: SendConfig {
            timeout: Duration::from_secs(5),
            extra_roots_pem: if trust_server {
                vec![server.cert_pem.clone().into_bytes()]
            } else {
                Vec::new()
            },
        },
        ..NotifierConfig::default()
    };
    Notifier::new(Arc::new(FileSecrets::new(secrets.path())), config).unwrap()
}

async fn wait_stats(
    n: &Notifier,
    done: impl Fn(&trainwarden_notify::ChannelStats) -> bool,
) -> trainwarden_notify::ChannelStats {
    for _ in 0..1000 {
        let s = n.stats().into_iter().find(|s| s.channel == ChannelKind::Email).unwrap();
        if done(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("stats never reached the expected state: {:?}", n.stats());
}

async fn two_rules_one_email(mode: &str, tls: &str) {
    let Some(server) = SmtpServer::start(mode, USER, PASSWORD) else { return };
    let secrets = SecretsDir::new(&format!("smtp-secrets-{mode}"));
    secrets.put("fraud", "smtp", "password", PASSWORD);
    let p = policy(&email_policy(server.port, tls));
    let n = notifier(&server, &secrets, true, Duration::from_secs(20));
    n.configure(&p);
    let at = now();
    let progress = Some(JobProgress { percent: Some(62.0), eta_seconds: Some(5400.0) });
    let plateau = intent(&p, "loss-plateau", "ft-llama", at, notify("team"));
    n.submit(&plateau, progress).unwrap();
    n.submit(&suspend_with_savings(plateau.clone()), progress).unwrap();
    n.submit(&intent(&p, "late", "ft-llama", at, notify("team")), progress).unwrap();

    // Delivered according to the notifier (its panic shows the last error), then as the server saw it.
    wait_stats(&n, |s| s.sent == 1).await;
    let messages = server.wait_for(1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.messages().len(), 1, "two rules, one email");
    let m = &messages[0];
    assert_eq!(m["tls"], true);
    assert_eq!(m["auth_login"], USER);
    assert_eq!(m["mail_from"], "trainwarden@example.com");
    assert_eq!(m["rcpt_tos"], serde_json::json!(["ml-team@example.com", "oncall@example.com"]));
    assert_eq!(m["subject"], "[firing] late, loss-plateau on fraud/ft-llama (2 alerts)");
    assert_eq!(m["content_type"], "multipart/alternative");
    let text = m["text"].as_str().unwrap();
    for part in [
        "loss-plateau [Enforce] firing on fraud/ft-llama",
        "late [Enforce] firing on fraud/ft-llama",
        "progress 62%, ETA 1h30m; suspending the TrainJob; 262.4 GPU-hours ($1,803.73) at stake",
    ] {
        assert!(text.contains(part), "{part:?} not in the text part:\n{text}");
    }
    let html = m["html"].as_str().unwrap();
    assert!(html.contains("<h2>[firing] late, loss-plateau on fraud/ft-llama (2 alerts)</h2>"), "{html}");
    assert!(html.contains("suspending the TrainJob"), "{html}");
    let s = wait_stats(&n, |s| s.sent == 1).await;
    assert_eq!((s.sent, s.failed, s.retried), (1, 0, 0), "{s:?}");
    assert!(!format!("{:?}", n.stats()).contains(PASSWORD));
    n.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn starttls_with_login_delivers_one_email_with_text_and_html() {
    two_rules_one_email("starttls", "StartTLS").await;
}

#[tokio::test]
async fn implicit_tls_with_login_delivers_one_email_with_text_and_html() {
    two_rules_one_email("implicit", "Implicit").await;
}

#[tokio::test]
async fn a_rejected_password_is_reported_and_not_retried() {
    let Some(server) = SmtpServer::start("starttls", USER, PASSWORD) else { return };
    let secrets = SecretsDir::new("smtp-wrong-password");
    let wrong = "wrong-password-also-secret";
    secrets.put("fraud", "smtp", "password", wrong);
    let p = policy(&email_policy(server.port, "StartTLS"));
    let n = notifier(&server, &secrets, true, Duration::from_secs(20));
    n.configure(&p);
    n.submit(&intent(&p, "late", "a", now(), notify("team")), None).unwrap();
    let s = wait_stats(&n, |s| s.failed == 1).await;
    assert_eq!((s.sent, s.retried), (0, 0), "{s:?}");
    let error = s.last_error.unwrap();
    assert!(error.contains("535") && error.contains("not retried"), "{error}");
    assert!(!error.contains(wrong), "{error}");
    assert!(server.messages().is_empty());
    n.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let Some(server) = SmtpServer::start("implicit", USER, PASSWORD) else { return };
    let secrets = SecretsDir::new("smtp-untrusted");
    secrets.put("fraud", "smtp", "password", PASSWORD);
    let p = policy(&email_policy(server.port, "Implicit"));
    // The self-signed certificate is not among the trusted roots: TLS must fail (retried, then given up).
    let n = notifier(&server, &secrets, false, Duration::from_millis(400));
    n.configure(&p);
    n.submit(&intent(&p, "late", "a", now(), notify("team")), None).unwrap();
    let s = wait_stats(&n, |s| s.failed == 1).await;
    assert_eq!(s.sent, 0);
    assert!(s.retried >= 1, "TLS failures are retried: {s:?}");
    let error = s.last_error.unwrap().to_lowercase();
    assert!(error.contains("certificate") || error.contains("tls"), "{error}");
    assert!(server.messages().is_empty());
    n.shutdown(Duration::from_secs(1)).await;
}
