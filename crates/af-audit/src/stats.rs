//! Intervals and tests: Wilson intervals for accuracies, a one-sided z-test against chance for
//! detectors whose questions differ in their number of options, Holm's correction for tokens.

/// The 0.975 quantile of the standard normal.
pub const Z95: f64 = 1.959_964;

/// 95% Wilson score interval for `right` (possibly fractional: tie credit) successes of `n`.
pub fn wilson(right: f64, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, z) = (n as f64, Z95);
    let p = (right / n).clamp(0.0, 1.0);
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Upper tail of the standard normal, P(Z > z).
pub fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// Complementary error function (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// One-sided p-value that credits summing to `right` beat per-question chance rates `chance`
/// (each question a Bernoulli trial under the null).
pub fn above_chance_p(right: f64, chance: &[f64]) -> f64 {
    let expected: f64 = chance.iter().sum();
    let variance: f64 = chance.iter().map(|p| p * (1.0 - p)).sum();
    if variance <= 0.0 {
        return if right > expected { 0.0 } else { 1.0 };
    }
    normal_upper_tail((right - expected) / variance.sqrt())
}

/// The mean of `x` and the half-width of its 95% interval (normal approximation, sample
/// standard deviation); (0, 0) for no values, an infinite half-width for one.
pub fn mean_interval(x: &[f64]) -> (f64, f64) {
    let n = x.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, f64::INFINITY);
    }
    let variance = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, Z95 * (variance / n as f64).sqrt())
}

/// Holm's step-down adjusted p-values, in the input order.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_published_values() {
        // Wilson (1927) as tabulated by Newcombe (1998), Table I: 81/263 -> 0.2553..0.3662.
        let (l, h) = wilson(81.0, 263);
        assert!(
            (l - 0.2553).abs() < 1e-3 && (h - 0.3662).abs() < 1e-3,
            "{l} {h}"
        );
        let (l, h) = wilson(0.0, 10);
        assert_eq!(l, 0.0);
        assert!((h - 0.2775).abs() < 1e-3, "{h}");
    }

    #[test]
    fn normal_tail_and_holm() {
        assert!((normal_upper_tail(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_upper_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_upper_tail(-1.0) - 0.841_344_7).abs() < 1e-6);
        // Holm on (0.01, 0.04, 0.03, 0.005): sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> 0.02, 0.03, 0.06, 0.06.
        let a = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (x, w) in a.iter().zip(want) {
            assert!((x - w).abs() < 1e-12, "{a:?}");
        }
    }

    #[test]
    fn mean_interval_is_the_normal_interval_of_the_mean() {
        // 1, 2, 3, 4: mean 2.5, sample sd sqrt(5/3), half-width 1.96 * sqrt(5/3) / 2.
        let (m, h) = mean_interval(&[1.0, 2.0, 3.0, 4.0]);
        assert!(
            (m - 2.5).abs() < 1e-12 && (h - Z95 * (5.0f64 / 3.0).sqrt() / 2.0).abs() < 1e-12,
            "{m} {h}"
        );
        assert_eq!(mean_interval(&[]), (0.0, 0.0));
        assert!(mean_interval(&[0.3]).1.is_infinite());
    }

    #[test]
    fn chance_test_is_one_sided_and_uses_each_questions_chance() {
        // 100 binary questions, 65 right: z = 15 / 5 = 3.
        let p = above_chance_p(65.0, &[0.5; 100]);
        assert!((p - normal_upper_tail(3.0)).abs() < 1e-12);
        assert!(above_chance_p(35.0, &[0.5; 100]) > 0.99);
    }
}
