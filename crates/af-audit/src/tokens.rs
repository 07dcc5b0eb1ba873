//! Token statistics after Gardner et al. (2021), "Competency problems": for each token, how often
//! an option that contains it is the right one, against the rate a token without artifact would
//! have, as a z-statistic, with Holm's correction over every token tested.
//!
//! Only tokens that tell options apart count: a token in every option of a question (the
//! WinoGrande sentence around the blank) is left out there. The no-artifact rate is the share of
//! the counted token occurrences that lie in right options, not 1/(options): when right answers
//! are longer, every token is more often in them, and that is the length baseline's finding, not
//! a lexical one (docs/decisions/046-the-no-artifact-rate-of-a-token.md).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::stats::{holm, normal_upper_tail};

/// One tested token.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenStat {
    pub token: String,
    /// Options that contain it.
    pub options: usize,
    /// Of those, right options.
    pub right: usize,
    /// right / options.
    pub rate: f64,
    /// (rate - no-artifact rate) / its standard error.
    pub z: f64,
    /// Two-sided, then Holm-adjusted over every tested token.
    pub p: f64,
    pub p_holm: f64,
    pub significant: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct TokenReport {
    /// Share of counted token occurrences in right options: the rate without artifact.
    pub no_artifact_rate: f64,
    /// Tokens with at least `min_count` options.
    pub tested: usize,
    pub significant: usize,
    /// Most telling first: the largest |z| among the significant, then the rest.
    pub top: Vec<TokenStat>,
}

/// Each option's distinct tokens that are not in every option of its question.
pub fn distinguishing_tokens(options: &[Vec<String>]) -> Vec<Vec<String>> {
    let sets: Vec<HashSet<&str>> = options
        .iter()
        .map(|o| o.iter().map(String::as_str).collect())
        .collect();
    let shared: HashSet<&str> = sets[0]
        .iter()
        .copied()
        .filter(|t| sets[1..].iter().all(|s| s.contains(t)))
        .collect();
    sets.iter()
        .map(|s| {
            let mut v: Vec<String> = s
                .iter()
                .filter(|t| !shared.contains(*t))
                .map(|t| t.to_string())
                .collect();
            v.sort_unstable();
            v
        })
        .collect()
}

/// Statistics over questions given as (each option's distinguishing tokens, label).
pub fn token_stats(
    questions: &[(Vec<Vec<String>>, usize)],
    min_count: usize,
    alpha: f64,
) -> (Vec<TokenStat>, f64) {
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
    let (mut right_mass, mut mass) = (0usize, 0usize);
    for (options, label) in questions {
        for (o, tokens) in options.iter().enumerate() {
            mass += tokens.len();
            if o == *label {
                right_mass += tokens.len();
            }
            for t in tokens {
                let c = counts.entry(t.as_str()).or_default();
                c.0 += 1;
                c.1 += usize::from(o == *label);
            }
        }
    }
    let p0 = if mass == 0 {
        0.0
    } else {
        right_mass as f64 / mass as f64
    };
    let mut stats: Vec<TokenStat> = counts
        .into_iter()
        .filter(|(_, (n, _))| *n >= min_count.max(1))
        .map(|(token, (n, right))| {
            let rate = right as f64 / n as f64;
            let se = (p0 * (1.0 - p0) / n as f64).sqrt();
            let z = if se > 0.0 { (rate - p0) / se } else { 0.0 };
            TokenStat {
                token: token.to_string(),
                options: n,
                right,
                rate,
                z,
                p: 2.0 * normal_upper_tail(z.abs()),
                p_holm: 1.0,
                significant: false,
            }
        })
        .collect();
    let adjusted = holm(&stats.iter().map(|s| s.p).collect::<Vec<_>>());
    for (s, a) in stats.iter_mut().zip(adjusted) {
        s.p_holm = a;
        s.significant = a < alpha;
    }
    stats.sort_by(|a, b| {
        b.significant
            .cmp(&a.significant)
            .then(b.z.abs().total_cmp(&a.z.abs()))
            .then(a.token.cmp(&b.token))
    });
    (stats, p0)
}

/// The report's view: counts and the `top` most telling tokens.
pub fn report(stats: &[TokenStat], p0: f64, top: usize) -> TokenReport {
    TokenReport {
        no_artifact_rate: p0,
        tested: stats.len(),
        significant: stats.iter().filter(|s| s.significant).count(),
        top: stats.iter().take(top).cloned().collect(),
    }
}

/// A detector from the statistics of a training split: an option scores the sum of the
/// z-statistics of its significant tokens. With nothing significant every option ties.
pub fn token_weights(stats: &[TokenStat]) -> HashMap<String, f64> {
    stats
        .iter()
        .filter(|s| s.significant)
        .map(|s| (s.token.clone(), s.z))
        .collect()
}

pub fn score_options(options: &[Vec<String>], weights: &HashMap<String, f64>) -> Vec<f32> {
    options
        .iter()
        .map(|o| o.iter().filter_map(|t| weights.get(t)).sum::<f64>() as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(options: &[&str], label: usize) -> (Vec<Vec<String>>, usize) {
        let opts: Vec<Vec<String>> = options
            .iter()
            .map(|o| o.split(' ').map(String::from).collect())
            .collect();
        (distinguishing_tokens(&opts), label)
    }

    #[test]
    fn a_word_only_right_answers_have_is_significant_and_a_shared_word_is_not_counted() {
        let mut data = Vec::new();
        for i in 0..60 {
            let filler = ["a", "b", "c", "d"][i % 4];
            data.push(q(
                &[
                    &format!("the tell {filler}"),
                    &format!("the x {filler}"),
                    "the y e",
                    "the z f",
                ],
                0,
            ));
        }
        let (stats, p0) = token_stats(&data, 10, 0.05);
        assert!((p0 - 0.25).abs() < 0.02, "{p0}");
        assert_eq!(stats[0].token, "tell");
        assert!(stats[0].significant && stats[0].rate == 1.0);
        assert!(
            !stats.iter().any(|s| s.token == "the"),
            "in every option: not counted"
        );
        let w = token_weights(&stats);
        let scores = score_options(
            &distinguishing_tokens(&[vec!["tell".into()], vec!["x".into()]]),
            &w,
        );
        assert!(scores[0] > scores[1]);
    }
}
