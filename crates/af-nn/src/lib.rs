//! af-nn owns everything that touches libtorch: loading it (and its CUDA backend), choosing the
//! device, thread counts and arithmetic (mixed precision), the language models (training,
//! sampling, features), the pretrained generator (`causal_lm`), the sentence encoders (frozen, and the cross-encoder `encoder-ft`
//! fine-tunes), the committee (its open registry of members, one file each, the joint head,
//! training and scoring) and its candidate table, and AFLite's batched linear probes (`linear_probes`).
//! Other crates stay free of tensors so they build and test in seconds.

pub mod causal_lm;
pub mod committee;
pub mod encoder;
pub mod linear_probes;
pub mod lm;
pub mod lm_files;
pub mod lm_train;
pub mod runtime;
pub mod sample;
pub mod table;

pub use committee::{
    Batch, BuildContext, Column, CommitteeModel, FineTunedMember, Member, MemberKind, MemberNet,
    Registry,
};
pub use runtime::{libtorch_info, select_device, LibtorchInfo, NnError};

/// libtorch's random generator is global and tests run on parallel threads: every test that
/// seeds it or draws from it (initialisation, dropout) holds this lock.
#[cfg(test)]
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
