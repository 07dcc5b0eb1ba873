//! One AF iteration of a fine-tuned member (`encoder-ft`, af-nn's `CrossEncoder`): fresh from the
//! pretrained weights, fine-tuned on the iteration's training questions (gold first, then the
//! assigned distractors, as the joint committee trains), then scoring a shortlist of each
//! held-out item: its gold, its assigned distractors and the `shortlist` other candidates the
//! joint committee's answer ranks highest. Every other candidate gets [`NOT_SHORTLISTED`], the
//! lowest score there is, so it is never swapped in and, if assigned, always easy; the gold and
//! the assigned distractors are always scored, so the head's accuracy is that of the whole
//! question. Costs per iteration: a fine-tuning pass over the training questions (the member's
//! `train-items` bounds it) and (k + 1 + shortlist) pairs per held-out item.

use std::collections::{BTreeSet, HashMap};

use af_filter::{Assignment, HeadScores, IterationPlan};
use af_io::pool_index::Pool;
use af_nn::committee::members::EncoderFtSettings;
use af_nn::encoder::CrossEncoder;
use anyhow::Context;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::Device;

/// The score of a candidate the fine-tuned member did not read: below every score it gives.
pub const NOT_SHORTLISTED: f32 = f32::MIN;

/// One AF iteration of a fine-tuned member: which member, its recipe, and what the iteration
/// trains on and scores.
#[derive(Clone, Copy)]
pub struct Iteration<'a> {
    pub pool: &'a Pool,
    pub member: &'static str,
    pub recipe: &'a EncoderFtSettings,
    pub device: Device,
    pub train: &'a [usize],
    pub heldout: &'a [usize],
    pub assignment: &'a Assignment,
    pub plan: &'a IterationPlan,
}

/// The fine-tuned member's head for the held-out items, per item gold first then candidates
/// 1..=pool, as the joint committee's heads are. `by` is the head whose scores pick the shortlist.
pub fn train_and_score(iteration: &Iteration, by: &HeadScores) -> anyhow::Result<HeadScores> {
    let Iteration {
        pool,
        member,
        recipe: settings,
        device,
        train,
        heldout,
        assignment,
        plan,
    } = *iteration;
    let started = std::time::Instant::now();
    // Its own streams: the joint committee's draws stay as they are without this member.
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0xf1e7_0e4c);
    let mut trained: Vec<usize> = train.to_vec();
    if settings.train_items > 0 && settings.train_items < trained.len() {
        trained.shuffle(&mut rng);
        trained.truncate(settings.train_items);
    }
    let question = |i: usize| -> Vec<u32> {
        std::iter::once(0)
            .chain(assignment.distractors[i].iter().copied())
            .collect()
    };
    let shortlists: Vec<Vec<u32>> = heldout
        .iter()
        .zip(&by.scores)
        .map(|(&i, scores)| shortlist(scores, &assignment.distractors[i], settings.shortlist))
        .collect();

    // Every pair this iteration reads, training questions first.
    let mut wanted: Vec<(usize, u32)> = trained
        .iter()
        .flat_map(|&i| question(i).into_iter().map(move |c| (i, c)))
        .collect();
    let n_train = wanted.len();
    wanted.extend(
        heldout
            .iter()
            .zip(&shortlists)
            .flat_map(|(&i, list)| list.iter().map(move |&c| (i, c))),
    );
    let endings: HashMap<i64, af_core::Candidate> = pool
        .fetch(wanted.iter().map(|&(i, c)| pool.row(i, c)))
        .context("cannot read the shortlisted candidates from the pool")?;
    let texts: Vec<(String, String)> = wanted
        .iter()
        .map(|&(i, c)| {
            let item = &pool.items[i];
            (
                item.context.clone(),
                format!("{} {}", item.noun_phrase, endings[&pool.row(i, c)].ending),
            )
        })
        .collect();
    let pairs: Vec<(&str, &str)> = texts
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();

    let dir = settings.model_dir()?;
    tch::manual_seed((plan.seed ^ 0xf1e7_0e4c) as i64);
    let mut encoder = CrossEncoder::fresh(&dir, device, &settings.options())
        .with_context(|| format!("cannot load {}", dir.display()))?;
    let encodings = encoder.tokenize_pairs(&pairs)?;
    let width = assignment.k + 1;
    let questions: Vec<Vec<usize>> = (0..trained.len())
        .map(|q| (q * width..(q + 1) * width).collect())
        .collect();
    let report = encoder.fine_tune(&encodings[..n_train], &questions, plan.seed)?;
    let scored = encoder.score(&encodings[n_train..]);
    if let Some(at) = scored.iter().position(|s| !s.is_finite()) {
        let (i, c) = wanted[n_train + at];
        anyhow::bail!("scored candidate {c} of item `{}` {}: its scores must be finite (a lower learning-rate is the usual cure)", pool.items[i].id, scored[at]);
    }

    let mut at = 0;
    let scores = heldout
        .iter()
        .zip(&shortlists)
        .map(|(&i, list)| {
            let mut s = vec![NOT_SHORTLISTED; pool.sizes[i] + 1];
            for &c in list {
                s[c as usize] = scored[at];
                at += 1;
            }
            s
        })
        .collect();
    tracing::info!(
        "{member}: fine-tuned on {} questions ({} steps, loss {}), scored {} shortlisted candidates, {:.1} s",
        trained.len(),
        report.steps,
        report.train_loss.iter().map(|l| format!("{l:.3}")).collect::<Vec<_>>().join(" -> "),
        scored.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(HeadScores {
        head: member.to_string(),
        is_member: true,
        scores,
    })
}

/// An item's shortlist, as candidate indices: the gold (0), its assigned distractors, and the
/// `n` other candidates scored highest by `scores` (gold first, then candidates 1..=pool), in
/// candidate order. Ties go to the lower index, so the list does not depend on the sort.
pub fn shortlist(scores: &[f32], assigned: &[u32], n: usize) -> Vec<u32> {
    let mut list: BTreeSet<u32> = std::iter::once(0).chain(assigned.iter().copied()).collect();
    let mut others: Vec<u32> = (1..scores.len() as u32)
        .filter(|c| !list.contains(c))
        .collect();
    others.sort_by(|&a, &b| {
        scores[b as usize]
            .total_cmp(&scores[a as usize])
            .then(a.cmp(&b))
    });
    list.extend(others.into_iter().take(n));
    list.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::shortlist;

    #[test]
    fn a_shortlist_holds_the_gold_the_assigned_and_the_best_others() {
        // Candidates 1..=6; 2 and 5 assigned; the best others are 6 then 1 (tied with 3: 1 wins).
        let scores = [0.0, 0.5, -1.0, 0.5, -2.0, 3.0, 0.9];
        assert_eq!(shortlist(&scores, &[2, 5], 2), [0, 1, 2, 5, 6]);
        assert_eq!(shortlist(&scores, &[2, 5], 0), [0, 2, 5]);
        assert_eq!(shortlist(&scores, &[2, 5], 99), [0, 1, 2, 3, 4, 5, 6]);
    }
}
