//! `af bench tagger`: the tagger's single-core throughput.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::machine;

#[derive(clap::Args)]
pub struct TaggerArgs {
    /// The sentences to tag (default: the project's caption fixture).
    #[arg(long)]
    conllu: Option<PathBuf>,
    /// Repeat the corpus until at least this many tokens were tagged.
    #[arg(long, default_value_t = 1_000_000)]
    min_tokens: usize,
    #[arg(long)]
    model: Option<PathBuf>,
}

pub fn run(args: TaggerArgs) -> anyhow::Result<ExitCode> {
    let TaggerArgs {
        conllu,
        min_tokens,
        model,
    } = args;
    let tagger = crate::commands::load_tagger(model.as_deref())?;
    let (source, sentences): (String, Vec<Vec<String>>) = match &conllu {
        Some(p) => (
            p.display().to_string(),
            af_io::conllu::read_conllu(p)?
                .into_iter()
                .map(|s| s.words)
                .collect(),
        ),
        None => {
            let path = PathBuf::from("fixtures/text/splits.tsv");
            let text = af_io::read_utf8(&path)?;
            let rows = text
                .lines()
                .skip(1)
                .map(|l| af_text::tokenize::tokenize_owned(&l.replace('\t', " ")))
                .collect();
            (path.display().to_string(), rows)
        }
    };
    let per_pass: usize = sentences.iter().map(Vec::len).sum();
    anyhow::ensure!(per_pass > 0, "no tokens in {source}");
    // One core: the figure the issue asks for is single-threaded throughput.
    let start = Instant::now();
    let mut tagged = 0usize;
    let mut checksum = 0usize;
    while tagged < min_tokens {
        for s in &sentences {
            checksum = checksum.wrapping_add(tagger.tag_ids(s).iter().sum::<usize>());
            tagged += s.len();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let out = json!({
        "benchmark": "tagger",
        "machine": machine(),
        "threads": 1,
        "source": source,
        "tokens": tagged,
        "seconds": seconds,
        "tokens_per_second": tagged as f64 / seconds,
        "checksum": checksum,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
