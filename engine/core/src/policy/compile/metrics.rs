//! Part of step 4 of [`compile`](super::compile): the metric names a rule watches, checked against what a
//! report can carry. Reports carry canonical names only (`input`'s table: `lr` arrives as `learning_rate`, a
//! step or epoch count is no metric at all), plus whatever custom names the training code sends. So a name
//! is:
//! * fine when canonical, or declared by the policy in `spec.metrics` (its custom metrics);
//! * an error when it can never match: another spelling of a known name (reporters' `lr` arrives as
//!   `learning_rate`), a progress counter, `"*"` outside `non_finite`;
//! * else, for a custom name the policy does not declare, a warning (`validate` prints it, `--strict` refuses
//!   it), with a did-you-mean when it is within two edits of a canonical or declared name (`lsos`). Not an
//!   error: a reporter may send such a name as it is (Keras' `val_loss` is one edit from `eval_loss`).
//!   `replay` and `backtest` name every watched metric no run reported, so an undeclared typo shows there too.

use crate::error::FieldError;
use crate::input::names::{MetricName, canonical_metric_names, classify_metric_name};
use crate::judge::script::edit_distance;

/// One metric name a rule watches, and where it is written.
#[derive(Clone, Debug)]
pub(super) struct Watched {
    /// The name as written.
    pub name: String,
    /// The field it is written in: `spec.rules[0].with.metric`, `spec.rules[1].when`.
    pub path: String,
    /// For a name inside a script, where in it (`line 1:8: metric("lsos")`), before the message.
    pub inside: Option<String>,
    /// Whether `"*"` (every metric) is meant here (`non_finite`).
    pub any_allowed: bool,
}

/// Checks `watched` against the canonical names and `declared` (`spec.metrics`): names no report can carry
/// to `errors`, names that are only unknown to `warnings`.
pub(super) fn check(
    watched: &[Watched],
    declared: &[String],
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<FieldError>,
) {
    for w in watched {
        let at = |message: String| {
            let message = match &w.inside {
                Some(inside) => format!("{inside}: {message}"),
                None => message,
            };
            FieldError::new(w.path.clone(), message)
        };
        let name = w.name.as_str();
        if name == "*" {
            if !w.any_allowed {
                errors.push(at(
                    "\"*\" (every metric) is only understood by non_finite; name the metric to watch".into(),
                ));
            }
            continue;
        }
        if declared.iter().any(|d| d == name) {
            continue;
        }
        match classify_metric_name(name) {
            MetricName::Canonical => {}
            MetricName::Alias(canonical) => errors.push(at(format!(
                "reports carry {name:?} as {canonical:?} (metric names are canonical in every report): write {canonical:?}"
            ))),
            MetricName::Counter(counter) => errors.push(at(format!(
                "{name:?} is the progress counter {counter}, not a metric series: read it with step(), \
                 total_steps() or epoch() in a `when`"
            ))),
            MetricName::Custom => match closest(name, declared) {
                Some(near) => warnings.push(at(format!(
                    "{name:?} is neither a canonical metric name nor declared; did you mean {near:?}? (a custom \
                     metric of the training code is declared in spec.metrics)"
                ))),
                None => warnings.push(at(format!(
                    "{name:?} is not a canonical metric name ({}); if the training code reports it, declare \
                     it in spec.metrics (replay and backtest say when no run reported it)",
                    canonical_metric_names().collect::<Vec<_>>().join(", ")
                ))),
            },
        }
    }
}

/// `spec.metrics` itself: each name non-empty, once, and custom (a canonical name needs no declaring, and
/// another spelling of one would never match).
pub(super) fn check_declared(declared: &[String], errors: &mut Vec<FieldError>) {
    for (i, name) in declared.iter().enumerate() {
        let path = format!("spec.metrics[{i}]");
        if name.is_empty() || name == "*" {
            errors.push(FieldError::new(path, "a metric name, not empty and not \"*\""));
        } else if declared[..i].contains(name) {
            errors.push(FieldError::new(path, format!("{name:?} is declared twice")));
        } else {
            match classify_metric_name(name) {
                MetricName::Canonical | MetricName::Custom => {}
                MetricName::Alias(canonical) => errors.push(FieldError::new(
                    path,
                    format!(
                        "reports carry {name:?} as {canonical:?}: a rule watches {canonical:?}, undeclared"
                    ),
                )),
                MetricName::Counter(counter) => errors.push(FieldError::new(
                    path,
                    format!("{name:?} is the progress counter {counter}, not a metric"),
                )),
            }
        }
    }
}

/// A canonical or declared name within two edits of `name` (and not `name` itself): what a typo meant.
fn closest(name: &str, declared: &[String]) -> Option<String> {
    if name.chars().count() < 3 {
        return None;
    }
    canonical_metric_names()
        .map(str::to_string)
        .chain(declared.iter().cloned())
        .map(|k| (edit_distance(name, &k), k))
        .filter(|(d, k)| *d <= 2 && *d < k.chars().count() / 2 + 1 && k != name)
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(name: &str, any_allowed: bool) -> Watched {
        Watched { name: name.into(), path: "spec.rules[0].with.metric".into(), inside: None, any_allowed }
    }

    fn verdicts(name: &str, declared: &[&str], any_allowed: bool) -> (Vec<String>, Vec<String>) {
        let declared: Vec<String> = declared.iter().map(ToString::to_string).collect();
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        check(&[watched(name, any_allowed)], &declared, &mut errors, &mut warnings);
        let text = |v: Vec<FieldError>| v.into_iter().map(|e| e.message).collect();
        (text(errors), text(warnings))
    }

    /// Issue 43: `metric: lsos`, `metric("lr")`, `metric: "*"` in a plateau were all accepted, and the rule
    /// could never fire.
    #[test]
    fn names_no_report_carries_are_refused_and_custom_ones_must_be_declared() {
        assert_eq!(verdicts("loss", &[], false), (vec![], vec![]));
        assert_eq!(verdicts("eval_accuracy", &[], false), (vec![], vec![]));
        let (errors, warnings) = verdicts("lsos", &[], false);
        assert!(errors.is_empty());
        assert!(warnings[0].contains("did you mean \"loss\"?"), "{warnings:?}");
        let (errors, _) = verdicts("lr", &[], false);
        assert!(errors[0].contains("reports carry \"lr\" as \"learning_rate\""), "{errors:?}");
        let (errors, _) = verdicts("epoch", &[], false);
        assert!(errors[0].contains("progress counter current_epoch"), "{errors:?}");
        let (errors, _) = verdicts("trainMetrics.loss", &[], false);
        assert!(errors[0].contains("as \"loss\""), "{errors:?}");
        let (errors, _) = verdicts("*", &[], false);
        assert!(errors[0].contains("only understood by non_finite"), "{errors:?}");
        assert_eq!(verdicts("*", &[], true), (vec![], vec![]));
        // A custom name: a warning until declared; declared, fine (and a typo of it is an error).
        let (errors, warnings) = verdicts("perplexity", &[], false);
        assert!(errors.is_empty() && warnings[0].contains("declare it in spec.metrics"), "{warnings:?}");
        assert_eq!(verdicts("perplexity", &["perplexity"], false), (vec![], vec![]));
        let (_, warnings) = verdicts("perplexty", &["perplexity"], false);
        assert!(warnings[0].contains("did you mean \"perplexity\"?"), "{warnings:?}");
        let (errors, warnings) = verdicts("val_loss", &[], false);
        assert!(errors.is_empty() && warnings[0].contains("did you mean \"eval_loss\"?"), "{warnings:?}");
        // Short names are too close to everything to guess at.
        let (errors, warnings) = verdicts("l2", &[], false);
        assert!(errors.is_empty() && warnings.len() == 1);
    }

    #[test]
    fn declared_names_are_custom_and_distinct() {
        let mut errors = Vec::new();
        let declared: Vec<String> =
            ["perplexity", "lr", "perplexity", "", "step"].iter().map(ToString::to_string).collect();
        check_declared(&declared, &mut errors);
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["spec.metrics[1]", "spec.metrics[2]", "spec.metrics[3]", "spec.metrics[4]"]);
    }
}
