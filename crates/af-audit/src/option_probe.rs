//! A probe over a few numbers per option: a conditional logit (a softmax over each question's
//! options of a linear score), trained on some questions and measured on the others, cross-fitted
//! over folds so that every question is measured once. `af eval` feeds it the LM's scores of each
//! option: a zero-shot LM below chance can still tell the gold once its scores are read the other
//! way round (the gold is the option it finds least likely), which acc and acc_norm never show
//! and any detector trained on the dataset can learn (docs/decisions.md, 483).
//!
//! Plain arithmetic (a handful of features, full-batch gradient descent on a convex loss), so it
//! is exact and the same on every machine for the same input.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// One question as the probe reads it: per option its features, and which option is right.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeQuestion {
    pub label: usize,
    pub options: Vec<Vec<f64>>,
}

/// How the probe is trained.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbeSettings {
    pub folds: usize,
    pub seed: u64,
    /// Full-batch gradient steps on the standardised features.
    pub steps: usize,
    pub learning_rate: f64,
    /// L2 penalty on the weights: keeps them finite when a feature separates the training
    /// questions perfectly.
    pub l2: f64,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            folds: 5,
            seed: 0,
            steps: 300,
            learning_rate: 0.5,
            l2: 1e-3,
        }
    }
}

/// What the probe measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResult {
    /// Test questions answered right, each question tested once; ties credit 1/(options tied).
    pub right: f64,
    pub questions: usize,
    /// The weights fitted on every question, per standardised feature: their signs say which
    /// way the probe reads each feature (a negative weight on a likelihood: the gold is the
    /// less likely option).
    pub weights: Vec<f64>,
}

/// Cross-fitted accuracy of the probe. Questions are dealt to `folds` folds in a shuffled order
/// drawn from `seed`; fewer questions than folds, or questions without features, give no test.
pub fn cross_fitted(questions: &[ProbeQuestion], settings: ProbeSettings) -> ProbeResult {
    let dims = questions
        .iter()
        .flat_map(|q| q.options.first())
        .map(Vec::len)
        .next()
        .unwrap_or(0);
    let standardised = standardise(questions, dims);
    let folds = settings.folds.max(2).min(questions.len().max(1));
    let mut order: Vec<usize> = (0..questions.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(settings.seed));
    let mut fold_of = vec![0; questions.len()];
    for (i, &q) in order.iter().enumerate() {
        fold_of[q] = i % folds;
    }
    let mut right = 0.0;
    if questions.len() >= 2 && dims > 0 {
        for fold in 0..folds {
            let train: Vec<&ProbeQuestion> = standardised
                .iter()
                .zip(&fold_of)
                .filter(|&(_, &f)| f != fold)
                .map(|(q, _)| q)
                .collect();
            let weights = fit(&train, dims, settings);
            right += standardised
                .iter()
                .zip(&fold_of)
                .filter(|&(_, &f)| f == fold)
                .map(|(q, _)| credit(&scores(&weights, q), q.label))
                .sum::<f64>();
        }
    }
    let all: Vec<&ProbeQuestion> = standardised.iter().collect();
    ProbeResult {
        right,
        questions: questions.len(),
        weights: fit(&all, dims, settings),
    }
}

/// Each feature centred and scaled by its mean and deviation over every option of every
/// question (no label is read, so the test folds' features can take part).
fn standardise(questions: &[ProbeQuestion], dims: usize) -> Vec<ProbeQuestion> {
    let rows = || questions.iter().flat_map(|q| &q.options);
    let n = rows().count().max(1) as f64;
    let mean: Vec<f64> = (0..dims)
        .map(|d| rows().map(|o| o[d]).sum::<f64>() / n)
        .collect();
    let scale: Vec<f64> = (0..dims)
        .map(|d| {
            let sd = (rows().map(|o| (o[d] - mean[d]).powi(2)).sum::<f64>() / n).sqrt();
            if sd > 0.0 {
                sd
            } else {
                1.0
            }
        })
        .collect();
    questions
        .iter()
        .map(|q| ProbeQuestion {
            label: q.label,
            options: q
                .options
                .iter()
                .map(|o| (0..dims).map(|d| (o[d] - mean[d]) / scale[d]).collect())
                .collect(),
        })
        .collect()
}

fn scores(weights: &[f64], q: &ProbeQuestion) -> Vec<f64> {
    q.options
        .iter()
        .map(|o| o.iter().zip(weights).map(|(x, w)| x * w).sum())
        .collect()
}

/// 1 when the label alone scores highest, 1/k when it ties with k - 1 others, else 0.
pub fn credit(scores: &[f64], label: usize) -> f64 {
    let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if scores[label] < best {
        return 0.0;
    }
    1.0 / scores.iter().filter(|&&s| s == best).count() as f64
}

/// Minimises the mean negative log-likelihood of the labels under a softmax over each question's
/// options, plus the L2 penalty.
fn fit(questions: &[&ProbeQuestion], dims: usize, settings: ProbeSettings) -> Vec<f64> {
    let mut weights = vec![0.0; dims];
    let n = questions.len().max(1) as f64;
    for _ in 0..settings.steps {
        let mut grad = vec![0.0; dims];
        for q in questions {
            let s = scores(&weights, q);
            let top = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|v| (v - top).exp()).collect();
            let total: f64 = e.iter().sum();
            for (i, option) in q.options.iter().enumerate() {
                let residual = e[i] / total - f64::from(u8::from(i == q.label));
                for (g, x) in grad.iter_mut().zip(option) {
                    *g += residual * x;
                }
            }
        }
        for (w, g) in weights.iter_mut().zip(&grad) {
            *w -= settings.learning_rate * (g / n + settings.l2 * *w);
        }
    }
    weights
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// Questions of `k` options whose feature 0 is noise and feature 1 is `shift` lower for the
    /// gold than for the distractors, plus noise.
    fn questions(n: usize, k: usize, shift: f64, seed: u64) -> Vec<ProbeQuestion> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let label = rng.random_range(0..k);
                let options = (0..k)
                    .map(|o| {
                        let gold = if o == label { shift } else { 0.0 };
                        vec![rng.random::<f64>(), rng.random::<f64>() - gold]
                    })
                    .collect();
                ProbeQuestion { label, options }
            })
            .collect()
    }

    #[test]
    fn finds_a_gold_that_is_the_least_likely_option() {
        let r = cross_fitted(&questions(400, 4, 0.5, 1), ProbeSettings::default());
        let accuracy = r.right / r.questions as f64;
        assert!(accuracy > 0.6, "{accuracy}");
        assert!(r.weights[1] < 0.0, "{:?}", r.weights);
        assert!(
            r.weights[1].abs() > 5.0 * r.weights[0].abs(),
            "{:?}",
            r.weights
        );
    }

    #[test]
    fn stays_near_chance_on_noise() {
        let r = cross_fitted(&questions(2000, 4, 0.0, 2), ProbeSettings::default());
        let accuracy = r.right / r.questions as f64;
        let (low, high) = crate::stats::wilson(r.right, r.questions);
        assert!(low < 0.25 && 0.25 < high, "{accuracy} [{low}, {high}]");
    }

    #[test]
    fn each_question_is_tested_once_and_ties_share_credit() {
        // Every option alike: the probe can only tie, and each question gives 1/k.
        let same: Vec<ProbeQuestion> = (0..10)
            .map(|i| ProbeQuestion {
                label: i % 3,
                options: vec![vec![1.0, 2.0]; 3],
            })
            .collect();
        let r = cross_fitted(&same, ProbeSettings::default());
        assert_eq!(r.questions, 10);
        assert!((r.right - 10.0 / 3.0).abs() < 1e-9, "{}", r.right);
        assert!(credit(&[1.0, 3.0, 3.0], 1) == 0.5 && credit(&[1.0, 3.0, 2.0], 2) == 0.0);
    }

    #[test]
    fn the_same_input_gives_the_same_result() {
        let q = questions(100, 4, 0.3, 3);
        let settings = ProbeSettings {
            seed: 9,
            ..ProbeSettings::default()
        };
        assert_eq!(cross_fitted(&q, settings), cross_fitted(&q, settings));
    }
}
