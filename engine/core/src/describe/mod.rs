//! What trainwarden tells people, in one vocabulary: the controller's Kubernetes Events ([`Notice`]: a
//! [`Reason`], which fixes the Event's type and action, and the note), the lines of `replay` and
//! `trainwarden test`, and the notifier's messages all take their words from here, so the three never word
//! the same thing differently.
//!
//! ```text
//!  evaluator Event ──Notice::of──▶ Reason + note      (controller Events)
//!                  ──words::held, limited, deferred, snooze, exception_ended──▶ replay lines, JSON summaries
//!  ActionSpec ──words::action / past / progressive──▶ notifier messages;  words::intent_line ──▶ replay
//! ```

mod notice;
mod reason;
pub mod words;

pub use notice::Notice;
pub use reason::Reason;
