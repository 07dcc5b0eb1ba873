//! Inter-annotator agreement over nominal judgements: Krippendorff's alpha and the plain share of
//! agreeing annotator pairs. A unit is one thing judged (an ending's label, an item's best pick);
//! units judged by fewer than two annotators carry no information about agreement and are left out.

use std::collections::HashMap;
use std::hash::Hash;

/// Krippendorff's alpha for nominal data, from the coincidence matrix (Krippendorff 2011,
/// "Computing Krippendorff's alpha-reliability"). `None` when fewer than two values are pairable
/// or every pairable value is the same (expected disagreement 0).
pub fn krippendorff_alpha<T: Eq + Hash + Clone>(units: &[Vec<T>]) -> Option<f64> {
    let mut coincidence: HashMap<(T, T), f64> = HashMap::new();
    for values in units.iter().filter(|v| v.len() >= 2) {
        let m = values.len() as f64;
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                if i != j {
                    *coincidence.entry((a.clone(), b.clone())).or_default() += 1.0 / (m - 1.0);
                }
            }
        }
    }
    let mut marginal: HashMap<T, f64> = HashMap::new();
    for ((a, _), o) in &coincidence {
        *marginal.entry(a.clone()).or_default() += o;
    }
    let n: f64 = marginal.values().sum();
    if n < 2.0 {
        return None;
    }
    let observed: f64 = coincidence
        .iter()
        .filter(|((a, b), _)| a != b)
        .map(|(_, o)| o)
        .sum();
    let expected: f64 = marginal
        .iter()
        .flat_map(|(a, na)| {
            marginal
                .iter()
                .filter(move |(b, _)| *b != a)
                .map(move |(_, nb)| na * nb)
        })
        .sum::<f64>()
        / (n - 1.0);
    (expected > 0.0).then(|| 1.0 - observed / expected)
}

/// Share of annotator pairs, over all units, that gave the same value.
pub fn pairwise_agreement<T: Eq>(units: &[Vec<T>]) -> Option<f64> {
    let (mut agree, mut pairs) = (0usize, 0usize);
    for values in units {
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                pairs += 1;
                agree += usize::from(a == b);
            }
        }
    }
    (pairs > 0).then(|| agree as f64 / pairs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_matches_krippendorffs_worked_example() {
        // Krippendorff (2011), section C, nominal data: 4 observers, 12 units, missing values
        // left out; alpha = 0.743.
        let units: Vec<Vec<u8>> = vec![
            vec![1, 1, 1],
            vec![2, 2, 3, 2],
            vec![3, 3, 3, 3],
            vec![3, 3, 3, 3],
            vec![2, 2, 2, 2],
            vec![1, 2, 3, 4],
            vec![4, 4, 4, 4],
            vec![1, 1, 2, 1],
            vec![2, 2, 2, 2],
            vec![5, 5, 5],
            vec![1, 1],
            vec![3],
        ];
        let a = krippendorff_alpha(&units).unwrap();
        assert!((a - 0.743).abs() < 1e-3, "{a}");
    }

    #[test]
    fn agreement_extremes() {
        assert_eq!(
            krippendorff_alpha(&[vec!['a', 'a'], vec!['b', 'b']]),
            Some(1.0)
        );
        assert_eq!(
            krippendorff_alpha(&[vec!['a', 'a'], vec!['a', 'a']]),
            None,
            "no variation: undefined"
        );
        assert_eq!(
            pairwise_agreement(&[vec![1, 1, 2], vec![3, 3]]),
            Some(2.0 / 4.0)
        );
        assert_eq!(pairwise_agreement::<u8>(&[vec![1]]), None);
    }
}
