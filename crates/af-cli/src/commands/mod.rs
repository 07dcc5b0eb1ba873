pub mod ablate;
pub mod aflite;
pub mod assemble;
pub mod audit;
pub mod bench;
pub mod datamap;
pub mod doctor;
pub mod eval;
pub mod features;
pub mod lm_score;
pub mod refilter;
pub mod tagger;

/// Where and how a standalone command (not a stage) computes: the options `af aflite` and
/// `af features` share.
#[derive(clap::Args)]
pub struct ComputeArgs {
    #[arg(long, default_value_t = 13)]
    pub seed: u64,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// CPU threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Replace what is in --out.
    #[arg(long)]
    pub force: bool,
}

pub use af_pipeline::setup::{device_named, empty_out_dir, load_tagger};

/// `--format` of the commands that read a multiple-choice file (`af audit`, `af datamap`).
pub fn parse_question_format(s: &str) -> Result<af_io::questions::QuestionFormat, String> {
    use af_io::questions::QuestionFormat;
    QuestionFormat::parse(s).ok_or_else(|| format!("expected one of {}", QuestionFormat::names()))
}
