//! af-pipeline's integration tests, one binary (each linking libtorch costs a link and a
//! process start): the stages, the runner, the audit, ablate, refilter, the members on real models.

mod ablate;
mod audit;
mod common;
mod encoder_ft;
mod encoder_member;
mod eval;
mod export;
mod filter_datamap;
mod lm_likelihood_member;
mod lm_score;
mod refilter;
mod registry;
mod resumable;
mod stages;
mod torchscript_member;
mod world;
