//! `af eval`: how hard a multiple-choice dataset is for a pretrained causal LM, zero-shot, scored
//! as lm-evaluation-harness scores it: per option the summed log-probability of its tokens after
//! the context; `acc` is the argmax of the sums, `acc_norm` of the sums divided by the option's
//! length in characters. The same two with the first sentence removed (zero-prompt: only the
//! start of the second sentence is context) and with nothing but the options (choices-only:
//! lm-eval's unconditional likelihood, the option after the BOS token alone).
//!
//! Requests are lm-eval's own: HellaSwag's layout through its `preprocess` and `process_docs`
//! (activity label, `ctx_a`, capitalised `ctx_b`), WinoGrande's through its partial scoring (the
//! sentence up to the blank with each option is the context, the rest the continuation); every
//! other layout as the export's lm-eval task asks (the context and the second sentence's start
//! joined, the option after one space).
//!
//! Writes into `--out`: `scores.jsonl` (per question, appended as it is scored: a rerun skips the
//! questions already there), `scores.csv` (per option), `eval.json` (the summary) and
//! `eval.html`.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use af_core::Question;
use af_io::questions::{read_questions, QuestionFile, QuestionFormat};
use af_nn::causal_lm::{CausalLm, Continuation};
use anyhow::Context;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::progress::Progress;

/// The three ways each option is scored.
pub const CONDITIONS: [&str; 3] = ["full", "zero-prompt", "choices-only"];

/// One option's three requests (context, continuation), and per condition the characters its
/// score is divided by for `acc_norm` (lm-eval's `len(choice)`).
#[derive(Clone, Debug, PartialEq)]
pub struct OptionPrompt {
    pub requests: [(String, String); 3],
    pub norm_chars: [usize; 3],
}

/// A question as the LM is asked it: the kept options (all, or gold and `ways - 1` distractors)
/// in their order in the file, and which is right.
#[derive(Clone, Debug, PartialEq)]
pub struct QuestionPrompt {
    pub id: String,
    pub label: usize,
    /// The indices in the file's option list of the options kept.
    pub kept: Vec<usize>,
    pub options: Vec<OptionPrompt>,
}

/// lm-eval's HellaSwag `preprocess`: strip, " [title]" to ". ", bracketed tags removed, double
/// spaces halved.
pub fn hellaswag_preprocess(text: &str) -> String {
    let text = text.trim().replace(" [title]", ". ");
    // re.sub("\\[.*?\\]", "", text): the shortest bracketed run, `.` matching no line break.
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after.find([']', '\n']) {
            Some(close) if after.as_bytes()[close] == b']' => {
                out.push_str(&rest[..open]);
                rest = &after[close + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace("  ", " ")
}

/// Python's `str.capitalize()`: the first character upper-case, every other one lower-case.
pub fn python_capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        None => String::new(),
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
    }
}

/// The three requests of an option scored after `target_delimiter + choice` as in lm-eval's
/// multiple-choice tasks: the full context, the second sentence's start alone, nothing (BOS).
fn continuation_prompt(query: &str, zero_context: &str, choice: &str) -> OptionPrompt {
    let continuation = format!(" {choice}");
    let chars = choice.chars().count();
    OptionPrompt {
        requests: [
            (query.to_string(), continuation.clone()),
            (zero_context.to_string(), continuation.clone()),
            (String::new(), continuation),
        ],
        norm_chars: [chars; 3],
    }
}

/// The requests of a question in every layout but HellaSwag's and WinoGrande's, as the export's
/// lm-eval task asks it: the context and the second sentence's start joined, each ending after
/// one space. af's and SWAG's files hold tokenised text, tidied first. The `lm-likelihood`
/// member scores a pool's candidates with these requests (af's layout), so that its scores are
/// `af eval`'s.
pub fn tokenised_prompts<'a>(
    format: QuestionFormat,
    context: &str,
    prefix: &str,
    endings: impl IntoIterator<Item = &'a str>,
) -> Vec<OptionPrompt> {
    let tidy = |s: &str| {
        if format.tokenized() {
            af_io::export::tidy(s)
        } else {
            s.trim().to_string()
        }
    };
    let prefix = tidy(prefix);
    let query = af_core::question::join_text(&tidy(context), &prefix);
    endings
        .into_iter()
        .map(|ending| continuation_prompt(&query, &prefix, &tidy(ending)))
        .collect()
}

/// The requests of one question read from `raw` (its JSON line, for the HellaSwag and WinoGrande
/// layouts, whose lm-eval tasks read fields the common [`Question`] does not keep).
fn question_prompt(
    q: &Question,
    format: QuestionFormat,
    raw: Option<&Value>,
    kept: Vec<usize>,
) -> anyhow::Result<QuestionPrompt> {
    let field = |key: &str| -> anyhow::Result<String> {
        let v = raw.and_then(|r| r.get(key));
        Ok(match v {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => String::new(),
            Some(other) => other.to_string(),
        })
    };
    let options = match format {
        f if f == QuestionFormat::HELLASWAG => {
            let ctx_b = python_capitalize(&field("ctx_b")?);
            let ctx = format!("{} {ctx_b}", field("ctx_a")?);
            let query = hellaswag_preprocess(&format!("{}: {ctx}", field("activity_label")?));
            let zero = hellaswag_preprocess(&ctx_b);
            kept.iter()
                .map(|&o| continuation_prompt(&query, &zero, &hellaswag_preprocess(&q.endings[o])))
                .collect()
        }
        f if f == QuestionFormat::WINOGRANDE => {
            let sentence = field("sentence")?;
            let blank = q
                .blank
                .as_ref()
                .context("a WinoGrande question without its blank")?;
            let idx = sentence
                .find('_')
                .with_context(|| format!("question {}: no blank in `sentence`", q.id))?;
            let target = sentence[idx + 1..].trim().to_string();
            let continuation = format!(" {target}");
            kept.iter()
                .map(|&o| {
                    let option = &blank.options[o];
                    let choice = format!("{}{option}", &sentence[..idx]);
                    OptionPrompt {
                        requests: [
                            (choice.clone(), continuation.clone()),
                            (option.clone(), continuation.clone()),
                            (String::new(), format!(" {option}")),
                        ],
                        norm_chars: [
                            choice.chars().count(),
                            target.chars().count(),
                            option.chars().count(),
                        ],
                    }
                })
                .collect()
        }
        _ => tokenised_prompts(
            format,
            &q.context,
            &q.prefix,
            kept.iter().map(|&o| q.endings[o].as_str()),
        ),
    };
    let label = kept
        .iter()
        .position(|&o| o == q.label)
        .expect("the gold is kept");
    Ok(QuestionPrompt {
        id: q.id.clone(),
        label,
        kept,
        options,
    })
}

/// The options of a question kept for `ways`: all when `ways` is none or not fewer than its
/// options, else the gold and `ways - 1` distractors drawn from a seed of `seed` and the id, in
/// their order in the file.
pub fn kept_options(q: &Question, ways: Option<usize>, seed: u64) -> Vec<usize> {
    let n = q.endings.len();
    let Some(k) = ways.filter(|&k| k < n) else {
        return (0..n).collect();
    };
    let distractors: Vec<usize> = (0..n).filter(|&o| o != q.label).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ af_core::hash::fnv1a64(q.id.as_bytes()));
    let mut kept: Vec<usize> = sample(&mut rng, distractors.len(), k.saturating_sub(1).max(1))
        .into_iter()
        .map(|i| distractors[i])
        .collect();
    kept.push(q.label);
    kept.sort_unstable();
    kept
}

/// Every question's requests, reading the raw JSON lines where the layout needs them.
pub fn prompts(
    file: &QuestionFile,
    ways: Option<usize>,
    seed: u64,
) -> anyhow::Result<Vec<QuestionPrompt>> {
    let raw_lines: Vec<String> = match file.format {
        f if f == QuestionFormat::HELLASWAG || f == QuestionFormat::WINOGRANDE => {
            let text = af_io::read_utf8(&file.path)?;
            text.trim_start_matches('\u{feff}')
                .lines()
                .map(str::to_string)
                .collect()
        }
        _ => Vec::new(),
    };
    file.questions
        .iter()
        .map(|q| {
            let raw = raw_lines
                .get(q.line.wrapping_sub(1))
                .map(|l| serde_json::from_str::<Value>(l))
                .transpose()
                .with_context(|| format!("{} line {}", file.path.display(), q.line))?;
            question_prompt(q, file.format, raw.as_ref(), kept_options(q, ways, seed))
        })
        .collect()
}

/// One scored question, a line of `scores.jsonl`: per kept option, per condition, the summed
/// log-probability and the tokens it was summed over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredQuestion {
    pub id: String,
    pub label: usize,
    /// The options' indices in the file.
    pub kept: Vec<usize>,
    /// [option][condition]
    pub logprob: Vec<[f64; 3]>,
    pub tokens: Vec<[usize; 3]>,
    pub norm_chars: Vec<[usize; 3]>,
}

impl ScoredQuestion {
    /// The first option with the highest score (numpy's argmax), raw or per character.
    pub fn choice(&self, condition: usize, normalised: bool) -> usize {
        let score = |o: usize| self.score(o, condition, normalised);
        (0..self.logprob.len()).fold(0, |best, o| if score(o) > score(best) { o } else { best })
    }

    /// The first option with the lowest score: [`Self::choice`] turned round.
    pub fn least_likely(&self, condition: usize, normalised: bool) -> usize {
        let score = |o: usize| self.score(o, condition, normalised);
        (0..self.logprob.len()).fold(0, |low, o| if score(o) < score(low) { o } else { low })
    }

    /// Option `o`'s log-probability under `condition`, raw or per character.
    fn score(&self, o: usize, condition: usize, normalised: bool) -> f64 {
        let l = self.logprob[o][condition];
        if normalised {
            l / self.norm_chars[o][condition].max(1) as f64
        } else {
            l
        }
    }
}

/// An accuracy over the questions, its 95% Wilson interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Questions answered right; ties, where a reading has them, credit 1/(options tied).
    pub right: f64,
    pub accuracy: f64,
    pub low: f64,
    pub high: f64,
}

impl Accuracy {
    fn of(right: f64, n: usize) -> Self {
        let (low, high) = af_audit::stats::wilson(right, n);
        Self {
            right,
            accuracy: right / n.max(1) as f64,
            low,
            high,
        }
    }
}

/// As every table and printout shows it: `23.5% [18.2, 29.8]`.
impl std::fmt::Display for Accuracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1}% [{:.1}, {:.1}]",
            100.0 * self.accuracy,
            100.0 * self.low,
            100.0 * self.high
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConditionResult {
    pub condition: String,
    pub acc: Accuracy,
    pub acc_norm: Accuracy,
}

/// What `eval.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    pub dataset: PathBuf,
    pub format: QuestionFormat,
    pub model: PathBuf,
    pub model_name: String,
    pub ways: Option<usize>,
    pub seed: u64,
    pub questions: usize,
    /// The mean over questions of 1 / options kept.
    pub chance: f64,
    pub conditions: Vec<ConditionResult>,
    /// Seconds spent scoring in this run (questions taken from the cache cost none).
    pub seconds: f64,
    pub scored_now: usize,
    pub device: String,
    /// The LM's scores read by a trained probe (absent from files af wrote before it had one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood_probe: Option<LikelihoodProbe>,
}

/// What each option gives the likelihood probe, in this order: the full condition's
/// log-probability per character (acc_norm's score) and per token, what the context adds per
/// token (full minus zero-prompt), and the choices-only log-probability per character.
pub const PROBE_FEATURES: [&str; 4] = [
    "full per character",
    "full per token",
    "context gain per token",
    "choices-only per character",
];

/// Folds the likelihood probe is cross-fitted over.
pub const PROBE_FOLDS: usize = 5;

/// The LM's scores read both ways: acc and acc_norm take the most likely option, which says how
/// hard the questions are for the LM as it is; a detector trained on the dataset can also learn
/// that the gold is the *least* likely option, as it is where a pool was written by an LM and the
/// gold by a person. `probe` is a conditional logit over [`PROBE_FEATURES`], trained on four
/// folds of the questions and tested on the fifth in turn, so every question is tested once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LikelihoodProbe {
    pub features: Vec<String>,
    pub folds: usize,
    pub probe: Accuracy,
    /// Fitted on every question, per standardised feature: a negative weight reads the feature
    /// the other way round (the gold scores lower than its distractors).
    pub weights: Vec<f64>,
    /// The option with the lowest full log-probability per character: acc_norm turned round.
    pub least_likely: Accuracy,
    /// Each feature alone, and the characters per token of the option's tokenisation: how often
    /// the gold has the lowest value among its question's options and how often the highest
    /// (ties credit 1/(options tied)). Says which reading carries the probe's edge; absent from
    /// files af wrote before it had them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readings: Vec<SingleReading>,
}

/// One reading of the options, the gold's place at either end of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SingleReading {
    pub reading: String,
    pub gold_lowest: Accuracy,
    pub gold_highest: Accuracy,
}

/// The reading [`LikelihoodProbe::readings`] adds to the probe's features: no LM score, only how
/// the LM's tokenizer cuts the option on its own (the choices-only condition's characters and
/// tokens: in WinoGrande's layout the full condition's tokens are the shared continuation). A
/// writer whose words are shorter or commoner than the person's leaves it even where the scores
/// match.
pub const CHARACTERS_PER_TOKEN: &str = "characters per token";

/// The gold's credit at the low and the high end of `values` (one per option), ties shared as
/// the probe shares them.
fn gold_at_ends(values: &[f64], label: usize) -> (f64, f64) {
    use af_audit::option_probe::credit;
    let negated: Vec<f64> = values.iter().map(|v| -v).collect();
    (credit(&negated, label), credit(values, label))
}

/// Each of the probe's features alone, then characters per token.
fn single_readings(
    scored: &[ScoredQuestion],
    probed: &[af_audit::option_probe::ProbeQuestion],
) -> Vec<SingleReading> {
    let reading = |name: &str, values: &dyn Fn(usize) -> Vec<f64>| {
        let (mut low, mut high) = (0.0, 0.0);
        for (i, q) in scored.iter().enumerate() {
            let (l, h) = gold_at_ends(&values(i), q.label);
            low += l;
            high += h;
        }
        SingleReading {
            reading: name.to_string(),
            gold_lowest: Accuracy::of(low, scored.len()),
            gold_highest: Accuracy::of(high, scored.len()),
        }
    };
    let mut readings: Vec<SingleReading> = PROBE_FEATURES
        .iter()
        .enumerate()
        .map(|(f, name)| reading(name, &|i| probed[i].options.iter().map(|o| o[f]).collect()))
        .collect();
    readings.push(reading(CHARACTERS_PER_TOKEN, &|i| {
        let q = &scored[i];
        (0..q.logprob.len())
            .map(|o| q.norm_chars[o][2] as f64 / q.tokens[o][2].max(1) as f64)
            .collect()
    }));
    readings
}

fn probe_features(q: &ScoredQuestion, o: usize) -> Vec<f64> {
    let (l, t) = (q.logprob[o], q.tokens[o][0].max(1) as f64);
    vec![
        q.score(o, 0, true),
        l[0] / t,
        (l[0] - l[1]) / t,
        q.score(o, 2, true),
    ]
}

/// The probe and the least-likely reading of scored questions; `seed` deals the folds.
pub fn likelihood_probe(scored: &[ScoredQuestion], seed: u64) -> LikelihoodProbe {
    use af_audit::option_probe::{cross_fitted, ProbeQuestion, ProbeSettings};
    let questions: Vec<ProbeQuestion> = scored
        .iter()
        .map(|q| ProbeQuestion {
            label: q.label,
            options: (0..q.logprob.len()).map(|o| probe_features(q, o)).collect(),
        })
        .collect();
    let result = cross_fitted(
        &questions,
        ProbeSettings {
            folds: PROBE_FOLDS,
            seed,
            ..ProbeSettings::default()
        },
    );
    let least = scored
        .iter()
        .filter(|q| q.least_likely(0, true) == q.label)
        .count();
    LikelihoodProbe {
        features: PROBE_FEATURES.iter().map(|f| f.to_string()).collect(),
        folds: PROBE_FOLDS,
        probe: Accuracy::of(result.right, scored.len()),
        weights: result.weights,
        least_likely: Accuracy::of(least as f64, scored.len()),
        readings: single_readings(scored, &questions),
    }
}

/// The summary of scored questions.
pub fn summarise(scored: &[ScoredQuestion]) -> (f64, Vec<ConditionResult>) {
    let n = scored.len();
    let chance = scored
        .iter()
        .map(|q| 1.0 / q.logprob.len().max(1) as f64)
        .sum::<f64>()
        / n.max(1) as f64;
    let results = CONDITIONS
        .iter()
        .enumerate()
        .map(|(c, name)| {
            let right = |norm| {
                scored
                    .iter()
                    .filter(|q| q.choice(c, norm) == q.label)
                    .count() as f64
            };
            ConditionResult {
                condition: name.to_string(),
                acc: Accuracy::of(right(false), n),
                acc_norm: Accuracy::of(right(true), n),
            }
        })
        .collect();
    (chance, results)
}

/// Scores questions in chunks of `chunk`, `batch_size` sequences per forward pass; `done` is
/// called with each chunk's scores in order.
pub fn score_questions(
    lm: &CausalLm,
    prompts: &[QuestionPrompt],
    batch_size: usize,
    chunk: usize,
    mut done: impl FnMut(&[ScoredQuestion]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for group in prompts.chunks(chunk.max(1)) {
        let requests: Vec<Continuation> = group
            .iter()
            .flat_map(|q| &q.options)
            .flat_map(|o| &o.requests)
            .map(|(context, continuation)| Continuation {
                context,
                continuation,
            })
            .collect();
        let scores = lm.loglikelihoods(&requests, batch_size)?;
        let mut at = scores.iter();
        let scored: Vec<ScoredQuestion> = group
            .iter()
            .map(|q| {
                let (mut logprob, mut tokens) = (Vec::new(), Vec::new());
                for _ in &q.options {
                    let s: Vec<_> = at.by_ref().take(3).collect();
                    logprob.push([s[0].logprob, s[1].logprob, s[2].logprob]);
                    tokens.push([s[0].tokens, s[1].tokens, s[2].tokens]);
                }
                ScoredQuestion {
                    id: q.id.clone(),
                    label: q.label,
                    kept: q.kept.clone(),
                    logprob,
                    tokens,
                    norm_chars: q.options.iter().map(|o| o.norm_chars).collect(),
                }
            })
            .collect();
        done(&scored)?;
    }
    Ok(())
}

/// What `af eval` is asked to do.
pub struct EvalRequest<'a> {
    pub dataset: &'a Path,
    /// How `eval.json` and `eval.html` name the dataset (default: `dataset`): the export names
    /// its files relative to its folder, which is renamed when it is done.
    pub name: Option<&'a Path>,
    pub format: Option<QuestionFormat>,
    pub skip_bad: bool,
    pub model: &'a Path,
    pub ways: Option<usize>,
    pub seed: u64,
    /// Sequences per forward pass.
    pub batch_size: usize,
    pub device: String,
    pub threads: usize,
    pub out: &'a Path,
    /// Score every question again, dropping `scores.jsonl`.
    pub force: bool,
}

/// The settings `scores.jsonl` was made with: a rerun with others starts afresh only with
/// `force`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct CacheKey {
    dataset: PathBuf,
    model: PathBuf,
    model_bytes: u64,
    ways: Option<usize>,
    seed: u64,
}

/// Evaluates a file and writes every output into `request.out`.
pub fn run(request: &EvalRequest, progress: &dyn Progress) -> anyhow::Result<EvalSummary> {
    af_nn::runtime::set_threads(request.threads);
    let device = crate::setup::device_named(&request.device)?;
    let file = read_questions(request.dataset, request.format, request.skip_bad)?;
    if request.ways.is_some_and(|k| k < 2) {
        anyhow::bail!("--ways must be at least 2");
    }
    let prompts = prompts(&file, request.ways, request.seed)?;
    std::fs::create_dir_all(request.out)
        .with_context(|| format!("cannot create {}", request.out.display()))?;
    let key = CacheKey {
        dataset: std::fs::canonicalize(request.dataset)?,
        model: std::fs::canonicalize(request.model)?,
        model_bytes: std::fs::metadata(request.model)?.len(),
        ways: request.ways,
        seed: request.seed,
    };
    let (key_path, cache_path) = (
        request.out.join("scores-key.json"),
        request.out.join("scores.jsonl"),
    );
    let old_key: Option<CacheKey> = std::fs::read_to_string(&key_path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    if request.force || old_key.as_ref() != Some(&key) {
        if old_key.is_some() && !request.force && cache_path.exists() {
            anyhow::bail!(
                "{} holds scores made with other settings ({}); --force scores afresh",
                cache_path.display(),
                key_path.display()
            );
        }
        let _ = std::fs::remove_file(&cache_path);
        af_core::atomic::write(&key_path, serde_json::to_string_pretty(&key)?.as_bytes())?;
    }
    let mut cached = read_cache(&cache_path)?;
    let wanted: HashSet<&str> = prompts.iter().map(|p| p.id.as_str()).collect();
    cached.retain(|id, _| wanted.contains(id.as_str()));
    let todo: Vec<QuestionPrompt> = prompts
        .iter()
        .filter(|p| !cached.contains_key(&p.id))
        .cloned()
        .collect();

    let lm = CausalLm::load(request.model, device)?;
    let start = std::time::Instant::now();
    let bar = progress.bar("questions", prompts.len() as u64);
    bar.set_position(cached.len() as u64);
    let mut writer = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&cache_path)
        .with_context(|| format!("cannot open {}", cache_path.display()))?;
    score_questions(&lm, &todo, request.batch_size, 16, |scored| {
        let mut lines = String::new();
        for q in scored {
            lines.push_str(&serde_json::to_string(q)?);
            lines.push('\n');
            cached.insert(q.id.clone(), q.clone());
        }
        writer.write_all(lines.as_bytes())?;
        writer.flush()?;
        bar.inc(scored.len() as u64);
        Ok(())
    })?;
    bar.finish();
    let seconds = start.elapsed().as_secs_f64();
    let scored: Vec<ScoredQuestion> = prompts.iter().map(|p| cached[&p.id].clone()).collect();
    let (chance, conditions) = summarise(&scored);
    let summary = EvalSummary {
        dataset: request.name.unwrap_or(request.dataset).to_path_buf(),
        format: file.format,
        model: request.model.to_path_buf(),
        model_name: lm.name.clone(),
        ways: request.ways,
        seed: request.seed,
        questions: scored.len(),
        chance,
        conditions,
        seconds,
        scored_now: todo.len(),
        device: format!("{device:?}"),
        likelihood_probe: Some(likelihood_probe(&scored, request.seed)),
    };
    write_outputs(request.out, &summary, &scored)?;
    Ok(summary)
}

fn read_cache(path: &Path) -> anyhow::Result<HashMap<String, ScoredQuestion>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(HashMap::new());
    };
    let mut out = HashMap::new();
    for line in text.lines() {
        // A run killed mid-write leaves a partial last line: that question is scored again.
        if let Ok(q) = serde_json::from_str::<ScoredQuestion>(line) {
            out.insert(q.id.clone(), q);
        }
    }
    Ok(out)
}

/// The columns of `scores.csv`.
const SCORES_COLUMNS: [&str; 12] = [
    "id",
    "option",
    "gold",
    "full",
    "full_tokens",
    "full_chars",
    "zero_prompt",
    "zero_prompt_tokens",
    "zero_prompt_chars",
    "choices_only",
    "choices_only_tokens",
    "choice_chars",
];

/// The one column of [`SCORES_COLUMNS`] a file may lack: it came after the others.
const LATE_COLUMN: &str = "zero_prompt_chars";

/// `scores.csv`: one row per kept option.
pub fn scores_csv(scored: &[ScoredQuestion]) -> anyhow::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(SCORES_COLUMNS)?;
    for q in scored {
        for (i, &o) in q.kept.iter().enumerate() {
            let (l, t, c) = (q.logprob[i], q.tokens[i], q.norm_chars[i]);
            w.write_record([
                q.id.clone(),
                o.to_string(),
                u8::from(i == q.label).to_string(),
                format!("{:.6}", l[0]),
                t[0].to_string(),
                c[0].to_string(),
                format!("{:.6}", l[1]),
                t[1].to_string(),
                c[1].to_string(),
                format!("{:.6}", l[2]),
                t[2].to_string(),
                c[2].to_string(),
            ])?;
        }
    }
    Ok(w.into_inner()?)
}

/// The scored questions of a `scores.csv`, in its order: what [`resummarise`] reads where the
/// `scores.jsonl` cache was not kept (a run's committed files). Files from before the
/// `zero_prompt_chars` column have the option's characters in its place, which is what it holds
/// in every layout but WinoGrande's (`winogrande` says which layout the file is of).
pub fn scored_from_csv(path: &Path, winogrande: bool) -> anyhow::Result<Vec<ScoredQuestion>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = reader.headers()?.clone();
    let columns = SCORES_COLUMNS.map(|name| headers.iter().position(|h| h == name));
    if let Some((name, _)) = SCORES_COLUMNS
        .iter()
        .zip(&columns)
        .find(|(name, c)| c.is_none() && **name != LATE_COLUMN)
    {
        anyhow::bail!(
            "{}: no `{name}` column (is it af eval's scores.csv?)",
            path.display()
        );
    }
    let late = SCORES_COLUMNS.iter().position(|&c| c == LATE_COLUMN);
    let zero_chars = columns[late.expect("a column of the list")];
    anyhow::ensure!(
        zero_chars.is_some() || !winogrande,
        "{} has no `{LATE_COLUMN}` column: WinoGrande's zero-prompt acc_norm cannot be read \
         back from it; score the dataset again",
        path.display()
    );
    let [id, option, gold, full, full_tokens, full_chars, zero, zero_tokens, _, choices, choices_tokens, choice_chars] =
        columns.map(|c| c.unwrap_or(usize::MAX));
    let mut out: Vec<ScoredQuestion> = Vec::new();
    for (row, record) in reader.records().enumerate() {
        let line = row + 2;
        let record = record.with_context(|| format!("{} line {line}", path.display()))?;
        let field = |i: usize| record.get(i).unwrap_or("");
        let at = |i: usize| Field {
            path,
            line,
            column: &headers[i],
            text: field(i),
        };
        let number = |i: usize| at(i).parse::<f64>("a number");
        let count = |i: usize| at(i).parse::<usize>("a count");
        let chars = count(full_chars)?;
        let zero_chars = zero_chars.map_or(Ok(chars), count)?;
        if out.last().is_none_or(|q| q.id != field(id)) {
            out.push(ScoredQuestion {
                id: field(id).to_string(),
                label: usize::MAX,
                kept: Vec::new(),
                logprob: Vec::new(),
                tokens: Vec::new(),
                norm_chars: Vec::new(),
            });
        }
        let q = out.last_mut().expect("pushed above");
        if field(gold) == "1" {
            q.label = q.kept.len();
        }
        q.kept.push(count(option)?);
        q.logprob
            .push([number(full)?, number(zero)?, number(choices)?]);
        q.tokens.push([
            count(full_tokens)?,
            count(zero_tokens)?,
            count(choices_tokens)?,
        ]);
        q.norm_chars.push([chars, zero_chars, count(choice_chars)?]);
    }
    if let Some(q) = out.iter().find(|q| q.label == usize::MAX) {
        anyhow::bail!(
            "{}: question {} has no option with gold 1",
            path.display(),
            q.id
        );
    }
    Ok(out)
}

/// One field of a CSV row, for its error message.
struct Field<'a> {
    path: &'a Path,
    line: usize,
    column: &'a str,
    text: &'a str,
}

impl Field<'_> {
    fn parse<T: std::str::FromStr>(&self, what: &str) -> anyhow::Result<T> {
        self.text.parse().map_err(|_| {
            anyhow::anyhow!(
                "{} line {}, `{}`: expected {what}, found {:?}",
                self.path.display(),
                self.line,
                self.column,
                self.text
            )
        })
    }
}

/// Summarises `dir` again from its `scores.csv` without the LM, keeping what its `eval.json`
/// says of the dataset, model and run, and rewrites `eval.json` and `eval.html`: how results
/// written before a new reading of the scores (the likelihood probe) get it.
pub fn resummarise(dir: &Path) -> anyhow::Result<EvalSummary> {
    let path = dir.join("eval.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {} (af eval writes it)", path.display()))?;
    let old: EvalSummary = serde_json::from_str(&text)
        .with_context(|| format!("{} is not af eval's eval.json", path.display()))?;
    let scored = scored_from_csv(
        &dir.join("scores.csv"),
        old.format == QuestionFormat::WINOGRANDE,
    )?;
    anyhow::ensure!(
        scored.len() == old.questions,
        "{} has {} questions, its eval.json {}",
        dir.join("scores.csv").display(),
        scored.len(),
        old.questions
    );
    let (chance, conditions) = summarise(&scored);
    let summary = EvalSummary {
        chance,
        conditions,
        likelihood_probe: Some(likelihood_probe(&scored, old.seed)),
        ..old
    };
    write_summary(dir, &summary)?;
    Ok(summary)
}

/// `af eval`'s summary in `dir` (its `eval.json`), which must be of the file `dataset`: what
/// `af audit --lm-eval DIR` shows beside its detectors.
pub fn summary_of(dir: &Path, dataset: &Path) -> anyhow::Result<EvalSummary> {
    let path = dir.join("eval.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} (`af eval {} --out {}` writes it)",
            path.display(),
            dataset.display(),
            dir.display()
        )
    })?;
    let summary: EvalSummary = serde_json::from_str(&text)
        .with_context(|| format!("{} is not af eval's eval.json", path.display()))?;
    let same = |p: &Path| p.canonicalize().ok();
    anyhow::ensure!(
        same(&summary.dataset).is_some() && same(&summary.dataset) == same(dataset),
        "{} is af eval of {}, not of {}",
        path.display(),
        summary.dataset.display(),
        dataset.display()
    );
    Ok(summary)
}

/// The results as an HTML table, with a line on how they were made: for `eval.html` and the
/// run's report.
pub fn html_table(results: &[(&str, &EvalSummary)]) -> String {
    let mut rows = Vec::new();
    for (name, s) in results {
        for c in &s.conditions {
            rows.push(vec![
                name.to_string(),
                c.condition.clone(),
                c.acc.to_string(),
                c.acc_norm.to_string(),
                format!("{:.1}%", 100.0 * s.chance),
                s.questions.to_string(),
            ]);
        }
    }
    af_report::table(
        &[
            "dataset",
            "scored",
            "acc [95%]",
            "acc_norm [95%]",
            "chance",
            "questions",
        ],
        &rows,
    )
}

/// What the conditions mean, under the table.
pub const CONDITIONS_NOTE: &str = "Scored as lm-evaluation-harness scores multiple choice: acc picks the option with the highest summed log-probability, acc_norm divides it by the option's length in characters. full: the whole context; zero-prompt: the first sentence removed (only the start of the second sentence, or for WinoGrande the option alone, is context); choices-only: the option after the BOS token alone (lm-eval's unconditional likelihood). A dataset whose zero-prompt or choices-only accuracy is far above chance can be answered without reading its context.";

fn write_outputs(out: &Path, s: &EvalSummary, scored: &[ScoredQuestion]) -> anyhow::Result<()> {
    write_file(out, "scores.csv", &scores_csv(scored)?)?;
    write_summary(out, s)
}

/// `eval.json` and `eval.html`.
fn write_summary(out: &Path, s: &EvalSummary) -> anyhow::Result<()> {
    write_file(
        out,
        "eval.json",
        serde_json::to_string_pretty(s)?.as_bytes(),
    )?;
    write_file(out, "eval.html", eval_page(s).as_bytes())
}

fn write_file(out: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    af_core::atomic::write(out.join(name), bytes)
        .with_context(|| format!("cannot write {}", out.join(name).display()))
}

/// The likelihood probe in a sentence, for `eval.html` and the run's report.
pub fn probe_sentence(p: &LikelihoodProbe, chance: f64) -> String {
    format!(
        "Read the other way: a probe trained on the LM's scores ({}; cross-fitted over {} folds) \
         finds the gold {} of the time, chance {:.1}%; the least likely option per character is \
         the gold {} of the time. Far above chance, a detector trained on this dataset can tell \
         the gold by how likely the LM finds it, whatever acc and acc_norm say.",
        p.features.join(", "),
        p.folds,
        p.probe,
        100.0 * chance,
        p.least_likely
    )
}

/// The results of one file as HTML: the table, what its conditions mean, and the probe.
pub fn results_html(name: &str, s: &EvalSummary) -> String {
    let probe = s.likelihood_probe.as_ref().map_or(String::new(), |p| {
        format!(
            "<p>{}</p>{}",
            af_report::escape(&probe_sentence(p, s.chance)),
            readings_table(p)
        )
    });
    format!(
        "{}<p class=\"sub\">{}</p>{probe}",
        html_table(&[(name, s)]),
        af_report::escape(CONDITIONS_NOTE)
    )
}

/// The single readings, one row each; empty for files written before them.
fn readings_table(p: &LikelihoodProbe) -> String {
    if p.readings.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = p
        .readings
        .iter()
        .map(|r| {
            vec![
                r.reading.clone(),
                r.gold_lowest.to_string(),
                r.gold_highest.to_string(),
            ]
        })
        .collect();
    af_report::table(
        &[
            "one reading alone",
            "gold lowest [95%]",
            "gold highest [95%]",
        ],
        &rows,
    )
}

fn eval_page(s: &EvalSummary) -> String {
    let name = s
        .dataset
        .file_name()
        .map_or("dataset".into(), |n| n.to_string_lossy().into_owned());
    let page = af_report::Page {
        title: format!("af eval: {name}"),
        subtitle: format!(
            "{} questions ({} layout), {} ({}), zero-shot{}",
            s.questions,
            s.format,
            s.model_name,
            s.model.display(),
            s.ways.map_or(String::new(), |k| format!(", {k}-way"))
        ),
        sections: vec![af_report::Section {
            title: "How hard it is for a language model".into(),
            html: results_html(&name, s),
        }],
        questions: Vec::new(),
    };
    page.render()
}

impl std::fmt::Display for EvalSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: {} questions, {}, chance {:.1}%, {:.1} s for {} scored now",
            self.dataset.display(),
            self.questions,
            self.model_name,
            100.0 * self.chance,
            self.seconds,
            self.scored_now
        )?;
        for c in &self.conditions {
            writeln!(
                f,
                "  {:<13} acc {}  acc_norm {}",
                c.condition, c.acc, c.acc_norm
            )?;
        }
        if let Some(p) = &self.likelihood_probe {
            writeln!(
                f,
                "  read the other way (a probe trained on the scores, {} folds): {}; least likely per character {}",
                p.folds, p.probe, p.least_likely
            )?;
            for r in &p.readings {
                writeln!(
                    f,
                    "    {:<27} gold lowest {}  highest {}",
                    r.reading, r.gold_lowest, r.gold_highest
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs of lm-eval 0.4.9's `hellaswag.utils.preprocess` and Python's `str.capitalize`.
    #[test]
    fn preprocessing_is_lm_eval_s() {
        for (input, python) in [
            (
                "  [header] How to x [title] Choose a spot. [step] Tulips need sun.  ",
                " How to x. Choose a spot. Tulips need sun.",
            ),
            ("a [b\n] c [d] e", "a [b\n] c e"),
            ("x  y   z", "x y  z"),
            ("no [close", "no [close"),
            ("[a][b] c", " c"),
            ("ends [title]", "ends. "),
        ] {
            assert_eq!(hellaswag_preprocess(input), python, "{input:?}");
        }
        for (input, python) in [
            ("the MAN", "The man"),
            ("A GUN fires", "A gun fires"),
            ("", ""),
            ("éCOLE", "École"),
        ] {
            assert_eq!(python_capitalize(input), python);
        }
    }

    fn fixture(name: &str) -> QuestionFile {
        let path = af_test_support::crate_dir()
            .join("../../fixtures/eval")
            .join(name);
        read_questions(&path, None, false).unwrap()
    }

    #[test]
    fn requests_are_those_of_lm_eval_s_tasks() {
        let p = prompts(&fixture("hellaswag-lm-eval.jsonl"), None, 1).unwrap();
        assert_eq!(p.len(), 5);
        let [full, zero, choices] = &p[3].options[1].requests;
        assert_eq!(full.0, "Running a marathon: Hundreds of runners crowd the starting line of a city race. A gun fires and");
        assert_eq!(full.1, " the runners surge forward down the street.");
        assert_eq!(zero.0, "A gun fires and");
        assert_eq!(choices.0, "");
        assert_eq!(choices.1, full.1);
        assert_eq!(p[3].label, 1);
        // WikiHow's tags go; an empty ctx_b leaves a trailing space that `strip` removes.
        let [full, zero, _] = &p[2].options[0].requests;
        assert_eq!(full.0, "Home and Garden: How to plant tulip bulbs. Choose a sunny spot. Tulips need at least six hours of sun.");
        assert_eq!(
            full.1,
            "  Dig a hole about eight inches deep. Place the bulb with its pointed end up."
        );
        assert_eq!(zero.0, "");
        assert_eq!(p[2].options[0].norm_chars[0], full.1.chars().count() - 1);

        let p = prompts(&fixture("winogrande-lm-eval.jsonl"), None, 1).unwrap();
        let [full, zero, choices] = &p[0].options[1].requests;
        assert_eq!(
            full.0,
            "The trophy did not fit into the suitcase because the suitcase"
        );
        assert_eq!(full.1, " was too large.");
        assert_eq!(zero.0, "the suitcase");
        assert_eq!(choices, &(String::new(), " the suitcase".to_string()));
        assert_eq!(p[0].options[1].norm_chars[0], full.0.chars().count());
        assert_eq!((p[0].label, p[1].label), (0, 1));
    }

    #[test]
    fn ways_keep_the_gold_and_a_fixed_draw_of_distractors() {
        let file = fixture("hellaswag-lm-eval.jsonl");
        let q = &file.questions[1];
        let a = kept_options(q, Some(2), 7);
        assert_eq!(a.len(), 2);
        assert!(a.contains(&q.label));
        assert_eq!(
            a,
            kept_options(q, Some(2), 7),
            "the same seed, the same draw"
        );
        assert_eq!(kept_options(q, Some(3), 7).len(), 3);
        assert_eq!(kept_options(q, Some(10), 7), vec![0, 1, 2, 3]);
        let draws: HashSet<Vec<usize>> = (0..20).map(|s| kept_options(q, Some(2), s)).collect();
        assert!(draws.len() > 1, "the seed decides which distractor");
        let p = prompts(&file, Some(2), 7).unwrap();
        assert!(p.iter().all(|q| q.options.len() == 2
            && q.kept[q.label] == file.questions.iter().find(|f| f.id == q.id).unwrap().label));
    }

    /// `n` 4-way questions whose gold the LM finds less likely per token than its distractors
    /// (by `gap` nats, plus noise), as a pool an LM wrote itself.
    fn lm_written(n: usize, gap: f64) -> Vec<ScoredQuestion> {
        use rand::Rng;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        (0..n)
            .map(|i| {
                let label = i % 4;
                let mut logprob = Vec::new();
                let mut tokens = Vec::new();
                for o in 0..4 {
                    let t = rng.random_range(5..15usize);
                    let per_token = -2.0 - rng.random::<f64>() - if o == label { gap } else { 0.0 };
                    let full = per_token * t as f64;
                    logprob.push([full, full - 5.0 * rng.random::<f64>(), full - 10.0]);
                    tokens.push([t; 3]);
                }
                ScoredQuestion {
                    id: format!("q{i}"),
                    label,
                    kept: vec![0, 1, 2, 3],
                    norm_chars: tokens.iter().map(|t| [t[0] * 5; 3]).collect(),
                    logprob,
                    tokens,
                }
            })
            .collect()
    }

    #[test]
    fn the_probe_reads_a_gold_the_lm_finds_least_likely() {
        let scored = lm_written(400, 0.6);
        let (_, conditions) = summarise(&scored);
        assert!(conditions[0].acc_norm.accuracy < 0.15, "{conditions:?}");
        let p = likelihood_probe(&scored, 0);
        assert!(p.probe.accuracy > 0.6, "{p:?}");
        assert!(p.least_likely.accuracy > 0.6, "{p:?}");
        assert!(p.weights[0] < 0.0 && p.weights[1] < 0.0, "{p:?}");
        let fair = likelihood_probe(&lm_written(400, 0.0), 0);
        assert!(fair.probe.low < 0.25 && 0.25 < fair.probe.high, "{fair:?}");
        // The first reading is acc_norm's score: its low end is the least likely reading, its
        // high end acc_norm itself (equal where no two options tie, as here: the readings share
        // a tie, acc_norm and least_likely take the first option tied).
        let first = &p.readings[0];
        assert_eq!(first.reading, PROBE_FEATURES[0]);
        assert_eq!(first.gold_lowest.right, p.least_likely.right);
        assert_eq!(first.gold_highest.accuracy, conditions[0].acc_norm.accuracy);
        assert_eq!(p.readings.last().unwrap().reading, CHARACTERS_PER_TOKEN);
    }

    #[test]
    fn a_single_reading_credits_the_gold_at_either_end_and_shares_ties() {
        assert_eq!(gold_at_ends(&[1.0, 2.0, 3.0], 0), (1.0, 0.0));
        assert_eq!(gold_at_ends(&[1.0, 2.0, 3.0], 2), (0.0, 1.0));
        assert_eq!(gold_at_ends(&[1.0, 2.0, 3.0], 1), (0.0, 0.0));
        assert_eq!(gold_at_ends(&[2.0, 2.0, 5.0, 2.0], 3), (1.0 / 3.0, 0.0));
        assert_eq!(gold_at_ends(&[4.0, 4.0], 0), (0.5, 0.5));
        // Characters per token from the choices-only condition's counts (the same in every
        // condition here): the gold (9 characters in 2 tokens) has the most, the option of 5
        // characters in 5 tokens the fewest.
        let q = ScoredQuestion {
            id: "q".into(),
            label: 1,
            kept: vec![0, 1, 2],
            logprob: vec![[-6.0; 3], [-4.0; 3], [-5.0; 3]],
            tokens: vec![[4; 3], [2; 3], [5; 3]],
            norm_chars: vec![[9; 3], [9; 3], [5; 3]],
        };
        let probed = [af_audit::option_probe::ProbeQuestion {
            label: q.label,
            options: (0..3).map(|o| probe_features(&q, o)).collect(),
        }];
        let readings = single_readings(std::slice::from_ref(&q), &probed);
        let cpt = readings.last().unwrap();
        assert_eq!((cpt.gold_lowest.right, cpt.gold_highest.right), (0.0, 1.0));
        // Per character the gold (-4/9 against -6/9 and -5/5) is the likeliest, per token (-4/2
        // against -6/4 and -5/5) the least likely.
        assert_eq!(
            (
                readings[0].gold_lowest.right,
                readings[0].gold_highest.right
            ),
            (0.0, 1.0)
        );
        assert_eq!(
            (
                readings[1].gold_lowest.right,
                readings[1].gold_highest.right
            ),
            (1.0, 0.0)
        );
    }

    #[test]
    fn scores_csv_reads_back_and_resummarises_to_the_same_conditions() {
        let scored = lm_written(40, 0.3);
        let dir = tempfile::tempdir().unwrap();
        let (chance, conditions) = summarise(&scored);
        let summary = EvalSummary {
            dataset: "d.jsonl".into(),
            format: QuestionFormat::AF,
            model: "m.gguf".into(),
            model_name: "m".into(),
            ways: Some(4),
            seed: 3,
            questions: scored.len(),
            chance,
            conditions,
            seconds: 1.0,
            scored_now: scored.len(),
            device: "Cpu".into(),
            likelihood_probe: None,
        };
        write_outputs(dir.path(), &summary, &scored).unwrap();
        let csv_path = dir.path().join("scores.csv");
        let back = scored_from_csv(&csv_path, false).unwrap();
        assert_eq!(back.len(), scored.len());
        for (a, b) in back.iter().zip(&scored) {
            assert_eq!(
                (&a.id, a.label, &a.kept, &a.tokens),
                (&b.id, b.label, &b.kept, &b.tokens)
            );
            assert_eq!(a.norm_chars, b.norm_chars);
            for (x, y) in a.logprob.iter().flatten().zip(b.logprob.iter().flatten()) {
                assert!((x - y).abs() < 1e-6);
            }
        }
        let again = resummarise(dir.path()).unwrap();
        assert_eq!(again.conditions, summary.conditions);
        assert_eq!(again.likelihood_probe, Some(likelihood_probe(&back, 3)));
        let json: EvalSummary =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval.json")).unwrap())
                .unwrap();
        assert_eq!(json, again);
        assert!(std::fs::read_to_string(dir.path().join("eval.html"))
            .unwrap()
            .contains("Read the other way"));

        // A file from before the zero_prompt_chars column reads back for every layout but
        // WinoGrande's; a row without its number says where.
        let text = std::fs::read_to_string(&csv_path).unwrap();
        let old: String = text
            .lines()
            .map(|l| {
                let mut f: Vec<&str> = l.split(',').collect();
                f.remove(8);
                f.join(",") + "\n"
            })
            .collect();
        std::fs::write(&csv_path, &old).unwrap();
        assert_eq!(scored_from_csv(&csv_path, false).unwrap(), back);
        let e = scored_from_csv(&csv_path, true).unwrap_err();
        assert!(format!("{e:#}").contains("zero_prompt_chars"), "{e:#}");
        std::fs::write(&csv_path, old.replacen("-", "x", 1)).unwrap();
        let e = format!("{:#}", scored_from_csv(&csv_path, false).unwrap_err());
        assert!(e.contains("line 2") && e.contains("`full`"), "{e}");
    }

    #[test]
    fn acc_takes_the_first_highest_sum_and_acc_norm_divides_by_characters() {
        let q = ScoredQuestion {
            id: "q".into(),
            label: 1,
            kept: vec![0, 1, 2],
            logprob: vec![
                [-10.0, -1.0, -3.0],
                [-12.0, -1.0, -2.0],
                [-30.0, -5.0, -2.0],
            ],
            tokens: vec![[3; 3]; 3],
            norm_chars: vec![[10; 3], [20; 3], [100; 3]],
        };
        assert_eq!(q.choice(0, false), 0);
        assert_eq!(q.choice(0, true), 2, "-0.3 per character beats -0.6 and -1");
        assert_eq!(
            q.choice(1, false),
            0,
            "a tie goes to the first, as numpy's argmax"
        );
        assert_eq!(q.choice(2, false), 1);
        let (chance, results) = summarise(&[q.clone(), ScoredQuestion { label: 0, ..q }]);
        assert!((chance - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(results[0].acc.right, 1.0);
        assert_eq!(results[0].acc_norm.right, 0.0);
        assert!(results[0].acc.low < 0.5 && results[0].acc.high > 0.5);
    }
}
