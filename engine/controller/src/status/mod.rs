//! Status: what the controller writes back about the policies. The brain projects each policy's status
//! (its book, the evaluator's rule memories, conditions, counts; see `brain::status`) and sends it over a
//! channel; [`writer`] is the one task that writes it, only while this replica leads.

pub mod writer;

pub use writer::StatusWriter;
