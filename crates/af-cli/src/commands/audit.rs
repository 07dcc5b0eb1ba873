//! `af audit DATASET`: af-audit's detectors on any multiple-choice file, with af-nn's committee
//! members as the learned (partial-input) detectors.
//!
//! Writes into `--out` (docs/formats.md): `audit.json` (every number, the input and the settings),
//! `detectors.csv`, `tokens.csv` (every tested token), `detectors.svg`, `audit.md` and
//! `audit.html`, and `audit-config.toml` (the settings, loadable with `--config`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use af_audit::{AuditReport, Learner, LearnerQuestion};
use af_core::{AuditConfig, CommitteeConfig, Config, Member};
use af_io::questions::{read_questions, QuestionFile, QuestionFormat};
use af_nn::committee::{self as nnc, CommitteeModel};
use af_text::Tagger;
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use tch::{nn, Device};

#[derive(Args)]
pub struct AuditArgs {
    /// The dataset: SWAG regular or full CSV, HellaSwag / WinoGrande / generic JSONL
    /// (`context`, `endings`, `label`), or af's dataset.jsonl. The layout is detected.
    dataset: PathBuf,
    /// A separate evaluation file (same layouts). Without it a `split` field (train against
    /// val/dev/test) or a split by group (`[audit] eval-share`) makes the evaluation split.
    #[arg(long)]
    eval: Option<PathBuf>,
    /// Name the layout instead of detecting it.
    #[arg(long, value_parser = parse_format)]
    format: Option<QuestionFormat>,
    /// Skip bad rows (listed in audit.json) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// An af config: its [audit] section, the detector sizes of [committee], and [run] seed,
    /// threads and device. Defaults otherwise (docs/configs.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Learned detectors, comma-separated (ngram, bow, cnn, lstm, pos-lstm); overrides [audit] models.
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    /// Output directory (default: audit/<dataset file name without extension>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N (overrides [run] device).
    #[arg(long)]
    device: Option<String>,
    /// CPU threads, 0: one per core (overrides [run] threads).
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of the split and of every detector (overrides [run] seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Replace what is in the output directory.
    #[arg(long)]
    force: bool,
}

fn parse_format(s: &str) -> Result<QuestionFormat, String> {
    QuestionFormat::parse(s).ok_or_else(|| format!("expected one of {}", QuestionFormat::NAMES))
}

/// The learned detectors: one committee member, no joint head, trained fresh on the training
/// questions (vocabulary from their options only) and scoring the evaluation options.
pub struct TorchLearner<'a> {
    pub config: &'a CommitteeConfig,
    pub tagger: &'a Tagger,
    pub device: Device,
}

impl Learner for TorchLearner<'_> {
    type Error = af_nn::NnError;

    fn train_and_score(&mut self, model: Member, train: &[LearnerQuestion], eval: &[LearnerQuestion], seed: u64) -> Result<Vec<Vec<f32>>, af_nn::NnError> {
        let options: Vec<(&[String], std::ops::Range<usize>)> =
            train.iter().chain(eval).flat_map(|q| &q.options).map(|o| (o.tokens.as_slice(), o.marked.clone())).collect();
        let counted: usize = train.iter().map(|q| q.options.len()).sum();
        let table = super::table::sentence_table(&options, counted, self.config, self.tagger, self.device);
        let mut questions = Vec::with_capacity(train.len());
        let mut at = 0i64;
        for q in train {
            // The committee trains with the right option first.
            let rows: Vec<i64> = (0..q.options.len() as i64).map(|o| at + o).collect();
            let mut ordered = vec![rows[q.label]];
            ordered.extend(rows.iter().enumerate().filter(|(o, _)| *o != q.label).map(|(_, r)| *r));
            questions.push(ordered);
            at += q.options.len() as i64;
        }
        tch::manual_seed(seed as i64);
        let vs = nn::VarStore::new(self.device);
        let committee = CommitteeModel::new(&vs.root(), self.config, &[model], false, &table);
        nnc::train(&vs, &committee, &table, &questions, self.config, seed)?;
        let eval_rows: Vec<i64> = (at..table.rows).collect();
        let flat = nnc::score(&committee, &table, &eval_rows, self.config.score_batch).swap_remove(0).1;
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
    report: &'a AuditReport,
}

#[derive(Serialize)]
struct SkippedRow<'a> {
    file: &'a Path,
    line: usize,
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

pub fn run(a: AuditArgs) -> anyhow::Result<ExitCode> {
    let mut config = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(models) = &a.models {
        config.audit.models = models
            .iter()
            .map(|m| Member::parse(m.trim()).filter(|m| *m != Member::Mlp).ok_or_else(|| anyhow::anyhow!("--models: unknown detector `{m}`: expected ngram, bow, cnn, lstm or pos-lstm")))
            .collect::<Result<_, _>>()?;
    }
    let seed = a.seed.unwrap_or(config.run.seed);
    let threads = a.threads.unwrap_or(config.run.threads);
    let device_name = a.device.clone().unwrap_or_else(|| config.run.device.clone());
    af_nn::runtime::set_threads(threads);
    let device = super::device_named(&device_name)?;

    let file = read_questions(&a.dataset, a.format, a.skip_bad)?;
    let eval_file = a.eval.as_deref().map(|p| read_questions(p, a.format, a.skip_bad)).transpose()?;
    let out = a.out.clone().unwrap_or_else(|| {
        let stem = a.dataset.file_stem().map_or("dataset".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from("audit").join(stem)
    });
    super::empty_out_dir(&out, a.force)?;
    let tagger = super::load_tagger(config.tagger.model.as_deref())?;

    let start = std::time::Instant::now();
    let report = audit_questions(&file, eval_file.as_ref(), &config, &[], seed, &tagger, device)?;
    let seconds = start.elapsed().as_secs_f64();

    let skipped_rows = std::iter::once(&file)
        .chain(eval_file.as_ref())
        .flat_map(|f| f.skipped.iter().map(|s| SkippedRow { file: &f.path, line: s.line, reason: &s.reason }))
        .collect();
    let settings = Settings { run: SettingsRun { seed, threads, device: device_name }, committee: &config.committee, audit: &config.audit };
    let record = AuditFile {
        dataset: &a.dataset,
        eval_dataset: a.eval.as_deref(),
        format: file.format,
        skipped_rows,
        settings,
        device: format!("{device:?}"),
        seconds,
        report: &report,
    };
    write_outputs(&out, &record)?;
    print_summary(&report, &a.dataset);
    println!("audit: {seconds:.1} s; outputs in {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// Runs the audit with a progress bar over the learned detectors.
pub fn audit_questions(
    file: &QuestionFile,
    eval: Option<&QuestionFile>,
    config: &Config,
    exclude: &[(Member, af_core::View)],
    seed: u64,
    tagger: &Tagger,
    device: Device,
) -> anyhow::Result<AuditReport> {
    let mut learner = TorchLearner { config: &config.committee, tagger, device };
    let bar = crate::progress::bar(0, "detectors");
    let mut progress = |done: usize, total: usize, name: &str| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(name.to_string());
    };
    let report = af_audit::audit(file.questions.clone(), eval.map(|f| f.questions.clone()), &config.audit, exclude, seed, &mut learner, &mut progress)
        .with_context(|| format!("auditing {}", file.path.display()))?;
    bar.finish_and_clear();
    Ok(report)
}

fn write_outputs(out: &Path, record: &AuditFile) -> anyhow::Result<()> {
    let report = record.report;
    let write = |name: &str, bytes: &[u8]| af_core::atomic::write(out.join(name), bytes).with_context(|| format!("cannot write {}", out.join(name).display()));
    write("audit.json", serde_json::to_string_pretty(record)?.as_bytes())?;
    write("audit-config.toml", toml::to_string(&record.settings)?.as_bytes())?;
    write("detectors.csv", &detectors_csv(report)?)?;
    let mut tokens = csv::Writer::from_writer(Vec::new());
    tokens.write_record(["token", "options", "right", "rate", "z", "p", "p_holm", "significant"])?;
    for t in &report.token_table {
        tokens.write_record([t.token.clone(), t.options.to_string(), t.right.to_string(), format!("{:.4}", t.rate), format!("{:.3}", t.z), format!("{:.3e}", t.p), format!("{:.3e}", t.p_holm), t.significant.to_string()])?;
    }
    write("tokens.csv", &tokens.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?)?;
    let title = format!("Audit of {}", record.dataset.display());
    let chart = detectors_chart(report, None, &title)?;
    write("detectors.svg", chart.as_bytes())?;
    write("audit.md", markdown(record).as_bytes())?;
    write("audit.html", html(record, &chart).as_bytes())?;
    Ok(())
}

pub fn detectors_csv(report: &AuditReport) -> anyhow::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "detector", "family", "model", "view", "train_questions", "eval_questions", "right", "accuracy", "ci_low", "ci_high", "chance", "edge",
        "p_value", "flagged", "twin_pairs", "twin_accuracy", "twin_chance",
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
        ])?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))
}

/// The chart of every detector against chance; with `compare`, the same detectors of a second
/// report as hollow markers (matched by name).
pub fn detectors_chart(report: &AuditReport, compare: Option<(&AuditReport, &str, &str)>, title: &str) -> anyhow::Result<String> {
    let rows: Vec<af_report::DetectorBar> = report
        .detectors
        .iter()
        .map(|d| af_report::DetectorBar {
            name: d.name.clone(),
            accuracy: d.accuracy,
            ci: (d.ci_low, d.ci_high),
            chance: d.chance,
            compare: compare.and_then(|(other, _, _)| other.detectors.iter().find(|o| o.name == d.name)).map(|o| (o.accuracy, (o.ci_low, o.ci_high))),
        })
        .collect();
    Ok(af_report::detectors_svg(&rows, title, compare.map(|(_, a, b)| (a, b)))?)
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
        "{} questions ({:?} layout), {}-{} options; split {}: {} train, {} evaluation; mean chance {:.3}. {} rows skipped. {:.1} s on {}.\n",
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
        let twins = d.twins.as_ref().map_or("-".into(), |t| format!("{:.3} of {} (chance {:.3})", t.accuracy, t.pairs, t.chance));
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3}-{:.3} | {:.3} | {:+.3} | {:.1e} | {} | {} |",
            d.name, d.accuracy, d.ci_low, d.ci_high, d.chance, d.edge, d.p_value, flag(d), twins
        );
    }
    let t = &r.tokens;
    let _ = writeln!(
        s,
        "\n## Tokens\n\n{} tokens in at least {} options tested; {} significant after Holm's correction at {}. No-artifact rate (share of distinguishing token occurrences in right options): {:.4}.\n",
        t.tested, record.settings.audit.token_min_count, t.significant, r.alpha, t.no_artifact_rate
    );
    let _ = writeln!(s, "| token | options | right | rate | z | p (Holm) |\n|---|---:|---:|---:|---:|---:|");
    for x in &t.top {
        let _ = writeln!(s, "| `{}` | {} | {} | {:.3} | {:+.2} | {:.1e} |", x.token, x.options, x.right, x.rate, x.z, x.p_holm);
    }
    if let Some(tw) = &r.twins {
        let _ = writeln!(s, "\n## Twins\n\n{} twin pairs ({:?}), {} in the evaluation split; a pair counts only when both are right.", tw.pairs, tw.source, tw.eval_pairs);
    }
    if !r.transforms.is_empty() {
        let _ = writeln!(s, "\n## Square One transforms\n\n| transform | train | evaluation | left out |\n|---|---:|---:|---:|");
        for x in &r.transforms {
            let _ = writeln!(s, "| {} | {} | {} | {} |", x.transform.name(), x.train, x.eval, x.excluded);
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

fn html(record: &AuditFile, chart: &str) -> String {
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
                d.twins.as_ref().map_or("-".into(), |t| format!("{:.3} of {}", t.accuracy, t.pairs)),
            ]
        })
        .collect();
    let tokens: Vec<Vec<String>> = r
        .tokens
        .top
        .iter()
        .map(|x| vec![x.token.clone(), x.options.to_string(), x.right.to_string(), format!("{:.3}", x.rate), format!("{:+.2}", x.z), format!("{:.1e}", x.p_holm)])
        .collect();
    let mut sections = vec![
        af_report::Section { title: "Detectors against chance".into(), html: chart.to_string() },
        af_report::Section {
            title: "Every detector".into(),
            html: format!(
                "<p>Flagged: above chance at family-wise alpha {} (one-sided p &lt; {:.2e}).</p>{}",
                r.alpha,
                r.detector_alpha,
                af_report::table(&["detector", "accuracy", "95% interval", "chance", "edge", "p", "flagged", "twin pairs"], &rows)
            ),
        },
        af_report::Section {
            title: "Most telling tokens".into(),
            html: format!(
                "<p>{} tested, {} significant (Holm); no-artifact rate {:.4}.</p>{}",
                r.tokens.tested,
                r.tokens.significant,
                r.tokens.no_artifact_rate,
                af_report::table(&["token", "options", "right", "rate", "z", "p (Holm)"], &tokens)
            ),
        },
    ];
    if !r.skipped.is_empty() {
        let items: String = r.skipped.iter().map(|x| format!("<li>{}: {}</li>", af_report::escape(&x.what), af_report::escape(&x.reason))).collect();
        sections.push(af_report::Section { title: "Not run".into(), html: format!("<ul>{items}</ul>") });
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

fn print_summary(report: &AuditReport, dataset: &Path) {
    println!(
        "audit of {}: {} questions, split {} ({} train / {} eval), chance {:.3}",
        dataset.display(),
        report.questions,
        report.split.method,
        report.split.train,
        report.split.eval,
        report.chance
    );
    for d in &report.detectors {
        println!(
            "  {:<28} {:.3} [{:.3}, {:.3}]  chance {:.3}{}",
            d.name,
            d.accuracy,
            d.ci_low,
            d.ci_high,
            d.chance,
            if d.flagged { "  FLAGGED" } else { "" }
        );
    }
    println!("  tokens: {} tested, {} significant (Holm)", report.tokens.tested, report.tokens.significant);
}
