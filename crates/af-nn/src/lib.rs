//! af-nn owns everything that touches libtorch: loading it (and its CUDA backend), choosing the
//! device, thread counts, and, as the pipeline grows, the language models and the committee.
//! Other crates stay free of tensors so they build and test in seconds.

pub mod committee;
pub mod lm;
pub mod lm_train;
pub mod runtime;
pub mod sample;

pub use runtime::{libtorch_info, select_device, LibtorchInfo, NnError};
