//! The audit of any multiple-choice file (`af audit`, and the export's audits): af-audit's
//! detectors, with af-nn's committee members as the learned (partial-input) detectors.
//!
//! Writes into `--out` (docs/formats.md): `audit.json` (every number, the input and the settings),
//! `detectors.csv`, `tokens.csv` (every tested token), `detectors.svg`, `audit.md` and
//! `audit.html`, and `audit-config.toml` (the settings, loadable with `--config`).

use std::path::{Path, PathBuf};

use af_audit::{AuditReport, Learner, LearnerQuestion};
use af_core::{AuditConfig, CommitteeConfig, Config, MemberName};
use af_io::questions::{read_questions, QuestionFile, QuestionFormat};
use af_nn::committee::{self as nnc, CommitteeModel, Registry};
use af_text::Tagger;
use anyhow::Context;
use serde::Serialize;
use tch::{nn, Device};

use crate::progress::Progress;

/// The learned detectors: one committee member, no joint head, trained fresh on the training
/// questions (vocabulary from their options only) and scoring the evaluation options.
pub struct TorchLearner<'a> {
    pub config: &'a CommitteeConfig,
    pub registry: &'a Registry,
    pub tagger: &'a Tagger,
    pub device: Device,
    /// The most options any detector's table cut to `[committee] max-tokens`.
    pub options_cut: usize,
    /// The frozen-embedding detector's encoder (`encoder` or `torchscript`), loaded when first
    /// needed, with the settings it was loaded from, and the option texts it has encoded.
    pub encoder: Option<(
        nnc::members::FrozenEncoder,
        af_nn::encoder::Encoder,
        crate::encoded::TextMemo,
    )>,
}

impl Learner for TorchLearner<'_> {
    type Error = af_nn::NnError;

    fn train_and_score(
        &mut self,
        model: &MemberName,
        train: &[LearnerQuestion],
        eval: &[LearnerQuestion],
        seed: u64,
    ) -> Result<Vec<Vec<f32>>, af_nn::NnError> {
        let scores = self.fit_and_score(model, train, eval, seed);
        // Its table and weights are gone: audits, the export and `af ablate` train dozens of
        // detectors in turn.
        crate::resources::after_a_model(&format!("detector {model}"));
        scores
    }
}

impl TorchLearner<'_> {
    /// One detector: its table from the questions' options, a fresh model trained on `train`,
    /// the scores of `eval`'s options.
    fn fit_and_score(
        &mut self,
        model: &MemberName,
        train: &[LearnerQuestion],
        eval: &[LearnerQuestion],
        seed: u64,
    ) -> Result<Vec<Vec<f32>>, af_nn::NnError> {
        let options: Vec<(&[String], std::ops::Range<usize>)> = train
            .iter()
            .chain(eval)
            .flat_map(|q| &q.options)
            .map(|o| (o.tokens.as_slice(), o.marked.clone()))
            .collect();
        let counted: usize = train.iter().map(|q| q.options.len()).sum();
        let pos = self
            .registry
            .get(model.as_str())
            .and_then(nnc::MemberKind::joint)
            .is_some_and(|m| m.columns().contains(&nnc::Column::Pos));
        let (mut table, cut) = crate::table::sentence_table_with(
            &options,
            counted,
            self.config,
            self.tagger,
            pos,
            self.device,
        );
        self.options_cut = self.options_cut.max(cut);
        if let Some(frozen) = self
            .registry
            .frozen_encoder(std::slice::from_ref(model), self.config)?
        {
            let (encoder, mut memo) = match self.encoder.take() {
                Some((loaded_from, e, memo)) if loaded_from == frozen => (e, memo),
                _ => (frozen.load(self.device)?, Default::default()),
            };
            // The view's text as the tokens give it: an uncased WordPiece tokenizer splits the
            // punctuation the words were split at the same way.
            let texts: Vec<String> = options.iter().map(|(tokens, _)| tokens.join(" ")).collect();
            let attached = crate::encoded::attach_texts(
                &mut table,
                &encoder,
                &texts,
                &mut memo,
                &crate::NoProgress,
            );
            self.encoder = Some((frozen, encoder, memo));
            attached?;
        }
        let mut questions = Vec::with_capacity(train.len());
        let mut at = 0i64;
        for q in train {
            // The committee trains with the right option first.
            let rows: Vec<i64> = (0..q.options.len() as i64).map(|o| at + o).collect();
            let mut ordered = vec![rows[q.label]];
            ordered.extend(
                rows.iter()
                    .enumerate()
                    .filter(|(o, _)| *o != q.label)
                    .map(|(_, r)| *r),
            );
            questions.push(ordered);
            at += q.options.len() as i64;
        }
        tch::manual_seed(seed as i64);
        let vs = nn::VarStore::new(self.device);
        let committee = CommitteeModel::new(
            &vs.root(),
            self.config,
            self.registry,
            std::slice::from_ref(model),
            false,
            &table,
        )?;
        nnc::train(&vs, &committee, &table, &questions, self.config, seed)?;
        let eval_rows: Vec<i64> = (at..table.rows).collect();
        let flat = nnc::score(&committee, &table, &eval_rows, self.config.score_batch)
            .swap_remove(0)
            .1;
        let mut out = Vec::with_capacity(eval.len());
        let mut at = 0;
        for q in eval {
            out.push(flat[at..at + q.options.len()].to_vec());
            at += q.options.len();
        }
        Ok(out)
    }
}

/// What `audit.json` holds besides the report.
#[derive(Serialize)]
struct AuditFile<'a> {
    dataset: &'a Path,
    eval_dataset: Option<&'a Path>,
    format: QuestionFormat,
    skipped_rows: Vec<SkippedRow<'a>>,
    settings: Settings<'a>,
    device: String,
    seconds: f64,
    /// Options longer than `[committee] max-tokens` in the widest view, cut to their last
    /// max-tokens tokens before the learned detectors read them.
    options_cut_to_max_tokens: usize,
    report: &'a AuditReport,
}

#[derive(Serialize)]
struct SkippedRow<'a> {
    file: &'a Path,
    line: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<usize>,
    reason: &'a str,
}

/// The settings an audit ran with; `audit-config.toml` is this, loadable with `--config`.
#[derive(Serialize)]
struct Settings<'a> {
    run: SettingsRun,
    committee: &'a CommitteeConfig,
    audit: &'a AuditConfig,
}

#[derive(Serialize)]
struct SettingsRun {
    seed: u64,
    threads: usize,
    device: String,
}

/// What `af audit` is asked to do.
pub struct AuditRequest<'a> {
    pub dataset: &'a Path,
    pub eval: Option<&'a Path>,
    /// The layout, when not detected.
    pub format: Option<QuestionFormat>,
    pub skip_bad: bool,
    /// `[audit]`, `[committee]` and `[tagger]` are read from it; seed, threads and device below.
    pub config: &'a Config,
    pub seed: u64,
    pub threads: usize,
    pub device: String,
    pub out: &'a Path,
    pub force: bool,
    /// The folder of an `af eval` of the same dataset (`af audit --lm-eval DIR`): its table joins
    /// `audit.html`, so one page says what the surface detectors and a language model see.
    pub lm_eval: Option<&'a Path>,
}

/// A finished audit: the report (also in `out/audit.json`) and its time.
pub struct AuditRun {
    pub dataset: PathBuf,
    pub out: PathBuf,
    pub seconds: f64,
    /// Options the learned detectors read cut to `max_tokens` (the most in any view).
    pub options_cut: usize,
    pub max_tokens: usize,
    pub report: AuditReport,
}

/// Audits a file and writes every output into `request.out`.
pub fn run(request: &AuditRequest, progress: &dyn Progress) -> anyhow::Result<AuditRun> {
    let config = request.config;
    af_nn::runtime::set_threads(request.threads);
    let device = crate::setup::device_named(&request.device)?;
    let registry = Registry::builtin();
    let file = read_questions(request.dataset, request.format, request.skip_bad)?;
    let eval_file = request
        .eval
        .map(|p| read_questions(p, request.format, request.skip_bad))
        .transpose()?;
    let lm = request
        .lm_eval
        .map(|dir| {
            crate::eval::summary_of(dir, request.dataset)
                .with_context(|| format!("--lm-eval {}", dir.display()))
        })
        .transpose()?;
    crate::setup::empty_out_dir(request.out, request.force)?;
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;

    let start = std::time::Instant::now();
    let auditor = Auditor {
        config,
        registry: &registry,
        exclude: &[],
        tagger: &tagger,
        device,
        progress,
    };
    let (report, options_cut) = auditor.audit(&file, eval_file.as_ref(), request.seed)?;
    let seconds = start.elapsed().as_secs_f64();

    let skipped_rows = std::iter::once(&file)
        .chain(eval_file.as_ref())
        .flat_map(|f| {
            f.skipped.iter().map(|s| SkippedRow {
                file: &f.path,
                line: s.line,
                column: s.column,
                reason: &s.reason,
            })
        })
        .collect();
    let settings = Settings {
        run: SettingsRun {
            seed: request.seed,
            threads: request.threads,
            device: request.device.clone(),
        },
        committee: &config.committee,
        audit: &config.audit,
    };
    let record = AuditFile {
        dataset: request.dataset,
        eval_dataset: request.eval,
        format: file.format,
        skipped_rows,
        settings,
        device: format!("{device:?}"),
        seconds,
        options_cut_to_max_tokens: options_cut,
        report: &report,
    };
    write_outputs(request.out, &record, lm.as_ref())?;
    Ok(AuditRun {
        dataset: request.dataset.to_path_buf(),
        out: request.out.to_path_buf(),
        seconds,
        options_cut,
        max_tokens: config.committee.max_tokens,
        report,
    })
}

/// What the audits of one command share: the config (`[audit]`, `[committee]`, and the seed of a
/// named audit), the members, the detectors left out, the tagger, the device the detectors train
/// on, and the progress bars.
pub struct Auditor<'a> {
    pub config: &'a Config,
    pub registry: &'a Registry,
    /// Members left out on the view they read (the export leaves out its committee's).
    pub exclude: &'a [(MemberName, af_core::View)],
    pub tagger: &'a Tagger,
    pub device: Device,
    pub progress: &'a dyn Progress,
}

impl Auditor<'_> {
    /// Audits `file` (against `eval`, when given) with a progress bar over the learned detectors;
    /// returns the report and how many options were cut to `[committee] max-tokens`.
    pub fn audit(
        &self,
        file: &QuestionFile,
        eval: Option<&QuestionFile>,
        seed: u64,
    ) -> anyhow::Result<(AuditReport, usize)> {
        let config = self.config;
        // Each detector reads the rows of the view it is trained on, whatever view a member's
        // table gives it in the committee.
        let committee = nnc::members::reading_given_rows(&config.committee);
        // One frozen-embedding detector per audit, as per committee: said before any detector
        // trains.
        self.registry
            .encoded_member(&config.audit.models)
            .map_err(|e| anyhow::anyhow!("[audit] models: {e}"))?;
        let mut learner = TorchLearner {
            config: &committee,
            registry: self.registry,
            tagger: self.tagger,
            device: self.device,
            options_cut: 0,
            encoder: None,
        };
        let bar = self.progress.bar("detectors", 0);
        let mut progress = |done: usize, total: usize, name: &str| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(name.to_string());
        };
        let report = af_audit::audit(
            file.questions.clone(),
            eval.map(|f| f.questions.clone()),
            &config.audit,
            self.exclude,
            seed,
            &mut learner,
            &mut progress,
        )
        .with_context(|| format!("auditing {}", file.path.display()))?;
        bar.finish();
        if learner.options_cut > 0 {
            tracing::warn!(
                "{}: {} options are longer than [committee] max-tokens = {} and were cut to their last {} tokens",
                file.path.display(),
                learner.options_cut,
                config.committee.max_tokens,
                config.committee.max_tokens
            );
        }
        Ok((report, learner.options_cut))
    }

    /// Audits `questions` as the dataset `NAME.jsonl` of `dir`, without their published split
    /// (so the audit splits by group with `[audit] eval-share`), and writes the report to
    /// `dir/audit-NAME.json`: the export's random and AF datasets, refilter's before and after.
    pub fn audit_named(
        &self,
        dir: &Path,
        name: &str,
        questions: &[af_core::Question],
    ) -> anyhow::Result<AuditReport> {
        let file = unsplit_file(dir.join(format!("{name}.jsonl")), questions);
        let (report, _) = self.audit(&file, None, self.config.run.seed)?;
        af_core::atomic::write(
            dir.join(format!("audit-{name}.json")),
            serde_json::to_string_pretty(&report)?.as_bytes(),
        )?;
        Ok(report)
    }
}

/// `questions` as an af file at `path` without their published split, so that an audit splits
/// them by group.
pub(crate) fn unsplit_file<'q>(
    path: PathBuf,
    questions: impl IntoIterator<Item = &'q af_core::Question>,
) -> QuestionFile {
    QuestionFile {
        path,
        format: QuestionFormat::AF,
        questions: questions
            .into_iter()
            .map(|q| af_core::Question {
                split: None,
                ..q.clone()
            })
            .collect(),
        skipped: Vec::new(),
    }
}

fn write_outputs(
    out: &Path,
    record: &AuditFile,
    lm: Option<&crate::eval::EvalSummary>,
) -> anyhow::Result<()> {
    let report = record.report;
    let write = |name: &str, bytes: &[u8]| {
        af_core::atomic::write(out.join(name), bytes)
            .with_context(|| format!("cannot write {}", out.join(name).display()))
    };
    write(
        "audit.json",
        serde_json::to_string_pretty(record)?.as_bytes(),
    )?;
    write(
        "audit-config.toml",
        toml::to_string(&record.settings)?.as_bytes(),
    )?;
    write("detectors.csv", &detectors_csv(report)?)?;
    let mut tokens = csv::Writer::from_writer(Vec::new());
    tokens.write_record([
        "token",
        "options",
        "right",
        "rate",
        "z",
        "p",
        "p_holm",
        "significant",
    ])?;
    for t in &report.token_table {
        tokens.write_record([
            t.token.clone(),
            t.options.to_string(),
            t.right.to_string(),
            format!("{:.4}", t.rate),
            format!("{:.3}", t.z),
            format!("{:.3e}", t.p),
            format!("{:.3e}", t.p_holm),
            t.significant.to_string(),
        ])?;
    }
    write(
        "tokens.csv",
        &tokens
            .into_inner()
            .map_err(|e| anyhow::anyhow!("csv: {e}"))?,
    )?;
    let title = format!("Audit of {}", record.dataset.display());
    let chart = detectors_chart(report, None, &title)?;
    write("detectors.svg", chart.as_bytes())?;
    write("audit.md", markdown(record).as_bytes())?;
    write("audit.html", html(record, &chart, lm).as_bytes())?;
    Ok(())
}

pub fn detectors_csv(report: &AuditReport) -> anyhow::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "detector",
        "family",
        "model",
        "view",
        "train_questions",
        "eval_questions",
        "right",
        "accuracy",
        "ci_low",
        "ci_high",
        "chance",
        "edge",
        "p_value",
        "flagged",
        "twin_pairs",
        "twin_accuracy",
        "twin_chance",
        "seconds",
    ])?;
    for d in &report.detectors {
        let t = d.twins.as_ref();
        w.write_record([
            d.name.clone(),
            d.family.clone(),
            d.model.clone().unwrap_or_default(),
            d.view.clone().unwrap_or_default(),
            d.train_questions.to_string(),
            d.eval_questions.to_string(),
            format!("{:.2}", d.right),
            format!("{:.4}", d.accuracy),
            format!("{:.4}", d.ci_low),
            format!("{:.4}", d.ci_high),
            format!("{:.4}", d.chance),
            format!("{:.4}", d.edge),
            format!("{:.3e}", d.p_value),
            d.flagged.to_string(),
            t.map_or(String::new(), |t| t.pairs.to_string()),
            t.map_or(String::new(), |t| format!("{:.4}", t.accuracy)),
            t.map_or(String::new(), |t| format!("{:.4}", t.chance)),
            format!("{:.1}", d.seconds),
        ])?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))
}

/// The chart of every detector against chance; with `compare`, the same detectors of a second
/// report as hollow markers (matched by name).
pub fn detectors_chart(
    report: &AuditReport,
    compare: Option<(&AuditReport, &str, &str)>,
    title: &str,
) -> anyhow::Result<String> {
    let rows: Vec<af_report::DetectorBar> = report
        .detectors
        .iter()
        .map(|d| af_report::DetectorBar {
            name: d.name.clone(),
            accuracy: d.accuracy,
            ci: (d.ci_low, d.ci_high),
            chance: d.chance,
            compare: compare
                .and_then(|(other, _, _)| other.detectors.iter().find(|o| o.name == d.name))
                .map(|o| (o.accuracy, (o.ci_low, o.ci_high))),
        })
        .collect();
    Ok(af_report::detectors_svg(
        &rows,
        title,
        compare.map(|(_, a, b)| (a, b)),
    )?)
}

fn flag(d: &af_audit::DetectorResult) -> &'static str {
    if d.flagged {
        "**yes**"
    } else {
        "no"
    }
}

fn markdown(record: &AuditFile) -> String {
    use std::fmt::Write as _;
    let r = record.report;
    let mut s = String::new();
    let _ = writeln!(s, "# Audit of `{}`\n", record.dataset.display());
    let _ = writeln!(
        s,
        "{} questions ({} layout), {}-{} options; split {}: {} train, {} evaluation; mean chance {:.3}. {} rows skipped. {:.1} s on {}.\n",
        r.questions,
        record.format,
        r.options_min,
        r.options_max,
        r.split.method,
        r.split.train,
        r.split.eval,
        r.chance,
        record.skipped_rows.len(),
        record.seconds,
        record.device
    );
    let _ = writeln!(
        s,
        "A detector is **flagged** when it beats chance at family-wise alpha {} (Bonferroni over {} detectors: one-sided p < {:.2e}). Accuracy on the evaluation split with its 95% Wilson interval; ties earn 1/(options tied).\n",
        r.alpha,
        r.detectors.len(),
        r.detector_alpha
    );
    let _ = writeln!(s, "| detector | accuracy | 95% interval | chance | edge | p | flagged | twin pairs (both right) |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---|---:|");
    for d in &r.detectors {
        let twins = d.twins.as_ref().map_or("-".into(), |t| {
            format!("{:.3} of {} (chance {:.3})", t.accuracy, t.pairs, t.chance)
        });
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3}-{:.3} | {:.3} | {:+.3} | {:.1e} | {} | {} |",
            d.name,
            d.accuracy,
            d.ci_low,
            d.ci_high,
            d.chance,
            d.edge,
            d.p_value,
            flag(d),
            twins
        );
    }
    let t = &r.tokens;
    let _ = writeln!(
        s,
        "\n## Tokens\n\n{} tokens in at least {} options tested; {} significant after Holm's correction at {}. No-artifact rate (share of distinguishing token occurrences in right options): {:.4}.\n",
        t.tested, record.settings.audit.token_min_count, t.significant, r.alpha, t.no_artifact_rate
    );
    let _ = writeln!(
        s,
        "| token | options | right | rate | z | p (Holm) |\n|---|---:|---:|---:|---:|---:|"
    );
    for x in &t.top {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {:.3} | {:+.2} | {:.1e} |",
            x.token, x.options, x.right, x.rate, x.z, x.p_holm
        );
    }
    if let Some(tw) = &r.twins {
        let _ = writeln!(s, "\n## Twins\n\n{} twin pairs ({:?}), {} in the evaluation split; a pair counts only when both are right.", tw.pairs, tw.source, tw.eval_pairs);
    }
    if !r.transforms.is_empty() {
        let _ = writeln!(s, "\n## Square One transforms\n\n| transform | train | evaluation | left out |\n|---|---:|---:|---:|");
        for x in &r.transforms {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                x.transform.name(),
                x.train,
                x.eval,
                x.excluded
            );
        }
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(s, "\n## Not run\n");
        for x in &r.skipped {
            let _ = writeln!(s, "- {}: {}", x.what, x.reason);
        }
    }
    s
}

fn html(record: &AuditFile, chart: &str, lm: Option<&crate::eval::EvalSummary>) -> String {
    let r = record.report;
    let rows: Vec<Vec<String>> = r
        .detectors
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                format!("{:.3}", d.accuracy),
                format!("{:.3}-{:.3}", d.ci_low, d.ci_high),
                format!("{:.3}", d.chance),
                format!("{:+.3}", d.edge),
                format!("{:.1e}", d.p_value),
                if d.flagged { "yes" } else { "no" }.into(),
                d.twins
                    .as_ref()
                    .map_or("-".into(), |t| format!("{:.3} of {}", t.accuracy, t.pairs)),
            ]
        })
        .collect();
    let tokens: Vec<Vec<String>> = r
        .tokens
        .top
        .iter()
        .map(|x| {
            vec![
                x.token.clone(),
                x.options.to_string(),
                x.right.to_string(),
                format!("{:.3}", x.rate),
                format!("{:+.2}", x.z),
                format!("{:.1e}", x.p_holm),
            ]
        })
        .collect();
    let mut sections = vec![
        af_report::Section {
            title: "Detectors against chance".into(),
            html: chart.to_string(),
        },
        af_report::Section {
            title: "Every detector".into(),
            html: format!(
                "<p>Flagged: above chance at family-wise alpha {} (one-sided p &lt; {:.2e}).</p>{}",
                r.alpha,
                r.detector_alpha,
                af_report::table(
                    &[
                        "detector",
                        "accuracy",
                        "95% interval",
                        "chance",
                        "edge",
                        "p",
                        "flagged",
                        "twin pairs"
                    ],
                    &rows
                )
            ),
        },
        af_report::Section {
            title: "Most telling tokens".into(),
            html: format!(
                "<p>{} tested, {} significant (Holm); no-artifact rate {:.4}.</p>{}",
                r.tokens.tested,
                r.tokens.significant,
                r.tokens.no_artifact_rate,
                af_report::table(
                    &["token", "options", "right", "rate", "z", "p (Holm)"],
                    &tokens
                )
            ),
        },
    ];
    if !r.skipped.is_empty() {
        let items: String = r
            .skipped
            .iter()
            .map(|x| {
                format!(
                    "<li>{}: {}</li>",
                    af_report::escape(&x.what),
                    af_report::escape(&x.reason)
                )
            })
            .collect();
        sections.push(af_report::Section {
            title: "Not run".into(),
            html: format!("<ul>{items}</ul>"),
        });
    }
    if let Some(s) = lm {
        sections.push(af_report::Section {
            title: "How hard it is for a language model (af eval)".into(),
            html: format!(
                "<p><code>af eval</code> of the same file (<code>--lm-eval</code>: its <code>eval.json</code>).</p>{}",
                crate::eval::results_html("this dataset", s)
            ),
        });
    }
    af_report::Page {
        title: format!("Audit of {}", record.dataset.display()),
        subtitle: format!(
            "{} questions, split {} ({} train, {} evaluation), mean chance {:.3}; every number is in audit.json",
            r.questions, r.split.method, r.split.train, r.split.eval, r.chance
        ),
        sections,
        questions: Vec::new(),
    }
    .render()
}

impl std::fmt::Display for AuditRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = &self.report;
        write!(
            f,
            "audit of {}: {} questions, split {} ({} train / {} eval), chance {:.3}",
            self.dataset.display(),
            report.questions,
            report.split.method,
            report.split.train,
            report.split.eval,
            report.chance
        )?;
        for d in &report.detectors {
            write!(
                f,
                "\n  {:<28} {:.3} [{:.3}, {:.3}]  chance {:.3}{}",
                d.name,
                d.accuracy,
                d.ci_low,
                d.ci_high,
                d.chance,
                if d.flagged { "  FLAGGED" } else { "" }
            )?;
        }
        write!(
            f,
            "\n  tokens: {} tested, {} significant (Holm)",
            report.tokens.tested, report.tokens.significant
        )?;
        if self.options_cut > 0 {
            write!(f, "\n  {} options longer than {} tokens were cut to their last {} ([committee] max-tokens)", self.options_cut, self.max_tokens, self.max_tokens)?;
        }
        write!(
            f,
            "\naudit: {:.1} s; outputs in {}",
            self.seconds,
            self.out.display()
        )
    }
}
