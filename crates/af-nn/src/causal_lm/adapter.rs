//! Caption adaptation of the pretrained generator: low-rank adapters ([`Lora`]) on its query and
//! value projections, trained on "prompt -> ending" examples with the base weights frozen.
//!
//! Why: a web-trained LM prompted with captions still writes the web's words (issue 41), which a
//! detector of style reads; SWAG and HellaSwag fine-tuned their generators on the captions. A
//! low-rank adapter is a few hundred thousand numbers per fold (no optimiser state for the 135M
//! frozen weights), trains for a bounded number of steps, and is saved beside the run
//! (docs/decisions/460-caption-adapter.md; `af bench adapt` measures a step's cost).
//!
//! The loss is the causal LM loss on the ending's tokens only: the prompt (example captions, the
//! context, the noun phrase) is what sampling conditions on, never what it writes. The ending is
//! tokenized after a space and apart from the prompt, as sampling draws it.

use std::path::Path;
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::nn::OptimizerConfig;
use tch::{nn, Kind, Tensor};

use super::{CausalLm, CausalLmError, Lora};

/// How an adapter is trained.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptSettings {
    /// Optimiser steps (each over `batch` examples, the examples reshuffled every pass).
    pub steps: usize,
    pub batch: usize,
    pub rank: usize,
    /// The adapter's term is scaled by alpha / rank.
    pub alpha: f64,
    pub learning_rate: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// The adapter's initial A and the order of the examples.
    pub seed: u64,
}

/// One training example: the text the generator continues, and the ending it should write.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptExample {
    pub prompt: String,
    pub ending: String,
}

/// An example as token ids: the sequence and where its ending starts.
struct ExampleIds {
    ids: Vec<i64>,
    ending_from: usize,
}

/// What a training run did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdaptReport {
    pub examples: usize,
    pub steps: usize,
    /// Each step's mean loss per ending token (nats), in order.
    pub losses: Vec<f64>,
    pub seconds: f64,
}

impl CausalLm {
    /// A fresh adapter for this model: A uniform in +-1/sqrt(in) (the reference implementation's
    /// Kaiming-uniform), drawn from `seed`; B zero, so the adapted model starts as the base.
    pub fn new_adapter(&self, rank: usize, alpha: f64, seed: u64) -> Lora {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let shapes = self.model.adapted_shapes();
        let r = rank as i64;
        let blocks = (0..self.model.config.layers)
            .map(|_| {
                shapes.map(|(out, inp)| {
                    let bound = 1.0 / (inp as f32).sqrt();
                    let a: Vec<f32> = (0..r * inp)
                        .map(|_| rng.random_range(-bound..bound))
                        .collect();
                    (
                        Tensor::from_slice(&a).view([r, inp]).to_device(self.device),
                        Tensor::zeros([out, r], (Kind::Float, self.device)),
                    )
                })
            })
            .collect();
        Lora {
            rank: r,
            scale: alpha / rank as f64,
            blocks,
        }
    }

    /// Sets (or removes) the adapter that sampling and scoring use from now on.
    pub fn set_adapter(&mut self, adapter: Option<Lora>) {
        self.model.set_adapter(adapter);
    }

    pub fn adapter(&self) -> Option<&Lora> {
        self.model.adapter()
    }

    fn example_ids(&self, e: &AdaptExample) -> Result<ExampleIds, CausalLmError> {
        let mut ids = self.token_ids(e.prompt.trim_end())?;
        let ending = self.token_ids(&format!(" {}", e.ending.trim()))?;
        // Too long for the model: the prompt's first tokens go (its examples, not its context).
        let keep = self.context_length.saturating_sub(ending.len()).max(1);
        if ids.len() > keep {
            ids.drain(..ids.len() - keep);
        }
        let ending_from = ids.len();
        ids.extend(ending);
        Ok(ExampleIds { ids, ending_from })
    }

    /// The model's mean loss per ending token over `batch`, as a tensor (with gradients when the
    /// adapter requires them).
    fn batch_loss(&self, batch: &[&ExampleIds]) -> Tensor {
        let width = batch
            .iter()
            .map(|e| e.ids.len() - 1)
            .max()
            .unwrap_or(1)
            .max(1);
        let (mut inputs, mut mask, mut rows, mut targets) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (b, e) in batch.iter().enumerate() {
            let n = e.ids.len() - 1;
            inputs.extend(
                e.ids[..n]
                    .iter()
                    .copied()
                    .chain(std::iter::repeat_n(0, width - n)),
            );
            mask.extend(std::iter::repeat_n(1i64, n).chain(std::iter::repeat_n(0, width - n)));
            // Position p predicts token p + 1: the ending's tokens are predicted from its start - 1.
            for p in e.ending_from.max(1) - 1..n {
                rows.push((b * width + p) as i64);
                targets.push(e.ids[p + 1]);
            }
        }
        let shape = [batch.len() as i64, width as i64];
        let dev = self.device;
        let on = |v: &[i64]| Tensor::from_slice(v).to_device(dev);
        -self
            .model
            .logprobs_at(
                &on(&inputs).view(shape),
                &on(&mask).view(shape),
                &on(&rows),
                &on(&targets),
            )
            .mean(Kind::Float)
    }

    /// The mean loss per ending token of `examples` under the model as it is (its adapter, if
    /// set), in batches of `batch` (nats; batches weighted by their ending tokens).
    pub fn adapter_loss(
        &self,
        examples: &[AdaptExample],
        batch: usize,
    ) -> Result<f64, CausalLmError> {
        let _guard = tch::no_grad_guard();
        let examples_ids = examples
            .iter()
            .map(|e| self.example_ids(e))
            .collect::<Result<Vec<_>, _>>()?;
        let (mut sum, mut tokens) = (0.0, 0usize);
        for chunk in examples_ids.chunks(batch.max(1)) {
            let refs: Vec<&ExampleIds> = chunk.iter().collect();
            let n: usize = chunk.iter().map(|e| e.ids.len() - e.ending_from).sum();
            sum += self.batch_loss(&refs).double_value(&[]) * n as f64;
            tokens += n;
        }
        Ok(sum / tokens.max(1) as f64)
    }

    /// Trains a fresh adapter on `examples` (the base weights frozen) and leaves it set on the
    /// model; `on_step` hears each step's number and loss. Deterministic on the CPU for a seed.
    pub fn train_adapter(
        &mut self,
        examples: &[AdaptExample],
        s: &AdaptSettings,
        on_step: &mut dyn FnMut(usize, f64),
    ) -> Result<AdaptReport, CausalLmError> {
        let start = Instant::now();
        let examples_ids = examples
            .iter()
            .map(|e| self.example_ids(e))
            .collect::<Result<Vec<_>, _>>()?;
        let fresh = self.new_adapter(s.rank, s.alpha, s.seed);
        let vs = nn::VarStore::new(self.device);
        let mut trained = Lora {
            rank: fresh.rank,
            scale: fresh.scale,
            blocks: Vec::new(),
        };
        for (i, pairs) in fresh.blocks.iter().enumerate() {
            let mut block = pairs.each_ref().map(|_| (Tensor::new(), Tensor::new()));
            // The store's own names (it refuses dots); files use `Lora::named`'s.
            for (j, (a, b)) in pairs.iter().enumerate() {
                block[j] = (
                    vs.root().var_copy(&format!("blk{i}_{j}_a"), a),
                    vs.root().var_copy(&format!("blk{i}_{j}_b"), b),
                );
            }
            trained.blocks.push(block);
        }
        self.set_adapter(Some(trained.shallow_clone()));
        let mut opt = nn::AdamW {
            wd: s.weight_decay,
            ..nn::AdamW::default()
        }
        .build(&vs, s.learning_rate)?;
        let mut rng = ChaCha8Rng::seed_from_u64(s.seed ^ 0x6164_6170_7421);
        let mut order: Vec<usize> = Vec::new();
        let mut losses = Vec::with_capacity(s.steps);
        for step in 0..s.steps {
            if examples_ids.is_empty() {
                break;
            }
            let mut batch = Vec::with_capacity(s.batch);
            while batch.len() < s.batch.min(examples_ids.len()) {
                if order.is_empty() {
                    order = (0..examples_ids.len()).collect();
                    order.shuffle(&mut rng);
                }
                batch.push(&examples_ids[order.pop().expect("refilled above")]);
            }
            let loss = self.batch_loss(&batch);
            opt.zero_grad();
            loss.backward();
            opt.clip_grad_norm(1.0);
            opt.step();
            let l = loss.double_value(&[]);
            losses.push(l);
            on_step(step, l);
        }
        // Detached copies: sampling needs no graph, and the store's variables go with it.
        let _guard = tch::no_grad_guard();
        self.set_adapter(Some(Lora {
            rank: trained.rank,
            scale: trained.scale,
            blocks: trained
                .blocks
                .iter()
                .map(|p| {
                    p.each_ref()
                        .map(|(a, b)| (a.detach().copy(), b.detach().copy()))
                })
                .collect(),
        }));
        Ok(AdaptReport {
            examples: examples.len(),
            steps: losses.len(),
            losses,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Writes the model's adapter to `path` (safetensors: its A and B tensors, and `alpha`).
    pub fn save_adapter(&self, path: &Path) -> Result<(), CausalLmError> {
        let lora = self.adapter().ok_or_else(|| CausalLmError::File {
            path: path.to_path_buf(),
            message: "no adapter to save".into(),
        })?;
        let alpha = Tensor::from_slice(&[lora.scale * lora.rank as f64]);
        let mut named: Vec<(String, Tensor)> = lora
            .named()
            .into_iter()
            .map(|(n, t)| (n, t.to_device(tch::Device::Cpu)))
            .collect();
        named.push(("alpha".into(), alpha));
        Ok(Tensor::write_safetensors(&named, path)?)
    }

    /// Reads an adapter [`Self::save_adapter`] wrote for a model of this shape.
    pub fn load_adapter(&self, path: &Path) -> Result<Lora, CausalLmError> {
        let bad = |message: String| CausalLmError::File {
            path: path.to_path_buf(),
            message,
        };
        let mut tensors: std::collections::HashMap<String, Tensor> =
            Tensor::read_safetensors(path)?.into_iter().collect();
        let alpha = tensors
            .remove("alpha")
            .ok_or_else(|| bad("no `alpha`: not an af adapter".into()))?
            .double_value(&[0]);
        let shapes = self.model.adapted_shapes();
        let mut rank = None;
        let mut blocks = Vec::with_capacity(self.model.config.layers);
        for i in 0..self.model.config.layers {
            let mut pair = Vec::with_capacity(2);
            for (target, (out, inp)) in Lora::TARGETS.iter().zip(shapes) {
                let mut take = |half: &str| {
                    let name = Lora::name(i, target, half);
                    tensors
                        .remove(&name)
                        .ok_or_else(|| bad(format!("no `{name}`: an adapter of another model?")))
                };
                let (a, b) = (take("a")?, take("b")?);
                let r = *rank.get_or_insert(a.size()[0]);
                if a.size() != [r, inp] || b.size() != [out, r] {
                    return Err(bad(format!(
                        "blk.{i}.{target}: shapes {:?} and {:?}, this model needs [{r}, {inp}] and [{out}, {r}]",
                        a.size(),
                        b.size()
                    )));
                }
                pair.push((a.to_device(self.device), b.to_device(self.device)));
            }
            let v = pair.pop().expect("two targets");
            let q = pair.pop().expect("two targets");
            blocks.push([q, v]);
        }
        if let Some(extra) = tensors.keys().next() {
            return Err(bad(format!(
                "`{extra}`: more blocks than this model has (an adapter of another model?)"
            )));
        }
        let rank = rank.unwrap_or(1);
        Ok(Lora {
            rank,
            scale: alpha / rank as f64,
            blocks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causal_lm::toy::write_toy_llama;

    fn toy_lm() -> (tempfile::TempDir, CausalLm) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toy.gguf");
        write_toy_llama(&path, 5).unwrap();
        let lm = CausalLm::load(&path, tch::Device::Cpu).unwrap();
        (dir, lm)
    }

    fn examples() -> Vec<AdaptExample> {
        [
            ("a man walks. he", "runs to the car."),
            ("a dog barks. it", "jumps at the man."),
            ("a girl sings. she", "dances on a stage."),
            ("two boys swim. they", "dive into the pool."),
        ]
        .iter()
        .map(|(p, e)| AdaptExample {
            prompt: p.to_string(),
            ending: e.to_string(),
        })
        .collect()
    }

    fn settings(steps: usize) -> AdaptSettings {
        AdaptSettings {
            steps,
            batch: 2,
            rank: 4,
            alpha: 8.0,
            learning_rate: 1e-2,
            weight_decay: 0.0,
            seed: 3,
        }
    }

    fn logprobs(lm: &CausalLm) -> Tensor {
        let _guard = tch::no_grad_guard();
        let ids = lm.token_ids("a man walks to the car.").unwrap();
        lm.model
            .token_logprobs(&Tensor::from_slice(&ids).unsqueeze(0))
    }

    #[test]
    fn an_adapter_whose_b_is_zero_is_the_base_model_exactly() {
        let (_dir, mut lm) = toy_lm();
        let base = logprobs(&lm);
        let adapter = lm.new_adapter(4, 8.0, 1);
        assert!(
            adapter.blocks[0][0]
                .0
                .abs()
                .sum(Kind::Float)
                .double_value(&[])
                > 0.0
        );
        lm.set_adapter(Some(adapter));
        assert!(logprobs(&lm).equal(&base));
        let mut moved = lm.new_adapter(4, 8.0, 1);
        moved.blocks[1][1].1 = moved.blocks[1][1].1.ones_like() * 0.1;
        lm.set_adapter(Some(moved));
        assert!(!logprobs(&lm).equal(&base), "a nonzero B changes the model");
    }

    #[test]
    fn training_lowers_the_loss_on_the_endings_deterministically_and_round_trips_on_disk() {
        let (dir, mut lm) = toy_lm();
        let data = examples();
        let before = lm.adapter_loss(&data, 4).unwrap();
        let base = logprobs(&lm);
        let mut heard = 0;
        let report = lm
            .train_adapter(&data, &settings(30), &mut |_, _| heard += 1)
            .unwrap();
        assert_eq!((report.steps, heard), (30, 30));
        let after = lm.adapter_loss(&data, 4).unwrap();
        assert!(
            after < before - 0.3,
            "loss per ending token {before:.3} -> {after:.3}"
        );
        let trained = logprobs(&lm);
        assert!(!trained.equal(&base));
        let path = dir.path().join("adapter.safetensors");
        lm.save_adapter(&path).unwrap();
        let loaded = lm.load_adapter(&path).unwrap();
        lm.set_adapter(None);
        assert!(
            logprobs(&lm).equal(&base),
            "removing the adapter restores the base"
        );
        lm.set_adapter(Some(loaded));
        assert!(
            logprobs(&lm).equal(&trained),
            "saved and loaded, the same logits"
        );
        let again = lm
            .train_adapter(&data, &settings(30), &mut |_, _| {})
            .unwrap();
        assert_eq!(again.losses, report.losses, "the same seed trains the same");
        assert!(logprobs(&lm).equal(&trained));
    }

    /// The loss reads the ending's tokens alone, after the prompt tokenized apart (as sampling
    /// continues it), and right padding in a batch changes nothing.
    #[test]
    fn the_loss_counts_the_ending_tokens_only() {
        let (_dir, lm) = toy_lm();
        let example = |prompt: &str, ending: &str| {
            lm.example_ids(&AdaptExample {
                prompt: prompt.into(),
                ending: ending.into(),
            })
            .unwrap()
        };
        let e = example("a man walks. he", "runs.");
        let long = example(
            "the two dogs bark at the cat in the yard. they",
            "run away from it.",
        );
        assert_eq!(
            e.ids[..e.ending_from],
            lm.token_ids("a man walks. he").unwrap()[..]
        );
        assert_eq!(e.ids[e.ending_from..], lm.token_ids(" runs.").unwrap()[..]);
        let _guard = tch::no_grad_guard();
        let direct = |e: &ExampleIds| {
            -lm.model
                .token_logprobs(&Tensor::from_slice(&e.ids).unsqueeze(0))
                .narrow(
                    1,
                    e.ending_from as i64 - 1,
                    (e.ids.len() - e.ending_from) as i64,
                )
                .sum(Kind::Float)
                .double_value(&[])
        };
        let n = |e: &ExampleIds| (e.ids.len() - e.ending_from) as f64;
        let batched = lm.batch_loss(&[&e]).double_value(&[]);
        assert!((direct(&e) / n(&e) - batched).abs() < 1e-5, "{batched}");
        let padded = lm.batch_loss(&[&e, &long]).double_value(&[]);
        let want = (direct(&e) + direct(&long)) / (n(&e) + n(&long));
        assert!((want - padded).abs() < 1e-5, "{want} vs {padded}");
    }
}
