//! AFLite (WinoGrande; docs/design.md §1.6): repeatedly train m linear classifiers on random partitions of
//! t instances, score every instance by how often it was predicted right when held out, and remove
//! up to k of the most predictable ones above a threshold, until fewer than k qualify or n remain.
//!
//! Past the paper (issue 16): instances are ranked by predictability, then by the mean
//! probability the classifiers give their true label (most confident first); and each iteration
//! trains the same classifiers on label-permuted copies of the set, whose predictability is what
//! chance alone produces (the null). An instance qualifies only where the null says at most a
//! `false_removal_rate` share of the qualifying ones are expected by chance (a permutation
//! estimate of the false-discovery rate), with `tau` fixed or chosen from the null (`tau: None`).
//!
//! The classifiers are behind [`LinearProbes`], so the bookkeeping here (group-aware partitions,
//! predictability, the null, selection, the stop rule) is tested without libtorch.

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
    /// Predictability an instance needs to be removed; None: the lowest the null allows
    /// (`--tau auto`). A fixed tau is checked against the null too, when there is one.
    pub tau: Option<f64>,
    /// The share of an iteration's qualifying instances the null may explain (estimated false
    /// removals over qualifying instances).
    pub false_removal_rate: f64,
    /// Label-permuted copies per iteration that make the null (0: no null, the paper's plain tau;
    /// `tau` must then be fixed).
    pub null_permutations: usize,
    /// Stop when this many instances remain (0: no target size).
    pub n: usize,
    /// Iterations at most.
    pub max_iterations: usize,
    pub seed: u64,
}

impl Default for AfliteOptions {
    fn default() -> Self {
        Self {
            m: 64,
            t: 10_000,
            k: 500,
            tau: None,
            false_removal_rate: 0.05,
            null_permutations: 1,
            n: 0,
            max_iterations: 1_000,
            seed: 13,
        }
    }
}

/// m linear classifiers trained together: for each partition, those instances marked in `train`.
pub trait LinearProbes {
    type Error: std::error::Error + 'static;
    /// `active`: indices of the instances still in the set; `labels`: one per instance (all of
    /// them, indexed like `active`'s entries), what the classifiers learn; `train[j]` marks, per
    /// active instance (same order), whether partition j trains on it. Returns per partition the
    /// class probabilities of every active instance, row-major [active, classes].
    fn fit_probabilities(
        &mut self,
        active: &[usize],
        labels: &[u32],
        train: &[Vec<bool>],
        seed: u64,
    ) -> Result<Vec<Vec<f32>>, Self::Error>;
}

/// Quantiles of the null's predictability (over every scored instance of every permuted copy).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NullQuantiles {
    pub q50: f64,
    pub q90: f64,
    pub q95: f64,
    pub q99: f64,
    pub max: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AfliteIteration {
    pub iteration: usize,
    /// Instances at the start of the iteration.
    pub size: usize,
    pub removed: usize,
    /// Mean predictability over the instances that were held out at least once.
    pub mean_predictability: f64,
    /// Instances at or above the threshold (the ones that qualify).
    pub above_tau: usize,
    /// The predictability an instance needed in this iteration: tau, or (with a null) the lowest
    /// value at or above tau that keeps the estimated false-removal rate within the option;
    /// None: no value does, nothing qualified. The null is compared in the order of removal
    /// (predictability, then confidence), so the threshold has a confidence part too.
    pub threshold: Option<f64>,
    /// Among instances at exactly `threshold`, the confidence needed (None: any).
    pub threshold_confidence: Option<f64>,
    /// The null's predictability, when there is one.
    pub null: Option<NullQuantiles>,
    /// The null's confidence (mean probability of the permuted label).
    pub null_confidence: Option<NullQuantiles>,
    /// Instances at or above tau the null expects by chance (with tau None: at the threshold).
    pub expected_false_at_tau: Option<f64>,
    /// Of the removed, how many the null expects by chance: the null's share at or above the
    /// lowest removed predictability, times the instances scored, at most the removed.
    pub expected_false_removals: Option<f64>,
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
    /// Per instance: the mean probability of its label when held out, same iteration.
    pub confidence: Vec<Option<f64>>,
    /// Instances in the order they were removed (the ranking inside each iteration).
    pub removal_order: Vec<usize>,
    pub iterations: Vec<AfliteIteration>,
    /// The fresh probe's held-out accuracy on the final set.
    pub final_probe_accuracy: f64,
}

impl AfliteResult {
    pub fn kept(&self) -> impl Iterator<Item = usize> + '_ {
        self.removed_in
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_none())
            .map(|(i, _)| i)
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
    #[error("tau auto needs a null: null permutations must be at least 1")]
    AutoWithoutNull,
    #[error("the false-removal rate must be in (0, 1), not {0}")]
    Rate(f64),
}

/// Per active instance that was held out at least once: (active position, predictability, mean
/// probability of its label).
fn held_out_scores(
    probabilities: &[Vec<f32>],
    train: &[Vec<bool>],
    active: &[usize],
    labels: &[u32],
) -> Vec<(usize, f64, f64)> {
    let classes = probabilities
        .first()
        .map_or(1, |p| p.len() / active.len().max(1))
        .max(1);
    let mut out = Vec::with_capacity(active.len());
    for (a, &i) in active.iter().enumerate() {
        let (mut right, mut seen, mut prob) = (0usize, 0usize, 0.0f64);
        for (j, side) in train.iter().enumerate() {
            if side[a] {
                continue;
            }
            let p = &probabilities[j][a * classes..(a + 1) * classes];
            // Ties go to the lowest class, as argmax does.
            let predicted = (0..classes).fold(0, |best, c| if p[c] > p[best] { c } else { best });
            seen += 1;
            right += usize::from(predicted == labels[i] as usize);
            prob += f64::from(p[labels[i] as usize]);
        }
        if seen > 0 {
            out.push((a, right as f64 / seen as f64, prob / seen as f64));
        }
    }
    out
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// An instance's place in the order of removal: predictability, then confidence.
type Key = (f64, f64);

fn key_cmp(a: &Key, b: &Key) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1))
}

/// The null's expected count of instances at or above `tau` among `scored`: its share there, with
/// one pseudo-count so that a value beyond every null draw is not called certain.
fn expected_at(null_sorted: &[Key], tau: Key, scored: usize) -> f64 {
    let at_or_above = null_sorted.len() - null_sorted.partition_point(|v| key_cmp(v, &tau).is_lt());
    scored as f64 * (at_or_above + 1) as f64 / (null_sorted.len() + 1) as f64
}

/// The lowest observed predictability at or above `floor` whose estimated false-removal rate
/// (null's expected count over observed count at or above it) is within `rate` (step-up, as
/// Benjamini-Hochberg): None when no value is.
fn calibrated_threshold(
    observed: &[Key],
    null_sorted: &[Key],
    floor: f64,
    rate: f64,
) -> Option<Key> {
    let mut sorted_obs = observed.to_vec();
    sorted_obs.sort_by(key_cmp);
    let mut best = None;
    for (at, &tau) in sorted_obs.iter().enumerate().rev() {
        if tau.0 < floor {
            break;
        }
        // Ties: every instance with this key counts.
        if at + 1 < sorted_obs.len() && key_cmp(&sorted_obs[at + 1], &tau).is_eq() {
            continue;
        }
        let count = sorted_obs.len() - sorted_obs.partition_point(|v| key_cmp(v, &tau).is_lt());
        if expected_at(null_sorted, tau, observed.len()) <= rate * count as f64 {
            best = Some(tau);
        }
    }
    best
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
    if options.tau.is_none() && options.null_permutations == 0 {
        return Err(AfliteError::AutoWithoutNull);
    }
    if !(options.false_removal_rate > 0.0 && options.false_removal_rate < 1.0) {
        return Err(AfliteError::Rate(options.false_removal_rate));
    }
    let total = labels.len();
    let mut removed_in: Vec<Option<usize>> = vec![None; total];
    let mut predictability: Vec<Option<f64>> = vec![None; total];
    let mut confidence: Vec<Option<f64>> = vec![None; total];
    let mut removal_order = Vec::new();
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
                return Err(AfliteError::TrainTooLarge {
                    t: options.t,
                    size: active.len(),
                });
            }
            break;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
        rng.set_stream(iteration as u64 + 1);
        let probe_accuracy = probe(probes, &active, labels, groups, &mut rng, iteration)?;
        let train: Vec<Vec<bool>> = (0..options.m)
            .map(|_| partition(&active, groups, options.t, &mut rng))
            .collect();
        let seed = options.seed ^ (iteration as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let fail = |source| AfliteError::Probes { iteration, source };
        let probabilities = probes
            .fit_probabilities(&active, labels, &train, seed)
            .map_err(fail)?;
        let scored = held_out_scores(&probabilities, &train, &active, labels);
        for &(a, p, c) in &scored {
            predictability[active[a]] = Some(p);
            confidence[active[a]] = Some(c);
        }
        let observed: Vec<Key> = scored.iter().map(|s| (s.1, s.2)).collect();
        let mean = observed.iter().map(|o| o.0).sum::<f64>() / scored.len().max(1) as f64;

        // The null: the same partitions, labels shuffled among the active instances (so the
        // class balance stays), from a stream of its own.
        let mut null: Vec<Key> = Vec::new();
        let mut null_rng = ChaCha8Rng::seed_from_u64(options.seed ^ 0x6E75_6C6C);
        null_rng.set_stream(iteration as u64 + 1);
        for r in 0..options.null_permutations {
            let mut shuffled: Vec<u32> = active.iter().map(|&i| labels[i]).collect();
            shuffled.shuffle(&mut null_rng);
            let mut permuted = labels.to_vec();
            for (&i, &l) in active.iter().zip(&shuffled) {
                permuted[i] = l;
            }
            let seed = seed ^ (r as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
            let p = probes
                .fit_probabilities(&active, &permuted, &train, seed)
                .map_err(fail)?;
            null.extend(
                held_out_scores(&p, &train, &active, &permuted)
                    .into_iter()
                    .map(|s| (s.1, s.2)),
            );
        }
        null.sort_by(key_cmp);
        let has_null = !null.is_empty();
        let threshold: Option<Key> = match (options.tau, has_null) {
            (Some(tau), false) => Some((tau, f64::NEG_INFINITY)),
            (tau, true) => calibrated_threshold(
                &observed,
                &null,
                tau.unwrap_or(f64::NEG_INFINITY),
                options.false_removal_rate,
            ),
            (None, false) => unreachable!("checked above"),
        };
        let mut qualified: Vec<(usize, f64, f64)> = match threshold {
            Some(th) => scored
                .into_iter()
                .filter(|s| key_cmp(&(s.1, s.2), &th).is_ge())
                .collect(),
            None => Vec::new(),
        };
        let above_tau = qualified.len();
        // Most predictable first, then most confident; ties in index order, so the run is
        // deterministic.
        qualified.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then(b.2.total_cmp(&a.2))
                .then(a.0.cmp(&b.0))
        });
        let room = active.len().saturating_sub(options.n);
        let remove =
            qualified
                .len()
                .min(options.k)
                .min(if options.n > 0 { room } else { usize::MAX });
        for &(a, _, _) in &qualified[..remove] {
            removed_in[active[a]] = Some(iteration);
            removal_order.push(active[a]);
        }
        let n_scored = observed.len();
        let quantiles = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            NullQuantiles {
                q50: quantile(&v, 0.5),
                q90: quantile(&v, 0.9),
                q95: quantile(&v, 0.95),
                q99: quantile(&v, 0.99),
                max: *v.last().expect("not empty"),
            }
        };
        let null_summary = has_null.then(|| quantiles(null.iter().map(|k| k.0).collect()));
        let null_confidence = has_null.then(|| quantiles(null.iter().map(|k| k.1).collect()));
        let at_tau = options.tau.map(|t| (t, f64::NEG_INFINITY)).or(threshold);
        let expected_false_at_tau =
            has_null.then(|| at_tau.map_or(0.0, |t| expected_at(&null, t, n_scored)));
        let expected_false_removals = has_null.then(|| match qualified[..remove].last() {
            Some(&(_, p, c)) => expected_at(&null, (p, c), n_scored).min(remove as f64),
            None => 0.0,
        });
        iterations.push(AfliteIteration {
            iteration,
            size: active.len(),
            removed: remove,
            mean_predictability: mean,
            above_tau,
            threshold: threshold.map(|t| t.0),
            threshold_confidence: threshold.map(|t| t.1).filter(|c| c.is_finite()),
            null: null_summary,
            null_confidence,
            expected_false_at_tau,
            expected_false_removals,
            probe_accuracy,
        });
        if above_tau < options.k {
            break;
        }
    }
    let active: Vec<usize> = (0..total).filter(|&i| removed_in[i].is_none()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    rng.set_stream(0);
    let final_probe_accuracy = probe(probes, &active, labels, groups, &mut rng, iterations.len())?;
    Ok(AfliteResult {
        removed_in,
        predictability,
        confidence,
        removal_order,
        iterations,
        final_probe_accuracy,
    })
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
    let probabilities = probes
        .fit_probabilities(active, labels, std::slice::from_ref(&train), rng.next_u64())
        .map_err(|source| AfliteError::Probes { iteration, source })?;
    let scored = held_out_scores(&probabilities, std::slice::from_ref(&train), active, labels);
    Ok(scored.iter().map(|s| s.1).sum::<f64>() / scored.len().max(1) as f64)
}

/// A random training side of `t` instances (or a little more: whole groups are taken), marked per
/// active instance.
fn partition(active: &[usize], groups: &[String], t: usize, rng: &mut ChaCha8Rng) -> Vec<bool> {
    let mut by_group: std::collections::BTreeMap<&str, Vec<usize>> =
        std::collections::BTreeMap::new();
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
    use rand::Rng;

    /// "Classifiers" that predict the true label of planted instances (when trained on the true
    /// labels: on permuted ones they learn nothing) and a coin flip otherwise.
    struct Oracle {
        planted: Vec<bool>,
        labels: Vec<u32>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    impl LinearProbes for Oracle {
        type Error = Never;
        fn fit_probabilities(
            &mut self,
            active: &[usize],
            labels: &[u32],
            train: &[Vec<bool>],
            seed: u64,
        ) -> Result<Vec<Vec<f32>>, Never> {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let learns = active.iter().all(|&i| labels[i] == self.labels[i]);
            Ok(train
                .iter()
                .map(|_| {
                    active
                        .iter()
                        .flat_map(|&i| {
                            let (class, p) = if learns && self.planted[i] {
                                (self.labels[i], 0.95)
                            } else {
                                (rng.random_range(0..2u32), rng.random_range(0.5..0.8f32))
                            };
                            if class == 1 {
                                [1.0 - p, p]
                            } else {
                                [p, 1.0 - p]
                            }
                        })
                        .collect()
                })
                .collect())
        }
    }

    fn options(
        t: usize,
        k: usize,
        tau: Option<f64>,
        null_permutations: usize,
        seed: u64,
    ) -> AfliteOptions {
        AfliteOptions {
            m: 64,
            t,
            k,
            tau,
            null_permutations,
            max_iterations: 50,
            seed,
            ..Default::default()
        }
    }

    #[test]
    fn planted_instances_go_first_and_twins_stay_together() {
        let n = 400;
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let planted: Vec<bool> = (0..n).map(|i| i % 5 == 0).collect();
        let groups: Vec<String> = (0..n).map(|i| format!("g{}", i / 2)).collect();
        let planted_count = planted.iter().filter(|&&p| p).count();
        for tau in [Some(0.75), None] {
            let mut oracle = Oracle {
                planted: planted.clone(),
                labels: labels.clone(),
            };
            let r = aflite(&mut oracle, &labels, &groups, &options(100, 30, tau, 1, 1)).unwrap();
            let removed: Vec<usize> = (0..n).filter(|&i| r.removed_in[i].is_some()).collect();
            let hits = removed.iter().filter(|&&i| planted[i]).count();
            assert!(
                hits * 10 >= planted_count * 9,
                "{tau:?} recall: {hits} of {planted_count}"
            );
            assert!(
                hits * 10 >= removed.len() * 9,
                "{tau:?} precision: {hits} of {}",
                removed.len()
            );
            assert_eq!(r.removal_order.len(), removed.len());
            let last = r.iterations.last().unwrap();
            assert!(last.above_tau < 30, "stopped because too few qualified");
            let first = &r.iterations[0];
            let null = first.null.as_ref().unwrap();
            assert!(
                null.q50 > 0.3 && null.q50 < 0.7 && null.q99 < 1.0,
                "{null:?}"
            );
            assert!(first.expected_false_removals.unwrap() < 3.0, "{first:?}");
        }
        // Twins: a partition takes whole groups.
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let active: Vec<usize> = (0..n).collect();
        let side = partition(&active, &groups, 101, &mut rng);
        for pair in side.chunks(2) {
            assert_eq!(pair[0], pair[1]);
        }
        assert_eq!(
            side.iter().filter(|&&s| s).count(),
            102,
            "whole groups: 101 rounds up to 102"
        );
    }

    #[test]
    fn without_signal_the_null_removes_nothing_and_the_target_size_is_respected() {
        let n = 300;
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let groups: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let mut noise = Oracle {
            planted: vec![false; n],
            labels: labels.clone(),
        };
        for seed in 0..5 {
            // The paper's plain tau: ~32 coin flips per instance, reaching 75% right is a 0.35% event.
            let r = aflite(
                &mut noise,
                &labels,
                &groups,
                &options(150, 20, Some(0.75), 0, seed),
            )
            .unwrap();
            assert!(r.kept().count() >= n - 3, "{} kept", r.kept().count());
            assert_eq!(
                r.iterations.len(),
                1,
                "fewer than k qualified: one iteration"
            );
            assert_eq!(r.iterations[0].null, None);
            // With the null, at a fixed tau and auto: at most 1% removed.
            for tau in [Some(0.6), None] {
                let r = aflite(
                    &mut noise,
                    &labels,
                    &groups,
                    &options(150, 20, tau, 1, seed),
                )
                .unwrap();
                assert!(
                    r.kept().count() >= n - 3,
                    "{tau:?}: {} kept",
                    r.kept().count()
                );
            }
        }
        let mut all = Oracle {
            planted: vec![true; n],
            labels: labels.clone(),
        };
        let r = aflite(
            &mut all,
            &labels,
            &groups,
            &AfliteOptions {
                n: 250,
                ..options(150, 20, None, 1, 2)
            },
        )
        .unwrap();
        assert_eq!(r.kept().count(), 250, "stops at the target size exactly");
        let e = aflite(&mut all, &labels, &groups, &options(150, 20, None, 0, 2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("tau auto needs a null"), "{e}");
    }

    /// Every instance is always predicted right, with a confidence of its own: the order of removal
    /// is the order of confidence.
    #[test]
    fn equal_predictability_is_ranked_by_confidence() {
        struct Sure(Vec<f32>);
        impl LinearProbes for Sure {
            type Error = Never;
            fn fit_probabilities(
                &mut self,
                active: &[usize],
                labels: &[u32],
                train: &[Vec<bool>],
                _: u64,
            ) -> Result<Vec<Vec<f32>>, Never> {
                Ok(train
                    .iter()
                    .map(|_| {
                        active
                            .iter()
                            .flat_map(|&i| {
                                if labels[i] == 1 {
                                    [1.0 - self.0[i], self.0[i]]
                                } else {
                                    [self.0[i], 1.0 - self.0[i]]
                                }
                            })
                            .collect()
                    })
                    .collect())
            }
        }
        let n = 50;
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let groups: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let conf: Vec<f32> = (0..n)
            .map(|i| 0.6 + 0.39 * ((i * 17 % n) as f32 / n as f32))
            .collect();
        let r = aflite(
            &mut Sure(conf.clone()),
            &labels,
            &groups,
            &AfliteOptions {
                k: 10,
                max_iterations: 1,
                ..options(20, 10, Some(0.75), 0, 1)
            },
        )
        .unwrap();
        let mut by_conf: Vec<usize> = (0..n).collect();
        by_conf.sort_by(|&a, &b| conf[b].total_cmp(&conf[a]));
        assert_eq!(r.removal_order, by_conf[..10]);
    }

    #[test]
    fn the_calibrated_threshold_keeps_the_estimated_false_removal_rate() {
        // Null: 1,000 values evenly in [0, 0.9); observed: 900 like the null and 100 at 0.95.
        let null: Vec<Key> = (0..1000).map(|i| (0.9 * i as f64 / 1000.0, 0.5)).collect();
        let mut observed: Vec<Key> = (0..900).map(|i| (0.9 * i as f64 / 900.0, 0.5)).collect();
        observed.extend(std::iter::repeat_n((0.95, 0.5), 100));
        let th = calibrated_threshold(&observed, &null, f64::NEG_INFINITY, 0.05).unwrap();
        let count = observed
            .iter()
            .filter(|&&p| key_cmp(&p, &th).is_ge())
            .count();
        assert!(expected_at(&null, th, observed.len()) <= 0.05 * count as f64);
        // Step-up: the threshold goes below the planted ones as far as the rate allows, taking a
        // few of the noise (about 5% of those taken).
        assert!(
            th.0 > 0.85 && th.0 < 0.95 && (101..=106).contains(&count),
            "{th:?} {count}"
        );
        // A fixed tau above that is kept.
        assert_eq!(
            calibrated_threshold(&observed, &null, 0.95, 0.05),
            Some((0.95, 0.5))
        );
        // Observed like the null: no threshold.
        assert_eq!(
            calibrated_threshold(&null, &null, f64::NEG_INFINITY, 0.05),
            None
        );
        // Equal predictability, told apart by confidence: 100 at (1.0, 0.95) beside a null whose
        // 1.0s are all unsure (0.55) are found; predictability alone could not.
        let null: Vec<Key> = (0..1000)
            .map(|i| if i % 10 == 0 { (1.0, 0.55) } else { (0.5, 0.5) })
            .collect();
        let mut observed: Vec<Key> = (0..900)
            .map(|i| if i % 10 == 0 { (1.0, 0.55) } else { (0.5, 0.5) })
            .collect();
        observed.extend(std::iter::repeat_n((1.0, 0.95), 100));
        assert_eq!(
            calibrated_threshold(&observed, &null, f64::NEG_INFINITY, 0.05),
            Some((1.0, 0.95))
        );
    }
}
