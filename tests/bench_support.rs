//! The unit tests of the benchmarks' shared code (benches/common: the storm's retry decision
//! and figures, the Lease renewal, the APF benchmark's figures and targets). The benchmarks
//! run with `harness = false`, so their own `#[cfg(test)]` modules would never run there.

#[path = "../benches/common/mod.rs"]
mod common;
