//! The AF loop.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use af_core::{BudgetRule, FilterConfig, Phase, SwapChoice, SwapHead};

use crate::Assignment;

#[derive(Debug, Error)]
pub enum FilterError<E: std::error::Error + 'static> {
    #[error("the committee failed in iteration {iteration}")]
    Committee {
        iteration: usize,
        #[source]
        source: E,
    },
    #[error(
        "the committee returned {got} score lists for {expected} held-out items (head `{head}`)"
    )]
    BadScores {
        head: String,
        got: usize,
        expected: usize,
    },
    #[error(
        "the committee returned training dynamics for {got} items, {expected} were trained on"
    )]
    BadDynamics { got: usize, expected: usize },
    #[error("no head named `{0}` in the committee's output")]
    UnknownHead(String),
    #[error("the schedule has no phases")]
    NoPhases,
}

/// One head's scores for the held-out items: per item, gold first, then candidates 1..=pool.
#[derive(Clone, Debug)]
pub struct HeadScores {
    pub head: String,
    pub is_member: bool,
    pub scores: Vec<Vec<f32>>,
}

/// What the loop decides for one iteration's committee.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterationPlan {
    /// The iteration's own seed.
    pub seed: u64,
    /// The learning rate to train with, when `[filter] learning-rate-range` draws one; None:
    /// the committee's own.
    pub learning_rate: Option<f64>,
}

/// A committee: trained on some items with their current assignment, it scores every pool
/// candidate of others.
pub trait Committee {
    type Error: std::error::Error + 'static;
    /// `train` and `heldout` are item indices.
    fn train_and_score(
        &mut self,
        phase: &Phase,
        train: &[usize],
        heldout: &[usize],
        assignment: &Assignment,
        plan: &IterationPlan,
    ) -> Result<Vec<HeadScores>, Self::Error>;

    /// The training dynamics of the last `train_and_score` call (data maps): per training item, in
    /// `train`'s order, what it recorded after each epoch, or None for an item it held out of
    /// fitting (early stopping's share). Empty when the committee records none.
    fn take_dynamics(&mut self) -> Vec<Option<EpochRecord>> {
        Vec::new()
    }
}

/// One item's question as the committee saw it while training, after each epoch: the probability
/// it gave the gold option and whether the gold option was its top choice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub gold_probability: Vec<f32>,
    pub right: Vec<bool>,
}

/// An item's training dynamics from the last iteration that trained on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemDynamics {
    pub iteration: usize,
    #[serde(flatten)]
    pub epochs: EpochRecord,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadMetrics {
    pub head: String,
    /// (k+1)-way accuracy: gold scored strictly above every assigned distractor.
    pub accuracy: f64,
    /// Gold scored strictly above a distractor, over all (item, assigned distractor) pairs.
    pub pairwise_accuracy: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Swap {
    pub iteration: usize,
    pub item: usize,
    pub removed: u32,
    pub added: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    pub iteration: usize,
    /// The schedule phase's name (`stage` in state.json and metrics.csv, as it always was).
    #[serde(rename = "stage")]
    pub phase: String,
    pub driving_head: String,
    pub heads: Vec<HeadMetrics>,
    pub heldout_items: usize,
    pub items_changed: usize,
    /// Held-out items whose gold the driving head scored above every candidate of the item's
    /// pool, assigned or not: no assignment from this pool fools that head there, so they are
    /// the floor AF cannot go below (absent from states of an older af: 0).
    #[serde(default)]
    pub items_gold_above_pool: usize,
    pub swaps: usize,
    /// Wall time of the iteration (training, scoring, swapping).
    pub seconds: f64,
    /// The learning rate drawn for this iteration (`[filter] learning-rate-range`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
}

/// The driving head's scores of an item's options when it was last held out, after that
/// iteration's swaps: what the exported dataset shows beside each option.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemScores {
    pub iteration: usize,
    pub head: String,
    pub gold: f32,
    /// In the order of the assignment's distractors.
    pub distractors: Vec<f32>,
}

/// Everything needed to continue: save it after every iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilterState {
    pub assignment: Assignment,
    pub iterations: Vec<IterationRecord>,
    pub swaps: Vec<Swap>,
    /// The phase being run (index into the schedule) and iterations done in it.
    #[serde(rename = "stage")]
    pub phase: usize,
    #[serde(rename = "in_stage")]
    pub in_phase: usize,
    /// Consecutive iterations of this phase within epsilon of chance so far.
    pub near_chance: usize,
    pub finished: bool,
    /// Per item, its last held-out scores (None until it is first held out).
    pub last_scores: Vec<Option<ItemScores>>,
    /// Per item, its training dynamics from the last iteration that trained on it (None until
    /// then, or when the committee records none). Absent from the states of an older af.
    #[serde(default)]
    pub dynamics: Vec<Option<ItemDynamics>>,
}

/// A draw from [low, high], uniform in the logarithm, from its own stream of `seed` (the split
/// and the swaps keep theirs, so a config without the range makes the choices it always made).
fn log_uniform([low, high]: [f64; 2], seed: u64) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(0x1ea2_11a7e);
    (low.ln() + rng.random::<f64>() * (high.ln() - low.ln())).exp()
}

/// Chance accuracy of a (k+1)-way question.
pub fn chance(k: usize) -> f64 {
    1.0 / (k as f64 + 1.0)
}

impl FilterState {
    pub fn new(assignment: Assignment) -> Self {
        let last_scores = vec![None; assignment.distractors.len()];
        let dynamics = vec![None; assignment.distractors.len()];
        Self {
            assignment,
            iterations: Vec::new(),
            swaps: Vec::new(),
            phase: 0,
            in_phase: 0,
            near_chance: 0,
            finished: false,
            last_scores,
            dynamics,
        }
    }

    /// Runs one iteration; returns false once the run is over. A phase ends after its
    /// iterations, or earlier when the driving head stays within epsilon of chance for
    /// `patience` iterations; the run ends with its last phase.
    ///
    /// Every random choice of iteration t (the split, then each item's swaps in held-out order)
    /// comes from one stream seeded by (seed, t), so a resumed run makes the same choices.
    pub fn step<C: Committee>(
        &mut self,
        committee: &mut C,
        groups: &[String],
        config: &FilterConfig,
        seed: u64,
    ) -> Result<bool, FilterError<C::Error>> {
        if config.stages.is_empty() {
            return Err(FilterError::NoPhases);
        }
        let t = self.iterations.len();
        let started = std::time::Instant::now();
        let Some(phase) = config.stages.get(self.phase).filter(|_| !self.finished) else {
            self.finished = true;
            return Ok(false);
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(t as u64 + 1);
        let (train, heldout) = split_by_group(groups, config.train_share, &mut rng);
        let iteration_seed = seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let plan = IterationPlan {
            seed: iteration_seed,
            learning_rate: config
                .learning_rate_range
                .map(|range| log_uniform(range, iteration_seed)),
        };
        let heads = committee
            .train_and_score(phase, &train, &heldout, &self.assignment, &plan)
            .map_err(|source| FilterError::Committee {
                iteration: t,
                source,
            })?;
        for h in &heads {
            if h.scores.len() != heldout.len() {
                return Err(FilterError::BadScores {
                    head: h.head.clone(),
                    got: h.scores.len(),
                    expected: heldout.len(),
                });
            }
        }
        let dynamics = committee.take_dynamics();
        if !dynamics.is_empty() {
            if dynamics.len() != train.len() {
                return Err(FilterError::BadDynamics {
                    got: dynamics.len(),
                    expected: train.len(),
                });
            }
            self.dynamics
                .resize(self.assignment.distractors.len(), None);
            for (&item, record) in train.iter().zip(dynamics) {
                if let Some(epochs) = record {
                    self.dynamics[item] = Some(ItemDynamics {
                        iteration: t,
                        epochs,
                    });
                }
            }
        }
        let metrics: Vec<HeadMetrics> = heads.iter().map(|h| self.metrics(h, &heldout)).collect();
        let driving = driving_head(&heads, &metrics, phase.driving(&config.swap_head))?;
        let budget = swap_budget(config.budget, config.n_easy, &metrics[driving]);
        let (mut changed, mut swaps, mut gold_above_pool) = (0, 0, 0);
        for (h, &item) in heldout.iter().enumerate() {
            let scores = &heads[driving].scores[h];
            gold_above_pool += usize::from(scores[1..].iter().all(|&s| s < scores[0]));
            let n = self.swap_item(
                item,
                scores,
                budget,
                (config.swap_choice, config.swap_temperature),
                &mut rng,
                t,
            );
            changed += usize::from(n > 0);
            swaps += n;
            self.last_scores[item] = Some(ItemScores {
                iteration: t,
                head: heads[driving].head.clone(),
                gold: scores[0],
                distractors: self.assignment.distractors[item]
                    .iter()
                    .map(|&c| scores[c as usize])
                    .collect(),
            });
        }
        let accuracy = metrics[driving].accuracy;
        let near = (accuracy - chance(self.assignment.k)).abs() <= config.epsilon;
        self.near_chance = if near { self.near_chance + 1 } else { 0 };
        self.iterations.push(IterationRecord {
            iteration: t,
            phase: phase.name.clone(),
            driving_head: heads[driving].head.clone(),
            heads: metrics,
            heldout_items: heldout.len(),
            items_changed: changed,
            items_gold_above_pool: gold_above_pool,
            swaps,
            seconds: started.elapsed().as_secs_f64(),
            learning_rate: plan.learning_rate,
        });
        self.in_phase += 1;
        if self.near_chance >= config.patience.max(1) || self.in_phase >= phase.iterations {
            self.phase += 1;
            self.in_phase = 0;
            self.near_chance = 0;
        }
        self.finished = self.phase >= config.stages.len();
        Ok(!self.finished)
    }

    /// The swap rule for one held-out item: up to `budget` of its assigned distractors that the
    /// driving head scores below the gold ("easy") are replaced by unassigned candidates it
    /// scores above the gold ("adversarial"). The adversarial ones are chosen at random, the easy
    /// ones by `choice`. Returns the swaps made.
    fn swap_item(
        &mut self,
        item: usize,
        scores: &[f32],
        budget: usize,
        choice: (SwapChoice, f64),
        rng: &mut ChaCha8Rng,
        iteration: usize,
    ) -> usize {
        let gold = scores[0];
        let assigned = &mut self.assignment.distractors[item];
        let mut easy: Vec<usize> = (0..assigned.len())
            .filter(|&s| scores[assigned[s] as usize] < gold)
            .collect();
        let mut adversarial: Vec<u32> = (1..scores.len() as u32)
            .filter(|c| scores[*c as usize] > gold && !assigned.contains(c))
            .collect();
        let n = budget.min(easy.len()).min(adversarial.len());
        if n > 0 {
            match choice {
                (SwapChoice::Uniform, _) => easy.shuffle(rng),
                (SwapChoice::Softmax, temperature) => {
                    // Weighted sampling without replacement (Efraimidis-Spirakis): sorting by
                    // u^(1/w) draws in proportion to w = softmax(-score / temperature).
                    let low = easy
                        .iter()
                        .map(|&s| scores[assigned[s] as usize])
                        .fold(f32::INFINITY, f32::min);
                    let mut keyed: Vec<(f64, usize)> = easy
                        .iter()
                        .map(|&s| {
                            let w = (-(f64::from(scores[assigned[s] as usize] - low))
                                / temperature)
                                .exp();
                            (
                                rng.random::<f64>().max(f64::MIN_POSITIVE).ln()
                                    / w.max(f64::MIN_POSITIVE),
                                s,
                            )
                        })
                        .collect();
                    keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
                    easy = keyed.into_iter().map(|(_, s)| s).collect();
                }
            }
            adversarial.shuffle(rng);
            for (&slot, &added) in easy.iter().zip(&adversarial).take(n) {
                self.swaps.push(Swap {
                    iteration,
                    item,
                    removed: assigned[slot],
                    added,
                });
                assigned[slot] = added;
            }
        }
        n
    }

    fn metrics(&self, h: &HeadScores, heldout: &[usize]) -> HeadMetrics {
        let (mut right, mut pairs_right, mut pairs) = (0usize, 0usize, 0usize);
        for (scores, &item) in h.scores.iter().zip(heldout) {
            let gold = scores[0];
            let assigned = &self.assignment.distractors[item];
            let beaten = assigned
                .iter()
                .filter(|&&c| gold > scores[c as usize])
                .count();
            right += usize::from(beaten == assigned.len());
            pairs_right += beaten;
            pairs += assigned.len();
        }
        HeadMetrics {
            head: h.head.clone(),
            accuracy: right as f64 / heldout.len().max(1) as f64,
            pairwise_accuracy: pairs_right as f64 / pairs.max(1) as f64,
        }
    }
}

/// The head whose scores decide this iteration's swaps.
fn driving_head<E: std::error::Error + 'static>(
    heads: &[HeadScores],
    metrics: &[HeadMetrics],
    rule: &SwapHead,
) -> Result<usize, FilterError<E>> {
    let named = |name: &str| {
        heads
            .iter()
            .position(|h| h.head == name)
            .ok_or_else(|| FilterError::UnknownHead(name.to_string()))
    };
    match rule {
        SwapHead::Joint => named(af_core::JOINT_HEAD),
        SwapHead::Member(m) => named(m.as_str()),
        SwapHead::BestMember => (0..heads.len())
            .filter(|&i| heads[i].is_member)
            .max_by(|&a, &b| metrics[a].accuracy.total_cmp(&metrics[b].accuracy))
            .ok_or_else(|| FilterError::UnknownHead("best member (no member heads)".into())),
    }
}

/// How many easy distractors each item may swap this iteration: SWAG's fixed `n_easy`, or
/// HellaSwag's by the driving head's pairwise accuracy (0 at <= 0.525, 1 at <= 0.575, else 2).
pub fn swap_budget(rule: BudgetRule, n_easy: usize, driving: &HeadMetrics) -> usize {
    match rule {
        BudgetRule::Fixed => n_easy,
        BudgetRule::PairwiseAccuracy => {
            let p = driving.pairwise_accuracy;
            if p <= 0.525 {
                0
            } else if p <= 0.575 {
                1
            } else {
                2
            }
        }
    }
}

pub use af_core::split::split_by_group;

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates carry a hidden "style" value; the gold's is 0. A committee that has learned the
    /// style scores candidates by how close they are to 0 (plus noise it cannot learn): AF must
    /// swap in close ones until it is at chance.
    struct StyleCommittee {
        style: Vec<Vec<f32>>,
        noise: Vec<Vec<f32>>,
        /// What each call was told to train with.
        learning_rates: Vec<Option<f64>>,
        /// The held-out items of each call.
        heldout: Vec<Vec<usize>>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    impl Committee for StyleCommittee {
        type Error = Never;
        fn train_and_score(
            &mut self,
            phase: &Phase,
            _: &[usize],
            heldout: &[usize],
            _: &Assignment,
            plan: &IterationPlan,
        ) -> Result<Vec<HeadScores>, Never> {
            self.learning_rates.push(plan.learning_rate);
            self.heldout.push(heldout.to_vec());
            let scores = heldout
                .iter()
                .map(|&i| {
                    self.style[i]
                        .iter()
                        .zip(&self.noise[i])
                        .map(|(s, n)| -s.abs() + n)
                        .collect()
                })
                .collect();
            let mut heads = vec![HeadScores {
                head: "joint".into(),
                is_member: false,
                scores,
            }];
            for m in &phase.members {
                heads.push(HeadScores {
                    head: m.to_string(),
                    is_member: true,
                    scores: heads[0].scores.clone(),
                });
            }
            Ok(heads)
        }
    }

    const SEED: u64 = 9;

    fn phase(name: &str, members: &[&str], iterations: usize) -> Phase {
        Phase {
            name: name.into(),
            members: af_core::member_names(members),
            iterations,
            swap_head: None,
        }
    }

    fn setup() -> (StyleCommittee, Vec<String>, FilterConfig, Assignment) {
        use rand::Rng;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (items, pool) = (300, 60);
        let mut style = Vec::new();
        let mut noise = Vec::new();
        for _ in 0..items {
            // Gold at 0; half the pool far away (easy), half about as close as the gold.
            style.push(
                (0..=pool)
                    .map(|c| {
                        if c == 0 {
                            0.0
                        } else if c % 2 == 0 {
                            rng.random_range(2.0..4.0)
                        } else {
                            rng.random_range(-0.05..0.05)
                        }
                    })
                    .collect(),
            );
            noise.push((0..=pool).map(|_| rng.random_range(-0.1f32..0.1)).collect());
        }
        let groups = (0..items).map(|i| format!("g{}", i / 3)).collect();
        let options = FilterConfig {
            k: 3,
            train_share: 0.8,
            swap_head: SwapHead::Joint,
            budget: BudgetRule::Fixed,
            n_easy: 2,
            epsilon: 0.05,
            patience: 3,
            stages: vec![phase("all", &["mlp"], 200)],
            ..FilterConfig::default()
        };
        let pool_sizes = vec![pool; items];
        (
            StyleCommittee {
                style,
                noise,
                learning_rates: Vec::new(),
                heldout: Vec::new(),
            },
            groups,
            options,
            Assignment::random(&pool_sizes, 3, 1).unwrap(),
        )
    }

    #[test]
    fn filtering_drives_the_committee_to_chance_and_records_every_swap() {
        let (mut c, groups, options, start) = setup();
        let mut state = FilterState::new(start.clone());
        while state.step(&mut c, &groups, &options, SEED).unwrap() {}
        let first = state.iterations[0].heads[0].accuracy;
        let last = state.iterations.last().unwrap().heads[0].accuracy;
        assert!(first > 0.3, "random distractors are easy: {first}");
        assert!((last - chance(3)).abs() <= 0.05, "ends near chance: {last}");
        assert!(
            state.finished && state.iterations.len() < 200,
            "stopped by the rule, not the maximum"
        );
        // Replaying the history on the start assignment gives the final assignment.
        let mut replay = start;
        for s in &state.swaps {
            let slot = replay.distractors[s.item]
                .iter()
                .position(|&c| c == s.removed)
                .expect("removed was assigned");
            replay.distractors[s.item][slot] = s.added;
        }
        assert_eq!(replay, state.assignment);
        for d in &state.assignment.distractors {
            let mut u = d.clone();
            u.sort_unstable();
            u.dedup();
            assert_eq!(u.len(), 3, "distractors stay distinct");
        }
    }

    /// Items whose every candidate is easy are counted, each iteration they are held out, as
    /// items the pool cannot make hard; the others never are here (each has a candidate that
    /// scores above the gold whatever the noise).
    #[test]
    fn items_whose_pool_holds_nothing_harder_than_the_gold_are_counted() {
        let (mut c, groups, mut options, start) = setup();
        let hopeless = 0..30;
        for i in 0..c.style.len() {
            if hopeless.contains(&i) {
                c.style[i][1..].iter_mut().for_each(|s| *s = 3.0);
            } else {
                (c.style[i][1], c.noise[i][1]) = (0.0, 0.5);
            }
        }
        options.stages = vec![phase("all", &["mlp"], 6)];
        let mut state = FilterState::new(start);
        while state.step(&mut c, &groups, &options, SEED).unwrap() {}
        assert_eq!(state.iterations.len(), c.heldout.len());
        for (it, heldout) in state.iterations.iter().zip(&c.heldout) {
            let expected = heldout.iter().filter(|i| hopeless.contains(*i)).count();
            assert_eq!(
                it.items_gold_above_pool, expected,
                "iteration {}",
                it.iteration
            );
        }
        assert!(
            state
                .iterations
                .iter()
                .map(|i| i.items_gold_above_pool)
                .sum::<usize>()
                > 0,
            "the hopeless items were held out at least once"
        );
    }

    /// A phase with its own swap-head is driven by that head, the others by `[filter] swap-head`.
    #[test]
    fn a_phase_with_its_own_swap_head_is_driven_by_it() {
        let (mut c, groups, mut options, start) = setup();
        let mut own = phase("own", &["mlp", "bow"], 2);
        own.swap_head = Some(SwapHead::Member(af_core::MemberName::new("bow")));
        options.stages = vec![phase("plain", &["mlp"], 2), own];
        let mut state = FilterState::new(start);
        while state.step(&mut c, &groups, &options, SEED).unwrap() {}
        let driven: Vec<&str> = state
            .iterations
            .iter()
            .map(|i| i.driving_head.as_str())
            .collect();
        assert_eq!(driven, ["joint", "joint", "bow", "bow"]);
    }

    #[test]
    fn a_resumed_run_ends_where_an_uninterrupted_one_does() {
        let (mut c, groups, options, start) = setup();
        let mut whole = FilterState::new(start.clone());
        while whole.step(&mut c, &groups, &options, SEED).unwrap() {}
        let mut part = FilterState::new(start);
        for _ in 0..4 {
            part.step(&mut c, &groups, &options, SEED).unwrap();
        }
        // "Killed": only the serialised state survives.
        let mut resumed: FilterState =
            serde_json::from_str(&serde_json::to_string(&part).unwrap()).unwrap();
        while resumed.step(&mut c, &groups, &options, SEED).unwrap() {}
        for state in [&mut resumed, &mut whole] {
            state.iterations.iter_mut().for_each(|i| i.seconds = 0.0);
        }
        assert_eq!(resumed, whole);
    }

    #[test]
    fn hellaswag_random_learning_rates_are_drawn_log_uniformly_per_iteration_and_recorded() {
        let (mut c, groups, mut options, start) = setup();
        let mut plain = FilterState::new(start.clone());
        plain.step(&mut c, &groups, &options, SEED).unwrap();
        assert_eq!(
            c.learning_rates,
            [None],
            "no range: the committee's own rate"
        );
        assert!(
            !serde_json::to_string(&plain.iterations[0])
                .unwrap()
                .contains("learning_rate"),
            "and nothing new in state.json"
        );

        options.learning_rate_range = Some([1e-4, 1e-2]);
        options.stages = vec![phase("all", &["mlp"], 400)];
        options.patience = 1000;
        c.learning_rates.clear();
        let mut state = FilterState::new(start.clone());
        while state.step(&mut c, &groups, &options, SEED).unwrap() {}
        let drawn: Vec<f64> = c
            .learning_rates
            .iter()
            .map(|r| r.expect("drawn every iteration"))
            .collect();
        assert_eq!(drawn.len(), 400);
        let recorded: Vec<f64> = state
            .iterations
            .iter()
            .map(|i| i.learning_rate.unwrap())
            .collect();
        assert_eq!(
            recorded, drawn,
            "state.json records what the committee was told"
        );
        assert!(drawn.iter().all(|r| (1e-4..=1e-2).contains(r)), "{drawn:?}");
        // Uniform in the logarithm: about a quarter in each quarter of the log-range.
        for q in 0..4 {
            let (lo, hi) = (
                10f64.powf(-4.0 + 0.5 * q as f64),
                10f64.powf(-3.5 + 0.5 * q as f64),
            );
            let share =
                drawn.iter().filter(|&&r| r >= lo && r < hi).count() as f64 / drawn.len() as f64;
            assert!((share - 0.25).abs() < 0.08, "quarter {q}: {share}");
        }
        // The swaps are what they were without the range: its draws come from their own stream.
        assert_eq!(state.iterations[0].swaps, plain.iterations[0].swaps);
        assert_eq!(
            state.assignment.distractors.len(),
            plain.assignment.distractors.len()
        );
        // And a resumed run draws the same rates.
        let mut part = FilterState::new(start);
        for _ in 0..3 {
            part.step(&mut c, &groups, &options, SEED).unwrap();
        }
        let mut resumed: FilterState =
            serde_json::from_str(&serde_json::to_string(&part).unwrap()).unwrap();
        while resumed.step(&mut c, &groups, &options, SEED).unwrap() {}
        assert_eq!(
            resumed
                .iterations
                .iter()
                .map(|i| i.learning_rate.unwrap())
                .collect::<Vec<_>>(),
            recorded
        );
    }

    #[test]
    fn stages_run_in_order_and_end_early_at_chance() {
        let (mut c, groups, mut options, start) = setup();
        options.stages = vec![
            phase("mlp", &["mlp"], 5),
            phase("full", &["mlp", "cnn"], 500),
        ];
        let mut state = FilterState::new(start);
        while state.step(&mut c, &groups, &options, SEED).unwrap() {}
        let stages: Vec<&str> = state.iterations.iter().map(|i| i.phase.as_str()).collect();
        assert_eq!(&stages[..5], ["mlp"; 5]);
        assert!(stages[5..].iter().all(|s| *s == "full"));
        assert!(
            state.iterations.len() < 505,
            "the last stage ended at chance"
        );
        assert_eq!(state.iterations[6].heads.len(), 3, "joint + two members");
    }

    #[test]
    fn hellaswag_softmax_swaps_out_the_most_confidently_wrong_distractors_first() {
        // One item: gold scored 0, distractors 1..=3 scored -4, -1, -2 (all easy), candidates
        // 4..=9 scored above the gold (adversarial).
        let scores = [0.0, -4.0, -1.0, -2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let fresh = || {
            let mut a = Assignment::random(&[9], 3, 1).unwrap();
            a.distractors[0] = vec![1, 2, 3];
            FilterState::new(a)
        };
        let removed = |choice: (SwapChoice, f64), draws: u64| {
            let mut counts = [0usize; 4];
            for d in 0..draws {
                let mut state = fresh();
                let mut rng = ChaCha8Rng::seed_from_u64(d);
                assert_eq!(state.swap_item(0, &scores, 1, choice, &mut rng, 0), 1);
                counts[state.swaps[0].removed as usize] += 1;
            }
            counts
        };
        // Near-zero temperature: always the lowest-scored one.
        assert_eq!(removed((SwapChoice::Softmax, 1e-3), 50), [0, 50, 0, 0]);
        // Temperature 1: in proportion to exp(-score): 0.846, 0.042 and 0.114 of the time.
        let c = removed((SwapChoice::Softmax, 1.0), 2000);
        assert!(
            (1620..1760).contains(&c[1]) && (50..120).contains(&c[2]) && (180..280).contains(&c[3]),
            "{c:?}"
        );
        // Uniform: each about a third.
        let c = removed((SwapChoice::Uniform, 1.0), 3000);
        assert!(c[1..].iter().all(|&n| (900..1100).contains(&n)), "{c:?}");
    }

    #[test]
    fn hellaswag_budget_stops_swapping_near_chance_pairwise() {
        let (mut c, groups, mut options, start) = setup();
        options.budget = BudgetRule::PairwiseAccuracy;
        options.swap_head = SwapHead::BestMember;
        let mut state = FilterState::new(start);
        while state.step(&mut c, &groups, &options, SEED).unwrap() {}
        for it in &state.iterations {
            let p = it
                .heads
                .iter()
                .find(|h| h.head == it.driving_head)
                .unwrap()
                .pairwise_accuracy;
            if p <= 0.525 {
                assert_eq!(it.swaps, 0);
            }
            assert_eq!(it.driving_head, "mlp");
        }
    }
}
