//! One delivery attempt on one channel: Slack (HTTP POST of Block Kit JSON), email (SMTP with lettre over
//! rustls: STARTTLS, implicit TLS or none, optional AUTH) and webhook (HTTP POST of the documented JSON,
//! signed with HMAC-SHA256 when a key is configured).
//!
//! Each attempt resolves its secrets afresh (a rotated Secret applies to the next message) and classifies
//! failures: [`SendError::Retryable`] for HTTP 5xx/408/429, timeouts, connection and TLS errors, SMTP 4xx and
//! unreadable secrets; [`SendError::Permanent`] for HTTP 4xx, SMTP 5xx, SMTP client refusals and missing secrets (a request that will never
//! succeed as it is). Error texts never contain a secret: URLs are stripped from HTTP errors and secret
//! values are only ever passed to the request itself. Retrying, queueing and rate limits are
//! [`crate::delivery`]'s business, not this module's.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use trainwarden_core::SmtpTls;
use trainwarden_core::{EmailChannel, SlackChannel, WebhookChannel, WebhookUrl};

use crate::grouping::Notification;
use crate::render::{self, Rendered};
use crate::secret::{SecretError, SecretResolver, SecretValue};

/// The header carrying a webhook body's signature: `sha256=<lower-case hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "X-Trainwarden-Signature";

/// Which channel of a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChannelKind {
    /// Slack incoming webhook (Block Kit).
    Slack,
    /// Email over SMTP.
    Email,
    /// Generic webhook (the JSON payload, optionally HMAC-signed).
    Webhook,
}

impl ChannelKind {
    /// `slack`, `email` or `webhook`, as in metrics, status and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Slack => "slack",
            ChannelKind::Email => "email",
            ChannelKind::Webhook => "webhook",
        }
    }
}

/// Why an attempt failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Worth trying again later: HTTP 5xx, 408, 429, timeouts, connection and TLS errors, SMTP 4xx, an
    /// unreadable Secret.
    #[error("{0} (will retry)")]
    Retryable(String),
    /// Retrying would not help: other HTTP 4xx, SMTP 5xx, a missing, forbidden or unusable Secret.
    #[error("{0} (not retried)")]
    Permanent(String),
    /// A retryable failure that is not retried any more: the last attempt's error, and why delivery stopped
    /// (`4 attempts; the retry limit of 60s passed`).
    #[error("{error} (given up after {why})")]
    GaveUp {
        /// The last attempt's error.
        error: String,
        /// How many attempts were made and what ended them.
        why: String,
    },
}

impl SendError {
    /// Whether the delivery worker should retry after this.
    pub fn is_retryable(&self) -> bool {
        matches!(self, SendError::Retryable(_))
    }
}

/// Settings shared by every channel.
#[derive(Clone, Debug)]
pub struct SendConfig {
    /// Per attempt: connect, TLS, request and response (HTTP), or the whole SMTP conversation.
    pub timeout: StdDuration,
    /// Extra trusted CA certificates (PEM), for receivers behind a private CA.
    pub extra_roots_pem: Vec<Vec<u8>>,
}

impl Default for SendConfig {
    fn default() -> Self {
        SendConfig { timeout: StdDuration::from_secs(10), extra_roots_pem: Vec::new() }
    }
}

/// Sends notifications; cheap to clone.
#[derive(Clone)]
pub struct Sender {
    http: reqwest::Client,
    config: Arc<SendConfig>,
    secrets: Arc<dyn SecretResolver>,
}

/// Installs ring as the process's rustls provider if none is (reqwest is built without one on purpose).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Sender {
    /// A sender with `config`'s timeout and CA roots that resolves Secrets through `secrets`; fails on an
    /// unusable extra CA certificate.
    pub fn new(config: SendConfig, secrets: Arc<dyn SecretResolver>) -> Result<Sender, String> {
        install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .user_agent(concat!("trainwarden/", env!("CARGO_PKG_VERSION")))
            // A redirect would re-send a signed body to wherever the first server points.
            .redirect(reqwest::redirect::Policy::none());
        for pem in &config.extra_roots_pem {
            let cert =
                reqwest::Certificate::from_pem(pem).map_err(|e| format!("extra CA certificate: {e}"))?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Sender { http, config: Arc::new(config), secrets })
    }

    /// One attempt on one channel of the notification's receiver.
    pub async fn send(&self, kind: ChannelKind, n: &Notification) -> Result<(), SendError> {
        let r = &n.receiver;
        match kind {
            ChannelKind::Slack => match &r.slack {
                Some(c) => self.slack(c, n).await,
                None => Err(SendError::Permanent("the receiver has no slack channel".into())),
            },
            ChannelKind::Email => match &r.email {
                Some(c) => self.email(c, n).await,
                None => Err(SendError::Permanent("the receiver has no email channel".into())),
            },
            ChannelKind::Webhook => match &r.webhook {
                Some(c) => self.webhook(c, n).await,
                None => Err(SendError::Permanent("the receiver has no webhook channel".into())),
            },
        }
    }

    async fn secret(&self, reference: &trainwarden_core::SecretRef) -> Result<SecretValue, SendError> {
        self.secrets.resolve(reference).await.map_err(|e| match e {
            // The API or a file could not be read: that may pass.
            SecretError::Unavailable { .. } => SendError::Retryable(e.to_string()),
            // Missing, empty or not text: a configuration problem, like an HTTP 4xx.
            SecretError::NotFound { .. }
            | SecretError::NotText { .. }
            | SecretError::Empty { .. }
            | SecretError::Forbidden { .. } => SendError::Permanent(e.to_string()),
        })
    }

    async fn slack(&self, c: &SlackChannel, n: &Notification) -> Result<(), SendError> {
        let url = self.secret(&c.url).await?;
        let rendered = Rendered::new(n, &c.title, &c.text);
        let body = serde_json::to_vec(&render::slack_payload(n, &rendered))
            .map_err(|e| SendError::Permanent(format!("encoding the Slack message: {e}")))?;
        self.post(url.expose(), body, None, "Slack").await
    }

    async fn webhook(&self, c: &WebhookChannel, n: &Notification) -> Result<(), SendError> {
        let url = match &c.url {
            WebhookUrl::Plain(u) => SecretValue::new(u.clone()),
            WebhookUrl::Secret(s) => self.secret(s).await?,
        };
        let key = match &c.hmac_key {
            Some(k) => Some(self.secret(k).await?),
            None => None,
        };
        let rendered = Rendered::new(n, &c.title, &c.text);
        let body = serde_json::to_vec(&render::webhook_payload(n, &rendered))
            .map_err(|e| SendError::Permanent(format!("encoding the webhook document: {e}")))?;
        let signature = key.map(|k| signature(k.expose().as_bytes(), &body));
        self.post(url.expose(), body, signature, "webhook").await
    }

    async fn post(
        &self,
        url: &str,
        body: Vec<u8>,
        signature: Option<String>,
        what: &str,
    ) -> Result<(), SendError> {
        let mut request =
            self.http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        if let Some(sig) = signature {
            request = request.header(SIGNATURE_HEADER, sig);
        }
        // The URL may be a secret (Slack's is a bearer credential): never let it into an error text.
        let response = request.send().await.map_err(|e| classify_http(e.without_url(), what))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.text().await.unwrap_or_default();
        let detail: String = scrub_url(&body, url).chars().take(200).collect();
        let message = format!("{what} answered HTTP {status}: {}", detail.trim());
        if status.is_server_error()
            || status == reqwest::StatusCode::TOO_MANY_REQUESTS
            || status == reqwest::StatusCode::REQUEST_TIMEOUT
        {
            Err(SendError::Retryable(message))
        } else {
            Err(SendError::Permanent(message))
        }
    }

    async fn email(&self, c: &EmailChannel, n: &Notification) -> Result<(), SendError> {
        let rendered = Rendered::new(n, &c.subject, &c.text);
        let parse = |a: &str| {
            a.parse::<Mailbox>().map_err(|e| SendError::Permanent(format!("email address {a:?}: {e}")))
        };
        let mut message = Message::builder().from(parse(&c.from)?).subject(rendered.title.clone());
        for to in &c.to {
            message = message.to(parse(to)?);
        }
        let message = message
            .multipart(MultiPart::alternative_plain_html(
                rendered.plain_text(),
                render::email_html(n, &rendered),
            ))
            .map_err(|e| SendError::Permanent(format!("building the email: {e}")))?;
        let tls = || -> Result<TlsParameters, SendError> {
            let mut builder = TlsParameters::builder(c.host.clone());
            for pem in &self.config.extra_roots_pem {
                let cert = Certificate::from_pem(pem)
                    .map_err(|e| SendError::Permanent(format!("extra CA certificate: {e}")))?;
                builder = builder.add_root_certificate(cert);
            }
            builder.build_rustls().map_err(|e| SendError::Permanent(format!("TLS settings: {e}")))
        };
        let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(c.host.clone())
            .port(c.port)
            .timeout(Some(self.config.timeout))
            .tls(match c.tls {
                SmtpTls::StartTLS => Tls::Required(tls()?),
                SmtpTls::Implicit => Tls::Wrapper(tls()?),
                SmtpTls::None => Tls::None,
            });
        if let (Some(user), Some(password)) = (&c.username, &c.password) {
            let password = self.secret(password).await?;
            transport = transport.credentials(Credentials::new(user.clone(), password.expose().to_string()));
        }
        let transport = transport.build();
        // The whole conversation is bounded, not just each read (a server may trickle bytes forever).
        match tokio::time::timeout(self.config.timeout * 3, transport.send(message)).await {
            Err(_) => Err(SendError::Retryable(format!("SMTP {}:{} timed out", c.host, c.port))),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                let message = format!("SMTP {}:{}: {e}", c.host, c.port);
                // SMTP 5xx, and our own client's refusals (no common AUTH mechanism, a malformed address),
                // will not go away by retrying; 4xx, I/O and TLS failures may.
                if e.is_permanent() || e.is_client() {
                    Err(SendError::Permanent(message))
                } else {
                    Err(SendError::Retryable(message))
                }
            }
        }
    }
}

fn classify_http(e: reqwest::Error, what: &str) -> SendError {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    if e.is_builder() {
        // A malformed URL: no retry will fix it.
        return SendError::Permanent(format!("{what} {kind}: invalid request (check the URL)"));
    }
    SendError::Retryable(format!("{what} {kind}: {}", trainwarden_core::error_chain(&e)))
}

/// `sha256=<hex>` of HMAC-SHA256(key, body).
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), body);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Checks a signature header against a body in constant time (what a receiver does; used by the tests and
/// offered to Rust receivers).
pub fn verify_signature(key: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.strip_prefix("sha256=") else { return false };
    if hex.len() != 64 || !hex.is_ascii() {
        return false;
    }
    let mut tag = Vec::with_capacity(32);
    for i in (0..64).step_by(2) {
        match u8::from_str_radix(&hex[i..i + 2], 16) {
            Ok(b) => tag.push(b),
            Err(_) => return false,
        }
    }
    ring::hmac::verify(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), body, &tag).is_ok()
}

/// An error body without the request URL or its path: servers often echo the path ("Cannot POST /services/
/// T0/B0/xyz"), and for a Slack or secret webhook URL the path is the credential.
fn scrub_url(body: &str, url: &str) -> String {
    let mut out = body.replace(url, "[redacted URL]");
    if let Ok(parsed) = reqwest::Url::parse(url) {
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_string(),
        };
        if path.len() > 1 {
            out = out.replace(&path, "[redacted path]");
            out = out.replace(parsed.path(), "[redacted path]");
        }
        // Each longer path segment on its own, too (a server may echo it decoded or in pieces).
        for segment in parsed.path_segments().into_iter().flatten().filter(|s| s.len() >= 8) {
            out = out.replace(segment, "[redacted]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_bodies_never_carry_the_url_or_its_path() {
        let url = "https://hooks.slack.com/services/T000/B000/s3cr3tToken123";
        let body = "Cannot POST /services/T000/B000/s3cr3tToken123 (full: https://hooks.slack.com/services/T000/B000/s3cr3tToken123), token s3cr3tToken123";
        let scrubbed = super::scrub_url(body, url);
        assert!(!scrubbed.contains("s3cr3tToken123"), "{scrubbed}");
        assert!(scrubbed.starts_with("Cannot POST [redacted path]"), "{scrubbed}");
    }

    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231_and_verifies() {
        // RFC 4231 test case 2.
        let sig = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(verify_signature(b"Jefe", b"what do ya want for nothing?", &sig));
        assert!(!verify_signature(b"Jefe", b"what do ya want for nothing!", &sig));
        assert!(!verify_signature(b"jefe", b"what do ya want for nothing?", &sig));
        assert!(!verify_signature(b"Jefe", b"x", "sha256=zz"));
        assert!(!verify_signature(b"Jefe", b"x", "md5=00"));
    }
}
