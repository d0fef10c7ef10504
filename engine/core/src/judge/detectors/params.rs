//! Reading a rule's `with:` map with field-path errors.
//!
//! Parameter names are camelCase as in the rest of the CRD, and the snake_case spelling used by the anchor
//! they come from is accepted too (`minDelta` or Lightning's `min_delta`, `numSteps` or SageMaker's
//! `num_steps`). Every problem is collected; unknown keys are reported by [`Params::finish`].

use serde_json::{Map, Value};

use crate::error::FieldError;
use crate::history::metric_series::Direction;
use crate::units::duration::{PolicyDuration, Warmup, Window};

/// `mode: min | max | auto` of metric detectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DirectionParam {
    Auto,
    Fixed(Direction),
}

impl DirectionParam {
    pub(crate) fn resolve(self, metric: &str) -> Direction {
        match self {
            DirectionParam::Auto => Direction::infer(metric),
            DirectionParam::Fixed(d) => d,
        }
    }
}

pub(crate) struct Params<'a> {
    map: &'a Map<String, Value>,
    path: String,
    used: Vec<&'a str>,
    errors: Vec<FieldError>,
}

fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

impl<'a> Params<'a> {
    pub(crate) fn new(map: &'a Map<String, Value>, path: &str) -> Self {
        Params { map, path: path.to_string(), used: Vec::new(), errors: Vec::new() }
    }

    fn field_path(&self, key: &str) -> String {
        format!("{}.{}", self.path, key)
    }

    pub(crate) fn error(&mut self, key: &str, message: impl Into<String>) {
        let path = self.field_path(key);
        self.errors.push(FieldError::new(path, message));
    }

    /// The raw value of `name` (camelCase or snake_case), marking it used.
    pub(crate) fn raw(&mut self, name: &str) -> Option<(&'a str, &'a Value)> {
        let snake = snake_case(name);
        let mut found = None;
        let candidates: &[&str] = if snake == name { &[name] } else { &[name, snake.as_str()] };
        for &candidate in candidates {
            if let Some((k, v)) = self.map.get_key_value(candidate) {
                if found.is_some() && k != name {
                    self.error(k, format!("{name} is given twice (as {name} and {k})"));
                    self.used.push(k.as_str());
                    continue;
                }
                self.used.push(k.as_str());
                found = Some((k.as_str(), v));
            }
        }
        found
    }

    pub(crate) fn f64(&mut self, name: &str) -> Option<f64> {
        let (key, v) = self.raw(name)?;
        match v.as_f64() {
            Some(x) if x.is_finite() => Some(x),
            _ => {
                self.error(key, format!("expected a number, got {v}"));
                None
            }
        }
    }

    /// A number that must be > 0 (or >= 0 when `allow_zero`).
    pub(crate) fn positive(&mut self, name: &str, allow_zero: bool) -> Option<f64> {
        let x = self.f64(name)?;
        if x < 0.0 || (!allow_zero && x == 0.0) {
            let key = self.key_as_written(name);
            self.error(&key, format!("must be {}, got {x}", if allow_zero { ">= 0" } else { "> 0" }));
            return None;
        }
        Some(x)
    }

    pub(crate) fn count(&mut self, name: &str) -> Option<u64> {
        let (key, v) = self.raw(name)?;
        match v.as_u64() {
            Some(n) => Some(n),
            None => {
                self.error(key, format!("expected a whole number >= 0, got {v}"));
                None
            }
        }
    }

    pub(crate) fn bool(&mut self, name: &str) -> Option<bool> {
        let (key, v) = self.raw(name)?;
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                self.error(key, format!("expected true or false, got {v}"));
                None
            }
        }
    }

    pub(crate) fn string(&mut self, name: &str) -> Option<&'a str> {
        let (key, v) = self.raw(name)?;
        match v.as_str() {
            Some(s) if !s.is_empty() => Some(s),
            _ => {
                self.error(key, format!("expected a non-empty string, got {v}"));
                None
            }
        }
    }

    /// A required string parameter.
    pub(crate) fn required_string(&mut self, name: &str) -> Option<&'a str> {
        let had = self.map.contains_key(name) || self.map.contains_key(&snake_case(name));
        let s = self.string(name);
        if !had {
            self.error(name, "required");
        }
        s
    }

    pub(crate) fn duration(&mut self, name: &str) -> Option<PolicyDuration> {
        let (key, v) = self.raw(name)?;
        match v {
            Value::String(s) => match s.parse::<PolicyDuration>() {
                Ok(d) => Some(d),
                Err(e) => {
                    self.error(key, e.to_string());
                    None
                }
            },
            _ => {
                self.error(key, format!("expected a duration such as \"30m\" or \"2h\", got {v}"));
                None
            }
        }
    }

    /// Seconds given as a number (SageMaker style) or a duration string.
    pub(crate) fn seconds_or_duration(&mut self, name: &str) -> Option<PolicyDuration> {
        let (key, v) = self.raw(name)?;
        match v {
            Value::Number(n) => match n.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 && x < 1e12 => {
                    Some(PolicyDuration::from_millis((x * 1000.0) as u64))
                }
                _ => {
                    self.error(key, format!("expected a number of seconds > 0, got {v}"));
                    None
                }
            },
            Value::String(s) => match s.parse::<PolicyDuration>() {
                Ok(d) => Some(d),
                Err(e) => {
                    self.error(key, e.to_string());
                    None
                }
            },
            _ => {
                self.error(key, format!("expected seconds or a duration such as \"30m\", got {v}"));
                None
            }
        }
    }

    pub(crate) fn window(&mut self, name: &str) -> Option<Window> {
        let (key, v) = self.raw(name)?;
        match serde_json::from_value::<Window>(v.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                self.error(key, e.to_string());
                None
            }
        }
    }

    pub(crate) fn warmup(&mut self, name: &str) -> Option<Warmup> {
        let (key, v) = self.raw(name)?;
        match serde_json::from_value::<Warmup>(v.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                self.error(key, e.to_string());
                None
            }
        }
    }

    /// A share of the planned run or of a value: `"25%"`, or a number of percent (`25`), returned as a
    /// fraction (0.25), in 0 to 100 %.
    pub(crate) fn percent(&mut self, name: &str) -> Option<f64> {
        let (key, v) = self.raw(name)?;
        let parsed = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().strip_suffix('%').and_then(|p| p.trim().parse::<f64>().ok()),
            _ => None,
        };
        match parsed {
            Some(x) if x.is_finite() && (0.0..=100.0).contains(&x) => Some(x / 100.0),
            _ => {
                self.error(key, format!("expected a percentage from 0 to 100 such as \"25%\", got {v}"));
                None
            }
        }
    }

    /// `mode: min | max | auto` (default auto).
    pub(crate) fn direction(&mut self, name: &str) -> DirectionParam {
        let Some((key, v)) = self.raw(name) else { return DirectionParam::Auto };
        match v.as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("min") => DirectionParam::Fixed(Direction::Min),
            Some("max") => DirectionParam::Fixed(Direction::Max),
            Some("auto") => DirectionParam::Auto,
            _ => {
                self.error(key, format!("expected min, max or auto, got {v}"));
                DirectionParam::Auto
            }
        }
    }

    fn key_as_written(&self, name: &str) -> String {
        let snake = snake_case(name);
        if self.map.contains_key(name) { name.to_string() } else { snake }
    }

    /// Reports keys nobody asked for and returns every error.
    pub(crate) fn finish(mut self) -> Vec<FieldError> {
        let unknown: Vec<String> =
            self.map.keys().filter(|k| !self.used.contains(&k.as_str())).cloned().collect();
        for k in unknown {
            self.error(&k, "unknown parameter");
        }
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn accepts_camel_and_snake_case() {
        let m = with(json!({"minDelta": 0.1, "num_steps": 3}));
        let mut p = Params::new(&m, "with");
        assert_eq!(p.f64("minDelta"), Some(0.1));
        assert_eq!(p.count("numSteps"), Some(3));
        assert!(p.finish().is_empty());
    }

    #[test]
    fn reports_every_problem_with_its_path() {
        let m = with(json!({"minDelta": "x", "patience": -1, "bogus": 1, "after": "5 minutes"}));
        let mut p = Params::new(&m, "spec.rules[0].with");
        assert_eq!(p.f64("minDelta"), None);
        assert_eq!(p.count("patience"), None);
        assert_eq!(p.duration("after"), None);
        let errors: Vec<String> = p.finish().into_iter().map(|e| e.path).collect();
        assert_eq!(
            errors,
            vec![
                "spec.rules[0].with.minDelta",
                "spec.rules[0].with.patience",
                "spec.rules[0].with.after",
                "spec.rules[0].with.bogus"
            ]
        );
    }

    #[test]
    fn the_same_parameter_twice_is_an_error() {
        let m = with(json!({"minDelta": 0.1, "min_delta": 0.2}));
        let mut p = Params::new(&m, "with");
        p.f64("minDelta");
        let e = p.finish();
        assert_eq!(e.len(), 1);
        assert!(e[0].message.contains("given twice"));
    }

    #[test]
    fn required_string_reports_absence() {
        let m = with(json!({}));
        let mut p = Params::new(&m, "with");
        assert_eq!(p.required_string("metric"), None);
        assert_eq!(p.finish()[0].to_string(), "with.metric: required");
    }
}
