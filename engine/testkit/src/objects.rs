//! Kubernetes objects as the API server holds them, for tests that create them there or read them as a
//! watch would deliver them: a TrainJob with its progress report, and the Kueue Workload Kueue makes for a
//! queued job.

use serde_json::{Value, json};

/// The TrainJob `namespace/name` whose `status.trainerStatus` is `status`, with its `lastUpdatedTime` set
/// to `at` (RFC 3339), as a watch delivers it.
pub fn trainjob_reporting(namespace: &str, name: &str, at: &str, mut status: Value) -> Value {
    status["lastUpdatedTime"] = json!(at);
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"trainerStatus": status},
    })
}

/// A Kueue Workload being written (see [`workload`]).
#[derive(Clone, Debug)]
pub struct WorkloadBuilder {
    object: Value,
}

/// The Workload `namespace/name` of Kueue API `version` (`v1beta1`, `v1beta2`) in LocalQueue `queue`, with no
/// pod set yet (and no `spec.active`: Kueue's default, active).
pub fn workload(version: &str, namespace: &str, name: &str, queue: &str) -> WorkloadBuilder {
    WorkloadBuilder {
        object: json!({
            "apiVersion": format!("kueue.x-k8s.io/{version}"), "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"queueName": queue, "podSets": []},
        }),
    }
}

impl WorkloadBuilder {
    /// Owned (as its controller) by the TrainJob `name` whose uid is `uid`: what Kueue creates for a job.
    pub fn owned_by(mut self, trainjob: &str, uid: &str) -> Self {
        self.object["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": trainjob, "uid": uid,
            "controller": true,
        }]);
        self
    }

    /// `spec.active` (false: deactivated).
    pub fn active(mut self, active: bool) -> Self {
        self.object["spec"]["active"] = json!(active);
        self
    }

    /// A pod set of `count` pods named `name`, each with `gpus` NVIDIA GPUs when given.
    pub fn pod_set(mut self, name: &str, count: u32, gpus: Option<u32>) -> Self {
        let mut set = json!({"name": name, "count": count});
        if let Some(g) = gpus {
            set["template"] = json!({"spec": {"containers": [{"name": "trainer", "image": "t",
                "resources": {"limits": {"nvidia.com/gpu": g.to_string()}}}]}});
        }
        self.object["spec"]["podSets"].as_array_mut().expect("podSets is a list").push(set);
        self
    }

    /// The object.
    pub fn build(self) -> Value {
        self.object
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_reads_as_kueue_writes_it() {
        let w = workload("v1beta2", "ml", "trainjob-ft-1a2b3", "team")
            .owned_by("ft", "u-1")
            .active(false)
            .pod_set("node", 2, Some(4))
            .build();
        assert_eq!(w["apiVersion"], "kueue.x-k8s.io/v1beta2");
        assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(w["spec"]["active"], false);
        assert_eq!(w["spec"]["podSets"][0]["count"], 2);
        assert_eq!(
            w["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            "4"
        );
    }
}
