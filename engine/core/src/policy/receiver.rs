//! Notification receivers, validated and compiled: durations parsed, templates parsed, Secret namespaces
//! resolved against the policy's scope.
//!
//! [`compile_receivers`] is called by [`crate::policy::compile`], so a bad receiver is a policy validation error with
//! its field path like any other. The notifier (crate `trainwarden-notify`) consumes [`CompiledReceiver`]s; it
//! never re-parses the spec. Pure: no I/O, no secrets (only references to them).

use std::collections::HashSet;

use crate::error::FieldError;
use crate::policy::template::{DEFAULT_TEXT, DEFAULT_TITLE, Scope, Template};
use crate::policy::{GroupLabel, PolicyScope, ReceiverSpec, SecretKeySelector, SmtpTls};
use crate::units::duration::PolicyDuration;

pub(crate) const DEFAULT_GROUP_WAIT: PolicyDuration = PolicyDuration::from_secs(30);
pub(crate) const DEFAULT_GROUP_INTERVAL: PolicyDuration = PolicyDuration::from_secs(300);
pub(crate) const DEFAULT_REPEAT_INTERVAL: PolicyDuration = PolicyDuration::from_secs(4 * 3600);
pub(crate) const DEFAULT_MAX_PER_MINUTE: u32 = 30;

/// A Secret key with its namespace settled.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretRef {
    /// The Secret's namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
    /// The key in the Secret's data.
    pub key: String,
}

impl std::fmt::Display for SecretRef {
    /// `namespace/name[key]`: names the Secret, never its value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}[{}]", self.namespace, self.name, self.key)
    }
}

/// A Slack channel.
#[derive(Clone, Debug, PartialEq)]
pub struct SlackChannel {
    /// The Secret key holding the incoming-webhook URL.
    pub url: SecretRef,
    /// Header, rendered once per message (group scope).
    pub title: Template,
    /// Body, rendered once per alert (alert scope).
    pub text: Template,
}

/// An SMTP channel.
#[derive(Clone, Debug, PartialEq)]
pub struct EmailChannel {
    /// SMTP server host, from `smarthost`.
    pub host: String,
    /// SMTP server port, from `smarthost`.
    pub port: u16,
    /// How the connection is secured.
    pub tls: SmtpTls,
    /// Sender address.
    pub from: String,
    /// Recipient addresses.
    pub to: Vec<String>,
    /// SMTP user name, to log in with `password`.
    pub username: Option<String>,
    /// The Secret key holding the SMTP password.
    pub password: Option<SecretRef>,
    /// Subject, rendered once per message (group scope).
    pub subject: Template,
    /// Body, rendered once per alert (alert scope).
    pub text: Template,
}

/// Where a webhook's URL comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookUrl {
    /// A URL written in the policy.
    Plain(String),
    /// A URL read from a Secret key.
    Secret(SecretRef),
}

/// A generic webhook channel.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookChannel {
    /// Where to POST: a URL written in the policy or a Secret key holding one.
    pub url: WebhookUrl,
    /// The Secret key holding the HMAC-SHA256 key the body is signed with.
    pub hmac_key: Option<SecretRef>,
    /// Header, rendered once per message (group scope).
    pub title: Template,
    /// Body, rendered once per alert (alert scope).
    pub text: Template,
}

/// One receiver, ready for the notifier.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledReceiver {
    /// Unique within the policy; `notify: {to: NAME}` refers to it.
    pub name: String,
    /// Sorted, deduplicated, never empty.
    pub group_by: Vec<GroupLabel>,
    /// How long to wait after the first alert of a new group for others to join it.
    pub group_wait: PolicyDuration,
    /// How long to wait before notifying about new alerts in a group that was already notified.
    pub group_interval: PolicyDuration,
    /// How long to wait before repeating a notification for alerts that are still firing.
    pub repeat_interval: PolicyDuration,
    /// Whether to notify when a rule stops firing.
    pub send_resolved: bool,
    /// Most messages per minute; more wait in the receiver's queue.
    pub max_per_minute: u32,
    /// Set when the receiver posts to Slack.
    pub slack: Option<SlackChannel>,
    /// Set when the receiver sends email.
    pub email: Option<EmailChannel>,
    /// Set when the receiver posts to a webhook.
    pub webhook: Option<WebhookChannel>,
    /// The policy's `spec.timezone` (UTC by default): messages print instants in it, with the offset.
    pub time_zone: jiff::tz::TimeZone,
}

/// Validates and compiles `spec.receivers`; problems go to `errors` with their paths.
pub(crate) fn compile_receivers(
    receivers: &[ReceiverSpec],
    scope: &PolicyScope,
    time_zone: &jiff::tz::TimeZone,
    errors: &mut Vec<FieldError>,
) -> Vec<CompiledReceiver> {
    let mut names = HashSet::new();
    let mut out = Vec::new();
    for (i, r) in receivers.iter().enumerate() {
        let path = format!("spec.receivers[{i}]");
        if r.name.trim().is_empty() {
            errors.push(FieldError::new(format!("{path}.name"), "required"));
        } else if !names.insert(r.name.as_str()) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!("duplicate receiver name {:?}", r.name),
            ));
        }
        let group_wait =
            duration(errors, &path, "groupWait", r.group_wait.as_ref(), DEFAULT_GROUP_WAIT, true);
        let group_interval = duration(
            errors,
            &path,
            "groupInterval",
            r.group_interval.as_ref(),
            DEFAULT_GROUP_INTERVAL,
            false,
        );
        let repeat_interval = duration(
            errors,
            &path,
            "repeatInterval",
            r.repeat_interval.as_ref(),
            DEFAULT_REPEAT_INTERVAL,
            false,
        );
        let mut group_by = r.group_by.clone().unwrap_or_else(|| vec![GroupLabel::Policy, GroupLabel::Job]);
        if group_by.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.groupBy"),
                "needs at least one of policy, job, namespace, rule (or leave it out for [policy, job])",
            ));
            group_by = vec![GroupLabel::Policy, GroupLabel::Job];
        }
        group_by.sort();
        group_by.dedup();
        let max_per_minute = match r.max_per_minute {
            None => DEFAULT_MAX_PER_MINUTE,
            Some(n) if (1..=6000).contains(&n) => n,
            Some(n) => {
                errors.push(FieldError::new(
                    format!("{path}.maxPerMinute"),
                    format!("must be 1 to 6000, got {n}"),
                ));
                DEFAULT_MAX_PER_MINUTE
            }
        };
        if r.slack.is_none() && r.email.is_none() && r.webhook.is_none() {
            errors.push(FieldError::new(path.clone(), "a receiver needs slack, email or webhook"));
        }
        let slack = r.slack.as_ref().map(|s| {
            let p = format!("{path}.slack");
            SlackChannel {
                url: secret(errors, scope, &format!("{p}.urlSecret"), &s.url_secret),
                title: template(
                    errors,
                    &format!("{p}.title"),
                    s.title.as_deref(),
                    DEFAULT_TITLE,
                    Scope::Group,
                ),
                text: template(errors, &format!("{p}.text"), s.text.as_deref(), DEFAULT_TEXT, Scope::Alert),
            }
        });
        let email = r.email.as_ref().map(|e| {
            let p = format!("{path}.email");
            let (host, port) = match parse_host_port(&e.smarthost) {
                Ok(hp) => hp,
                Err(message) => {
                    errors.push(FieldError::new(format!("{p}.smarthost"), message));
                    (String::new(), 0)
                }
            };
            if let Err(message) = check_address(&e.from) {
                errors.push(FieldError::new(format!("{p}.from"), message));
            }
            if e.to.is_empty() {
                errors.push(FieldError::new(format!("{p}.to"), "needs at least one address"));
            }
            for (j, to) in e.to.iter().enumerate() {
                if let Err(message) = check_address(to) {
                    errors.push(FieldError::new(format!("{p}.to[{j}]"), message));
                }
            }
            let password =
                e.password_secret.as_ref().map(|s| secret(errors, scope, &format!("{p}.passwordSecret"), s));
            match (&e.username, &password) {
                (Some(_), None) => errors
                    .push(FieldError::new(format!("{p}.passwordSecret"), "username needs passwordSecret")),
                (None, Some(_)) => {
                    errors.push(FieldError::new(format!("{p}.username"), "passwordSecret needs username"));
                }
                _ => {}
            }
            if e.tls == SmtpTls::None && password.is_some() {
                errors.push(FieldError::new(
                    format!("{p}.tls"),
                    "None would send the password unencrypted: use StartTLS or Implicit",
                ));
            }
            EmailChannel {
                host,
                port,
                tls: e.tls,
                from: e.from.clone(),
                to: e.to.clone(),
                username: e.username.clone(),
                password,
                subject: template(
                    errors,
                    &format!("{p}.subject"),
                    e.subject.as_deref(),
                    DEFAULT_TITLE,
                    Scope::Group,
                ),
                text: template(errors, &format!("{p}.text"), e.text.as_deref(), DEFAULT_TEXT, Scope::Alert),
            }
        });
        let webhook = r.webhook.as_ref().map(|w| {
            let p = format!("{path}.webhook");
            let url = match (&w.url, &w.url_secret) {
                (Some(url), None) => {
                    if let Err(message) = check_http_url(url) {
                        errors.push(FieldError::new(format!("{p}.url"), message));
                    }
                    WebhookUrl::Plain(url.clone())
                }
                (None, Some(s)) => WebhookUrl::Secret(secret(errors, scope, &format!("{p}.urlSecret"), s)),
                (Some(_), Some(_)) | (None, None) => {
                    errors.push(FieldError::new(p.clone(), "needs exactly one of url and urlSecret"));
                    WebhookUrl::Plain(String::new())
                }
            };
            WebhookChannel {
                url,
                hmac_key: w
                    .hmac_secret
                    .as_ref()
                    .map(|s| secret(errors, scope, &format!("{p}.hmacSecret"), s)),
                title: template(errors, &p, None, DEFAULT_TITLE, Scope::Group),
                text: template(errors, &p, None, DEFAULT_TEXT, Scope::Alert),
            }
        });
        out.push(CompiledReceiver {
            name: r.name.clone(),
            group_by,
            group_wait,
            group_interval,
            repeat_interval,
            send_resolved: r.send_resolved,
            max_per_minute,
            slack,
            email,
            webhook,
            time_zone: time_zone.clone(),
        });
    }
    out
}

fn duration(
    errors: &mut Vec<FieldError>,
    path: &str,
    field: &str,
    text: Option<&crate::policy::DurationText>,
    default: PolicyDuration,
    zero_allowed: bool,
) -> PolicyDuration {
    match text.map(super::spec::DurationText::parse) {
        None => default,
        Some(Ok(d)) if zero_allowed || !d.is_zero() => d,
        Some(Ok(_)) => {
            errors.push(FieldError::new(format!("{path}.{field}"), "must be longer than 0s"));
            default
        }
        Some(Err(e)) => {
            errors.push(FieldError::new(format!("{path}.{field}"), e));
            default
        }
    }
}

fn template(
    errors: &mut Vec<FieldError>,
    path: &str,
    text: Option<&str>,
    default: &str,
    scope: Scope,
) -> Template {
    match Template::parse(text.unwrap_or(default), scope) {
        Ok(t) => t,
        Err(e) => {
            errors.push(FieldError::new(path, e.to_string()));
            Template::empty()
        }
    }
}

/// Settles a Secret's namespace: a ProgressPolicy reads only its own namespace's Secrets (so a policy author
/// cannot exfiltrate another team's credentials through the controller); a ClusterProgressPolicy names one.
fn secret(errors: &mut Vec<FieldError>, scope: &PolicyScope, path: &str, s: &SecretKeySelector) -> SecretRef {
    if s.name.trim().is_empty() {
        errors.push(FieldError::new(format!("{path}.name"), "required"));
    }
    if s.key.trim().is_empty() {
        errors.push(FieldError::new(format!("{path}.key"), "required"));
    }
    let namespace = match (scope, &s.namespace) {
        (PolicyScope::Namespace(own), None) => own.clone(),
        (PolicyScope::Namespace(own), Some(ns)) if ns == own => own.clone(),
        (PolicyScope::Namespace(own), Some(ns)) => {
            errors.push(FieldError::new(
                format!("{path}.namespace"),
                format!(
                    "a ProgressPolicy may only reference Secrets in its own namespace {own:?}, not {ns:?}"
                ),
            ));
            own.clone()
        }
        (PolicyScope::Cluster { .. }, Some(ns)) if !ns.trim().is_empty() => ns.clone(),
        (PolicyScope::Cluster { .. }, _) => {
            errors.push(FieldError::new(
                format!("{path}.namespace"),
                "a ClusterProgressPolicy must name the Secret's namespace",
            ));
            String::new()
        }
    };
    SecretRef { namespace, name: s.name.clone(), key: s.key.clone() }
}

/// `host:port`, `[v6]:port`.
fn parse_host_port(text: &str) -> Result<(String, u16), String> {
    let bad = || format!("expected host:port, got {text:?}");
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// `user@domain` or `Name <user@domain>`: a shape check; the mailer parses it fully.
fn check_address(text: &str) -> Result<(), String> {
    let addr = match (text.find('<'), text.strip_suffix('>')) {
        (Some(open), Some(inner)) => &inner[open + 1..],
        _ => text,
    };
    let ok = match addr.split_once('@') {
        Some((user, domain)) => {
            !user.is_empty()
                && !domain.is_empty()
                && !domain.contains('@')
                && !addr.chars().any(|c| c.is_whitespace() || c.is_control() || c == '<' || c == '>')
        }
        None => false,
    };
    if ok { Ok(()) } else { Err(format!("{text:?} is not an email address")) }
}

fn check_http_url(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') && !url.chars().any(char::is_whitespace) => Ok(()),
        _ => Err(format!("{url:?} is not an http:// or https:// URL")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_and_addresses() {
        assert_eq!(parse_host_port("smtp.example.com:587").unwrap(), ("smtp.example.com".into(), 587));
        assert_eq!(parse_host_port("[::1]:25").unwrap(), ("::1".into(), 25));
        assert!(parse_host_port("smtp.example.com").is_err());
        assert!(parse_host_port("smtp:0").is_err());
        assert!(parse_host_port(":25").is_err());
        assert!(check_address("a@b.c").is_ok());
        assert!(check_address("Trainwarden <tw@example.com>").is_ok());
        assert!(check_address("nobody").is_err());
        assert!(check_address("a b@c").is_err());
        assert!(check_http_url("http://127.0.0.1:8080/hook").is_ok());
        assert!(check_http_url("ftp://x").is_err());
    }
}
