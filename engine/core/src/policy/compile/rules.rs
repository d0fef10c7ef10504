//! Step 4 of [`compile`](super::compile): each rule's name, detector (with its windows checked against the
//! sampling interval), Rhai condition, durations and actions, as [`CompiledRule`]s.

use std::collections::HashSet;

use crate::error::FieldError;
use crate::judge::detectors;
use crate::judge::script::{ScriptContext, ScriptEngine};
use crate::policy::{PolicySpec, RuleSpec};
use crate::units::duration::PolicyDuration;

use super::metrics::Watched;
use super::{CompiledRule, actions};

/// Every rule of the spec, compiled; problems go to `errors` (a rule with errors is still returned, and the
/// policy is then not compiled at all).
pub(super) fn rules(
    spec: &PolicySpec,
    sampling_interval: PolicyDuration,
    engine: &ScriptEngine,
    errors: &mut Vec<FieldError>,
    watched: &mut Vec<Watched>,
) -> Vec<CompiledRule> {
    let mut names = HashSet::new();
    let mut rules = Vec::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        if rule.name.is_empty() {
            errors.push(FieldError::new(format!("{path}.name"), "required"));
        } else if !names.insert(rule.name.as_str()) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!("duplicate rule name {:?}", rule.name),
            ));
        }
        rules.push(compile_rule(spec, &path, rule, sampling_interval, engine, errors, watched));
    }
    rules
}

/// One rule at `path`, after its name was checked.
fn compile_rule(
    spec: &PolicySpec,
    path: &str,
    rule: &RuleSpec,
    sampling_interval: PolicyDuration,
    engine: &ScriptEngine,
    errors: &mut Vec<FieldError>,
    watched: &mut Vec<Watched>,
) -> CompiledRule {
    let first_watched = watched.len();
    let detector = match &rule.uses {
        Some(name) => match detectors::build(name, rule.with.as_ref(), &format!("{path}.with")) {
            Ok(d) => Some(d),
            Err(e) => {
                errors.extend(e);
                None
            }
        },
        None => {
            if rule.with.is_some() {
                errors.push(FieldError::new(format!("{path}.with"), "`with` needs `uses` (a detector)"));
            }
            None
        }
    };
    // The metric names of `with` (`metric`, `train_metric`, …) as written; `"*"` only for non_finite.
    // `metric: auto` is a keyword of the detectors that judge levels (every evaluation metric, else the
    // training loss), not a name a report carries.
    let takes_auto = matches!(rule.uses.as_deref(), Some("plateau" | "diverging" | "no_expected_gain"));
    for (param, value) in rule.with.iter().flatten() {
        if (param == "metric" || param.ends_with("_metric"))
            && let Some(name) = value.as_str()
            && !(takes_auto && name == "auto")
        {
            watched.push(Watched {
                name: name.to_string(),
                path: format!("{path}.with.{param}"),
                inside: None,
                any_allowed: rule.uses.as_deref() == Some("non_finite"),
            });
        }
    }
    if let Some((name, _)) = detector.as_ref().and_then(|d| d.watched_metric())
        && !watched[first_watched..].iter().any(|w| w.name == name)
        && !(takes_auto && name == "auto")
    {
        // A default (`validation_metric: eval_loss`): canonical, so only for the summary's list.
        watched.push(Watched {
            name: name.to_string(),
            path: format!("{path}.uses"),
            inside: None,
            any_allowed: false,
        });
    }
    if let Some(d) = &detector {
        for (param, window) in d.windows() {
            if window < sampling_interval {
                errors.push(FieldError::new(
                    format!("{path}.with.{param}"),
                    format!(
                        "{window} is shorter than the sampling interval {sampling_interval}: there would be no sample to judge; raise it or set spec.samplingInterval"
                    ),
                ));
            }
        }
        if d.needs_gpu_hour_cost() && spec.gpu_hour_cost.is_none() {
            errors.push(FieldError::new(
                format!("{path}.with.maxCost"),
                "a cost budget needs spec.gpuHourCost",
            ));
        }
    }
    let script = match &rule.when {
        Some(src) if src.trim().is_empty() => {
            errors.push(FieldError::new(format!("{path}.when"), "empty condition"));
            None
        }
        Some(src) => match engine.compile(&rule.name, src) {
            Ok(s) => {
                let context =
                    ScriptContext { sampling_interval, has_gpu_hour_cost: spec.gpu_hour_cost.is_some() };
                let problems = engine.check(&s, &context);
                let ok = problems.is_empty();
                for (name, line, column, function) in engine.metric_arguments(&s) {
                    watched.push(Watched {
                        inside: Some(format!("line {line}:{column}: {function}({name:?})")),
                        name,
                        path: format!("{path}.when"),
                        any_allowed: function == "non_finite",
                    });
                }
                errors.extend(problems.into_iter().map(|e| {
                    FieldError::new(
                        format!("{path}.when"),
                        format!("line {}:{}: {}", e.line, e.column, e.message),
                    )
                }));
                ok.then_some(s)
            }
            Err(e) => {
                errors.push(FieldError::new(
                    format!("{path}.when"),
                    format!("line {}:{}: {}", e.line, e.column, e.message),
                ));
                None
            }
        },
        None => None,
    };
    if rule.uses.is_none() && rule.when.is_none() {
        errors.push(FieldError::new(
            path,
            "a rule needs `uses` (a detector), `when` (a Rhai condition), or both",
        ));
    }
    let for_ = duration_field(errors, format!("{path}.for"), rule.for_.as_ref());
    let keep_firing_for =
        duration_field(errors, format!("{path}.keepFiringFor"), rule.keep_firing_for.as_ref());
    let cooldown = duration_field(errors, format!("{path}.cooldown"), rule.cooldown.as_ref());
    actions::check(path, &rule.actions, &spec.receivers, errors);
    CompiledRule {
        name: rule.name.clone(),
        detector_name: rule.uses.clone(),
        detector,
        script,
        when: rule.when.clone(),
        for_,
        keep_firing_for,
        cooldown,
        mode: rule.mode.unwrap_or(spec.mode),
        actions: rule.actions.clone(),
        fingerprint: serde_json::to_string(&(rule, spec.mode, spec.gpu_hour_cost, spec.assume_gpus))
            .unwrap_or_default(),
        watched_metrics: {
            let mut names: Vec<String> = Vec::new();
            for w in &watched[first_watched..] {
                if w.name != "*" && !names.contains(&w.name) {
                    names.push(w.name.clone());
                }
            }
            names
        },
    }
}

pub(super) fn duration_field(
    errors: &mut Vec<FieldError>,
    path: String,
    text: Option<&crate::policy::DurationText>,
) -> PolicyDuration {
    match text.map(super::super::spec::DurationText::parse) {
        None => PolicyDuration::from_secs(0),
        Some(Ok(d)) => d,
        Some(Err(e)) => {
            errors.push(FieldError::new(path, e));
            PolicyDuration::from_secs(0)
        }
    }
}
