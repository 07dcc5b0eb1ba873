//! AFLite (WinoGrande; DESIGN §1.6): repeatedly train m linear classifiers on random partitions of
//! t instances, score every instance by how often it was predicted right when held out, and remove
//! up to k of the most predictable ones above tau, until fewer than k qualify or n remain.
//!
//! The classifiers are behind [`LinearProbes`], so the bookkeeping here (group-aware partitions,
//! predictability, selection, the stop rule) is tested without libtorch.

use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AfliteOptions {
    /// Partitions (classifiers) per iteration.
    pub m: usize,
    /// Training instances per partition.
    pub t: usize,
    /// Instances removed per iteration at most.
    pub k: usize,
    /// Predictability an instance needs to be removed.
    pub tau: f64,
    /// Stop when this many instances remain (0: no target size).
    pub n: usize,
    /// Iterations at most.
    pub max_iterations: usize,
    pub seed: u64,
}

impl Default for AfliteOptions {
    fn default() -> Self {
        Self { m: 64, t: 10_000, k: 500, tau: 0.75, n: 0, max_iterations: 1_000, seed: 13 }
    }
}

/// m linear classifiers trained together: for each partition, those instances marked in `train`.
pub trait LinearProbes {
    type Error: std::error::Error + 'static;
    /// `active`: indices of the instances still in the set; `train[j]` marks, per active instance
    /// (same order), whether partition j trains on it. Returns per partition the predicted label
    /// of every active instance.
    fn fit_predict(&mut self, active: &[usize], train: &[Vec<bool>], seed: u64) -> Result<Vec<Vec<u32>>, Self::Error>;
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AfliteIteration {
    pub iteration: usize,
    /// Instances at the start of the iteration.
    pub size: usize,
    pub removed: usize,
    /// Mean predictability over the instances that were held out at least once.
    pub mean_predictability: f64,
    /// Instances at or above tau.
    pub above_tau: usize,
    /// A fresh linear probe trained on 80% of the set (by group) at the start of the iteration,
    /// accuracy on the other 20%.
    pub probe_accuracy: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AfliteResult {
    /// Per instance: removed in which iteration (None: kept).
    pub removed_in: Vec<Option<usize>>,
    /// Per instance: its predictability in the last iteration that scored it (None: never held out).
    pub predictability: Vec<Option<f64>>,
    pub iterations: Vec<AfliteIteration>,
    /// The fresh probe's held-out accuracy on the final set.
    pub final_probe_accuracy: f64,
}

impl AfliteResult {
    pub fn kept(&self) -> impl Iterator<Item = usize> + '_ {
        self.removed_in.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AfliteError<E: std::error::Error + 'static> {
    #[error("the linear probes failed in iteration {iteration}")]
    Probes {
        iteration: usize,
        #[source]
        source: E,
    },
    #[error("t = {t} leaves nothing to predict among {size} instances: lower t")]
    TrainTooLarge { t: usize, size: usize },
    #[error("m, t and k must be positive")]
    Zero,
}

/// Runs AFLite over `labels.len()` instances; `groups` keeps twins on one side of each partition.
pub fn aflite<P: LinearProbes>(
    probes: &mut P,
    labels: &[u32],
    groups: &[String],
    options: &AfliteOptions,
) -> Result<AfliteResult, AfliteError<P::Error>> {
    if options.m == 0 || options.t == 0 || options.k == 0 {
        return Err(AfliteError::Zero);
    }
    let total = labels.len();
    let mut removed_in: Vec<Option<usize>> = vec![None; total];
    let mut predictability: Vec<Option<f64>> = vec![None; total];
    let mut iterations = Vec::new();
    for iteration in 0..options.max_iterations {
        let active: Vec<usize> = (0..total).filter(|&i| removed_in[i].is_none()).collect();
        if active.len() <= options.n {
            break;
        }
        if options.t >= active.len() {
            // Nothing would be left to predict. Before the first iteration that is a mistake in
            // the options; later it is where the set has shrunk to.
            if iteration == 0 {
                return Err(AfliteError::TrainTooLarge { t: options.t, size: active.len() });
            }
            break;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
        rng.set_stream(iteration as u64 + 1);
        let probe_accuracy = probe(probes, &active, labels, groups, &mut rng, iteration)?;
        let train: Vec<Vec<bool>> = (0..options.m).map(|_| partition(&active, groups, options.t, &mut rng)).collect();
        let seed = options.seed ^ (iteration as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let predictions = probes.fit_predict(&active, &train, seed).map_err(|source| AfliteError::Probes { iteration, source })?;
        let mut scored: Vec<(usize, f64)> = Vec::with_capacity(active.len());
        for (a, &i) in active.iter().enumerate() {
            let (mut right, mut seen) = (0usize, 0usize);
            for j in 0..options.m {
                if !train[j][a] {
                    seen += 1;
                    right += usize::from(predictions[j][a] == labels[i]);
                }
            }
            if seen > 0 {
                let p = right as f64 / seen as f64;
                predictability[i] = Some(p);
                scored.push((i, p));
            }
        }
        let mean = scored.iter().map(|s| s.1).sum::<f64>() / scored.len().max(1) as f64;
        let mut qualified: Vec<(usize, f64)> = scored.into_iter().filter(|s| s.1 >= options.tau).collect();
        let above_tau = qualified.len();
        // Most predictable first; ties in index order, so the run is deterministic.
        qualified.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let room = active.len().saturating_sub(options.n);
        let remove = qualified.len().min(options.k).min(if options.n > 0 { room } else { usize::MAX });
        for &(i, _) in &qualified[..remove] {
            removed_in[i] = Some(iteration);
        }
        iterations.push(AfliteIteration { iteration, size: active.len(), removed: remove, mean_predictability: mean, above_tau, probe_accuracy });
        if above_tau < options.k {
            break;
        }
    }
    let active: Vec<usize> = (0..total).filter(|&i| removed_in[i].is_none()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    rng.set_stream(0);
    let final_probe_accuracy = probe(probes, &active, labels, groups, &mut rng, iterations.len())?;
    Ok(AfliteResult { removed_in, predictability, iterations, final_probe_accuracy })
}

/// Held-out accuracy of one linear probe trained on 80% of `active` (whole groups).
fn probe<P: LinearProbes>(
    probes: &mut P,
    active: &[usize],
    labels: &[u32],
    groups: &[String],
    rng: &mut ChaCha8Rng,
    iteration: usize,
) -> Result<f64, AfliteError<P::Error>> {
    let train = partition(active, groups, active.len() * 4 / 5, rng);
    let predicted = probes
        .fit_predict(active, std::slice::from_ref(&train), rng.next_u64())
        .map_err(|source| AfliteError::Probes { iteration, source })?;
    let (mut right, mut seen) = (0usize, 0usize);
    for (a, &i) in active.iter().enumerate() {
        if !train[a] {
            seen += 1;
            right += usize::from(predicted[0][a] == labels[i]);
        }
    }
    Ok(right as f64 / seen.max(1) as f64)
}

/// A random training side of `t` instances (or a little more: whole groups are taken), marked per
/// active instance.
fn partition(active: &[usize], groups: &[String], t: usize, rng: &mut ChaCha8Rng) -> Vec<bool> {
    let mut by_group: std::collections::BTreeMap<&str, Vec<usize>> = std::collections::BTreeMap::new();
    for (a, &i) in active.iter().enumerate() {
        by_group.entry(groups[i].as_str()).or_default().push(a);
    }
    let mut order: Vec<&Vec<usize>> = by_group.values().collect();
    order.shuffle(rng);
    let mut train = vec![false; active.len()];
    let mut taken = 0;
    for members in order {
        if taken >= t {
            break;
        }
        for &a in members {
            train[a] = true;
        }
        taken += members.len();
    }
    train
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Classifiers" that predict the label exactly for planted instances and a coin flip otherwise.
    struct Oracle {
        planted: Vec<bool>,
        labels: Vec<u32>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    impl LinearProbes for Oracle {
        type Error = Never;
        fn fit_predict(&mut self, active: &[usize], train: &[Vec<bool>], seed: u64) -> Result<Vec<Vec<u32>>, Never> {
            use rand::Rng;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            Ok(train
                .iter()
                .map(|_| active.iter().map(|&i| if self.planted[i] { self.labels[i] } else { rng.random_range(0..2) }).collect())
                .collect())
        }
    }

    #[test]
    fn planted_instances_go_first_and_twins_stay_together() {
        let n = 400;
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let planted: Vec<bool> = (0..n).map(|i| i % 5 == 0).collect();
        let groups: Vec<String> = (0..n).map(|i| format!("g{}", i / 2)).collect();
        let options = AfliteOptions { m: 64, t: 100, k: 30, tau: 0.75, n: 0, max_iterations: 50, seed: 1 };
        let mut oracle = Oracle { planted: planted.clone(), labels: labels.clone() };
        let r = aflite(&mut oracle, &labels, &groups, &options).unwrap();
        let removed: Vec<usize> = (0..n).filter(|&i| r.removed_in[i].is_some()).collect();
        let planted_count = planted.iter().filter(|&&p| p).count();
        let hits = removed.iter().filter(|&&i| planted[i]).count();
        assert!(hits * 10 >= planted_count * 9, "recall: {hits} of {planted_count}");
        assert!(hits * 10 >= removed.len() * 9, "precision: {hits} of {}", removed.len());
        assert!(r.iterations.last().unwrap().above_tau < 30, "stopped because too few qualified");
        // Twins: a partition takes whole groups.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let active: Vec<usize> = (0..n).collect();
        let side = partition(&active, &groups, 101, &mut rng);
        for pair in side.chunks(2) {
            assert_eq!(pair[0], pair[1]);
        }
        assert_eq!(side.iter().filter(|&&s| s).count(), 102, "whole groups: 101 rounds up to 102");
    }

    #[test]
    fn without_signal_nothing_is_removed_and_the_target_size_is_respected() {
        let n = 300;
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let groups: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let mut noise = Oracle { planted: vec![false; n], labels: labels.clone() };
        let options = AfliteOptions { m: 64, t: 150, k: 20, tau: 0.75, n: 0, max_iterations: 10, seed: 2 };
        let r = aflite(&mut noise, &labels, &groups, &options).unwrap();
        // ~32 coin flips per instance: reaching 75% right is a 0.35% event.
        assert!(r.kept().count() >= n - 3, "{} kept", r.kept().count());
        assert_eq!(r.iterations.len(), 1, "fewer than k qualified: one iteration");
        let mut all = Oracle { planted: vec![true; n], labels: labels.clone() };
        let r = aflite(&mut all, &labels, &groups, &AfliteOptions { n: 250, ..options }).unwrap();
        assert_eq!(r.kept().count(), 250, "stops at the target size exactly");
    }
}
