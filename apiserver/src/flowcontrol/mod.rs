//! API Priority and Fairness: the configuration objects and their maintenance.

pub mod bootstrap;
pub mod maintain;
