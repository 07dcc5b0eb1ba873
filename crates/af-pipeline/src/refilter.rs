//! `af refilter`: an existing multiple-choice dataset filtered again by the configured
//! committee. Its questions become items as they stand (a `questions` input of the pairs stage),
//! each with its own wrong options in its pool, topped up when asked with endings from af's LMs
//! (trained on the dataset's own contexts, or adopted from another run with `--lms`); then the
//! run's stages as usual (the LMs give every option its LM features), and the audit of the
//! dataset as it came against the re-filtered one.
//!
//! The run directory holds `refilter.toml` (the config it ran, loadable by `af run`) and, after
//! the stages, `refilter/`: `audit-before.json`, `audit-after.json`, `audit-comparison.csv` and
//! `report.json` (docs/formats.md).

use std::path::{Path, PathBuf};

use af_core::config::{InputFormat, InputSpec};
use af_core::{Config, Question};
use af_io::questions::{read_questions, QuestionFormat};
use af_nn::committee::Registry;
use anyhow::Context;
use serde::Serialize;

use crate::progress::Progress;

/// What `af refilter` is asked to do besides what its base config says.
#[derive(Clone, Debug)]
pub struct RefilterOptions {
    /// The dataset to re-filter.
    pub input: PathBuf,
    /// Its layout, when the first line does not tell.
    pub layout: Option<String>,
    /// New endings per question from af's LMs (`[generate] endings`; 0: only its own options).
    pub generate: usize,
    /// Leave out (and list) questions that cannot be read or have too few options.
    pub skip_bad: bool,
    /// Distractors per re-filtered question (default: the base config's `[filter] k`).
    pub k: Option<usize>,
    /// The run directory (default: beside the base config's, named after the dataset).
    pub out: Option<PathBuf>,
    /// A run whose trained LMs to adopt (`[lm] from`) instead of training LMs on the dataset's
    /// own questions: the run that made the dataset, or any whose LMs read the same kind of text.
    pub lms: Option<PathBuf>,
}

/// The run config of a re-filtering: `base` with the dataset as its only input, every question
/// kept, `[generate] endings` the new endings asked for. Checked as a config file would be.
pub fn refilter_config(base: &Config, options: &RefilterOptions) -> anyhow::Result<Config> {
    let input = af_core::config::absolute_path(&options.input)
        .with_context(|| format!("cannot resolve {}", options.input.display()))?;
    if !input.is_file() {
        anyhow::bail!(
            "{}: no such file (af refilter reads a multiple-choice dataset: {})",
            input.display(),
            QuestionFormat::names()
        );
    }
    let mut config = base.clone();
    let mut spec = InputSpec::new(&input, InputFormat::Questions);
    spec.layout = options.layout.clone();
    spec.skip_bad = options.skip_bad;
    config.pairs.inputs = vec![spec];
    config.generate.endings = options.generate;
    config.generate.limit_items = 0;
    // Adapters trained on the base config's items were trained on other examples.
    config.generate.pretrained_adapters_from = None;
    if let Some(k) = options.k {
        config.filter.k = k;
    }
    if let Some(run) = &options.lms {
        let run = af_core::config::absolute_path(run)
            .with_context(|| format!("cannot resolve {}", run.display()))?;
        let theirs = Config::load(&run.join("lm/config.toml")).with_context(|| format!("--lms {}: cannot load its lm/config.toml (is it a run directory whose LMs are trained?)", run.display()))?;
        // Their shape and folds, so the adopted weights load and every item keeps its fold.
        config.lm = af_core::LmConfig {
            from: Some(run),
            pretrain: Vec::new(),
            ..theirs.lm
        };
        config.pairs.folds = theirs.pairs.folds;
    }
    config.run.dir = match &options.out {
        Some(dir) => af_core::config::absolute_path(dir)
            .with_context(|| format!("cannot resolve {}", dir.display()))?,
        None => {
            let stem = input
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "dataset".into());
            let base_name = base
                .run
                .dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into());
            base.run
                .dir
                .with_file_name(format!("{base_name}-refilter-{stem}"))
        }
    };
    // Through the file format and back: the same checks as any config file.
    let origin = config.run.dir.join("refilter.toml");
    Config::parse(&config.to_toml(), &origin).with_context(|| {
        format!(
            "the re-filtering config ({}) is not valid",
            origin.display()
        )
    })
}

/// One detector, on the dataset as it came and on the re-filtered one. Their numbers of options
/// may differ, so edges (accuracy - chance) are what compares.
#[derive(Clone, Debug, Serialize)]
pub struct BeforeAfter {
    pub detector: String,
    pub before: f64,
    pub before_ci: (f64, f64),
    pub before_chance: f64,
    pub after: f64,
    pub after_ci: (f64, f64),
    pub after_chance: f64,
    pub before_edge: f64,
    pub after_edge: f64,
    /// (before edge - after edge) / before edge, where the detector is flagged before.
    pub edge_shrink: Option<f64>,
    pub before_flagged: bool,
    pub after_flagged: bool,
    /// After's edge - before's, question by question, where both audits measured the same
    /// questions (ids kept and cross-fitted, `[audit] eval-folds`); else none.
    pub edge_change: Option<af_audit::EdgeChange>,
}

/// `refilter/report.json`: what went in, what came out, and the audit of both.
#[derive(Serialize)]
pub struct RefilterReport {
    pub input: PathBuf,
    pub format: QuestionFormat,
    /// Questions in the input, and in the re-filtered dataset.
    pub questions_in: usize,
    pub questions_out: usize,
    pub options_before: (usize, usize),
    pub options_after: usize,
    pub detectors: Vec<BeforeAfter>,
}

impl std::fmt::Display for RefilterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let options = |(lo, hi): (usize, usize)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        };
        write!(
            f,
            "refilter: {} of {} questions re-filtered, {} options each before, {} after; audit before -> after (edge = accuracy - chance)",
            self.questions_out,
            self.questions_in,
            options(self.options_before),
            self.options_after
        )?;
        for d in &self.detectors {
            write!(
                f,
                "\n  {:<26} {:.3} (edge {:+.3}) -> {:.3} (edge {:+.3})",
                d.detector, d.before, d.before_edge, d.after, d.after_edge
            )?;
            if let Some(x) = d.edge_shrink {
                write!(f, "  edge shrank {:.0}%", 100.0 * x)?;
            }
            if let Some(e) = d.edge_change {
                write!(f, "  paired {e}")?;
            }
        }
        Ok(())
    }
}

/// After the stages of `config` (a [`refilter_config`]) have run: audits the input's questions
/// that were re-filtered, as they came, against the re-filtered dataset (`export/dataset.jsonl`)
/// with every detector of `[audit]`, into `<run>/refilter/`.
pub fn audit_before_after(
    config: &Config,
    registry: &Registry,
    progress: &dyn Progress,
) -> anyhow::Result<RefilterReport> {
    let input = config
        .pairs
        .inputs
        .iter()
        .find(|i| i.format == InputFormat::Questions)
        .context("the config has no `questions` input to compare with")?;
    let before_file = af_io::questions::read_question_input(input)?;
    let after_path = config.run.dir.join("export/dataset.jsonl");
    let after = read_questions(&after_path, Some(QuestionFormat::AF), false)?.questions;
    let kept: std::collections::HashSet<&str> = after.iter().map(|q| q.id.as_str()).collect();
    let before: Vec<Question> = before_file
        .questions
        .iter()
        .filter(|q| kept.contains(q.id.as_str()))
        .cloned()
        .collect();
    anyhow::ensure!(
        before.len() == after.len(),
        "{} holds questions that {} does not",
        after_path.display(),
        input.path.display()
    );
    let dir = config.run.dir.join("refilter");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let device = crate::setup::device(config)?;
    let auditor = crate::audit::Auditor {
        config,
        registry,
        exclude: &[],
        tagger: &tagger,
        device,
        progress,
    };
    let reports: Vec<af_audit::AuditReport> = [("before", &before), ("after", &after)]
        .into_iter()
        .map(|(name, questions)| auditor.audit_named(&dir, name, questions))
        .collect::<anyhow::Result<_>>()?;
    let detectors: Vec<BeforeAfter> = reports[0]
        .detectors
        .iter()
        .zip(&reports[1].detectors)
        .map(|(b, a)| BeforeAfter {
            detector: b.name.clone(),
            before: b.accuracy,
            before_ci: (b.ci_low, b.ci_high),
            before_chance: b.chance,
            after: a.accuracy,
            after_ci: (a.ci_low, a.ci_high),
            after_chance: a.chance,
            before_edge: b.edge,
            after_edge: a.edge,
            edge_shrink: b.edge_shrink(a),
            before_flagged: b.flagged,
            after_flagged: a.flagged,
            edge_change: af_audit::edge_change(b, a),
        })
        .collect();
    write_comparison(&dir.join("audit-comparison.csv"), &detectors)?;
    let options = before.iter().map(|q| q.endings.len());
    let report = RefilterReport {
        input: input.path.clone(),
        format: before_file.format,
        questions_in: before_file.questions.len() + before_file.skipped.len(),
        questions_out: after.len(),
        options_before: (
            options.clone().min().unwrap_or(0),
            options.max().unwrap_or(0),
        ),
        options_after: config.filter.k + 1,
        detectors,
    };
    af_core::atomic::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    Ok(report)
}

/// The `edge_change`, `edge_change_ci_low`, `edge_change_ci_high` cells of a comparison CSV;
/// empty where the two audits did not measure the same questions.
pub(crate) fn edge_change_fields(e: Option<af_audit::EdgeChange>) -> [String; 3] {
    e.map_or_else(Default::default, |e| {
        [e.change, e.ci_low, e.ci_high].map(|x| format!("{x:.4}"))
    })
}

fn write_comparison(path: &Path, rows: &[BeforeAfter]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "detector",
        "before",
        "before_ci_low",
        "before_ci_high",
        "before_chance",
        "after",
        "after_ci_low",
        "after_ci_high",
        "after_chance",
        "before_edge",
        "after_edge",
        "edge_shrink",
        "before_flagged",
        "after_flagged",
        "edge_change",
        "edge_change_ci_low",
        "edge_change_ci_high",
    ])?;
    let f = |x: f64| format!("{x:.4}");
    for r in rows {
        w.write_record(
            [
                r.detector.clone(),
                f(r.before),
                f(r.before_ci.0),
                f(r.before_ci.1),
                f(r.before_chance),
                f(r.after),
                f(r.after_ci.0),
                f(r.after_ci.1),
                f(r.after_chance),
                f(r.before_edge),
                f(r.after_edge),
                r.edge_shrink.map_or(String::new(), |x| format!("{x:.3}")),
                r.before_flagged.to_string(),
                r.after_flagged.to_string(),
            ]
            .into_iter()
            .chain(edge_change_fields(r.edge_change)),
        )?;
    }
    af_core::atomic::write(
        path,
        &w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?,
    )?;
    Ok(())
}
