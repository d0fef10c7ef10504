//! trainwarden's notifications: `notify` actions delivered to Slack, email and webhooks, grouped and
//! deduplicated the way Alertmanager does it, with bounded, retrying, rate-limited delivery.
//!
//! ```text
//!  ActionIntent / Resolved ─▶ Notifier ─▶ Grouper (sans-IO: groupBy, groupWait, groupInterval,
//!                              │           repeatInterval, sendResolved) ─▶ Notification
//!                              └─ router task ─▶ bounded queue per receiver channel ─▶ worker
//!                                   (rate limit, backoff + jitter) ─▶ Sender (Slack | SMTP | webhook)
//! ```
//!
//! Modules: [`alert`] (alerts from intents, template values), [`grouping`] (the state machine, clock as an
//! argument), [`render`] (Slack Block Kit, email parts, webhook JSON), [`send`] (one attempt per channel,
//! HMAC signatures), [`delivery`] (queues, retries, counters), [`secret`] (redacted values; the
//! resolver trait, environment and file resolvers — the controller brings the Kubernetes one), [`notifier`]
//! (the handle the controller holds), [`tracking`] (whether the message carrying an intent was delivered),
//! [`offline`] (the same grouping on a replay's clock).
//!
//! Receivers are declared in the policy (`spec.receivers`, validated by `trainwarden-core`, where message
//! templates are parsed so a template error is a validation error).
//!
//! # Webhook payload (`version: trainwarden.dev/notification/v1`)
//!
//! `POST` with `Content-Type: application/json`. With `hmacSecret`, the header
//! `X-Trainwarden-Signature: sha256=<hex>` carries HMAC-SHA256 over the exact body bytes, keyed with the
//! Secret's value; verify it before trusting the body ([`send::verify_signature`] does it in constant time).
//! A response other than 2xx is a failure: 5xx, 408 and 429 are retried with backoff, other 4xx are not.
//!
//! ```json
//! {
//!   "version": "trainwarden.dev/notification/v1",
//!   "status": "firing",                       // "resolved" when every alert in the message is resolved
//!   "repeat": false,                          // true: a repeatInterval reminder, nothing changed
//!   "receiver": "team",
//!   "groupKey": "team{policy=\"fraud/weekend-safe\",job=\"fraud/ft\"}",
//!   "groupLabels": {"job": "fraud/ft", "policy": "fraud/weekend-safe"},
//!   "policy": {"kind": "ProgressPolicy", "namespace": "fraud", "name": "weekend-safe", "generation": 3},
//!   "createdAt": "2026-11-28T00:12:30Z",
//!   "title": "[firing] loss-plateau on fraud/ft",   // the default title template, rendered
//!   "text": "…",                                    // the default text template, rendered per alert
//!   "alerts": [{
//!     "status": "firing",
//!     "rule": "loss-plateau",
//!     "job": {"namespace": "fraud", "name": "ft"},
//!     "mode": "Enforce",                      // "Audit": the actions were not performed
//!     "summary": "loss has not improved by more than 0.001 for …",
//!     "values": {"best": 0.6117, "last": 0.6121},
//!     "actions": [{"kind": "suspend", "description": "suspend the TrainJob"}],
//!     "message": null,                        // the notify action's message
//!     "firedAt": "2026-11-28T00:12:00Z",
//!     "resolvedAt": null,
//!     "progress": {"percent": 31.5, "etaSeconds": 118062},   // or null; fields absent when unknown
//!     "savings": {"until": "…", "basis": "estimatedEnd", "gpus": 8, "gpuHours": 262.36, "dollars": 1803.73},
//!     "intentId": "ProgressPolicy:fraud:weekend-safe:3:loss-plateau:fraud:ft:…"   // stable per firing
//!   }]
//! }
//! ```
//!
//! Fields are only ever added within a version; consumers should ignore unknown fields.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod alert;
pub mod delivery;
pub mod grouping;
pub mod notifier;
pub mod offline;
pub mod render;
pub mod secret;
pub mod send;
pub mod tracking;

pub use alert::{ActionState, Alert, AlertAction, AlertStatus, JobProgress};
pub use delivery::RetryPolicy;
pub use grouping::{GroupLimits, Grouper, Notification, Refused};
pub use notifier::{ChannelStats, Notifier, NotifierConfig, ShutdownReport, SubmitError};
pub use secret::{
    EnvSecrets, FileSecrets, LocalSecrets, SecretError, SecretFuture, SecretResolver, SecretValue,
};
pub use send::{
    ChannelKind, SIGNATURE_HEADER, SendConfig, SendError, Sender, install_crypto_provider, signature,
    verify_signature,
};
pub use tracking::Delivery;
