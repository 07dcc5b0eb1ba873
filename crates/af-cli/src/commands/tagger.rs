//! `af tagger train | eval | tag`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use af_text::tagger::{upos, TaggedSentence, TrainOptions};
use af_text::Tagger;
use anyhow::Context;
use clap::Subcommand;
use serde::Serialize;

#[derive(Subcommand)]
pub enum TaggerCommand {
    /// Train a tagger on CoNLL-U treebanks (UD English-EWT: ../shared/data/ud-english-ewt).
    Train {
        /// Training treebanks.
        #[arg(long, required = true, num_args = 1..)]
        conllu: Vec<PathBuf>,
        /// A held-out treebank to report accuracy on after training.
        #[arg(long)]
        dev: Option<PathBuf>,
        /// Passes over the training data.
        #[arg(long, default_value_t = TrainOptions::default().epochs)]
        epochs: usize,
        #[arg(long, default_value_t = 13)]
        seed: u64,
        /// 1: one left-to-right pass (faster); 2: a second pass that sees the first's tags ahead.
        #[arg(long, default_value_t = TrainOptions::default().passes as u8, value_parser = clap::value_parser!(u8).range(1..=2))]
        passes: u8,
        /// Where to write the model.
        #[arg(long, default_value = "models/pos-tagger-ewt.aftag")]
        out: PathBuf,
    },
    /// Accuracy of a tagger on CoNLL-U treebanks: UPOS, and the finer tags it predicts.
    Eval {
        #[arg(long, required = true, num_args = 1..)]
        conllu: Vec<PathBuf>,
        /// The model (default: the one built into af).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also list the most frequent confusions (gold -> predicted).
        #[arg(long, value_name = "N")]
        confusions: Option<usize>,
    },
    /// Tag and split sentences given on the command line: word/TAG, then noun phrase | ending.
    Tag {
        sentences: Vec<String>,
        #[arg(long)]
        model: Option<PathBuf>,
    },
}

pub fn run(command: TaggerCommand) -> anyhow::Result<ExitCode> {
    match command {
        TaggerCommand::Train {
            conllu,
            dev,
            epochs,
            seed,
            passes,
            out,
        } => {
            let options = TrainOptions {
                epochs,
                seed,
                passes: passes.into(),
                ..Default::default()
            };
            train(&conllu, dev.as_deref(), &options, &out)
        }
        TaggerCommand::Eval {
            conllu,
            model,
            json,
            confusions,
        } => {
            let tagger = super::load_tagger(model.as_deref())?;
            let sentences = read_all(&conllu)?;
            let acc = evaluate(&tagger, &sentences);
            if let Some(n) = confusions {
                print_confusions(&tagger, &sentences, n);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&acc)?);
            } else {
                println!(
                    "{} tokens: UPOS accuracy {:.2}%, fine-tag accuracy {:.2}%",
                    acc.tokens,
                    100.0 * acc.upos_accuracy,
                    100.0 * acc.fine_accuracy
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        TaggerCommand::Tag { sentences, model } => {
            let tagger = super::load_tagger(model.as_deref())?;
            for s in sentences {
                let tokens = af_text::tokenize(&s);
                let words = tokens.to_vec();
                let tags = tagger.tag(&words);
                let tagged: Vec<String> = words
                    .iter()
                    .zip(&tags)
                    .map(|(w, t)| format!("{w}/{t}"))
                    .collect();
                println!("{}", tagged.join(" "));
                match af_text::split::split_subject(
                    &words,
                    &tags,
                    af_text::split::AdverbSide::default(),
                ) {
                    Ok(i) => {
                        let cut = tokens.spans[i].start;
                        println!("{} | {}", s[..cut].trim_end(), &s[cut..]);
                    }
                    Err(e) => println!("(no split: {e})"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_confusions(tagger: &Tagger, sentences: &[TaggedSentence], n: usize) {
    let mut counts: std::collections::HashMap<(String, String), (usize, Vec<String>)> =
        Default::default();
    for s in sentences {
        for ((p, g), w) in tagger.tag(&s.words).iter().zip(&s.tags).zip(&s.words) {
            if upos(p) != upos(g) {
                let e = counts
                    .entry((upos(g).to_string(), upos(p).to_string()))
                    .or_default();
                e.0 += 1;
                if e.1.len() < 8 {
                    e.1.push(w.clone());
                }
            }
        }
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1 .0));
    for ((g, p), (c, words)) in v.into_iter().take(n) {
        println!("{c:>6} {g} -> {p}: {}", words.join(" "));
    }
}

fn read_all(files: &[PathBuf]) -> anyhow::Result<Vec<TaggedSentence>> {
    let mut out = Vec::new();
    for f in files {
        out.extend(af_io::conllu::read_conllu(f)?);
    }
    Ok(out)
}

#[derive(Serialize)]
pub struct Accuracy {
    pub tokens: usize,
    pub upos_accuracy: f64,
    pub fine_accuracy: f64,
}

pub fn evaluate(tagger: &Tagger, sentences: &[TaggedSentence]) -> Accuracy {
    let (mut tokens, mut upos_right, mut fine_right) = (0, 0, 0);
    for s in sentences {
        for (p, g) in tagger.tag(&s.words).iter().zip(&s.tags) {
            tokens += 1;
            upos_right += usize::from(upos(p) == upos(g));
            fine_right += usize::from(p == g);
        }
    }
    let n = tokens.max(1) as f64;
    Accuracy {
        tokens,
        upos_accuracy: upos_right as f64 / n,
        fine_accuracy: fine_right as f64 / n,
    }
}

fn train(
    conllu: &[PathBuf],
    dev: Option<&Path>,
    options: &TrainOptions,
    out: &Path,
) -> anyhow::Result<ExitCode> {
    let sentences = read_all(conllu)?;
    let tokens: usize = sentences.iter().map(|s| s.words.len()).sum();
    tracing::info!(
        "training on {} sentences, {tokens} tokens, {} epochs per pass",
        sentences.len(),
        options.epochs
    );
    let start = Instant::now();
    let bar = crate::progress::bar(Tagger::training_epochs(options) as u64, "epochs");
    let tagger = Tagger::train(&sentences, options, |epoch, acc| {
        bar.set_position(epoch as u64);
        tracing::debug!("epoch {epoch}: training accuracy {:.2}%", 100.0 * acc);
    })?;
    bar.finish_and_clear();
    let bytes = tagger.to_bytes();
    // The saved model is quantised: evaluate what was saved, not what was trained.
    let saved = Tagger::from_bytes(&bytes).context("the model just written does not read back")?;
    af_core::atomic::write(out, &bytes)
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "wrote {} ({} KiB, {} tags) in {:.1} s",
        out.display(),
        bytes.len() / 1024,
        saved.tags().len(),
        start.elapsed().as_secs_f64()
    );
    if let Some(dev) = dev {
        let acc = evaluate(&saved, &af_io::conllu::read_conllu(dev)?);
        println!(
            "{}: UPOS accuracy {:.2}% over {} tokens",
            dev.display(),
            100.0 * acc.upos_accuracy,
            acc.tokens
        );
    }
    Ok(ExitCode::SUCCESS)
}
