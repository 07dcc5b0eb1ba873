//! af-pipeline is af as a library: what `af run` and every other command do, without arguments
//! to parse or anything printed. It owns
//! - the stage runner ([`runner`]): the ordered stages, their fingerprints, skipping what is up
//!   to date, and the records of time and memory each stage leaves (`stage.json`);
//! - one module per stage ([`stages`]), each returning its report for the caller to show;
//! - the libtorch committee behind af-filter's `Committee` trait ([`committee`]) and the
//!   candidate table it reads, built from text ([`table`]);
//! - frozen sentence embeddings for the `encoder` member, cached per run ([`encoded`]), and the
//!   fine-tuned `encoder-ft` member's iteration beside the joint committee ([`fine_tuned`]);
//! - a pretrained LM's scores of a pool for the `lm-likelihood` member, cached per run
//!   ([`lm_likelihood`]);
//! - the audit's learned detectors and its files ([`audit`]), AFLite over feature files
//!   ([`aflite`]) and af's encoders as AFLite's features ([`features`]);
//! - `af ablate` ([`ablate`]): one pool filtered by several committee compositions, and the
//!   cross-matrix of every detector on every composition's dataset;
//! - `af refilter` ([`refilter`]): an existing multiple-choice dataset run through the stages,
//!   and audited before against after;
//! - `af lm score` ([`lm_score`]): a dataset's options scored by a run's LMs, a fluency judge
//!   other than the generator;
//! - loading configs against the member registry, devices and threads ([`setup`]).
//!
//! Progress goes through the [`Progress`] trait, which the binary draws as bars. Errors are
//! `anyhow` chains: the pipeline is orchestration, its errors are messages with their causes for
//! a person (docs/decisions/088-af-pipeline-s-errors-are-anyhow-chains.md), while the crates below it keep typed errors.

pub mod ablate;
pub mod aflite;
pub mod audit;
pub mod committee;
pub mod datamap;
pub mod encoded;
pub mod eval;
pub mod features;
pub mod fine_tuned;
pub mod lm_likelihood;
pub mod lm_score;
pub mod progress;
pub mod refilter;
pub mod resources;
pub mod runner;
pub mod setup;
pub mod stages;
pub mod table;

pub use progress::{Bar, NoProgress, Progress};
pub use runner::{StageName, ALL_STAGES};
pub use setup::{load_config, load_config_with};
