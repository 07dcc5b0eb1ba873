//! AFLite's m linear classifiers, trained together as one batched problem: weights [m, d, C],
//! each classifier's training rows gathered into [m, t, d] (padded, masked), then every active
//! instance predicted by all m at once: [m, N, C] = X [N, d] x W.
//! Zero initialisation and full-batch Adam make a run deterministic on the CPU.

use tch::nn::OptimizerConfig;
use tch::{nn, Device, Kind, Tensor};

use crate::NnError;

#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSettings {
    /// Full-batch optimisation steps.
    pub steps: usize,
    pub learning_rate: f64,
    /// L2 penalty on the weights.
    pub weight_decay: f64,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            steps: 100,
            learning_rate: 0.05,
            weight_decay: 1e-4,
        }
    }
}

/// Standardised features and labels on the device.
pub struct BatchedProbes {
    x: Tensor,
    labels: Tensor,
    classes: i64,
    settings: ProbeSettings,
    device: Device,
}

/// Standardises each dimension of a row-major [rows, dim] matrix to mean 0 and (population)
/// standard deviation 1, so that one learning rate suits every feature scale. The statistics are
/// taken in float64: in float32 a column of 3e38 sums to infinity and every value becomes NaN
/// (issue 44). A result float32 cannot hold is refused with its row and column; it cannot arise
/// from finite float32 features (each standardised value is at most sqrt(rows) in size), so the
/// check guards against a NaN or infinity that got past the readers.
pub fn standardize(features: &[f32], rows: usize, dim: usize) -> Result<Vec<f32>, NnError> {
    if let Some(i) = features.iter().position(|v| !v.is_finite()) {
        return Err(NnError::NonFinite {
            what: format!(
                "feature row {}, column {} (counting from 0)",
                i / dim,
                i % dim
            ),
            value: f64::from(features[i]),
            kept: "nothing was trained".into(),
        });
    }
    let mut mean = vec![0f64; dim];
    for row in features.chunks_exact(dim.max(1)) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += f64::from(v);
        }
    }
    mean.iter_mut().for_each(|m| *m /= rows.max(1) as f64);
    let mut var = vec![0f64; dim];
    for row in features.chunks_exact(dim.max(1)) {
        for ((s, &v), m) in var.iter_mut().zip(row).zip(&mean) {
            *s += (f64::from(v) - m).powi(2);
        }
    }
    let std: Vec<f64> = var
        .iter()
        .map(|s| (s / rows.max(1) as f64).sqrt().max(1e-6))
        .collect();
    let mut out = Vec::with_capacity(features.len());
    for (i, &v) in features.iter().enumerate() {
        let c = i % dim;
        let z = ((f64::from(v) - mean[c]) / std[c]) as f32;
        if !z.is_finite() {
            return Err(NnError::NonFinite {
                what: format!(
                    "feature row {}, column {} (counting from 0), standardised",
                    i / dim,
                    c
                ),
                value: f64::from(z),
                kept: format!(
                    "its column's mean is {:e}, its deviation {:e}",
                    mean[c], std[c]
                ),
            });
        }
        out.push(z);
    }
    Ok(out)
}

impl BatchedProbes {
    /// `features`: row-major [rows, dim], standardised here ([`standardize`]); labels in
    /// 0..classes.
    pub fn new(
        features: &[f32],
        rows: usize,
        dim: usize,
        labels: &[u32],
        classes: usize,
        settings: ProbeSettings,
        device: Device,
    ) -> Result<Self, NnError> {
        let x = Tensor::from_slice(&standardize(features, rows, dim)?)
            .view([rows as i64, dim as i64])
            .to(device);
        let labels: Vec<i64> = labels.iter().map(|&l| i64::from(l)).collect();
        Ok(Self {
            x,
            labels: Tensor::from_slice(&labels).to(device),
            classes: classes as i64,
            settings,
            device,
        })
    }

    /// Trains one classifier per row of `train` on the marked instances of `active` and predicts
    /// every active instance with each.
    pub fn fit_predict(
        &self,
        active: &[usize],
        train: &[Vec<bool>],
    ) -> Result<Vec<Vec<u32>>, NnError> {
        let idx = Tensor::from_slice(&active.iter().map(|&i| i as i64).collect::<Vec<_>>())
            .to(self.device);
        let logits = self.fit_logits(active, &self.labels.index_select(0, &idx), train)?;
        let predicted = logits.argmax(-1, false).to_kind(Kind::Int).to(Device::Cpu);
        let flat = Vec::<i32>::try_from(&predicted.view([-1])).map_err(NnError::Torch)?;
        Ok(flat
            .chunks(active.len())
            .map(|c| c.iter().map(|&p| p as u32).collect())
            .collect())
    }

    /// As [`Self::fit_predict`], but trained on `labels` (one per instance, not only the active
    /// ones: AFLite's null trains on permuted copies) and returning, per classifier, every active
    /// instance's class probabilities, row-major [active, classes].
    pub fn fit_probabilities(
        &self,
        active: &[usize],
        labels: &[u32],
        train: &[Vec<bool>],
    ) -> Result<Vec<Vec<f32>>, NnError> {
        let y: Vec<i64> = active.iter().map(|&i| i64::from(labels[i])).collect();
        let logits = self.fit_logits(active, &Tensor::from_slice(&y).to(self.device), train)?;
        let p = logits.softmax(-1, Kind::Float).to(Device::Cpu);
        let flat = Vec::<f32>::try_from(&p.view([-1])).map_err(NnError::Torch)?;
        Ok(flat
            .chunks(active.len() * self.classes as usize)
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// The m classifiers' logits for every active instance, [m, A, C]; `y`: the active
    /// instances' labels, [A].
    fn fit_logits(
        &self,
        active: &[usize],
        y: &Tensor,
        train: &[Vec<bool>],
    ) -> Result<Tensor, NnError> {
        let m = train.len() as i64;
        let idx: Vec<i64> = active.iter().map(|&i| i as i64).collect();
        let idx = Tensor::from_slice(&idx).to(self.device);
        let x = self.x.index_select(0, &idx).unsqueeze(0); // [1, A, d]
                                                           // Each classifier trains on its own rows only: gather them ([m, t_max, d], padded and
                                                           // masked) rather than computing every classifier's logits over every instance.
        let sides: Vec<Vec<i64>> = train
            .iter()
            .map(|t| {
                t.iter()
                    .enumerate()
                    .filter(|(_, &b)| b)
                    .map(|(a, _)| a as i64)
                    .collect()
            })
            .collect();
        let t_max = sides.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut rows = vec![0i64; train.len() * t_max];
        let mut mask = vec![0f32; train.len() * t_max];
        for (j, side) in sides.iter().enumerate() {
            rows[j * t_max..j * t_max + side.len()].copy_from_slice(side);
            mask[j * t_max..j * t_max + side.len()]
                .iter_mut()
                .for_each(|v| *v = 1.0);
        }
        let rows = Tensor::from_slice(&rows).to(self.device);
        let mask = Tensor::from_slice(&mask)
            .view([m, t_max as i64])
            .to(self.device);
        let d = self.x.size()[1];
        let x_train = x
            .squeeze_dim(0)
            .index_select(0, &rows)
            .view([m, t_max as i64, d]);
        let target = y.index_select(0, &rows).view([m, t_max as i64, 1]);
        let per_classifier = mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0);
        let vs = nn::VarStore::new(self.device);
        let w = vs.root().zeros("weight", &[m, d, self.classes]);
        let b = vs.root().zeros("bias", &[m, 1, self.classes]);
        let mut opt = nn::Adam::default().build(&vs, self.settings.learning_rate)?;
        for _ in 0..self.settings.steps {
            let logits = x_train.bmm(&w) + &b; // [m, t_max, C]
            let nll = -logits
                .log_softmax(-1, Kind::Float)
                .gather(2, &target, false)
                .squeeze_dim(-1); // [m, t_max]
            let loss = ((nll * &mask).sum_dim_intlist(1, false, Kind::Float) / &per_classifier)
                .sum(Kind::Float)
                + w.square().sum(Kind::Float) * self.settings.weight_decay;
            opt.zero_grad();
            loss.backward();
            opt.step();
        }
        Ok(tch::no_grad(|| x.matmul(&w) + &b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// 600 instances, 16-d noise; the first 150 carry their label in dimension 0.
    fn planted(signal: bool) -> (Vec<f32>, Vec<u32>) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let (n, d) = (600, 16);
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let mut x: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        if signal {
            for i in 0..150 {
                x[i * d] = if labels[i] == 1 { 3.0 } else { -3.0 };
            }
        }
        (x, labels)
    }

    #[test]
    fn batched_probes_learn_a_planted_feature_and_are_deterministic() {
        let (x, labels) = planted(true);
        let probes = BatchedProbes::new(
            &x,
            600,
            16,
            &labels,
            2,
            ProbeSettings::default(),
            Device::Cpu,
        )
        .unwrap();
        let active: Vec<usize> = (0..600).collect();
        let train: Vec<Vec<bool>> = (0..4)
            .map(|j| (0..600).map(|i| (i + j) % 2 == 0 || i % 3 == 0).collect())
            .collect();
        let p = probes.fit_predict(&active, &train).unwrap();
        assert_eq!(p.len(), 4);
        for row in &p {
            let planted_right = (0..150).filter(|&i| row[i] == labels[i]).count();
            assert!(
                planted_right >= 140,
                "{planted_right} of 150 planted instances predicted"
            );
        }
        assert_eq!(
            p,
            probes.fit_predict(&active, &train).unwrap(),
            "deterministic on CPU"
        );
        // The probabilities agree with the predictions, and permuted labels give other classifiers.
        let probs = probes.fit_probabilities(&active, &labels, &train).unwrap();
        for (row, pr) in p.iter().zip(&probs) {
            for (a, &pred) in row.iter().enumerate() {
                let c = &pr[a * 2..a * 2 + 2];
                assert!((c[0] + c[1] - 1.0).abs() < 1e-5);
                assert_eq!(pred, u32::from(c[1] > c[0]), "instance {a}: {c:?}");
            }
        }
        let flipped: Vec<u32> = labels.iter().map(|l| 1 - l).collect();
        let back = probes.fit_probabilities(&active, &flipped, &train).unwrap();
        assert!(
            (back[0][1] - probs[0][0]).abs() < 1e-4,
            "flipping every label mirrors the classifier"
        );
    }

    /// Issue 44: a constant column of 3e38 (a valid float32) summed in float32 overflowed, and
    /// every standardised value, then every probability, was NaN.
    #[test]
    fn standardising_extreme_finite_features_stays_finite() {
        let big = 3e38f32;
        let (rows, dim) = (1000, 4);
        let features: Vec<f32> = (0..rows)
            .flat_map(|i| {
                let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
                [big, sign * f32::MAX, 1e-45 * sign, (i as f32) * 1e30]
            })
            .collect();
        let z = standardize(&features, rows, dim).unwrap();
        assert!(z.iter().all(|v| v.is_finite()), "a NaN or infinity");
        assert!(z.chunks(dim).all(|r| r[0] == 0.0), "a constant column is 0");
        assert!(z.chunks(dim).all(|r| (r[1].abs() - 1.0).abs() < 1e-6));
        let mean3: f64 = z.chunks(dim).map(|r| f64::from(r[3])).sum::<f64>() / rows as f64;
        assert!(mean3.abs() < 1e-5, "{mean3}");
        // What got past the readers is refused with its place.
        let mut bad = features.clone();
        bad[5 * dim + 2] = f32::NAN;
        let e = standardize(&bad, rows, dim).unwrap_err().to_string();
        assert!(
            e.starts_with("feature row 5, column 2 (counting from 0) is not finite (NaN)"),
            "{e}"
        );
        let probes = BatchedProbes::new(
            &features,
            rows,
            dim,
            &(0..rows as u32).map(|i| i % 2).collect::<Vec<_>>(),
            2,
            ProbeSettings {
                steps: 5,
                ..Default::default()
            },
            Device::Cpu,
        )
        .unwrap();
        let active: Vec<usize> = (0..rows).collect();
        let train = vec![(0..rows).map(|i| i % 3 == 0).collect::<Vec<bool>>()];
        let p = probes
            .fit_probabilities(
                &active,
                &(0..rows as u32).map(|i| i % 2).collect::<Vec<_>>(),
                &train,
            )
            .unwrap();
        assert!(p[0].iter().all(|v| v.is_finite()), "NaN probabilities");
    }
}
