//! The notification receivers of a policy (`spec.receivers`): Slack, email and webhook channels, with
//! Alertmanager's grouping.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// A notification receiver: one or more channels and how alerts are grouped and repeated (Alertmanager's
/// semantics). Alerts for the same group (by default the same policy and job) that arrive within `groupWait`
/// become one message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.slack) || has(self.email) || has(self.webhook)", "message": "a receiver needs slack, email or webhook"},
]))]
pub struct ReceiverSpec {
    /// Receiver name, unique within the policy; `notify: {to: NAME}` refers to it.
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub name: String,

    /// Alert properties that form a group (one message per group): any of policy, job, namespace, rule.
    /// Default [policy, job]: every rule firing on one job within groupWait becomes one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4))]
    pub group_by: Option<Vec<GroupLabel>>,

    /// How long to wait after the first alert of a new group for others to join it. Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_wait: Option<DurationText>,

    /// How long to wait before notifying about new alerts in a group that was already notified. Default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_interval: Option<DurationText>,

    /// How long to wait before repeating a notification for alerts that are still firing. Default 4h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_interval: Option<DurationText>,

    /// Also notify when a rule stops firing (resolved). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub send_resolved: bool,

    /// Most messages per minute to this receiver; more wait in its queue. Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 6000))]
    pub max_per_minute: Option<u32>,

    /// Slack incoming webhook (Block Kit message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackReceiverSpec>,

    /// Email over SMTP (plain text and HTML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<EmailReceiverSpec>,

    /// JSON POST in trainwarden's documented schema, optionally signed with HMAC-SHA256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookReceiverSpec>,
}

/// An alert property notifications are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum GroupLabel {
    /// The policy that fired.
    Policy,
    /// The TrainJob, `namespace/name`.
    Job,
    /// The TrainJob's namespace.
    Namespace,
    /// The rule that fired.
    Rule,
}

/// A key of a Kubernetes Secret. A ProgressPolicy may only name Secrets in its own namespace (leave
/// `namespace` out or set it to the policy's); a ClusterProgressPolicy must say which namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// Namespace of the Secret: required for a ClusterProgressPolicy, the policy's own for a ProgressPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// A Slack incoming webhook.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlackReceiverSpec {
    /// The Secret key holding the incoming-webhook URL (`https://hooks.slack.com/services/…`).
    pub url_secret: SecretKeySelector,
    /// Header template, once per message (group fields only; see the book's Notifications page).
    /// Default `[{{status}}] {{rules}} on {{job}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub title: Option<String>,
    /// Body template, rendered once per alert (every field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub text: Option<String>,
}

/// How an SMTP connection is secured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS, which the server must offer (port 587).
    #[default]
    StartTLS,
    /// TLS from the first byte (port 465).
    Implicit,
    /// No encryption: only for a relay on the same host or pod network. Not allowed with a password.
    None,
}

/// Email over SMTP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmailReceiverSpec {
    /// The SMTP server, `host:port`.
    #[schemars(length(min = 3, max = 261))]
    pub smarthost: String,
    /// StartTLS (the default), Implicit or None.
    #[serde(default)]
    pub tls: SmtpTls,
    /// Sender address, `trainwarden@example.com` or `Trainwarden <trainwarden@example.com>`.
    #[schemars(length(min = 3, max = 320))]
    pub from: String,
    /// Recipient addresses.
    #[schemars(length(min = 1, max = 32))]
    pub to: Vec<String>,
    /// SMTP user name; needs passwordSecret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 320))]
    pub username: Option<String>,
    /// The Secret key holding the SMTP password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretKeySelector>,
    /// Subject template (group fields only). Default `[{{status}}] {{rules}} on {{job}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub subject: Option<String>,
    /// Body template, rendered once per alert (every field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub text: Option<String>,
}

/// A generic webhook: JSON POST (schema in the book's Notifications page).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookReceiverSpec {
    /// The endpoint URL (http or https), when it is not a secret. Exactly one of url and urlSecret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 8, max = 2048))]
    pub url: Option<String>,
    /// The Secret key holding the endpoint URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_secret: Option<SecretKeySelector>,
    /// The Secret key holding the HMAC-SHA256 key; with it every request carries
    /// `X-Trainwarden-Signature: sha256=<hex HMAC of the body>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_secret: Option<SecretKeySelector>,
}
