//! trainwarden's Kubernetes surface.
//!
//! - [`crd`]: the `ProgressPolicy` / `ClusterProgressPolicy` custom resources (`trainwarden.dev/v1alpha1`),
//!   generated from the core's spec types, their CRD YAML, and their conversion into the core's
//!   [`PolicyDocument`](trainwarden_core::PolicyDocument);
//! - [`status`]: the policies' status (counts, savings, conditions, a capped per-job list);
//! - [`trainjob`]: Kubeflow `TrainJob`s as dynamic objects and their normalization into
//!   [`JobSnapshot`](trainwarden_core::JobSnapshot)s;
//! - [`annotations`]: the annotations the controller keeps on TrainJobs;
//! - [`kueue`]: Kueue's Workload, which owns suspension of the jobs Kueue manages;
//! - [`client`]: building a client (kubeconfig, crypto provider);
//! - [`verdict`]: a TrainJob's pending and firing rules, as the controller publishes them on the job.
//!
//! Evaluation stays in `trainwarden-core`, which knows nothing of Kubernetes.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod annotations;
pub mod client;
pub mod crd;
pub mod kueue;
pub mod status;
pub mod trainjob;
pub mod verdict;

pub use crd::{
    ClusterProgressPolicy, ClusterProgressPolicySpec, PolicyResource, ProgressPolicy,
    ProgressPolicyException, ProgressPolicyExceptionSpec, ProgressPolicySpec,
};
pub use status::{
    COUNTED_ACTIONS_KEPT, CountedAction, CountedActions, ExceptionStatus, JobStatus, MAX_COUNTED_ACTIONS,
    MAX_STATUS_EXCEPTIONS, MAX_STATUS_JOBS, ProgressPolicyStatus,
};
pub use verdict::{RuleVerdict, VERDICT_ANNOTATION, VERDICT_FIELD_MANAGER, Verdict};

/// The field manager trainwarden uses for its own server-side applies (policy status, CRDs, TrainJob
/// patches).
pub const FIELD_MANAGER: &str = "trainwarden";
