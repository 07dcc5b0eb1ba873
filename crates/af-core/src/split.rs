//! The group-aware split every stage uses: AF's iterations, the export's evaluation, the audit.

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Splits item indices by group: whole groups go to the training side with probability
/// `train_share`, decided once per group.
pub fn split_by_group(groups: &[String], train_share: f64, rng: &mut ChaCha8Rng) -> (Vec<usize>, Vec<usize>) {
    let mut names: Vec<&str> = groups.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names.shuffle(rng);
    let n_train = ((names.len() as f64) * train_share).round() as usize;
    let train_groups: std::collections::HashSet<&str> = names[..n_train.min(names.len())].iter().copied().collect();
    let (mut train, mut heldout) = (Vec::new(), Vec::new());
    for (i, g) in groups.iter().enumerate() {
        if train_groups.contains(g.as_str()) {
            train.push(i);
        } else {
            heldout.push(i);
        }
    }
    (train, heldout)
}
