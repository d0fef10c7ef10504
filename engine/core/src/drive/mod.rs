//! Drivers of the evaluator on their own clock: [`replay`] of recorded streams and [`rule_test`] for
//! `*.test.yaml` files, whose series are written in the promtool-style [`notation`].

pub(crate) mod notation;
pub mod replay;
pub mod rule_test;
