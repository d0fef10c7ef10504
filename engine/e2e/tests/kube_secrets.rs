//! The Kubernetes Secret resolver against a real kube-apiserver (trainwarden-testkit's API server and
//! receivers; each test has its own namespace), and a Slack delivery whose webhook URL
//! comes from a Secret.

use trainwarden_testkit::fixtures;
use trainwarden_testkit::setup;

use trainwarden_testkit::receivers as common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use trainwarden_controller::secrets::KubeSecrets;
use trainwarden_core::SecretRef;
use trainwarden_notify::{ChannelKind, Notifier, NotifierConfig, SecretResolver};

async fn create_secret(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let secret = Secret {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..ObjectMeta::default() },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("create Secret {ns}/{name}: {e}"));
}

fn reference(ns: &str, name: &str, key: &str) -> SecretRef {
    SecretRef { namespace: ns.into(), name: name.into(), key: key.into() }
}

#[tokio::test]
async fn secrets_are_read_from_the_api_and_errors_name_only_the_reference() {
    let ctx = setup!("notify_kube_secrets");
    let value = "https://hooks.slack.example/services/T0/B0/kube-secret-value";
    create_secret(&ctx.client, &ctx.ns, "slack", &[("url", &format!("{value}\n")), ("empty", "")]).await;
    let resolver = KubeSecrets::new(ctx.client.clone());

    let got = resolver.resolve(&reference(&ctx.ns, "slack", "url")).await.unwrap();
    assert_eq!(got.expose(), value, "trailing newline trimmed");
    assert_eq!(format!("{got:?}"), "SecretValue([redacted])");

    let errors = [
        resolver.resolve(&reference(&ctx.ns, "slack", "password")).await.unwrap_err().to_string(),
        resolver.resolve(&reference(&ctx.ns, "slack", "empty")).await.unwrap_err().to_string(),
        resolver.resolve(&reference(&ctx.ns, "nope", "url")).await.unwrap_err().to_string(),
    ];
    assert_eq!(
        errors[0],
        format!("secret {0}/slack[password] not found: Secret {0}/slack has no key \"password\"", ctx.ns)
    );
    assert_eq!(errors[1], format!("secret {}/slack[empty] is empty", ctx.ns));
    assert_eq!(errors[2], format!("secret {0}/nope[url] not found: no Secret {0}/nope", ctx.ns));
    for e in &errors {
        assert!(!e.contains("kube-secret-value"), "{e}");
    }
}

#[tokio::test]
async fn a_slack_url_from_a_kubernetes_secret_delivers_and_stays_out_of_stats() {
    let ctx = setup!("notify_kube_slack");
    let server = HttpReceiver::start().await;
    create_secret(&ctx.client, &ctx.ns, "slack", &[("url", &server.url("/services/T0/B0/from-kube"))]).await;
    let p = policy(
        &fixtures::policy("p")
            .namespace(&ctx.ns)
            .mode("Audit")
            .spec(
                "receivers:\n  - {name: team, groupWait: 100ms, slack: {urlSecret: {name: slack, key: url}}}",
            )
            .rule("{name: stalled, when: \"true\", actions: [{notify: {to: team}}]}")
            .yaml(),
    );
    let notifier =
        Notifier::new(Arc::new(KubeSecrets::new(ctx.client.clone())), NotifierConfig::default()).unwrap();
    notifier.configure(&p);
    let mut i = intent(&p, "stalled", "ft", now(), notify("team"));
    i.job.namespace = ctx.ns.clone();
    notifier.submit(&i, None).unwrap();
    let got = server.wait_for("/services/T0/B0/from-kube", 1, Duration::from_secs(10)).await;
    assert!(got[0].json()["text"].as_str().unwrap().contains("stalled on"), "{}", got[0].json());
    notifier.shutdown(Duration::from_secs(2)).await;
    let stats = notifier.stats();
    let slack = stats.iter().find(|s| s.channel == ChannelKind::Slack).unwrap();
    assert_eq!(slack.sent, 1);
    assert!(!format!("{stats:?}").contains("from-kube"));
}

#[tokio::test]
async fn the_api_server_takes_receivers_and_rejects_one_without_a_channel() {
    use kube::api::{ApiResource, DynamicObject};
    use trainwarden_kube::ProgressPolicy;

    let ctx = setup!("notify_crd_receivers");
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ApiResource::erase::<ProgressPolicy>(&()));
    let object = |name: &str, receiver: serde_json::Value| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "trainwarden.dev/v1alpha1",
            "kind": "ProgressPolicy",
            "metadata": {"name": name, "namespace": ctx.ns},
            "spec": {
                "receivers": [receiver],
                "rules": [{"name": "r", "when": "true", "actions": [{"notify": {"to": "team"}}]}],
            },
        }))
        .unwrap()
    };
    let good = object(
        "good",
        serde_json::json!({
            "name": "team", "groupBy": ["job", "rule"], "groupWait": "10s", "sendResolved": true,
            "slack": {"urlSecret": {"name": "slack", "key": "url"}, "text": "{{rule}}: {{summary}}"},
            "email": {"smarthost": "smtp.example.com:587", "tls": "Implicit", "from": "tw@example.com", "to": ["a@example.com"]},
            "webhook": {"url": "https://hooks.example.com/x", "hmacSecret": {"name": "hook", "key": "hmac"}},
        }),
    );
    let created = api.create(&PostParams::default(), &good).await.expect("a policy with receivers");
    assert_eq!(created.data["spec"]["receivers"][0]["email"]["tls"], "Implicit");

    let bad = object("bad", serde_json::json!({"name": "team", "groupBy": ["team"], "groupWait": "soon"}));
    let error = api.create(&PostParams::default(), &bad).await.unwrap_err().to_string();
    for part in [
        "spec.receivers[0].groupBy[0]: Unsupported value: \"team\"",
        "spec.receivers[0].groupWait: Invalid value: \"soon\"",
    ] {
        assert!(error.contains(part), "{part:?} not in {error}");
    }
    // CEL rules run only on an otherwise valid object.
    let silent = object("silent", serde_json::json!({"name": "team"}));
    let error = api.create(&PostParams::default(), &silent).await.unwrap_err().to_string();
    assert!(error.contains("a receiver needs slack, email or webhook"), "{error}");
}
