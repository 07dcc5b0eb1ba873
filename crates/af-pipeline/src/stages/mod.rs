//! The stages of a run, one module each, each with its [`crate::runner::Stage`]: its name, the
//! stage it reads from, what its outputs depend on and how to make them. A stage writes its files
//! into its directory and returns its report, whose `Display` is what the binary prints of it.
//!
//! A new stage is a module here and a line in [`STAGES`]: the runner, `af run --force/--until`
//! and `stage.json` take their names from the list.

pub mod export;
pub mod filter;
pub mod generate;
pub mod lm;
pub mod pairs;
pub mod report;

use std::any::Any;
use std::fmt;

use crate::runner::Stage;

/// The stages `af run` runs, in order.
pub static STAGES: &[&dyn Stage] = &[
    &pairs::Pairs,
    &lm::Lm,
    &generate::Generate,
    &filter::Filter,
    &export::Export,
    &report::Report,
];

/// What a stage reports when it ends: printed by the binary, and read back as its own type by
/// whoever knows the stage (`report.downcast_ref::<LmReport>()`).
pub trait StageOutcome: fmt::Display + Any {}

impl<T: fmt::Display + Any> StageOutcome for T {}

impl dyn StageOutcome {
    /// The report as the stage's own type, when it is one.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref()
    }
}
