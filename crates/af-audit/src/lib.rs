//! af-audit measures the shortcuts a multiple-choice dataset leaves (docs/design.md §1.5): the random and
//! length baselines, partial-input detectors on SWAG's three views, token statistics, twin
//! scoring and the "Back to Square One" transforms, each as an accuracy with a 95% interval
//! beside chance, trained on one split and measured on another, or cross-fitted over group folds
//! (`eval-folds`) so that every question is measured once.
//!
//! Learned detectors are behind the [`Learner`] trait (af-cli implements it with af-nn's
//! committee members), so everything here is tested without libtorch. Nothing prints; progress
//! goes to a callback.

pub mod length_rules;
pub mod option_probe;
pub mod stats;
pub mod synthetic;
pub mod tokens;
pub mod transforms;
pub mod twins;

use std::collections::HashSet;
use std::ops::Range;

use af_core::{AuditConfig, MemberName, Question, View};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use length_rules::LengthRule;
pub use tokens::{TokenReport, TokenStat};
pub use transforms::Transform;
pub use twins::TwinSource;

/// One option as a learned detector reads it: lowercased tokens, and the ones before the ending
/// (context, second-sentence start) marked.
#[derive(Clone, Debug, PartialEq)]
pub struct OptionTokens {
    pub tokens: Vec<String>,
    pub marked: Range<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LearnerQuestion {
    pub options: Vec<OptionTokens>,
    pub label: usize,
}

/// Trains a fresh detector of one architecture and scores held-out options with it.
pub trait Learner {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Per-option scores of every `eval` question (higher: more likely right). `eval` labels are
    /// there for the caller's bookkeeping; a learner must not read them.
    fn train_and_score(
        &mut self,
        model: &MemberName,
        train: &[LearnerQuestion],
        eval: &[LearnerQuestion],
        seed: u64,
    ) -> Result<Vec<Vec<f32>>, Self::Error>;
}

#[derive(Debug, Error)]
pub enum AuditError<E: std::error::Error + 'static> {
    #[error("the training split is empty ({method}; {questions} questions in {groups} groups): pass a separate --eval file or a larger dataset")]
    EmptyTrain {
        method: String,
        questions: usize,
        groups: usize,
    },
    #[error("the evaluation split is empty ({method}; {questions} questions in {groups} groups): pass a separate --eval file or a larger dataset")]
    EmptyEval {
        method: String,
        questions: usize,
        groups: usize,
    },
    #[error("detector {detector}")]
    Learner {
        detector: String,
        #[source]
        source: E,
    },
}

/// A twin-pair score: a pair counts only when both questions are right.
#[derive(Clone, Debug, Serialize)]
pub struct TwinScore {
    pub pairs: usize,
    pub accuracy: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub chance: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DetectorResult {
    /// `random`, `shortest-ending`, `longest-ending`, `median-length-ending`,
    /// `shortest-words-ending`, `longest-words-ending`, `token-statistics/ending`, `cnn/full`,
    /// `lstm/no-candidates`, ...
    pub name: String,
    /// `baseline`, `token-statistics` or `learned`.
    pub family: String,
    pub model: Option<String>,
    /// The view (ending, second-sentence, full) or transform (no-candidates, partial-sentence).
    pub view: Option<String>,
    pub train_questions: usize,
    pub eval_questions: usize,
    /// Questions right, ties credited 1/(options tied).
    pub right: f64,
    pub accuracy: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub chance: f64,
    /// accuracy - chance.
    pub edge: f64,
    /// One-sided, that the detector beats chance.
    pub p_value: f64,
    /// p_value below the audit's family-wise alpha divided by the number of detectors.
    pub flagged: bool,
    pub twins: Option<TwinScore>,
    /// Wall time of a learned detector (training and scoring); 0 for the others.
    pub seconds: f64,
    /// Each measured question's credit and chance, for comparing two versions of a dataset
    /// question by question ([`edge_change`]).
    #[serde(skip)]
    pub per_question: Vec<QuestionCredit>,
}

/// One measured question of one detector.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionCredit {
    pub id: String,
    pub credit: f64,
    pub chance: f64,
}

/// How a detector's edge over chance moved from one version of a dataset to another measured on
/// the same questions: the mean over questions of (after's credit - chance) - (before's), with a
/// 95% interval from the per-question differences (normal approximation). Paired, so it is far
/// narrower than the two accuracies' intervals side by side: both versions share each
/// question's context and gold, and much of what a detector gets right or wrong.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EdgeChange {
    pub change: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub questions: usize,
}

/// `+0.056 [+0.019, +0.093]`: the change and its interval, as tables and summaries print it.
impl std::fmt::Display for EdgeChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:+.3} [{:+.3}, {:+.3}]",
            self.change, self.ci_low, self.ci_high
        )
    }
}

/// The paired change of edge from `before` to `after`, when both measured the same questions
/// (by id; order free); `None` when they did not, or measured none.
pub fn edge_change(before: &DetectorResult, after: &DetectorResult) -> Option<EdgeChange> {
    paired_edge_change(&before.per_question, &after.per_question)
}

/// [`edge_change`] from the per-question credits themselves (as `af ablate` keeps them).
pub fn paired_edge_change(
    before: &[QuestionCredit],
    after: &[QuestionCredit],
) -> Option<EdgeChange> {
    if before.len() != after.len() || after.is_empty() {
        return None;
    }
    let by_id: std::collections::HashMap<&str, &QuestionCredit> =
        before.iter().map(|q| (q.id.as_str(), q)).collect();
    let diffs: Vec<f64> = after
        .iter()
        .map(|a| {
            by_id
                .get(a.id.as_str())
                .map(|b| (a.credit - a.chance) - (b.credit - b.chance))
        })
        .collect::<Option<_>>()?;
    let (change, half) = stats::mean_interval(&diffs);
    Some(EdgeChange {
        change,
        ci_low: change - half,
        ci_high: change + half,
        questions: diffs.len(),
    })
}

impl DetectorResult {
    /// How much of this detector's edge over chance is gone in `after` (the same detector on
    /// another version of the dataset): (edge - after's edge) / edge, only where there is an
    /// edge to shrink (this one is flagged and above chance).
    pub fn edge_shrink(&self, after: &DetectorResult) -> Option<f64> {
        (self.flagged && self.edge > 0.0).then(|| (self.edge - after.edge) / self.edge)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SplitSummary {
    /// `separate evaluation file`, `split field (train vs ...)`, `by group (share ...)` or
    /// `cross-fitted over K group folds`.
    pub method: String,
    /// 1, or the number of cross-fitting folds.
    pub folds: usize,
    /// Questions each detector trained on (the mean over folds when cross-fitted).
    pub train: usize,
    /// Questions measured (every question when cross-fitted).
    pub eval: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TwinSummary {
    pub source: TwinSource,
    pub pairs: usize,
    pub eval_pairs: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TransformSummary {
    pub transform: Transform,
    pub train: usize,
    pub eval: usize,
    /// Questions the transform did not apply to (no discourse marker), left out.
    pub excluded: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub what: String,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    pub questions: usize,
    pub options_min: usize,
    pub options_max: usize,
    pub split: SplitSummary,
    /// Mean chance over the evaluation questions.
    pub chance: f64,
    pub alpha: f64,
    /// alpha / detectors: the level each detector is flagged at.
    pub detector_alpha: f64,
    pub detectors: Vec<DetectorResult>,
    /// Over every question of the dataset.
    pub tokens: TokenReport,
    /// Every tested token, most telling first (for a CSV; the JSON keeps the report's top).
    #[serde(skip)]
    pub token_table: Vec<TokenStat>,
    pub twins: Option<TwinSummary>,
    pub transforms: Vec<TransformSummary>,
    pub skipped: Vec<Skipped>,
}

/// Progress of the learned detectors: (done, total, name of the one starting).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

struct Tokenized {
    context: Vec<String>,
    prefix: Vec<String>,
    endings: Vec<Vec<String>>,
}

fn tokenize(q: &Question) -> Tokenized {
    let t = af_text::tokenize_lowercase;
    Tokenized {
        context: t(&q.context),
        prefix: t(&q.prefix),
        endings: q.endings.iter().map(|e| t(e)).collect(),
    }
}

fn learner_question(t: &Tokenized, label: usize, view: View) -> LearnerQuestion {
    let given: Vec<String> = match view {
        View::Ending => Vec::new(),
        View::SecondSentence => t.prefix.clone(),
        View::Full => t.context.iter().chain(&t.prefix).cloned().collect(),
    };
    let options = t
        .endings
        .iter()
        .map(|e| OptionTokens {
            tokens: given.iter().chain(e).cloned().collect(),
            marked: 0..given.len(),
        })
        .collect();
    LearnerQuestion { options, label }
}

/// Credit of one question: 1/(options tied at the top) when the right one is among them.
pub fn credit(scores: &[f32], label: usize) -> f64 {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if scores[label] < max {
        return 0.0;
    }
    1.0 / scores.iter().filter(|&&s| s == max).count() as f64
}

/// Audits `questions`. With `eval_questions` the two are the training and evaluation splits;
/// otherwise a `split` field (train against val/dev/test) or a group split makes them. Learned
/// detectors in `exclude` (architecture and view) are not run: an AF committee's own members on
/// the view they read, whose accuracy on the AF dataset says nothing new.
pub fn audit<L: Learner>(
    questions: Vec<Question>,
    eval_questions: Option<Vec<Question>>,
    config: &AuditConfig,
    exclude: &[(MemberName, View)],
    seed: u64,
    learner: &mut L,
    progress: Progress,
) -> Result<AuditReport, AuditError<L::Error>> {
    let separate = eval_questions.is_some();
    let n_train_file = questions.len();
    let mut all = questions;
    all.extend(eval_questions.unwrap_or_default());
    let tokenized: Vec<Tokenized> = all.iter().map(tokenize).collect();
    let mut skipped = Vec::new();

    // Twins first: a pairing by edit distance regroups questions, so no split separates a pair.
    let mut twins = None;
    if all.iter().any(|q| q.blank.is_some()) {
        let mut pairs = twins::pairs_from_groups(&all);
        let mut source = TwinSource::Groups;
        if pairs.is_empty() && config.twin_max_edits > 0 {
            let sentences: Vec<Vec<String>> = tokenized
                .iter()
                .map(|t| t.context.iter().chain(&t.endings[0]).cloned().collect())
                .collect();
            pairs = twins::pairs_by_edit_distance(&all, &sentences, config.twin_max_edits);
            source = TwinSource::EditDistance;
            for &(a, b) in &pairs {
                let group = format!("twins:{}", all[a].id);
                all[a].group.clone_from(&group);
                all[b].group = group;
            }
        }
        twins = Some((source, pairs));
    }

    let (folds, method) = split(&all, separate.then_some(n_train_file), config, seed);
    let groups = all
        .iter()
        .map(|q| q.group.as_str())
        .collect::<HashSet<_>>()
        .len();
    if folds.iter().any(|(train, _)| train.is_empty()) {
        return Err(AuditError::EmptyTrain {
            method,
            questions: all.len(),
            groups,
        });
    }
    if folds.iter().any(|(_, eval)| eval.is_empty()) {
        return Err(AuditError::EmptyEval {
            method,
            questions: all.len(),
            groups,
        });
    }
    // Every measured question, fold after fold; a detector's scores come in this order.
    let eval: Vec<usize> = folds.iter().flat_map(|(_, e)| e.iter().copied()).collect();
    let train_size = mean_size(folds.iter().map(|(t, _)| t.len()));
    let eval_pos: std::collections::HashMap<usize, usize> =
        eval.iter().enumerate().map(|(p, &i)| (i, p)).collect();
    let eval_pairs: Vec<(usize, usize)> = twins
        .as_ref()
        .map(|(_, pairs)| {
            pairs
                .iter()
                .filter_map(|(a, b)| Some((*eval_pos.get(a)?, *eval_pos.get(b)?)))
                .collect()
        })
        .unwrap_or_default();
    let chance: Vec<f64> = eval.iter().map(|&i| all[i].chance()).collect();
    let scorer = Scorer {
        ids: eval.iter().map(|&i| all[i].id.clone()).collect(),
        chance: chance.clone(),
        labels: eval.iter().map(|&i| all[i].label).collect(),
        pairs: eval_pairs.clone(),
        train: train_size,
    };

    let mut detectors = Vec::new();
    // Baselines.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7261_6e64);
    let random: Vec<Vec<f32>> = eval
        .iter()
        .map(|&i| {
            let pick = rng.random_range(0..all[i].endings.len());
            (0..all[i].endings.len())
                .map(|o| f32::from(u8::from(o == pick)))
                .collect()
        })
        .collect();
    detectors.push(scorer.result("random", "baseline", None, None, &random));
    let lengths: Vec<Vec<f32>> = eval
        .iter()
        .map(|&i| {
            tokenized[i]
                .endings
                .iter()
                .map(|e| e.len() as f32)
                .collect()
        })
        .collect();
    for rule in LengthRule::ALL {
        let scores: Vec<Vec<f32>> = lengths.iter().map(|l| rule.scores(l)).collect();
        detectors.push(scorer.result(rule.name(), "baseline", None, None, &scores));
    }
    let word_lengths: Vec<Vec<Option<f32>>> = eval
        .iter()
        .map(|&i| {
            tokenized[i]
                .endings
                .iter()
                .map(|e| length_rules::mean_word_length(e))
                .collect()
        })
        .collect();
    for (rule, name) in length_rules::WORD_LENGTH_RULES {
        let scores: Vec<Vec<f32>> = word_lengths
            .iter()
            .map(|l| length_rules::word_length_scores(rule, l))
            .collect();
        detectors.push(scorer.result(name, "baseline", None, None, &scores));
    }

    // Token statistics: the dataset's table over every question; the detector from the training split's.
    let distinguishing: Vec<Vec<Vec<String>>> = tokenized
        .iter()
        .map(|t| tokens::distinguishing_tokens(&t.endings))
        .collect();
    let table = |idx: &[usize]| -> Vec<(Vec<Vec<String>>, usize)> {
        idx.iter()
            .map(|&i| (distinguishing[i].clone(), all[i].label))
            .collect()
    };
    let every: Vec<usize> = (0..all.len()).collect();
    let (stats, p0) = tokens::token_stats(&table(&every), config.token_min_count, config.alpha);
    let token_report = tokens::report(&stats, p0, config.top_tokens);
    let mut token_scores: Vec<Vec<f32>> = Vec::with_capacity(eval.len());
    for (train, eval) in &folds {
        let (train_stats, _) =
            tokens::token_stats(&table(train), config.token_min_count, config.alpha);
        let weights = tokens::token_weights(&train_stats);
        token_scores.extend(
            eval.iter()
                .map(|&i| tokens::score_options(&distinguishing[i], &weights)),
        );
    }
    detectors.push(scorer.result(
        "token-statistics/ending",
        "token-statistics",
        None,
        Some("ending"),
        &token_scores,
    ));

    // Learned detectors on each view, then on each transform of blank questions.
    let views: Vec<View> = config
        .views
        .iter()
        .copied()
        .filter(|&v| {
            let available = match v {
                View::Ending => true,
                View::SecondSentence => all.iter().any(|q| !q.prefix.trim().is_empty()),
                View::Full => all.iter().any(|q| !q.context.trim().is_empty()),
            };
            if !available {
                let field = if v == View::SecondSentence {
                    "second-sentence start"
                } else {
                    "context"
                };
                skipped.push(Skipped {
                    what: format!("view {}", v.name()),
                    reason: format!("no question has a {field}: the view repeats another"),
                });
            }
            available
        })
        .collect();
    let mut transformed = Vec::new();
    let mut transform_summaries = Vec::new();
    if all.iter().any(|q| q.blank.is_some()) {
        for t in Transform::ALL {
            let applied: Vec<Option<Question>> = all
                .iter()
                .map(|q| transforms::apply(t, q, &config.discourse_markers))
                .collect();
            let pick = |idx: &[usize]| -> Vec<(usize, Question)> {
                idx.iter()
                    .filter_map(|&i| applied[i].clone().map(|q| (i, q)))
                    .collect()
            };
            let sides: Vec<TransformedFold> =
                folds.iter().map(|(tr, ev)| (pick(tr), pick(ev))).collect();
            let (train, eval) = (
                mean_size(sides.iter().map(|(tr, _)| tr.len())),
                sides.iter().map(|(_, ev)| ev.len()).sum(),
            );
            transform_summaries.push(TransformSummary {
                transform: t,
                train,
                eval,
                excluded: applied.iter().filter(|q| q.is_none()).count(),
            });
            if sides.iter().any(|(tr, ev)| tr.is_empty() || ev.is_empty()) {
                skipped.push(Skipped {
                    what: format!("transform {}", t.name()),
                    reason: "it applies to no question of one split".into(),
                });
                continue;
            }
            transformed.push((t, sides));
        }
    }
    let excluded = views
        .iter()
        .flat_map(|&v| config.models.iter().map(move |m| (m.clone(), v)))
        .filter(|p| exclude.contains(p))
        .count();
    let total = (config.models.len() * (views.len() + transformed.len()) - excluded) * folds.len();
    let mut done = 0;
    // Each detector's seed comes from its name (and fold), so adding or removing another
    // detector changes no other's numbers; fold 0 keeps the seed a single split has.
    let mut run =
        |name: &str, model: &MemberName, sides: &[(Vec<LearnerQuestion>, Vec<LearnerQuestion>)]| {
            let detector_seed = seed ^ af_core::hash::fnv1a64(name.as_bytes());
            let start = std::time::Instant::now();
            let mut scores = Vec::new();
            for (fold, (train_q, eval_q)) in sides.iter().enumerate() {
                let shown = if sides.len() > 1 {
                    format!("{name} (fold {}/{})", fold + 1, sides.len())
                } else {
                    name.to_string()
                };
                progress(done, total, &shown);
                done += 1;
                let fold_seed = detector_seed.wrapping_add(fold as u64);
                scores.extend(
                    learner
                        .train_and_score(model, train_q, eval_q, fold_seed)
                        .map_err(|source| AuditError::Learner {
                            detector: name.to_string(),
                            source,
                        })?,
                );
            }
            Ok::<_, AuditError<L::Error>>((scores, start.elapsed().as_secs_f64()))
        };
    for &view in &views {
        let as_learner = |idx: &[usize]| -> Vec<LearnerQuestion> {
            idx.iter()
                .map(|&i| learner_question(&tokenized[i], all[i].label, view))
                .collect()
        };
        let sides: Vec<_> = folds
            .iter()
            .map(|(train, eval)| (as_learner(train), as_learner(eval)))
            .collect();
        for model in &config.models {
            let name = format!("{}/{}", model, view.name());
            if exclude.iter().any(|(m, v)| m == model && *v == view) {
                skipped.push(Skipped { what: name, reason: "excluded by the caller (a committee member on the view it was trained against)".into() });
                continue;
            }
            let (scores, seconds) = run(&name, model, &sides)?;
            detectors.push(DetectorResult {
                seconds,
                ..scorer.result(
                    &name,
                    "learned",
                    Some(model.as_str()),
                    Some(view.name()),
                    &scores,
                )
            });
        }
    }
    for (t, folds) in &transformed {
        let as_learner = |qs: &[(usize, Question)]| -> Vec<LearnerQuestion> {
            qs.iter()
                .map(|(_, q)| learner_question(&tokenize(q), q.label, View::Full))
                .collect()
        };
        let sides: Vec<_> = folds
            .iter()
            .map(|(tr, ev)| (as_learner(tr), as_learner(ev)))
            .collect();
        // Scores of the questions the transform left out are all ties: chance credit, and the
        // detector's accuracy is over the transformed questions only.
        let kept: Vec<usize> = folds
            .iter()
            .flat_map(|(_, ev)| ev.iter().map(|(i, _)| eval_pos[i]))
            .collect();
        let sub = scorer.subset(&kept, mean_size(folds.iter().map(|(tr, _)| tr.len())));
        for model in &config.models {
            let name = format!("{}/{}", model, t.name());
            let (scores, seconds) = run(&name, model, &sides)?;
            detectors.push(DetectorResult {
                seconds,
                ..sub.result(
                    &name,
                    "learned",
                    Some(model.as_str()),
                    Some(t.name()),
                    &scores,
                )
            });
        }
    }
    progress(done, total, "");

    let detector_alpha = config.alpha / detectors.len() as f64;
    for d in &mut detectors {
        d.flagged = d.p_value < detector_alpha;
    }
    let options = all.iter().map(|q| q.endings.len());
    Ok(AuditReport {
        questions: all.len(),
        options_min: options.clone().min().unwrap_or(0),
        options_max: options.max().unwrap_or(0),
        split: SplitSummary {
            method,
            folds: folds.len(),
            train: train_size,
            eval: eval.len(),
        },
        chance: chance.iter().sum::<f64>() / chance.len() as f64,
        alpha: config.alpha,
        detector_alpha,
        detectors,
        tokens: token_report,
        token_table: stats,
        twins: twins.map(|(source, pairs)| TwinSummary {
            source,
            pairs: pairs.len(),
            eval_pairs: eval_pairs.len(),
        }),
        transforms: transform_summaries,
        skipped,
    })
}

/// The mean of the folds' sizes, rounded: what one detector trained on.
fn mean_size(sizes: impl Iterator<Item = usize>) -> usize {
    let sizes: Vec<usize> = sizes.collect();
    (sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64).round() as usize
}

/// Mixed into the seed of the audit's group split and folds.
const FOLD_SALT: u64 = 0x6175_6469;

/// The (training, evaluation) indices of each of `folds` group folds over items of `groups`, as
/// the audit cross-fits them with `seed`: `af ablate` trains its own detectors on these, so they
/// and the audit's measure each item with the same fold's training.
pub fn cross_fit_folds(groups: &[&str], folds: usize, seed: u64) -> Folds {
    let fold = af_core::split::folds_by_group(groups, folds, seed ^ FOLD_SALT);
    (0..folds)
        .map(|f| (0..groups.len()).partition(|&i| fold[i] != f))
        .collect()
}

/// Each fold's (training, evaluation) indices into the questions.
pub type Folds = Vec<(Vec<usize>, Vec<usize>)>;

/// A transform's questions on each side of one fold: (index into `all`, transformed question).
type TransformedFold = (Vec<(usize, Question)>, Vec<(usize, Question)>);

/// The (training, evaluation) indices into `all` of each fold (one unless cross-fitted), and how
/// they were made. A named evaluation file is what the user asked to be measured, so it is never
/// cross-fitted; a split field is, when folds are asked for (a detector trained afresh has no use
/// for a published split's purpose).
fn split(
    all: &[Question],
    separate_at: Option<usize>,
    config: &AuditConfig,
    seed: u64,
) -> (Folds, String) {
    if let Some(n) = separate_at {
        let method = if config.eval_folds > 1 {
            "separate evaluation file (eval-folds does not apply)"
        } else {
            "separate evaluation file"
        };
        return (
            vec![((0..n).collect(), (n..all.len()).collect())],
            method.into(),
        );
    }
    let groups: Vec<&str> = all.iter().map(|q| q.group.as_str()).collect();
    if config.eval_folds > 1 {
        let k = config.eval_folds;
        return (cross_fit_folds(&groups, k, seed), format!("cross-fitted over {k} group folds (each question scored by detectors trained on the other {})", k - 1));
    }
    let (train, eval, method) = one_split(all, config.eval_share, seed);
    (vec![(train, eval)], method)
}

/// One held-out split: a split field's training side against the rest, else a share of groups.
fn one_split(all: &[Question], eval_share: f64, seed: u64) -> (Vec<usize>, Vec<usize>, String) {
    let is_train = |s: &str| s.eq_ignore_ascii_case("train");
    let splits: HashSet<&str> = all.iter().filter_map(|q| q.split.as_deref()).collect();
    if all.iter().all(|q| q.split.is_some())
        && splits.iter().any(|s| is_train(s))
        && splits.iter().any(|s| !is_train(s))
    {
        let (train, eval): (Vec<usize>, Vec<usize>) =
            (0..all.len()).partition(|&i| is_train(all[i].split.as_deref().unwrap_or("")));
        let mut others: Vec<&str> = splits.into_iter().filter(|s| !is_train(s)).collect();
        others.sort_unstable();
        return (
            train,
            eval,
            format!("split field (train against {})", others.join(", ")),
        );
    }
    let groups: Vec<String> = all.iter().map(|q| q.group.clone()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ FOLD_SALT);
    let (train, eval) = af_core::split::split_by_group(&groups, 1.0 - eval_share, &mut rng);
    (
        train,
        eval,
        format!("by group, {:.0}% of groups held out", eval_share * 100.0),
    )
}

/// Turns per-option scores of the evaluation questions into a [`DetectorResult`].
struct Scorer {
    ids: Vec<String>,
    chance: Vec<f64>,
    labels: Vec<usize>,
    /// Twin pairs as positions in the evaluation list.
    pairs: Vec<(usize, usize)>,
    train: usize,
}

impl Scorer {
    /// A detector's result from its scores of the evaluation questions' options.
    fn result(
        &self,
        name: &str,
        family: &str,
        model: Option<&str>,
        view: Option<&str>,
        scores: &[Vec<f32>],
    ) -> DetectorResult {
        let (chance, labels, pairs) = (&self.chance, &self.labels, &self.pairs);
        let credits: Vec<f64> = scores
            .iter()
            .zip(labels)
            .map(|(s, &l)| credit(s, l))
            .collect();
        let right: f64 = credits.iter().sum();
        let n = credits.len();
        let accuracy = right / n.max(1) as f64;
        let (ci_low, ci_high) = stats::wilson(right, n);
        let mean_chance = chance.iter().sum::<f64>() / n.max(1) as f64;
        let twins = (!pairs.is_empty()).then(|| {
            let both: f64 = pairs.iter().map(|&(a, b)| credits[a] * credits[b]).sum();
            let pair_chance = pairs
                .iter()
                .map(|&(a, b)| chance[a] * chance[b])
                .sum::<f64>()
                / pairs.len() as f64;
            let (lo, hi) = stats::wilson(both, pairs.len());
            TwinScore {
                pairs: pairs.len(),
                accuracy: both / pairs.len() as f64,
                ci_low: lo,
                ci_high: hi,
                chance: pair_chance,
            }
        });
        DetectorResult {
            name: name.into(),
            family: family.into(),
            model: model.map(String::from),
            view: view.map(String::from),
            train_questions: self.train,
            eval_questions: n,
            right,
            accuracy,
            ci_low,
            ci_high,
            chance: mean_chance,
            edge: accuracy - mean_chance,
            p_value: stats::above_chance_p(right, chance),
            flagged: false,
            twins,
            seconds: 0.0,
            per_question: self
                .ids
                .iter()
                .zip(chance)
                .zip(credits)
                .map(|((id, &chance), credit)| QuestionCredit {
                    id: id.clone(),
                    credit,
                    chance,
                })
                .collect(),
        }
    }

    /// The scorer of the evaluation questions at `kept` (positions), in that order.
    fn subset(&self, kept: &[usize], train: usize) -> Scorer {
        let new_pos: std::collections::HashMap<usize, usize> =
            kept.iter().enumerate().map(|(n, &p)| (p, n)).collect();
        Scorer {
            ids: kept.iter().map(|&p| self.ids[p].clone()).collect(),
            chance: kept.iter().map(|&p| self.chance[p]).collect(),
            labels: kept.iter().map(|&p| self.labels[p]).collect(),
            pairs: self
                .pairs
                .iter()
                .filter_map(|(a, b)| Some((*new_pos.get(a)?, *new_pos.get(b)?)))
                .collect(),
            train,
        }
    }
}

#[cfg(test)]
mod tests;
