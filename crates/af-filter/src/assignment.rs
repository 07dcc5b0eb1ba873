//! Which k candidates of its pool each item shows as distractors.

use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum AssignmentError {
    #[error("item {item} has {pool} generated candidates, fewer than k = {k}: lower k or generate more endings")]
    PoolTooSmall { item: usize, pool: usize, k: usize },
    #[error("k must be at least 1")]
    ZeroK,
}

/// For every item, `k` distinct candidate ids (1..=pool size; 0 is the gold ending).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub k: usize,
    pub distractors: Vec<Vec<u32>>,
}

impl Assignment {
    /// A uniformly random assignment: the no-AF baseline, and AF's starting point.
    pub fn random(pool_sizes: &[usize], k: usize, seed: u64) -> Result<Self, AssignmentError> {
        if k == 0 {
            return Err(AssignmentError::ZeroK);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6173_7369_676e);
        let mut distractors = Vec::with_capacity(pool_sizes.len());
        for (item, &pool) in pool_sizes.iter().enumerate() {
            if pool < k {
                return Err(AssignmentError::PoolTooSmall { item, pool, k });
            }
            distractors.push(
                sample(&mut rng, pool, k)
                    .into_iter()
                    .map(|c| c as u32 + 1)
                    .collect(),
            );
        }
        Ok(Self { k, distractors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_assignment_is_distinct_in_range_and_seeded() {
        let a = Assignment::random(&[9, 20, 100], 9, 1).unwrap();
        for (d, pool) in a.distractors.iter().zip([9u32, 20, 100]) {
            let mut s = d.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 9);
            assert!(s.iter().all(|&c| c >= 1 && c <= pool));
        }
        assert_eq!(a, Assignment::random(&[9, 20, 100], 9, 1).unwrap());
        assert_ne!(a, Assignment::random(&[9, 20, 100], 9, 2).unwrap());
        assert_eq!(
            Assignment::random(&[9, 3], 4, 1),
            Err(AssignmentError::PoolTooSmall {
                item: 1,
                pool: 3,
                k: 4
            })
        );
    }
}
