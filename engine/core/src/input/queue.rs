//! Who is waiting for the quota a job holds: the demand queued in Kueue behind it.
//!
//! A job Kueue admits (label `kueue.x-k8s.io/queue-name`) holds quota of a ClusterQueue. Stopping it helps
//! only the Workloads pending in that ClusterQueue and in the other ClusterQueues of its cohort (they may
//! borrow what it frees). [`QueueDemand`] is that demand, as the controller counts it from Kueue's
//! Workloads, and as a recorded stream carries it on a compact line's `queue` field:
//! `"queue": {"pending": 3, "pendingGpus": 16}`.

use serde_json::Value;

use crate::input::NormalizeError;

/// The Workloads waiting for the quota a job holds, and the GPUs they ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueDemand {
    /// Pending Workloads (active, not finished, no quota reserved) in the job's ClusterQueue and cohort.
    pub pending: u32,
    /// The GPUs (`*/gpu` requests × pod count) those Workloads ask for.
    pub pending_gpus: f64,
}

/// Reads a stream's `queue` field (`path` names it in errors).
pub(crate) fn from_stream_value(value: &Value, path: &str) -> Result<QueueDemand, NormalizeError> {
    let Value::Object(obj) = value else {
        return Err(NormalizeError::new(
            path,
            format!("expected an object {{pending, pendingGpus}}, got {value}"),
        ));
    };
    let mut demand = QueueDemand::default();
    for (key, v) in obj {
        let field = format!("{path}.{key}");
        match key.as_str() {
            "pending" => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => demand.pending = n,
                None => {
                    return Err(NormalizeError::new(field, format!("expected a whole number >= 0, got {v}")));
                }
            },
            "pendingGpus" => match v.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => demand.pending_gpus = x,
                _ => return Err(NormalizeError::new(field, format!("expected a number >= 0, got {v}"))),
            },
            _ => return Err(NormalizeError::new(field, "unknown field (expected pending, pendingGpus)")),
        }
    }
    Ok(demand)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stream_field_reads_into_the_demand() {
        let d = from_stream_value(&json!({"pending": 3, "pendingGpus": 16}), "queue").unwrap();
        assert_eq!(d, QueueDemand { pending: 3, pending_gpus: 16.0 });
        assert_eq!(from_stream_value(&json!({}), "queue").unwrap(), QueueDemand::default());
    }

    #[test]
    fn bad_fields_say_which() {
        let e = |v| from_stream_value(&v, "queue").unwrap_err().to_string();
        assert_eq!(e(json!({"pending": -1})), "queue.pending: expected a whole number >= 0, got -1");
        assert_eq!(e(json!({"pending": 1.5})), "queue.pending: expected a whole number >= 0, got 1.5");
        assert_eq!(e(json!({"pendingGpus": "8"})), "queue.pendingGpus: expected a number >= 0, got \"8\"");
        assert_eq!(e(json!({"pendng": 1})), "queue.pendng: unknown field (expected pending, pendingGpus)");
        assert_eq!(e(json!(3)), "queue: expected an object {pending, pendingGpus}, got 3");
    }
}
