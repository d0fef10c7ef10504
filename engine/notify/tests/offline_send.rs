//! `replay --notify`'s sending ([`offline::send_all`]): channels concurrently, each at its receiver's
//! `maxPerMinute`, retries bounded by the deadline, and final errors that never say "(will retry)".

use trainwarden_testkit::receivers as common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use trainwarden_core::CompiledPolicy;
use trainwarden_notify::delivery::RetryPolicy;
use trainwarden_notify::offline;
use trainwarden_notify::send::SendConfig;
use trainwarden_notify::{AlertStatus, FileSecrets, Notification, Sender};

fn policy_for(receivers: &[(&str, &HttpReceiver, u32)]) -> CompiledPolicy {
    let mut yaml = String::from(
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p, namespace: fraud}\nspec:\n  receivers:\n",
    );
    for (name, server, per_minute) in receivers {
        yaml += &format!(
            "    - name: {name}\n      maxPerMinute: {per_minute}\n      webhook: {{url: \"{}\"}}\n",
            server.url(&format!("/{name}"))
        );
    }
    yaml += "  rules:\n    - {name: r, when: \"true\", actions: [{notify: {to: a}}]}\n";
    policy(&yaml)
}

fn message(p: &CompiledPolicy, receiver: usize) -> Notification {
    Notification {
        policy: p.reference.clone(),
        receiver: Arc::new(p.receivers[receiver].clone()),
        group_key: format!("{}{{}}", p.receivers[receiver].name),
        group_labels: Vec::new(),
        status: AlertStatus::Firing,
        alerts: Vec::new(),
        created_at: now(),
        repeat: false,
    }
}

fn sender() -> Sender {
    let dir = SecretsDir::new("offline-send");
    Sender::new(SendConfig::default(), Arc::new(FileSecrets::new(dir.path()))).unwrap()
}

fn retry() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(100),
        give_up_after: Duration::from_secs(30),
    }
}

#[tokio::test]
async fn channels_go_concurrently_each_at_its_rate_limit() {
    let (slow_a, slow_b) = (HttpReceiver::start().await, HttpReceiver::start().await);
    slow_a.delay(Duration::from_millis(600));
    slow_b.delay(Duration::from_millis(600));
    let p = policy_for(&[("a", &slow_a, 6000), ("b", &slow_b, 6000)]);
    let started = Instant::now();
    let outcomes =
        offline::send_all(&[message(&p, 0), message(&p, 1)], &sender(), &retry(), Duration::from_secs(5))
            .await;
    assert!(outcomes.iter().all(|o| o.result.is_ok()));
    assert_eq!(
        outcomes.iter().map(|o| (o.index, o.receiver.as_str())).collect::<Vec<_>>(),
        [(0, "a"), (1, "b")]
    );
    assert!(started.elapsed() < Duration::from_millis(1100), "one after the other: {:?}", started.elapsed());

    // 60 per minute: a burst of 60, then one a second.
    let server = HttpReceiver::start().await;
    let p = policy_for(&[("a", &server, 60)]);
    let many: Vec<Notification> = (0..62).map(|_| message(&p, 0)).collect();
    let started = Instant::now();
    let outcomes = offline::send_all(&many, &sender(), &retry(), Duration::from_secs(5)).await;
    assert_eq!(outcomes.iter().filter(|o| o.result.is_ok()).count(), 62);
    assert!(started.elapsed() >= Duration::from_millis(1900), "rate limit ignored: {:?}", started.elapsed());
}

#[tokio::test]
async fn retries_stop_at_the_deadline_and_the_error_says_so() {
    let server = HttpReceiver::start().await;
    server.fail_with(&[503; 100]);
    let p = policy_for(&[("a", &server, 6000)]);
    let started = Instant::now();
    let outcomes =
        offline::send_all(&[message(&p, 0)], &sender(), &retry(), Duration::from_millis(400)).await;
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let error = outcomes[0].result.as_ref().unwrap_err().to_string();
    assert!(!error.contains("will retry"), "{error}");
    assert!(error.ends_with("attempts; the delivery deadline came first)"), "{error}");
    assert!(error.contains("(given up after "), "{error}");
}
