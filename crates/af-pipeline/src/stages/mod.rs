//! The stages of a run, one module each, each with its [`crate::runner::Stage`]: what its
//! outputs depend on and how to make them. A stage writes its files into its directory and
//! returns its report; [`StageReport`]'s `Display` is what the binary prints of it.

pub mod export;
pub mod filter;
pub mod generate;
pub mod lm;
pub mod pairs;
pub mod pretrained_endings;
pub mod report;

use std::fmt;

/// What a stage reports when it ends.
pub enum StageReport {
    Pairs(af_text::pairs::PairsReport),
    Lm(lm::LmReport),
    Generate(generate::GenerateOutcome),
    Filter(filter::FilterReport),
    Export(export::ExportSummary),
    /// The report page written.
    Report(std::path::PathBuf),
}

impl fmt::Display for StageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageReport::Pairs(r) => {
                if r.documents == 0 {
                    write!(f, "pairs: {} items, every one a question read as it stands with its wrong options in its pool ({} groups); folds {:?}", r.items, r.groups, r.items_per_fold)?;
                } else {
                    write!(
                        f,
                        "pairs: {} items from {} candidate pairs ({} groups, {} sentences); folds {:?}",
                        r.items, r.candidate_pairs, r.groups, r.sentences, r.items_per_fold
                    )?;
                    if r.questions > 0 {
                        write!(f, "\n  {} of the items are questions read as they stand, their wrong options in their pools", r.questions)?;
                    }
                }
                if let Some(n) = r.folds_followed {
                    write!(f, "\n  {n} of the items keep the fold they have in the run whose LMs this one adopts")?;
                }
                for (reason, n) in &r.dropped {
                    write!(f, "\n  dropped {n:>6} {reason}")?;
                }
                Ok(())
            }
            StageReport::Lm(r) => {
                let folds: Vec<String> = r
                    .folds
                    .iter()
                    .map(|x| {
                        format!(
                            "lm fold {}: held-out perplexity {:.1} forward, {:.1} backward ({} items never seen by this LM)",
                            x.fold, x.heldout_ppl_forward, x.heldout_ppl_backward, x.heldout_items
                        )
                    })
                    .collect();
                if let Some(run) = &r.from {
                    writeln!(f, "lm: adopted from {} (its figures)", run.display())?;
                }
                f.write_str(&folds.join("\n"))
            }
            StageReport::Generate(r) => r.fmt(f),
            StageReport::Filter(r) => r.fmt(f),
            StageReport::Export(r) => r.fmt(f),
            StageReport::Report(path) => write!(f, "report: {}", path.display()),
        }
    }
}
