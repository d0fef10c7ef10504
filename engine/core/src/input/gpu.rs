//! What a job's GPUs were doing at one instant, as NVIDIA's DCGM exporter reports it through Prometheus.
//!
//! One [`GpuSample`] holds one reading per GPU the job's pods hold. The fields are the DCGM exporter's
//! gauges (dcgm-exporter `etc/default-counters.csv`; `DCGM_FI_PROF_GR_ENGINE_ACTIVE` is in
//! `etc/dcp-metrics-included.csv`), in their units:
//!
//! | field | DCGM field | unit |
//! | --- | --- | --- |
//! | `util` | `DCGM_FI_DEV_GPU_UTIL` | percent, 0–100 |
//! | `engineActive` | `DCGM_FI_PROF_GR_ENGINE_ACTIVE` | ratio, 0–1 |
//! | `power` | `DCGM_FI_DEV_POWER_USAGE` | W |
//! | `fbUsed` | `DCGM_FI_DEV_FB_USED` | MiB |
//!
//! A GPU's *utilization*, which the detectors and `gpu_util()` judge, is `util`, or `engineActive × 100`
//! where the exporter does not report `util`. A recorded stream carries a sample as the compact line's `gpu`
//! field: `"gpu": [{"id": "ft-node-0-0-x7k2p/0", "util": 97, "power": 312.5}, …]`.

use serde_json::Value;

use crate::input::NormalizeError;
use crate::time::Timestamp;

/// One GPU's reading.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReading {
    /// Which GPU: `pod/gpu` as the controller names it, or whatever a stream says; used in messages.
    pub id: String,
    /// `DCGM_FI_DEV_GPU_UTIL`, percent.
    pub util: Option<f64>,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, 0–1.
    pub engine_active: Option<f64>,
    /// `DCGM_FI_DEV_POWER_USAGE`, watts.
    pub power: Option<f64>,
    /// `DCGM_FI_DEV_FB_USED`, MiB.
    pub fb_used: Option<f64>,
}

impl GpuReading {
    /// Utilization in percent: `util`, else `engineActive × 100`.
    pub fn utilization(&self) -> Option<f64> {
        self.util.or(self.engine_active.map(|r| r * 100.0))
    }
}

/// A job's GPUs at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSample {
    /// When the readings were taken (the query's evaluation time).
    pub at: Timestamp,
    /// One per GPU, in a stable order (by id).
    pub gpus: Vec<GpuReading>,
}

/// The GPUs of a sample one number each: what the series keeps and the host functions read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuSummary {
    /// Mean utilization over the GPUs that report one, percent.
    pub mean_util: f64,
    /// The idlest GPU's utilization, percent.
    pub min_util: f64,
    /// The busiest GPU's utilization, percent.
    pub max_util: f64,
    /// Mean power draw per GPU, W (NaN if no GPU reports it).
    pub mean_power: f64,
    /// GPUs with a utilization.
    pub gpus: u32,
}

impl GpuSample {
    /// The sample's summary, `None` if no GPU reports a utilization.
    pub fn summary(&self) -> Option<GpuSummary> {
        let utils: Vec<f64> = self.gpus.iter().filter_map(GpuReading::utilization).collect();
        if utils.is_empty() {
            return None;
        }
        let powers: Vec<f64> = self.gpus.iter().filter_map(|g| g.power).collect();
        let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
        Some(GpuSummary {
            mean_util: mean(&utils),
            min_util: utils.iter().copied().fold(f64::INFINITY, f64::min),
            max_util: utils.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mean_power: mean(&powers),
            gpus: utils.len() as u32,
        })
    }

    /// The GPU with the lowest utilization (first by id on a tie).
    pub fn idlest(&self) -> Option<&GpuReading> {
        self.gpus
            .iter()
            .filter(|g| g.utilization().is_some())
            .min_by(|a, b| a.utilization().unwrap_or(0.0).total_cmp(&b.utilization().unwrap_or(0.0)))
    }
}

/// Reads a stream's `gpu` field: an array of `{id?, util?, engineActive?, power?, fbUsed?}` with at least one
/// value each, every value a finite number in its unit's range. Errors name the field (`gpu[2].util`).
pub(crate) fn from_stream_value(
    value: &Value,
    at: Timestamp,
    path: &str,
) -> Result<GpuSample, NormalizeError> {
    let Value::Array(items) = value else {
        return Err(NormalizeError::new(path, format!("expected an array of GPU readings, got {value}")));
    };
    if items.len() > MAX_GPUS_PER_JOB {
        return Err(NormalizeError::new(
            path,
            format!("{} GPU readings; at most {MAX_GPUS_PER_JOB} per job are read", items.len()),
        ));
    }
    let mut gpus = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at_path = format!("{path}[{i}]");
        let Value::Object(obj) = item else {
            return Err(NormalizeError::new(at_path, format!("expected an object, got {item}")));
        };
        let mut reading =
            GpuReading { id: i.to_string(), util: None, engine_active: None, power: None, fb_used: None };
        for (key, v) in obj {
            let field = format!("{at_path}.{key}");
            let number = |max: f64| -> Result<f64, NormalizeError> {
                match v.as_f64() {
                    Some(x) if x.is_finite() && (0.0..=max).contains(&x) => Ok(x),
                    _ if max.is_finite() => Err(NormalizeError::new(
                        &field,
                        format!("expected a number from 0 to {max}, got {v}"),
                    )),
                    _ => Err(NormalizeError::new(&field, format!("expected a finite number >= 0, got {v}"))),
                }
            };
            match key.as_str() {
                "id" => match v {
                    Value::String(s) if !s.is_empty() => reading.id = s.clone(),
                    _ => {
                        return Err(NormalizeError::new(
                            field,
                            format!("expected a non-empty string, got {v}"),
                        ));
                    }
                },
                "util" => reading.util = Some(number(100.0)?),
                "engineActive" => reading.engine_active = Some(number(1.0)?),
                "power" => reading.power = Some(number(f64::INFINITY)?),
                "fbUsed" => reading.fb_used = Some(number(f64::INFINITY)?),
                other => {
                    return Err(NormalizeError::new(
                        field,
                        format!(
                            "unknown field {other:?}; expected one of id, util, engineActive, power, fbUsed"
                        ),
                    ));
                }
            }
        }
        if reading.util.is_none()
            && reading.engine_active.is_none()
            && reading.power.is_none()
            && reading.fb_used.is_none()
        {
            return Err(NormalizeError::new(
                at_path,
                "a GPU reading needs util, engineActive, power or fbUsed",
            ));
        }
        gpus.push(reading);
    }
    Ok(GpuSample { at, gpus })
}

/// GPUs read per job: more than any node group holds for one TrainJob today (64 nodes × 8), and a bound on
/// what one line or query result can make the engine hold.
pub const MAX_GPUS_PER_JOB: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at() -> Timestamp {
        "2026-11-27T23:00:00Z".parse().unwrap()
    }

    #[test]
    fn reads_a_stream_field_and_summarizes_it() {
        let s = from_stream_value(
            &json!([
                {"id": "p-0/0", "util": 97, "power": 300},
                {"id": "p-0/1", "util": 3, "power": 60},
                {"id": "p-1/0", "engineActive": 0.5}
            ]),
            at(),
            "gpu",
        )
        .unwrap();
        let sum = s.summary().unwrap();
        assert_eq!(sum.gpus, 3);
        assert_eq!(sum.min_util, 3.0);
        assert_eq!(sum.max_util, 97.0);
        assert_eq!(sum.mean_util, 50.0);
        assert_eq!(sum.mean_power, 180.0);
        assert_eq!(s.idlest().unwrap().id, "p-0/1");
    }

    #[test]
    fn util_is_preferred_to_the_engine_ratio() {
        let r = GpuReading {
            id: "0".into(),
            util: Some(100.0),
            engine_active: Some(0.02),
            power: None,
            fb_used: None,
        };
        assert_eq!(r.utilization(), Some(100.0));
    }

    #[test]
    fn a_sample_with_power_only_has_no_summary() {
        let s = from_stream_value(&json!([{"power": 61.0}]), at(), "gpu").unwrap();
        assert_eq!(s.summary(), None);
    }

    #[test]
    fn bad_readings_name_their_field() {
        let err = |v: Value| from_stream_value(&v, at(), "gpu").unwrap_err().to_string();
        assert_eq!(err(json!({"util": 3})), "gpu: expected an array of GPU readings, got {\"util\":3}");
        assert_eq!(err(json!([{"util": 130}])), "gpu[0].util: expected a number from 0 to 100, got 130");
        assert_eq!(
            err(json!([{"util": 1}, {"engineActive": 2}])),
            "gpu[1].engineActive: expected a number from 0 to 1, got 2"
        );
        assert_eq!(err(json!([{"power": -1}])), "gpu[0].power: expected a finite number >= 0, got -1");
        assert_eq!(
            err(json!([{"utill": 1}])),
            "gpu[0].utill: unknown field \"utill\"; expected one of id, util, engineActive, power, fbUsed"
        );
        assert_eq!(
            err(json!([{"id": "x"}])),
            "gpu[0]: a GPU reading needs util, engineActive, power or fbUsed"
        );
        assert_eq!(err(json!([{"id": 3, "util": 1}])), "gpu[0].id: expected a non-empty string, got 3");
    }
}
