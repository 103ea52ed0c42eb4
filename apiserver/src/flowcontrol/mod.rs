//! API Priority and Fairness: the pure fair-queuing core (shuffle sharding, one priority level's queues) and the concurrency-limit arithmetic.

pub mod limits;
pub mod queueset;
pub mod shuffle;
