//! From a [`Notification`] to the bytes each channel sends: a Slack Block Kit message, an email's subject,
//! plain-text and HTML parts, and the webhook's JSON document (its schema is documented in the crate docs
//! and versioned by [`WEBHOOK_SCHEMA_VERSION`]). Pure: no secrets, no I/O.

use serde_json::{Value, json};
use trainwarden_core::Template;

use crate::alert::{AlertFields, AlertStatus, GroupFields};
use crate::grouping::{Notification, group_label_name};

/// `version` of every webhook payload; a breaking change to the schema gets a new one.
pub const WEBHOOK_SCHEMA_VERSION: &str = "trainwarden.dev/notification/v1";

/// Slack allows 50 blocks per message and 3000 characters per section text.
const SLACK_MAX_ALERT_BLOCKS: usize = 40;
const SLACK_SECTION_CHARS: usize = 2900;
const SLACK_HEADER_CHARS: usize = 150;

/// A message rendered with one channel's templates.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The rendered title (Slack header, email subject), on one line.
    pub title: String,
    /// One rendered `text` per alert, in the notification's order.
    pub alert_texts: Vec<String>,
}

impl Rendered {
    /// Renders `title` once for `n`'s group and `text` once per alert, as `n`'s receiver would send them.
    pub fn new(n: &Notification, title: &Template, text: &Template) -> Rendered {
        let group = GroupFields {
            receiver: &n.receiver.name,
            time_zone: &n.receiver.time_zone,
            status: n.status,
            alerts: &n.alerts,
        };
        // A title is one line (a subject header cannot hold a newline).
        let title = title.render(&group).replace(['\r', '\n'], " ");
        let alert_texts = n
            .alerts
            .iter()
            .map(|alert| {
                let mut text = text.render(&AlertFields { group: &group, alert }).trim().to_string();
                // A reminder repeats the alert as it fired: nothing newer is known here, so it says so.
                if n.repeat && alert.status == AlertStatus::Firing {
                    text += &format!(
                        "\nReminder: still firing since {}; the values and progress above are from then.",
                        trainwarden_core::fmt_local(alert.fired_at, &n.receiver.time_zone)
                    );
                }
                text
            })
            .collect();
        Rendered { title, alert_texts }
    }

    /// The plain-text body: the alerts' texts, a blank line between them.
    pub fn plain_text(&self) -> String {
        self.alert_texts.join("\n\n")
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Slack's mrkdwn treats `&`, `<` and `>` as control characters.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The Slack incoming-webhook payload (Block Kit): a header, one section per alert, a context line.
pub fn slack_payload(n: &Notification, r: &Rendered) -> Value {
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": truncate(&r.title, SLACK_HEADER_CHARS)}}),
    ];
    for text in r.alert_texts.iter().take(SLACK_MAX_ALERT_BLOCKS) {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": truncate(&slack_escape(text), SLACK_SECTION_CHARS)}}));
    }
    let more = r.alert_texts.len().saturating_sub(SLACK_MAX_ALERT_BLOCKS);
    let mut context = format!("trainwarden · policy {} · receiver {}", n.policy, n.receiver.name);
    if more > 0 {
        context +=
            &format!(" · {} not shown", trainwarden_core::plural(more as u64, "more alert", "more alerts"));
    }
    if n.repeat {
        context += " · reminder: still firing";
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": slack_escape(&context)}]}));
    json!({"text": r.title, "blocks": blocks})
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The HTML part of an email: the same content as the text part, escaped.
pub fn email_html(n: &Notification, r: &Rendered) -> String {
    let mut html = String::from("<!DOCTYPE html>\n<html><body style=\"font-family: sans-serif\">\n");
    html += &format!("<h2>{}</h2>\n", html_escape(&r.title));
    for text in &r.alert_texts {
        html += &format!("<p>{}</p>\n", html_escape(text).replace('\n', "<br>\n"));
    }
    html += &format!(
        "<p style=\"color: #666; font-size: smaller\">trainwarden · policy {} · receiver {}{}</p>\n</body></html>\n",
        html_escape(&n.policy.to_string()),
        html_escape(&n.receiver.name),
        if n.repeat { " · reminder: still firing" } else { "" }
    );
    html
}

/// The webhook document (schema in the crate docs).
pub fn webhook_payload(n: &Notification, r: &Rendered) -> Value {
    let alerts: Vec<Value> = n
        .alerts
        .iter()
        .map(|a| {
            json!({
                "status": a.status.as_str(),
                "rule": a.rule,
                "job": {"namespace": a.job.namespace, "name": a.job.name},
                "mode": a.mode.as_str(),
                "summary": a.summary,
                "values": a.values,
                "actions": a.actions.iter().map(|x| json!({"kind": x.kind, "description": x.description})).collect::<Vec<_>>(),
                "message": a.message,
                "firedAt": a.fired_at.to_string(),
                "resolvedAt": a.resolved_at.map(|t| t.to_string()),
                "progress": a.progress,
                "savings": a.savings,
                "intentId": a.intent_id,
            })
        })
        .collect();
    let labels: serde_json::Map<String, Value> =
        n.group_labels.iter().map(|(l, v)| (group_label_name(*l).to_string(), json!(v))).collect();
    json!({
        "version": WEBHOOK_SCHEMA_VERSION,
        "status": n.status.as_str(),
        "repeat": n.repeat,
        "receiver": n.receiver.name,
        "groupKey": n.group_key,
        "groupLabels": labels,
        "policy": {"kind": n.policy.kind, "namespace": n.policy.namespace, "name": n.policy.name, "generation": n.policy.generation},
        "createdAt": n.created_at.to_string(),
        "title": r.title,
        "text": r.plain_text(),
        "alerts": alerts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use trainwarden_core::CompiledReceiver;
    use trainwarden_core::PolicyDuration;
    use trainwarden_core::Savings;
    use trainwarden_core::{DEFAULT_TEXT, DEFAULT_TITLE, TemplateScope};
    use trainwarden_core::{GroupLabel, Mode, PolicyRef};
    use trainwarden_core::{JobKey, Timestamp};

    use crate::alert::{ActionState, Alert, AlertAction, AlertStatus, JobProgress};

    fn notification() -> Notification {
        let at: Timestamp = "2026-11-27T23:11:26Z".parse().unwrap();
        let policy = PolicyRef {
            kind: trainwarden_core::PolicyKind::Namespaced,
            namespace: Some("fraud".into()),
            name: "weekend-safe".into(),
            generation: 3,
        };
        let alert = Alert {
            policy: policy.clone(),
            rule: "loss-plateau".into(),
            job: JobKey::new("fraud", "ft"),
            status: AlertStatus::Firing,
            mode: Mode::Audit,
            summary: "loss <stuck> & flat".into(),
            values: [("best".to_string(), 0.6117)].into(),
            actions: vec![AlertAction {
                kind: "suspend".into(),
                description: "suspend the TrainJob".into(),
                intent_id: "id-2".into(),
                state: ActionState::Issued,
            }],
            message: None,
            fired_at: at,
            resolved_at: None,
            resolution: None,
            progress: Some(JobProgress { percent: Some(17.0), eta_seconds: None }),
            savings: Some(Savings {
                until: at,
                basis: trainwarden_core::SavingsBasis::EstimatedEnd,
                gpus: 8.0,
                gpu_hours: 16.0,
                dollars: None,
            }),
            intent_id: "id-1".into(),
        };
        Notification {
            policy,
            receiver: Arc::new(CompiledReceiver {
                name: "team".into(),
                group_by: vec![GroupLabel::Policy, GroupLabel::Job],
                group_wait: PolicyDuration::from_secs(30),
                group_interval: PolicyDuration::from_secs(300),
                repeat_interval: PolicyDuration::from_secs(3600),
                send_resolved: false,
                max_per_minute: 30,
                slack: None,
                email: None,
                webhook: None,
                time_zone: jiff::tz::TimeZone::fixed(jiff::tz::offset(1)),
            }),
            group_key: "team{policy=\"fraud/weekend-safe\",job=\"fraud/ft\"}".into(),
            group_labels: vec![
                (GroupLabel::Policy, "fraud/weekend-safe".into()),
                (GroupLabel::Job, "fraud/ft".into()),
            ],
            status: AlertStatus::Firing,
            alerts: vec![alert],
            created_at: "2026-11-27T23:11:56Z".parse().unwrap(),
            repeat: false,
        }
    }

    fn rendered(n: &Notification) -> Rendered {
        Rendered::new(
            n,
            &Template::parse(DEFAULT_TITLE, TemplateScope::Group).unwrap(),
            &Template::parse(DEFAULT_TEXT, TemplateScope::Alert).unwrap(),
        )
    }

    /// Locks the documented webhook schema, `trainwarden.dev/notification/v1`: a change here is a change
    /// for every receiver (add fields only; anything else needs a new version).
    #[test]
    fn the_webhook_document_is_the_documented_schema() {
        let n = notification();
        let doc = webhook_payload(&n, &rendered(&n));
        let expected = json!({
            "version": "trainwarden.dev/notification/v1",
            "status": "firing",
            "repeat": false,
            "receiver": "team",
            "groupKey": "team{policy=\"fraud/weekend-safe\",job=\"fraud/ft\"}",
            "groupLabels": {"policy": "fraud/weekend-safe", "job": "fraud/ft"},
            "policy": {"kind": "ProgressPolicy", "namespace": "fraud", "name": "weekend-safe", "generation": 3},
            "createdAt": "2026-11-27T23:11:56Z",
            "title": "[firing] loss-plateau on fraud/ft",
            "text": "loss-plateau [Audit] firing on fraud/ft at Sat 2026-11-28 00:11:26 +01:00: loss <stuck> & flat\nprogress 17%; would suspend the TrainJob; 16 GPU-hours at stake",
            "alerts": [{
                "status": "firing",
                "rule": "loss-plateau",
                "job": {"namespace": "fraud", "name": "ft"},
                "mode": "Audit",
                "summary": "loss <stuck> & flat",
                "values": {"best": 0.6117},
                "actions": [{"kind": "suspend", "description": "suspend the TrainJob"}],
                "message": null,
                "firedAt": "2026-11-27T23:11:26Z",
                "resolvedAt": null,
                "progress": {"percent": 17.0},
                "savings": {"until": "2026-11-27T23:11:26Z", "basis": "estimatedEnd", "gpus": 8.0, "gpuHours": 16.0},
                "intentId": "id-1",
            }],
        });
        assert_eq!(doc, expected, "{doc:#}");
    }

    #[test]
    fn slack_and_email_escape_what_they_must() {
        let n = notification();
        let r = rendered(&n);
        let slack = slack_payload(&n, &r);
        assert_eq!(slack["blocks"][0]["text"]["text"], "[firing] loss-plateau on fraud/ft");
        assert!(
            slack["blocks"][1]["text"]["text"].as_str().unwrap().contains("loss &lt;stuck&gt; &amp; flat")
        );
        assert_eq!(slack["blocks"].as_array().unwrap().len(), 3);
        let html = email_html(&n, &r);
        assert!(html.contains("loss &lt;stuck&gt; &amp; flat<br>\nprogress 17%"), "{html}");
        assert!(!html.contains("<stuck>"));
    }

    /// Times print in the policy's zone with the offset (the webhook's `firedAt` stays a UTC instant).
    #[test]
    fn times_are_in_the_policys_time_zone() {
        let n = notification();
        let r = rendered(&n);
        assert!(
            r.alert_texts[0]
                .starts_with("loss-plateau [Audit] firing on fraud/ft at Sat 2026-11-28 00:11:26 +01:00: "),
            "{}",
            r.alert_texts[0]
        );
    }

    /// Issue 43: a small saving was `0 GPU-hours` beside its dollars; GPU-hours and dollars are printed by
    /// the one formatter of each.
    #[test]
    fn a_small_saving_is_never_zero_gpu_hours_beside_its_price() {
        let mut n = notification();
        let s = n.alerts[0].savings.as_mut().unwrap();
        (s.gpu_hours, s.dollars) = (0.0042, Some(0.0462));
        let text = &rendered(&n).alert_texts[0];
        assert!(text.ends_with("would suspend the TrainJob; 0.0042 GPU-hours ($0.05) at stake"), "{text}");
    }

    /// Enforce: what the executor reported it did, in the past tense, and the commands that undo it.
    #[test]
    fn enforce_messages_say_what_was_done_and_how_to_resume() {
        let mut n = notification();
        n.alerts[0].mode = Mode::Enforce;
        assert_eq!(
            rendered(&n).alert_texts[0],
            "loss-plateau [Enforce] firing on fraud/ft at Sat 2026-11-28 00:11:26 +01:00: loss <stuck> & flat\n\
             progress 17%; suspending the TrainJob; 16 GPU-hours at stake",
            "before the executor's result: what is under way"
        );
        n.alerts[0].actions[0].state = ActionState::Done {
            what: "suspended the TrainJob".into(),
            undo: Some(crate::alert::resume_hint(&n.alerts[0].job, None)),
        };
        assert_eq!(
            rendered(&n).alert_texts[0],
            "loss-plateau [Enforce] firing on fraud/ft at Sat 2026-11-28 00:11:26 +01:00: loss <stuck> & flat\n\
             progress 17%; suspended the TrainJob; 16 GPU-hours at stake\n\
             To resume it: kubectl -n fraud patch trainjob ft --type=merge -p '{\"spec\":{\"suspend\":false}}'\n\
             To exempt it from every policy: kubectl -n fraud annotate trainjob ft trainwarden.dev/exempt=true"
        );
        assert_eq!(
            crate::alert::resume_hint(&n.alerts[0].job, Some("trainjob-ft-3f2a1")),
            "To resume it, reactivate its Kueue Workload: kubectl -n fraud patch workload trainjob-ft-3f2a1 --type=merge -p '{\"spec\":{\"active\":true}}'\n\
             To exempt it from every policy: kubectl -n fraud annotate trainjob ft trainwarden.dev/exempt=true"
        );
    }

    /// A reminder says its values are the firing's; a resolution says why it resolved.
    #[test]
    fn reminders_date_their_values_and_resolutions_say_why() {
        let mut n = notification();
        n.repeat = true;
        assert_eq!(
            rendered(&n).alert_texts[0],
            "loss-plateau [Audit] firing on fraud/ft at Sat 2026-11-28 00:11:26 +01:00: loss <stuck> & flat\n\
             progress 17%; would suspend the TrainJob; 16 GPU-hours at stake\n\
             Reminder: still firing since Sat 2026-11-28 00:11:26 +01:00; the values and progress above are from then."
        );
        let mut n = notification();
        n.status = AlertStatus::Resolved;
        n.alerts[0].status = AlertStatus::Resolved;
        n.alerts[0].resolved_at = Some("2026-11-28T17:00:00Z".parse().unwrap());
        n.alerts[0].resolution = Some(trainwarden_core::Resolution::WindowClosed);
        assert_eq!(
            rendered(&n).alert_texts[0],
            "loss-plateau [Audit] resolved on fraud/ft at Sat 2026-11-28 18:00:00 +01:00: the policy's active \
             window closed (it fired: loss <stuck> & flat)\nprogress 17%"
        );
    }

    #[test]
    fn escaping_and_truncation() {
        assert_eq!(slack_escape("a<b>&c"), "a&lt;b&gt;&amp;c");
        assert_eq!(html_escape("\"<x>\""), "&quot;&lt;x&gt;&quot;");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
