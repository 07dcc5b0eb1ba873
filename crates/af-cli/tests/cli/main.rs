//! The `af` binary's tests, one test binary: commands run as a user runs them.

mod aflite;
mod audit;
mod cli;
mod common;
mod export;
mod filter;
mod fuzz_cli;
mod generator;
mod real_data;
mod refilter;
