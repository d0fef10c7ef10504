//! End-to-end tests against a real kube-apiserver + etcd (`tests/k8s/with-control-plane.sh cargo test -p
//! trainwarden-e2e`), one test binary per subject:
//!
//! ```text
//!  controller, history, gpu, notifications, rhoai, kube_secrets   the controller in-process, TrainJobs
//!                                                                  reported as Kubeflow's status server does
//!  faults     the `trainwarden controller` binary as processes, through fault proxies, parts of the plane killed
//!  monitoring the controller's /metrics against the chart's Prometheus rules and dashboards
//!  chart      the Helm chart installed and its RBAC checked by the API server
//!  plugin     `kubectl trainwarden` against what the controller published
//!  friday     the Friday story replayed through the controller and read with the plugin
//! ```
//!
//! What they share lives here: [`controller`] (a controller running in this process, TrainJobs, policies,
//! polling), [`plugin`] (the plugin run as a user runs it, golden files) and [`binaries`] (the workspace's
//! binaries, built when missing). The real API server itself, the fault proxy and the notification
//! receivers are `trainwarden-testkit`'s.

pub mod binaries;
pub mod controller;
pub mod plugin;
