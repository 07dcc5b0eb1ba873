//! af-core owns what every stage agrees on: the item and document types that travel between
//! stages, the configuration (TOML mapped onto serde structs with defaults and
//! `deny_unknown_fields`), and the small helpers for writing files so that a crash never leaves a
//! half-written artifact. It has no libtorch; its formats are TOML (configs) and the JSON that
//! stages' fingerprints record of a config.

pub mod atomic;
pub mod config;
/// `[ablate]`, where it always was: `af_core::ablate::Design` and the like.
pub use config::ablate;
pub mod hash;
pub mod item;
pub mod memory;
pub mod question;
pub mod split;

pub use ablate::{AblateConfig, Composition};
pub use config::{
    member_names, AdverbSide, AuditConfig, BudgetRule, CommitteeConfig, Config, ConfigError,
    ExportConfig, FilterConfig, LmConfig, MemberName, Phase, ScoreBatch, SwapChoice, SwapHead,
    TextEncoding, ValidityRule, View, JOINT_HEAD, SWAG_COMMITTEE,
};
pub use item::{Candidate, Document, Item, GOLD_ORIGIN, LM_FEATURES};
pub use question::{Blank, Question};
