//! The group-aware split every stage uses: AF's iterations, the export's evaluation, the audit.

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Splits item indices by group: whole groups go to the training side with probability
/// `train_share`, decided once per group.
pub fn split_by_group(
    groups: &[String],
    train_share: f64,
    rng: &mut ChaCha8Rng,
) -> (Vec<usize>, Vec<usize>) {
    let mut names: Vec<&str> = groups.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names.shuffle(rng);
    let n_train = ((names.len() as f64) * train_share).round() as usize;
    let train_groups: std::collections::HashSet<&str> =
        names[..n_train.min(names.len())].iter().copied().collect();
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

/// Group folds for cross-fitting: the distinct groups shuffled by `seed` and dealt round-robin,
/// so fold sizes differ by at most one group. Returns each item's fold.
pub fn folds_by_group(groups: &[&str], folds: usize, seed: u64) -> Vec<usize> {
    use rand::SeedableRng;
    let mut names: Vec<&str> = groups.to_vec();
    names.sort_unstable();
    names.dedup();
    names.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let fold: std::collections::HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, g)| (*g, i % folds.max(1)))
        .collect();
    groups.iter().map(|g| fold[g]).collect()
}

/// The published splits of a dataset: whole groups to `train`, `validation` and `test` by the
/// given shares (test takes the rest), seeded.
pub fn train_validation_test(
    groups: &[String],
    train_share: f64,
    validation_share: f64,
    seed: u64,
) -> Vec<&'static str> {
    use rand::SeedableRng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (train, rest) = split_by_group(groups, train_share, &mut rng);
    let rest_groups: Vec<String> = rest.iter().map(|&i| groups[i].clone()).collect();
    let within_rest = if train_share < 1.0 {
        validation_share / (1.0 - train_share)
    } else {
        0.0
    };
    let (validation, _) = split_by_group(&rest_groups, within_rest.min(1.0), &mut rng);
    let mut out = vec!["test"; groups.len()];
    for i in train {
        out[i] = "train";
    }
    for v in validation {
        out[rest[v]] = "validation";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_way_split_keeps_groups_whole_and_follows_the_shares() {
        let groups: Vec<String> = (0..3000).map(|i| format!("g{}", i / 3)).collect();
        let splits = train_validation_test(&groups, 0.8, 0.1, 7);
        for chunk in splits.chunks(3) {
            assert!(
                chunk.iter().all(|s| *s == chunk[0]),
                "a group is never split"
            );
        }
        let share = |name: &str| splits.iter().filter(|s| **s == name).count() as f64 / 3000.0;
        assert!(
            (share("train") - 0.8).abs() < 0.01 && (share("validation") - 0.1).abs() < 0.01,
            "{} {}",
            share("train"),
            share("validation")
        );
        assert_eq!(
            train_validation_test(&groups, 0.8, 0.1, 7),
            splits,
            "seeded"
        );
    }

    #[test]
    fn group_folds_keep_groups_whole_and_balanced() {
        let groups: Vec<String> = (0..100).map(|i| format!("g{}", i / 4)).collect();
        let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
        let folds = folds_by_group(&refs, 3, 9);
        for chunk in folds.chunks(4) {
            assert!(
                chunk.iter().all(|f| *f == chunk[0]),
                "a group is never split"
            );
        }
        let sizes: Vec<usize> = (0..3)
            .map(|f| folds.iter().filter(|&&x| x == f).count() / 4)
            .collect();
        assert_eq!(sizes.iter().sum::<usize>(), 25);
        assert!(sizes.iter().all(|&s| s == 8 || s == 9), "{sizes:?}");
        assert_eq!(folds_by_group(&refs, 3, 9), folds, "seeded");
    }
}
