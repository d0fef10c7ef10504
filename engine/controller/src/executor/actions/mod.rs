//! One module per action kind. Each gets the TrainJob as read just before ([`Target`](super::Target)) and
//! ends with an [`Ended`](super::Ended) or an [`ActionError`](super::ActionError).

mod annotate;
pub(super) mod checkpoint;
mod event;
mod notify;
mod scale;
mod suspend;

pub use suspend::workload_resource;
