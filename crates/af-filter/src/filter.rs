//! The AF loop.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Assignment;

#[derive(Debug, Error)]
pub enum FilterError<E: std::error::Error + 'static> {
    #[error("the committee failed in iteration {iteration}")]
    Committee {
        iteration: usize,
        #[source]
        source: E,
    },
    #[error("the committee returned {got} score lists for {expected} held-out items (head `{head}`)")]
    BadScores { head: String, got: usize, expected: usize },
    #[error("no head named `{0}` in the committee's output")]
    UnknownHead(String),
    #[error("the schedule has no stages")]
    NoStages,
}

/// One stage of the schedule: a committee composition run for some iterations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    /// The committee members of this stage (the committee decides what the names mean).
    pub members: Vec<String>,
    pub iterations: usize,
}

/// Which head's scores decide the swaps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapHead {
    /// The head with the given name (e.g. "joint", or a member).
    Named(String),
    /// The member with the best held-out (k+1)-way accuracy in this iteration.
    BestMember,
}

/// How many easy distractors an item may swap per iteration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapBudget {
    /// SWAG: min(n, #easy, #adversarial).
    Fixed(usize),
    /// HellaSwag: from the driving head's pairwise accuracy: 0 at <= 0.525, 1 at <= 0.575, else 2.
    ByPairwiseAccuracy,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilterOptions {
    pub seed: u64,
    /// Share of groups trained on each iteration (the rest is held out and filtered).
    pub train_share: f64,
    pub swap_head: SwapHead,
    pub budget: SwapBudget,
    /// A stage ends early when the driving head's held-out accuracy is within `epsilon` of
    /// chance ...
    pub epsilon: f64,
    /// ... for this many consecutive iterations.
    pub patience: usize,
    pub stages: Vec<Stage>,
}

/// One head's scores for the held-out items: per item, gold first, then candidates 1..=pool.
#[derive(Clone, Debug)]
pub struct HeadScores {
    pub head: String,
    pub is_member: bool,
    pub scores: Vec<Vec<f32>>,
}

/// A committee: trained on some items with their current assignment, it scores every pool
/// candidate of others.
pub trait Committee {
    type Error: std::error::Error + 'static;
    /// `train` and `heldout` are item indices; `seed` is the iteration's own.
    fn train_and_score(
        &mut self,
        stage: &Stage,
        train: &[usize],
        heldout: &[usize],
        assignment: &Assignment,
        seed: u64,
    ) -> Result<Vec<HeadScores>, Self::Error>;
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
    pub stage: String,
    pub driving_head: String,
    pub heads: Vec<HeadMetrics>,
    pub heldout_items: usize,
    pub items_changed: usize,
    pub swaps: usize,
    /// Wall time of the iteration (training, scoring, swapping).
    pub seconds: f64,
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
    /// The stage being run (index into the schedule) and iterations done in it.
    pub stage: usize,
    pub in_stage: usize,
    /// Consecutive iterations of this stage within epsilon of chance so far.
    pub near_chance: usize,
    pub finished: bool,
    /// Per item, its last held-out scores (None until it is first held out).
    pub last_scores: Vec<Option<ItemScores>>,
}

/// Chance accuracy of a (k+1)-way question.
pub fn chance(k: usize) -> f64 {
    1.0 / (k as f64 + 1.0)
}

impl FilterState {
    pub fn new(assignment: Assignment) -> Self {
        let last_scores = vec![None; assignment.distractors.len()];
        Self { assignment, iterations: Vec::new(), swaps: Vec::new(), stage: 0, in_stage: 0, near_chance: 0, finished: false, last_scores }
    }

    /// Runs one iteration; returns false once the run is over. A stage ends after its iterations,
    /// or earlier when the driving head stays within epsilon of chance for `patience`
    /// iterations; the run ends with its last stage.
    pub fn step<C: Committee>(
        &mut self,
        committee: &mut C,
        groups: &[String],
        options: &FilterOptions,
    ) -> Result<bool, FilterError<C::Error>> {
        if options.stages.is_empty() {
            return Err(FilterError::NoStages);
        }
        let t = self.iterations.len();
        let started = std::time::Instant::now();
        let Some(stage) = options.stages.get(self.stage).filter(|_| !self.finished) else {
            self.finished = true;
            return Ok(false);
        };
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
        rng.set_stream(t as u64 + 1);
        let (train, heldout) = split_by_group(groups, options.train_share, &mut rng);
        let iteration_seed = options.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let heads = committee
            .train_and_score(stage, &train, &heldout, &self.assignment, iteration_seed)
            .map_err(|source| FilterError::Committee { iteration: t, source })?;
        for h in &heads {
            if h.scores.len() != heldout.len() {
                return Err(FilterError::BadScores { head: h.head.clone(), got: h.scores.len(), expected: heldout.len() });
            }
        }
        let metrics: Vec<HeadMetrics> = heads.iter().map(|h| self.metrics(h, &heldout)).collect();
        let driving = match &options.swap_head {
            SwapHead::Named(name) => heads.iter().position(|h| &h.head == name).ok_or_else(|| FilterError::UnknownHead(name.clone()))?,
            SwapHead::BestMember => (0..heads.len())
                .filter(|&i| heads[i].is_member)
                .max_by(|&a, &b| metrics[a].accuracy.total_cmp(&metrics[b].accuracy))
                .ok_or_else(|| FilterError::UnknownHead("best member (no member heads)".into()))?,
        };
        let budget = match options.budget {
            SwapBudget::Fixed(n) => n,
            SwapBudget::ByPairwiseAccuracy => {
                let p = metrics[driving].pairwise_accuracy;
                if p <= 0.525 {
                    0
                } else if p <= 0.575 {
                    1
                } else {
                    2
                }
            }
        };
        let (mut changed, mut swaps) = (0, 0);
        for (h, &item) in heldout.iter().enumerate() {
            let scores = &heads[driving].scores[h];
            let gold = scores[0];
            let assigned = &mut self.assignment.distractors[item];
            let mut easy: Vec<usize> = (0..assigned.len()).filter(|&s| scores[assigned[s] as usize] < gold).collect();
            let mut adversarial: Vec<u32> =
                (1..scores.len() as u32).filter(|c| scores[*c as usize] > gold && !assigned.contains(c)).collect();
            let n = budget.min(easy.len()).min(adversarial.len());
            if n > 0 {
                easy.shuffle(&mut rng);
                adversarial.shuffle(&mut rng);
                for (&slot, &added) in easy.iter().zip(&adversarial).take(n) {
                    self.swaps.push(Swap { iteration: t, item, removed: assigned[slot], added });
                    assigned[slot] = added;
                }
                changed += 1;
                swaps += n;
            }
            self.last_scores[item] = Some(ItemScores {
                iteration: t,
                head: heads[driving].head.clone(),
                gold,
                distractors: assigned.iter().map(|&c| scores[c as usize]).collect(),
            });
        }
        let accuracy = metrics[driving].accuracy;
        let near = (accuracy - chance(self.assignment.k)).abs() <= options.epsilon;
        self.near_chance = if near { self.near_chance + 1 } else { 0 };
        self.iterations.push(IterationRecord {
            iteration: t,
            stage: stage.name.clone(),
            driving_head: heads[driving].head.clone(),
            heads: metrics,
            heldout_items: heldout.len(),
            items_changed: changed,
            swaps,
            seconds: started.elapsed().as_secs_f64(),
        });
        self.in_stage += 1;
        if self.near_chance >= options.patience.max(1) || self.in_stage >= stage.iterations {
            self.stage += 1;
            self.in_stage = 0;
            self.near_chance = 0;
        }
        self.finished = self.stage >= options.stages.len();
        Ok(!self.finished)
    }

    fn metrics(&self, h: &HeadScores, heldout: &[usize]) -> HeadMetrics {
        let (mut right, mut pairs_right, mut pairs) = (0usize, 0usize, 0usize);
        for (scores, &item) in h.scores.iter().zip(heldout) {
            let gold = scores[0];
            let assigned = &self.assignment.distractors[item];
            let beaten = assigned.iter().filter(|&&c| gold > scores[c as usize]).count();
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
    }

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    impl Committee for StyleCommittee {
        type Error = Never;
        fn train_and_score(&mut self, stage: &Stage, _: &[usize], heldout: &[usize], _: &Assignment, _: u64) -> Result<Vec<HeadScores>, Never> {
            let scores = heldout
                .iter()
                .map(|&i| self.style[i].iter().zip(&self.noise[i]).map(|(s, n)| -s.abs() + n).collect())
                .collect();
            let mut heads = vec![HeadScores { head: "joint".into(), is_member: false, scores }];
            for m in &stage.members {
                heads.push(HeadScores { head: m.clone(), is_member: true, scores: heads[0].scores.clone() });
            }
            Ok(heads)
        }
    }

    fn setup() -> (StyleCommittee, Vec<String>, FilterOptions, Assignment) {
        use rand::Rng;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (items, pool) = (300, 60);
        let mut style = Vec::new();
        let mut noise = Vec::new();
        for _ in 0..items {
            // Gold at 0; half the pool far away (easy), half about as close as the gold.
            style.push((0..=pool).map(|c| if c == 0 { 0.0 } else if c % 2 == 0 { rng.random_range(2.0..4.0) } else { rng.random_range(-0.05..0.05) }).collect());
            noise.push((0..=pool).map(|_| rng.random_range(-0.1f32..0.1)).collect());
        }
        let groups = (0..items).map(|i| format!("g{}", i / 3)).collect();
        let options = FilterOptions {
            seed: 9,
            train_share: 0.8,
            swap_head: SwapHead::Named("joint".into()),
            budget: SwapBudget::Fixed(2),
            epsilon: 0.05,
            patience: 3,
            stages: vec![Stage { name: "all".into(), members: vec!["mlp".into()], iterations: 200 }],
        };
        let pool_sizes = vec![pool; items];
        (StyleCommittee { style, noise }, groups, options, Assignment::random(&pool_sizes, 3, 1).unwrap())
    }

    #[test]
    fn filtering_drives_the_committee_to_chance_and_records_every_swap() {
        let (mut c, groups, options, start) = setup();
        let mut state = FilterState::new(start.clone());
        while state.step(&mut c, &groups, &options).unwrap() {}
        let first = state.iterations[0].heads[0].accuracy;
        let last = state.iterations.last().unwrap().heads[0].accuracy;
        assert!(first > 0.3, "random distractors are easy: {first}");
        assert!((last - chance(3)).abs() <= 0.05, "ends near chance: {last}");
        assert!(state.finished && state.iterations.len() < 200, "stopped by the rule, not the maximum");
        // Replaying the history on the start assignment gives the final assignment.
        let mut replay = start;
        for s in &state.swaps {
            let slot = replay.distractors[s.item].iter().position(|&c| c == s.removed).expect("removed was assigned");
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

    #[test]
    fn a_resumed_run_ends_where_an_uninterrupted_one_does() {
        let (mut c, groups, options, start) = setup();
        let mut whole = FilterState::new(start.clone());
        while whole.step(&mut c, &groups, &options).unwrap() {}
        let mut part = FilterState::new(start);
        for _ in 0..4 {
            part.step(&mut c, &groups, &options).unwrap();
        }
        // "Killed": only the serialised state survives.
        let mut resumed: FilterState = serde_json::from_str(&serde_json::to_string(&part).unwrap()).unwrap();
        while resumed.step(&mut c, &groups, &options).unwrap() {}
        for state in [&mut resumed, &mut whole] {
            state.iterations.iter_mut().for_each(|i| i.seconds = 0.0);
        }
        assert_eq!(resumed, whole);
    }

    #[test]
    fn stages_run_in_order_and_end_early_at_chance() {
        let (mut c, groups, mut options, start) = setup();
        options.stages = vec![
            Stage { name: "mlp".into(), members: vec!["mlp".into()], iterations: 5 },
            Stage { name: "full".into(), members: vec!["mlp".into(), "cnn".into()], iterations: 500 },
        ];
        let mut state = FilterState::new(start);
        while state.step(&mut c, &groups, &options).unwrap() {}
        let stages: Vec<&str> = state.iterations.iter().map(|i| i.stage.as_str()).collect();
        assert_eq!(&stages[..5], ["mlp"; 5]);
        assert!(stages[5..].iter().all(|s| *s == "full"));
        assert!(state.iterations.len() < 505, "the last stage ended at chance");
        assert_eq!(state.iterations[6].heads.len(), 3, "joint + two members");
    }

    #[test]
    fn hellaswag_budget_stops_swapping_near_chance_pairwise() {
        let (mut c, groups, mut options, start) = setup();
        options.budget = SwapBudget::ByPairwiseAccuracy;
        options.swap_head = SwapHead::BestMember;
        let mut state = FilterState::new(start);
        while state.step(&mut c, &groups, &options).unwrap() {}
        for it in &state.iterations {
            let p = it.heads.iter().find(|h| h.head == it.driving_head).unwrap().pairwise_accuracy;
            if p <= 0.525 {
                assert_eq!(it.swaps, 0);
            }
            assert_eq!(it.driving_head, "mlp");
        }
    }
}
