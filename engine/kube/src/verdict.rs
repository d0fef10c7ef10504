//! A TrainJob's verdict ([`VERDICT_ANNOTATION`]): which rules of which policies are pending or firing for
//! it, since when and why. The controller's leader writes it on the TrainJob when, and only when, that set
//! changes (a rule starts pending, fires, resolves or clears), so `kubectl trainwarden get` and `explain`
//! read every job's state from the objects themselves, for thousands of jobs, without the controller's pod
//! being reachable, and the write rate is the rate of rule transitions, not of progress reports. A job no
//! rule is pending or firing for carries no verdict. Rules in Audit mode are left out: Audit's promise is
//! that nothing is written to the TrainJob (the policy status lists them).
//!
//! The text is JSON, versioned (`v`), at most [`MAX_VERDICT_BYTES`] long: at most [`MAX_VERDICT_RULES`]
//! rules (firing first) and each reason clipped to [`MAX_REASON_CHARS`] characters.

use trainwarden_core::{Mode, PolicyKind, RuleState, Timestamp};

/// The annotation that holds a TrainJob's verdict.
pub const VERDICT_ANNOTATION: &str = "trainwarden.dev/verdict";
/// The field manager of [`VERDICT_ANNOTATION`]: its own, so a verdict write states one field and never
/// races what an action applied, and applying an empty verdict removes the annotation.
pub const VERDICT_FIELD_MANAGER: &str = "trainwarden-verdict";
/// The verdict format this build writes and reads.
pub const VERDICT_VERSION: u32 = 1;
/// The most rules a verdict lists.
pub const MAX_VERDICT_RULES: usize = 16;
/// The most characters of one rule's reason.
pub const MAX_REASON_CHARS: usize = 240;
/// The most bytes of a verdict's text (16 rules with full reasons and long names fit).
pub const MAX_VERDICT_BYTES: usize = 8192;

/// One rule that is pending or firing for the job.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleVerdict {
    /// `ProgressPolicy` or `ClusterProgressPolicy`.
    pub kind: PolicyKind,
    /// The policy's namespace (a ProgressPolicy); absent for a ClusterProgressPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The policy's name.
    pub policy: String,
    /// The rule's name.
    pub rule: String,
    /// `Pending` or `Firing`.
    pub state: RuleState,
    /// When the rule entered that state (always set by the controller; unknown for a rule read from a policy
    /// status list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Enforce or Audit.
    pub mode: Mode,
    /// Why the condition held, as the rule said it when it entered the state.
    #[serde(default)]
    pub why: String,
}

impl RuleVerdict {
    /// The policy as people name it: `namespace/name`, or `name` for a cluster policy.
    pub fn policy_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.policy),
            None => self.policy.clone(),
        }
    }

    fn key(&self) -> (PolicyKind, Option<&str>, &str, &str) {
        (self.kind, self.namespace.as_deref(), &self.policy, &self.rule)
    }
}

/// A job's verdict: its pending and firing rules.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// The format version ([`VERDICT_VERSION`]).
    pub v: u32,
    /// Firing rules first, then pending; by policy and rule within each.
    pub rules: Vec<RuleVerdict>,
}

/// Why an annotation's text is not a verdict this build reads.
#[derive(Debug, thiserror::Error)]
pub enum VerdictError {
    /// Not JSON of the verdict's shape.
    #[error("the {VERDICT_ANNOTATION} annotation cannot be read: {0}")]
    Unreadable(String),
    /// Written by a newer controller.
    #[error(
        "the {VERDICT_ANNOTATION} annotation has format version {0}; this build reads version {VERDICT_VERSION} (upgrade kubectl-trainwarden)"
    )]
    UnknownVersion(u32),
}

impl Verdict {
    /// Reads an annotation's text.
    pub fn parse(text: &str) -> Result<Verdict, VerdictError> {
        #[derive(serde::Deserialize)]
        struct Header {
            v: u32,
        }
        let header: Header =
            serde_json::from_str(text).map_err(|e| VerdictError::Unreadable(e.to_string()))?;
        if header.v != VERDICT_VERSION {
            return Err(VerdictError::UnknownVersion(header.v));
        }
        serde_json::from_str(text).map_err(|e| VerdictError::Unreadable(e.to_string()))
    }

    /// The annotation's text, or `None` when no rule is pending or firing (the annotation is removed).
    pub fn render(&self) -> Option<String> {
        if self.rules.is_empty() {
            return None;
        }
        let mut shown = self.clone();
        shown.v = VERDICT_VERSION;
        shown.sort_and_bound();
        let mut text = serde_json::to_string(&shown).ok()?;
        // Reasons are clipped and rules counted, so only absurdly long names get here: drop rules from the
        // end (pending ones first) until it fits.
        while text.len() > MAX_VERDICT_BYTES && shown.rules.len() > 1 {
            shown.rules.pop();
            text = serde_json::to_string(&shown).ok()?;
        }
        Some(text)
    }

    /// Records a rule entering `state` (`Pending` or `Firing`) at `since`; `Inactive` removes it.
    pub fn set(&mut self, rule: RuleVerdict) {
        self.rules.retain(|r| r.key() != rule.key());
        if rule.state != RuleState::Inactive {
            self.rules.push(rule);
        }
    }

    /// Removes every rule of one policy (it was deleted).
    pub fn remove_policy(&mut self, kind: PolicyKind, namespace: Option<&str>, name: &str) {
        self.rules.retain(|r| !(r.kind == kind && r.namespace.as_deref() == namespace && r.policy == name));
    }

    /// The firing rules.
    pub fn firing(&self) -> impl Iterator<Item = &RuleVerdict> {
        self.rules.iter().filter(|r| r.state == RuleState::Firing)
    }

    /// The pending rules.
    pub fn pending(&self) -> impl Iterator<Item = &RuleVerdict> {
        self.rules.iter().filter(|r| r.state == RuleState::Pending)
    }

    fn sort_and_bound(&mut self) {
        let order = |s: RuleState| if s == RuleState::Firing { 0 } else { 1 };
        self.rules.sort_by(|a, b| (order(a.state), a.key()).cmp(&(order(b.state), b.key())));
        self.rules.truncate(MAX_VERDICT_RULES);
        for r in &mut self.rules {
            if r.why.chars().count() > MAX_REASON_CHARS {
                r.why = format!("{}…", r.why.chars().take(MAX_REASON_CHARS - 1).collect::<String>());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(policy: &str, name: &str, state: RuleState, why: &str) -> RuleVerdict {
        RuleVerdict {
            kind: PolicyKind::Namespaced,
            namespace: Some("ml".into()),
            policy: policy.into(),
            rule: name.into(),
            state,
            since: Some("2026-10-02T22:03:00Z".parse().unwrap()),
            mode: Mode::Enforce,
            why: why.into(),
        }
    }

    #[test]
    fn a_verdict_round_trips_with_firing_rules_first() {
        let mut v = Verdict::default();
        v.set(rule("stall", "plateau", RuleState::Pending, "no improvement > 0.001 for 40m"));
        v.set(rule("stall", "silent", RuleState::Firing, "no report for 31m"));
        let text = v.render().unwrap();
        let back = Verdict::parse(&text).unwrap();
        assert_eq!(back.rules.iter().map(|r| r.rule.as_str()).collect::<Vec<_>>(), ["silent", "plateau"]);
        assert_eq!(back.rules[1].why, "no improvement > 0.001 for 40m");
        assert_eq!(back.v, VERDICT_VERSION);
    }

    #[test]
    fn a_rule_moves_between_states_and_leaves_when_inactive() {
        let mut v = Verdict::default();
        v.set(rule("stall", "plateau", RuleState::Pending, ""));
        v.set(rule("stall", "plateau", RuleState::Firing, ""));
        assert_eq!(v.rules.len(), 1);
        assert_eq!(v.firing().count(), 1);
        v.set(rule("stall", "plateau", RuleState::Inactive, ""));
        assert_eq!(v.render(), None, "no rule pending or firing: no annotation");
    }

    #[test]
    fn the_text_is_bounded() {
        let mut v = Verdict::default();
        for i in 0..40 {
            v.set(rule(&"p".repeat(200), &format!("rule-{i:02}"), RuleState::Pending, &"x".repeat(5000)));
        }
        let text = v.render().unwrap();
        assert!(text.len() <= MAX_VERDICT_BYTES, "{} bytes", text.len());
        let back = Verdict::parse(&text).unwrap();
        assert!(back.rules.len() <= MAX_VERDICT_RULES);
        assert!(back.rules[0].why.chars().count() <= MAX_REASON_CHARS);
    }

    #[test]
    fn another_version_or_shape_is_refused_with_the_annotation_named() {
        let e = Verdict::parse(r#"{"v":2,"rules":[]}"#).unwrap_err().to_string();
        assert!(e.contains("format version 2") && e.contains(VERDICT_ANNOTATION), "{e}");
        let e = Verdict::parse("not json").unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }

    #[test]
    fn removing_a_policy_removes_only_its_rules() {
        let mut v = Verdict::default();
        v.set(rule("a", "r", RuleState::Firing, ""));
        v.set(rule("b", "r", RuleState::Pending, ""));
        v.remove_policy(PolicyKind::Namespaced, Some("ml"), "a");
        assert_eq!(v.rules.len(), 1);
        assert_eq!(v.rules[0].policy, "b");
    }
}
