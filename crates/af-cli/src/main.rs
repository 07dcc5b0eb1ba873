//! The `af` command line. It parses arguments, sets up logging and threads, calls the library
//! crates and prints for people: results on stdout, progress and errors (with their whole cause
//! chain) on stderr. Nothing below this crate prints.

mod commands;
mod progress;

use std::path::PathBuf;
use std::process::ExitCode;

use af_pipeline::runner::{self, StageRun};
use af_pipeline::StageName;
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "af",
    version,
    about = "Adversarial Filtering: build multiple-choice datasets whose wrong answers cannot be told from the right one by style",
    long_about = "af builds SWAG-style multiple-choice datasets: it pairs consecutive sentences, \
splits the second into a noun phrase and an ending, generates candidate endings with language \
models, and filters them adversarially. Each stage reads and writes files in a run directory.\n\n\
Start with `af doctor`, then `af run configs/default.toml`."
)]
struct Cli {
    /// More log output (-v: debug, -vv: trace). AF_LOG=<filter> overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check libtorch: version, where it was loaded from, CUDA, devices and threads.
    Doctor {
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
        /// Also check what this config names: a `[committee.member.torchscript] module` must load.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Inspect configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Train, evaluate or try the part-of-speech tagger.
    #[command(subcommand)]
    Tagger(commands::tagger::TaggerCommand),
    /// Make items from sentence pairs: the `pairs` stage alone (always runs; `af run` skips it when up to date).
    Pairs(StageArgs),
    /// Train the generator's language models: the `lm` stage alone.
    #[command(subcommand)]
    Lm(LmCommand),
    /// Sample candidate endings with their LM features into the pool: the `generate` stage alone.
    ///
    /// Resumes where a killed run stopped. `--shard I/N` does every N-th block of items, for
    /// running on many processes or machines; afterwards one plain `af generate` checks the pool
    /// and writes its report (docs/scale-out.md).
    Generate {
        #[command(flatten)]
        stage: StageArgs,
        /// Do only shard I of N (0-based), e.g. `--shard 3/8`.
        #[arg(long, value_parser = parse_shard, value_name = "I/N")]
        shard: Option<(usize, usize)>,
        /// Discard finished blocks and start over.
        #[arg(long)]
        force: bool,
    },
    /// Adversarial Filtering of the pool: the `filter` stage alone.
    ///
    /// Writes state.json, metrics.csv and history.csv after every iteration. A killed run
    /// continues from its last finished iteration when started again with the same config
    /// and ends exactly where an uninterrupted run would.
    Filter {
        #[command(flatten)]
        stage: StageArgs,
        /// Continue a killed run; fails when there is none to continue.
        #[arg(long, conflicts_with = "force")]
        resume: bool,
        /// Discard the state of an earlier run and start over.
        #[arg(long)]
        force: bool,
    },
    /// Write the filtered dataset in every layout (af JSONL; SWAG regular and full CSV, HellaSwag
    /// JSONL, Hugging Face JSONL and an lm-evaluation-harness task, per split), the
    /// random-assignment baseline, and the detectors' evaluation of both: the `export` stage alone.
    Export {
        #[command(flatten)]
        stage: StageArgs,
        /// Also write annotation sheets (CSV and an HTML form) and their key into
        /// export/annotation, for `af assemble` ([export] annotation = true does the same).
        #[arg(long)]
        annotation: bool,
    },
    /// Build the final dataset from filled annotation sheets by SWAG's rules: keep items whose
    /// found ending was ranked best or second, distractors from the endings neither best nor
    /// gibberish (with `--distractors unlikely`: only those most annotators called unlikely; with
    /// `none-likely`: those and none called likely; with `all-unlikely`: those every annotator
    /// called unlikely); extra training items where a generated ending was best; a re-annotation
    /// queue where fewer than three usable distractors remain. Majority vote over annotators,
    /// with Krippendorff's alpha and pairwise agreement. Writes af's layout and the export's
    /// published ones (SWAG, HellaSwag, HF, lm-eval), and the second-answer check's next sheets
    /// (check/): checkers shown the true ending say whether each candidate could also be right
    /// and whether it reads as fluent; `--checks` with the filled sheets sets aside what they
    /// flag and uses the replacements they pass (docs/formats.md).
    Assemble(commands::assemble::AssembleArgs),
    /// Write RUN_DIR/report: report.html (self-contained), accuracy.svg and accuracy.png.
    Report {
        /// The run directory (the `dir` of its config).
        run_dir: PathBuf,
    },
    /// AFLite: remove the instances that linear probes on the given features predict too well.
    ///
    /// Features from any encoder (.npy, .safetensors, .csv), one row per instance of a JSONL
    /// file; `--winogrande` reads WinoGrande's layout and keeps twins together.
    Aflite(commands::aflite::AfliteArgs),
    /// Data map (Dataset Cartography) of any multiple-choice file: the committee trains several
    /// epochs and each question's gold-option probability per epoch gives its confidence,
    /// variability, correctness and forgetfulness; writes datamap.csv, the map (SVG, PNG) and the
    /// easy-to-learn / ambiguous / hard-to-learn subsets in the input's own layout.
    Datamap(commands::datamap::DatamapArgs),
    /// Features for AFLite from af's own encoders: trained on a slice of a WinoGrande-style file
    /// that is then dropped, they encode the rest (features.npy + instances.jsonl).
    Features(commands::features::FeaturesArgs),
    /// Measure the shortcuts of any multiple-choice dataset: random and length baselines,
    /// partial-input detectors (n-gram, CNN, BiLSTM on the ending, second sentence and full
    /// input), token statistics, twin pairs and Square One's transforms, each against chance.
    ///
    /// Reads SWAG (regular and full CSV), HellaSwag, WinoGrande, generic JSONL (`context`,
    /// `endings`, `label`) and af's own dataset.jsonl; writes audit.json, audit.md, audit.html,
    /// detectors.csv, tokens.csv and detectors.svg.
    Audit(commands::audit::AuditArgs),
    /// How hard a multiple-choice dataset is for a pretrained LM, zero-shot, scored as
    /// lm-evaluation-harness scores it: acc and acc_norm with 95% intervals, also zero-prompt and
    /// choices-only; writes scores.csv, eval.json and eval.html, resumable (scores.jsonl).
    Eval(commands::eval::EvalArgs),
    /// Ablations over committee composition: filter the run's pool with each composition of
    /// [ablate] (leave-one-out by default), then score every composition's dataset, and the
    /// random assignment, with every detector on one shared split, or on every item with
    /// `[audit] eval-folds` (the cross-matrix).
    ///
    /// Needs the run's pool (`af run CONFIG --until generate`). Each composition's AF run is in
    /// RUN_DIR/ablate/NAME, resumes after a kill and is skipped when up to date; writes each
    /// dataset as NAME/dataset.jsonl (for `af audit` and `af refilter`), cross-matrix.csv (with
    /// each cell's paired change from the random assignment), composition-pairs.csv (every two
    /// compositions, paired), summary.csv, cross-matrix.svg/.png and ablate.html
    /// (docs/formats.md).
    Ablate(commands::ablate::AblateArgs),
    /// Re-filter an existing multiple-choice dataset with the config's committee: each question
    /// is an item as it stands, its own wrong options its pool (topped up with `--generate N`
    /// endings from LMs trained on the dataset's questions); then every stage of `af run`, and
    /// the audit of the dataset as it came against the re-filtered one (RUN_DIR/refilter).
    ///
    /// Reruns skip what is up to date, as `af run` does; RUN_DIR/refilter.toml is the config it
    /// ran, for `af run` and `af ablate`.
    Refilter(commands::refilter::RefilterArgs),
    /// Run every stage of a config in order, skipping those whose outputs are up to date.
    Run {
        #[command(flatten)]
        stage: StageArgs,
        /// Rerun this stage, and every stage after it, even if up to date (pairs, lm, generate,
        /// filter, export, report).
        #[arg(long, value_name = "STAGE")]
        force: Vec<StageName>,
        /// Stop after this stage.
        #[arg(long, value_name = "STAGE")]
        until: Option<StageName>,
    },
    /// Benchmarks that print JSON with the machine, sizes and figures.
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
}

#[derive(Subcommand)]
enum LmCommand {
    /// Train one forward/backward LM pair per fold, each without its fold; resumes after a kill.
    Train {
        #[command(flatten)]
        stage: StageArgs,
        /// Discard checkpoints and start over.
        #[arg(long)]
        force: bool,
    },
    /// Score every option of multiple-choice datasets with the run's LMs (by default, for each
    /// item, an LM that did not generate its endings): mean and interval of the endings'
    /// log-perplexity, gold and distractors, per dataset (a fluency judge other than the
    /// generator; compare AF's distractors with random ones).
    Score(commands::lm_score::LmScoreArgs),
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let (i, n): (usize, usize) = (
        i.parse().map_err(|_| "I is not a number")?,
        n.parse().map_err(|_| "N is not a number")?,
    );
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n}: need 0 <= I < N"));
    }
    Ok((i, n))
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the resolved config (defaults filled in, paths made absolute) as TOML.
    Show {
        /// The config file (default: configs/default.toml).
        file: Option<PathBuf>,
    },
}

#[derive(Args)]
struct StageArgs {
    /// The run config (default: configs/default.toml in the current directory).
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    af_pipeline::resources::keep_large_allocations();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Prints what became of a stage: its report when it ran.
fn print_stage(run: &StageRun) {
    match run {
        StageRun::UpToDate { .. } => {}
        StageRun::Done { report, .. } | StageRun::Partial { report } => println!("{report}"),
    }
}

/// Runs one stage of a config, as its own command does.
fn one_stage(
    config: &af_core::Config,
    stage: StageName,
    force: bool,
    shard: Option<(usize, usize)>,
) -> anyhow::Result<ExitCode> {
    af_pipeline::setup::init_threads(config);
    print_stage(&runner::run_stage(
        config,
        stage,
        force,
        shard,
        &progress::Bars,
    )?);
    Ok(ExitCode::SUCCESS)
}

fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    use af_pipeline::load_config;
    match command {
        Command::Doctor { json, config } => commands::doctor::run(json, config.as_deref()),
        Command::Config(ConfigCommand::Show { file }) => {
            let config = load_config(file.as_deref())?;
            print!("{}", config.to_toml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Tagger(c) => commands::tagger::run(c),
        Command::Pairs(args) => one_stage(
            &load_config(args.config.as_deref())?,
            af_pipeline::stages::pairs::NAME,
            true,
            None,
        ),
        Command::Lm(LmCommand::Train { stage: args, force }) => one_stage(
            &load_config(args.config.as_deref())?,
            af_pipeline::stages::lm::NAME,
            force,
            None,
        ),
        Command::Lm(LmCommand::Score(args)) => commands::lm_score::run(args),
        Command::Generate {
            stage: args,
            shard,
            force,
        } => one_stage(
            &load_config(args.config.as_deref())?,
            af_pipeline::stages::generate::NAME,
            force,
            shard,
        ),
        Command::Filter {
            stage: args,
            resume,
            force,
        } => {
            let config = load_config(args.config.as_deref())?;
            let dir = config.run.dir.join("filter");
            if resume && !dir.join("state.json").exists() {
                anyhow::bail!("--resume: no interrupted filter run in {}", dir.display());
            }
            if resume && !runner::resumable(&config, af_pipeline::stages::filter::NAME)? {
                anyhow::bail!(
                    "--resume: the run in {} was started with another config or other upstream outputs; resuming it would mix the two (run without --resume to start over)",
                    dir.display()
                );
            }
            one_stage(&config, af_pipeline::stages::filter::NAME, force, None)
        }
        Command::Export {
            stage: args,
            annotation,
        } => {
            let mut config = load_config(args.config.as_deref())?;
            config.export.annotation |= annotation;
            one_stage(&config, af_pipeline::stages::export::NAME, true, None)
        }
        Command::Report { run_dir } => {
            let out = run_dir.join("report");
            af_pipeline::stages::report::write(&run_dir, &out)?;
            println!("{}", out.join("report.html").display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            stage: args,
            force,
            until,
        } => {
            let config = load_config(args.config.as_deref())?;
            let all = &af_pipeline::ALL_STAGES;
            let last = until.map_or(all.len(), |u| {
                all.iter()
                    .position(|&s| s == u)
                    .expect("a parsed stage name is in ALL_STAGES")
                    + 1
            });
            runner::run_stages(&config, &all[..last], &force, &progress::Bars, print_stage)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(c) => commands::bench::run(c),
        Command::Ablate(a) => commands::ablate::run(a),
        Command::Refilter(a) => commands::refilter::run(a),
        Command::Aflite(a) => commands::aflite::run(a),
        Command::Datamap(a) => commands::datamap::run(a),
        Command::Audit(a) => commands::audit::run(a),
        Command::Eval(a) => commands::eval::run(a),
        Command::Assemble(a) => commands::assemble::run(a),
        Command::Features(a) => commands::features::run(a),
    }
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("AF_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
