//! Drivers of the evaluator on their own clock: [`replay`] of recorded streams, [`backtest`] of policies on
//! complete recorded runs, and [`rule_test`] for `*.test.yaml` files, whose series are written in the
//! promtool-style [`notation`].

pub mod backtest;
pub(crate) mod notation;
pub mod replay;
pub mod rule_test;
