//! trainwarden's evaluation core.
//!
//! The folders follow the data path:
//!
//! ```text
//! input/     TrainJob objects, upstream trainerStatus, the RHOAI annotation, streams → samples and snapshots
//! history/   bounded per-metric and per-job series; the per-job view the judges read
//! judge/     built-in detectors and Rhai conditions: does a rule's condition hold for a job now?
//! evaluate/  the Evaluator: firing lifecycle, timers, rule memories, savings → events and action intents
//! policy/    the CRD spec types, validation and compilation, notification receivers and templates
//! describe/  what trainwarden tells people: Event reasons and notes, action and hold wording
//! drive/     replay of recorded streams, backtests on complete runs, `trainwarden test` rule tests
//! units/     durations, windows and warmups, calendars (active windows in a time zone); how money and spans
//!            of time print
//! testing/   the tests' fixtures, for every crate (feature `testing`): clocks, policies, snapshots, harness
//! time.rs    instants, spans and how they print
//! ```
//!
//! Modules are private; what consumers use is re-exported here, plus three driver modules ([`replay`],
//! [`backtest`], [`rule_test`]) and [`describe`], whose functions are used by name.
//!
//! Nothing here talks to Kubernetes, starts a runtime, reads a file or a clock: time is an argument. The one
//! exception is the wall-clock deadline that stops a runaway Rhai script ([`Limits::deadline`]); it only
//! turns an evaluation into an error, never into a different answer.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod describe;
mod drive;
mod error;
mod evaluate;
mod history;
mod input;
mod judge;
mod policy;
mod time;
mod units;

#[cfg(test)]
mod robustness_tests;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use drive::{backtest, replay, rule_test};
pub use error::{FieldError, FieldErrors, MAX_ECHOED_TOKEN, Position, clip_tokens, error_chain};
pub use evaluate::{
    ActionIntent, CHECKPOINT_VERSION, EngineConfig, Evaluator, Event, ExceptionEnd, HistoryCheckpoint,
    HistoryRefused, HistoryRestored, Limit, LimitKind, MAX_CHECKPOINT_BYTES, Reason, Resolution, RuleCounts,
    RuleMemory, RuleState, SNOOZE_ANNOTATION, Savings, SavingsBasis, Snooze, SnoozeCap, SnoozeChange,
    SnoozeEnd, TransitionKind,
};
pub use evaluate::{
    CHECKPOINT_ANNOTATION, CHECKPOINT_REQUEST_ANNOTATION, CheckpointRequest, MAX_REASON_CHARS, MAX_WAITERS,
    RequestOutcome, RequestRecord,
};
pub use history::gpu_series::{GPU_STALE_SECONDS, GpuSeries};
pub use history::job::JobData;
pub use history::job_series::JobSeries;
pub use history::metric_series::{Direction, MetricSeries};
pub use input::checkpoint_report::{
    CHECKPOINT_REQUEST_ID_METRIC, CHECKPOINT_STEP_METRIC, MAX_EXACT_INTEGER, ReportedCheckpoint,
    SavedCheckpoint, exact_integer,
};
pub use input::gpu::{GpuReading, GpuSample, GpuSummary, MAX_GPUS_PER_JOB};
pub use input::merge::{LateRecord, MAX_LINE_BYTES, Merge, MergeError, RecordSource, StreamLines};
pub use input::namespaces::{NamespaceLabels, parse_namespace_labels};
pub use input::queue::QueueDemand;
pub use input::sample::{JobKey, JobPhase, JobSnapshot, Metric, ProgressSample, SampleSource};
pub use input::stream::{RecordError, StreamRecord, parse_line, parse_stream};
pub use input::{
    NormalizeError, TRAINER_STATUS_ANNOTATION, from_annotation, from_metrics_response, from_trainer_status,
    from_trainjob,
};
pub use judge::detectors::{DETECTORS, DetectorInfo, ParamDoc, is_cohort_detector};
pub use judge::script::{BUILTINS, Limits, ScriptContext, ScriptEngine};
pub use policy::compile::{CompiledPolicy, PolicyDocument, RESERVED_ANNOTATIONS, compile, parse_documents};
pub use policy::exception::{
    CompiledException, EXCEPTION_KIND, ExceptedPolicy, ExceptedTarget, ExceptionMatch, ExceptionRef,
    ExceptionSpec, compile_exception, parse_exceptions,
};
pub use policy::object::objects_of_other_apis;
pub use policy::positions::DocumentPositions;
pub use policy::receiver::{
    CompiledReceiver, EmailChannel, SecretRef, SlackChannel, WebhookChannel, WebhookUrl,
};
pub use policy::template::{
    DEFAULT_TEXT, DEFAULT_TITLE, Field, FieldValues, Scope as TemplateScope, Template,
};
pub use policy::{
    ActionKind, ActionSpec, AnnotateAction, CheckpointAction, CheckpointFirst, ClusterPolicySpec,
    DEFAULT_CHECKPOINT_TIMEOUT, EventAction, EventType, ExceptionsSpec, GroupLabel, LabelSelector,
    MAX_CHECKPOINT_TIMEOUT, Mode, NAME_PATTERN, NotifyAction, PolicyId, PolicyKind, PolicyRef, PolicyScope,
    PolicySpec, REASON_PATTERN, SmtpTls, SuspendAction,
};
pub use time::{Timestamp, fmt_local, fmt_num, plural, plural_num};
pub use units::duration::{DURATION_PATTERN, PolicyDuration};
pub use units::money::{Cents, fmt_gpu_hours, fmt_money, thousands};
pub use units::span::{fmt_span, fmt_span_short};
