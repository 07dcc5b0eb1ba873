//! `own`: a question's own wrong options (a `questions` input), first in its pool, as they are.

use af_core::config::GenerateConfig;

use super::{Ending, EndingSource, Items, SourceContext};
use crate::progress::Bar;

pub const NAME: &str = "own";

pub struct Own;

impl EndingSource for Own {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Whatever the items came with: nothing to ask for.
    fn enabled(&self, _g: &GenerateConfig) -> bool {
        true
    }

    fn endings(
        &mut self,
        items: &Items,
        _so_far: &[Vec<Ending>],
        _ctx: &SourceContext,
        _bar: &dyn Bar,
    ) -> anyhow::Result<Vec<Vec<Ending>>> {
        Ok(items
            .items
            .iter()
            .map(|(_, item)| item.distractors.iter().map(Ending::text).collect())
            .collect())
    }
}
