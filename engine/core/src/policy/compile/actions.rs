//! Part of step 4 (the rules) of [`compile`](super::compile): each action's own fields, and that a `notify` names a
//! receiver the policy declares.

use crate::error::FieldError;
use crate::policy::{ActionSpec, MAX_CHECKPOINT_TIMEOUT, ReceiverSpec};
use crate::units::duration::PolicyDuration;

/// Checks the actions of the rule at `path`.
pub(super) fn check(
    path: &str,
    actions: &[ActionSpec],
    receivers: &[ReceiverSpec],
    errors: &mut Vec<FieldError>,
) {
    for (j, action) in actions.iter().enumerate() {
        let apath = format!("{path}.actions[{j}]");
        match action {
            ActionSpec::Notify(n) if n.to.trim().is_empty() => {
                errors.push(FieldError::new(format!("{apath}.notify.to"), "required"));
            }
            // A policy without receivers leaves delivery to receivers configured outside it; once it
            // declares any, every notify must name one of them.
            ActionSpec::Notify(n) if !receivers.is_empty() && !receivers.iter().any(|r| r.name == n.to) => {
                errors.push(FieldError::new(
                    format!("{apath}.notify.to"),
                    format!(
                        "no receiver named {:?} in spec.receivers (defined: {})",
                        n.to,
                        receivers.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            ActionSpec::Annotate(a) if !valid_annotation_key(&a.key) => errors.push(FieldError::new(
                format!("{apath}.annotate.key"),
                format!(
                    "{:?} is not a valid annotation key (prefix/name, name at most 63 characters)",
                    a.key
                ),
            )),
            ActionSpec::Annotate(a) if RESERVED_ANNOTATIONS.contains(&a.key.as_str()) => {
                errors.push(FieldError::new(
                    format!("{apath}.annotate.key"),
                    format!(
                        "{:?} is an annotation the controller itself keeps on TrainJobs; choose another key (e.g. trainwarden.dev/<your-rule>)",
                        a.key
                    ),
                ));
            }
            ActionSpec::Scale(s) if s.num_nodes < 1 => {
                errors.push(FieldError::new(format!("{apath}.scale.numNodes"), "must be at least 1"));
            }
            _ => {}
        }
        let grace = match action {
            ActionSpec::Suspend(s) => s.grace.as_ref().map(|g| ("suspend", g)),
            ActionSpec::Scale(s) => s.grace.as_ref().map(|g| ("scale", g)),
            _ => None,
        };
        let timeout = match action {
            ActionSpec::Checkpoint(c) => c.timeout.as_ref().map(|t| ("checkpoint.timeout", t)),
            ActionSpec::Suspend(s) => s
                .checkpoint_first
                .as_ref()
                .and_then(|c| c.timeout.as_ref())
                .map(|t| ("suspend.checkpointFirst.timeout", t)),
            _ => None,
        };
        if let Some((field, text)) = timeout {
            let field = format!("{apath}.{field}");
            match text.parse() {
                Err(e) => errors.push(FieldError::new(field, e)),
                Ok(d) if d.is_zero() => errors.push(FieldError::new(
                    field,
                    "must be longer than 0s (leave it out for the default, 10m)",
                )),
                Ok(d) if d > MAX_CHECKPOINT_TIMEOUT => {
                    errors.push(FieldError::new(field, format!("must be at most 24h, got {}", text.0)));
                }
                Ok(_) => {}
            }
        }
        if let Some((kind, text)) = grace {
            let field = format!("{apath}.{kind}.grace");
            match text.parse() {
                Err(e) => errors.push(FieldError::new(field, e)),
                Ok(d) if d.is_zero() => errors
                    .push(FieldError::new(field, "must be longer than 0s (leave it out to act at once)")),
                Ok(d) if d > PolicyDuration::from_secs(7 * 24 * 3600) => {
                    errors.push(FieldError::new(field, format!("must be at most 7d, got {}", text.0)));
                }
                Ok(_) => {}
            }
        }
    }
}

/// The annotations the controller writes (or reads as its own) on TrainJobs: an `annotate` action may not
/// set them (it would fight the controller's writes). trainwarden-kube's constants are checked against this
/// list by a test there.
pub const RESERVED_ANNOTATIONS: &[&str] = &[
    "trainwarden.dev/verdict",
    "trainwarden.dev/history",
    "trainwarden.dev/intents",
    "trainwarden.dev/last-action",
    "trainwarden.dev/suspended-by",
    "trainwarden.dev/scale-pending",
    "trainwarden.dev/snooze-until",
    "trainwarden.dev/exempt",
    "trainwarden.dev/checkpoint-request",
    "trainwarden.dev/checkpoint",
];

pub(super) fn valid_annotation_key(key: &str) -> bool {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(ok_char)
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && key.rsplit_once('/').is_none_or(|(prefix, _)| !prefix.is_empty() && prefix.len() <= 253)
}
