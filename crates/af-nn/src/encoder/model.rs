//! BERT's forward pass on plain tensors: frozen weights read from the model's safetensors file,
//! or, for fine-tuning (`encoder-ft`), the same weights copied into a VarStore as trainable
//! variables ([`Bert::load_trainable`]).

use std::collections::HashMap;
use std::path::Path;

use tch::{nn, Device, Kind, Tensor};

use super::config::{Activation, BertConfig};
use super::EncoderError;

struct Linear {
    w: Tensor,
    b: Tensor,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.w, Some(&self.b))
    }
}

struct LayerNorm {
    w: Tensor,
    b: Tensor,
    eps: f64,
}

impl LayerNorm {
    fn forward(&self, x: &Tensor) -> Tensor {
        let d = self.w.size()[0];
        x.layer_norm([d], Some(&self.w), Some(&self.b), self.eps, true)
    }
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

pub(crate) struct Bert {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: i64,
    act: Activation,
    pub(crate) kind: Kind,
}

/// A tensor name as BERT's current layout spells it: without the `bert.` prefix a pretraining
/// checkpoint has, and with `weight`/`bias` for the LayerNorm `gamma`/`beta` of old TF ports.
fn canonical_name(name: &str) -> String {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    if let Some(stem) = name.strip_suffix(".gamma") {
        format!("{stem}.weight")
    } else if let Some(stem) = name.strip_suffix(".beta") {
        format!("{stem}.bias")
    } else {
        name.to_string()
    }
}

struct Weights<'a, 'p> {
    path: &'a Path,
    tensors: HashMap<String, Tensor>,
    device: Device,
    kind: Kind,
    /// Where trainable copies go; None: the tensors are used as they are (frozen).
    vars: Option<&'a nn::Path<'p>>,
}

impl Weights<'_, '_> {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, EncoderError> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| EncoderError::File {
                path: self.path.to_path_buf(),
                message: format!(
                    "tensor `{name}` is missing (nor under `bert.{name}`, nor as gamma/beta)"
                ),
            })?;
        let want: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        if t.size() != want {
            return Err(EncoderError::File {
                path: self.path.to_path_buf(),
                message: format!(
                    "tensor `{name}` has shape {:?}; config.json implies {want:?}",
                    t.size()
                ),
            });
        }
        let t = t.to_device(self.device).to_kind(self.kind);
        Ok(match self.vars {
            None => t,
            Some(root) => {
                // A VarStore path cannot hold dots in a name: one path segment per part.
                let mut parts: Vec<&str> = name.split('.').collect();
                let last = parts.pop().expect("a name has a part");
                let p = parts.iter().fold(root.clone(), |p, part| &p / *part);
                p.var_copy(last, &t)
            }
        })
    }

    fn linear(&mut self, prefix: &str, out: usize, inp: usize) -> Result<Linear, EncoderError> {
        Ok(Linear {
            w: self.take(&format!("{prefix}.weight"), &[out, inp])?,
            b: self.take(&format!("{prefix}.bias"), &[out])?,
        })
    }

    fn norm(&mut self, prefix: &str, d: usize, eps: f64) -> Result<LayerNorm, EncoderError> {
        Ok(LayerNorm {
            w: self.take(&format!("{prefix}.weight"), &[d])?,
            b: self.take(&format!("{prefix}.bias"), &[d])?,
            eps,
        })
    }
}

impl Bert {
    pub(crate) fn load(
        path: &Path,
        cfg: &BertConfig,
        device: Device,
        kind: Kind,
    ) -> Result<Self, EncoderError> {
        let tensors = read_tensors(path)?;
        Self::from_tensors(path, tensors, cfg, device, kind, None)
    }

    /// The pretrained weights at `path` as trainable f32 variables under `root` (on its
    /// VarStore's device), for fine-tuning: every call starts again from the file.
    pub(crate) fn load_trainable(
        path: &Path,
        cfg: &BertConfig,
        root: &nn::Path,
    ) -> Result<Self, EncoderError> {
        let tensors = read_tensors(path)?;
        Self::from_tensors(path, tensors, cfg, root.device(), Kind::Float, Some(root))
    }

    /// BERT's initialisation (normal, deviation 0.02; LayerNorm 1 and 0) drawn on the CPU from
    /// `seed`, so the same seed gives the same weights on any device. For benchmarks on machines
    /// the real weights cannot be carried to: the speed is the architecture's.
    pub(crate) fn random(
        path: &Path,
        cfg: &BertConfig,
        seed: i64,
        device: Device,
        kind: Kind,
    ) -> Result<Self, EncoderError> {
        Self::from_tensors(path, random_tensors(cfg, seed), cfg, device, kind, None)
    }

    fn from_tensors(
        path: &Path,
        tensors: HashMap<String, Tensor>,
        cfg: &BertConfig,
        device: Device,
        kind: Kind,
        vars: Option<&nn::Path>,
    ) -> Result<Self, EncoderError> {
        let mut w = Weights {
            path,
            tensors,
            device,
            kind,
            vars,
        };
        let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let word = w.take("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?;
        let position = w.take(
            "embeddings.position_embeddings.weight",
            &[cfg.max_position_embeddings, h],
        )?;
        let token_type = w.take(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, h],
        )?;
        let emb_norm = w.norm("embeddings.LayerNorm", h, eps)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            layers.push(Layer {
                query: w.linear(&format!("{p}.attention.self.query"), h, h)?,
                key: w.linear(&format!("{p}.attention.self.key"), h, h)?,
                value: w.linear(&format!("{p}.attention.self.value"), h, h)?,
                attn_out: w.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: w.norm(&format!("{p}.attention.output.LayerNorm"), h, eps)?,
                intermediate: w.linear(&format!("{p}.intermediate.dense"), i, h)?,
                output: w.linear(&format!("{p}.output.dense"), h, i)?,
                out_norm: w.norm(&format!("{p}.output.LayerNorm"), h, eps)?,
            });
        }
        // What remains (the pooler, pretraining heads, position_ids) is not part of the encoder.
        Ok(Self {
            word,
            position,
            token_type,
            emb_norm,
            layers,
            heads: cfg.num_attention_heads as i64,
            act: cfg.activation(),
            kind,
        })
    }

    /// Token vectors `[batch, len, hidden]` for `ids`, `type_ids` `[batch, len]` (int64) and
    /// `mask` `[batch, len]` (1 for a token, 0 for padding).
    pub(crate) fn forward(&self, ids: &Tensor, type_ids: &Tensor, mask: &Tensor) -> Tensor {
        let (b, len) = ids.size2().expect("ids are [batch, len]");
        let positions = Tensor::arange(len, (Kind::Int64, ids.device()));
        let x = Tensor::embedding(&self.word, ids, -1, false, false)
            + Tensor::embedding(&self.position, &positions, -1, false, false).unsqueeze(0)
            + Tensor::embedding(&self.token_type, type_ids, -1, false, false);
        let mut x = self.emb_norm.forward(&x);
        // True where a query may attend to a key; broadcast over heads and queries.
        let attend = mask.to_kind(Kind::Bool).view([b, 1, 1, len]);
        let hidden = x.size()[2];
        let dh = hidden / self.heads;
        let split = |t: Tensor| t.view([b, len, self.heads, dh]).transpose(1, 2);
        for layer in &self.layers {
            let q = split(layer.query.forward(&x));
            let k = split(layer.key.forward(&x));
            let v = split(layer.value.forward(&x));
            let ctx = Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(&attend),
                0.0,
                false,
                None,
                false,
            );
            let ctx = ctx.transpose(1, 2).contiguous().view([b, len, hidden]);
            x = layer
                .attn_norm
                .forward(&(layer.attn_out.forward(&ctx) + &x));
            let inner = layer.intermediate.forward(&x);
            let inner = match self.act {
                Activation::Gelu => inner.gelu("none"),
                Activation::GeluTanh => inner.gelu("tanh"),
                Activation::Relu => inner.relu(),
            };
            x = layer.out_norm.forward(&(layer.output.forward(&inner) + &x));
        }
        x
    }
}

/// BERT's initialisation as named tensors, drawn on the CPU from `seed`.
pub(crate) fn random_tensors(cfg: &BertConfig, seed: i64) -> HashMap<String, Tensor> {
    tch::manual_seed(seed);
    let (h, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
    let opts = (Kind::Float, Device::Cpu);
    let mut tensors = HashMap::new();
    let normal = |shape: &[i64]| Tensor::randn(shape, opts) * 0.02;
    tensors.insert(
        "embeddings.word_embeddings.weight".to_string(),
        normal(&[cfg.vocab_size as i64, h]),
    );
    tensors.insert(
        "embeddings.position_embeddings.weight".to_string(),
        normal(&[cfg.max_position_embeddings as i64, h]),
    );
    tensors.insert(
        "embeddings.token_type_embeddings.weight".to_string(),
        normal(&[cfg.type_vocab_size as i64, h]),
    );
    let mut linears = Vec::new();
    let mut norms = vec!["embeddings.LayerNorm".to_string()];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        for name in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ] {
            linears.push((format!("{p}.{name}"), h, h));
        }
        linears.push((format!("{p}.intermediate.dense"), i, h));
        linears.push((format!("{p}.output.dense"), h, i));
        norms.push(format!("{p}.attention.output.LayerNorm"));
        norms.push(format!("{p}.output.LayerNorm"));
    }
    for (name, o, n) in linears {
        tensors.insert(format!("{name}.weight"), normal(&[o, n]));
        tensors.insert(format!("{name}.bias"), Tensor::zeros([o], opts));
    }
    for name in norms {
        tensors.insert(format!("{name}.weight"), Tensor::ones([h], opts));
        tensors.insert(format!("{name}.bias"), Tensor::zeros([h], opts));
    }
    tensors
}

/// A safetensors file's tensors by their canonical names, floating-point ones as f32.
fn read_tensors(path: &Path) -> Result<HashMap<String, Tensor>, EncoderError> {
    let raw = Tensor::read_safetensors(path).map_err(|e| EncoderError::File {
        path: path.to_path_buf(),
        message: format!("not a readable safetensors file: {e}"),
    })?;
    let mut tensors = HashMap::with_capacity(raw.len());
    for (name, t) in raw {
        // Weights may be stored in half precision; the forward pass starts from f32.
        let t = if t.is_floating_point() {
            t.to_kind(Kind::Float)
        } else {
            t
        };
        tensors.insert(canonical_name(&name), t);
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    use super::canonical_name;

    #[test]
    fn legacy_and_prefixed_names_map_to_the_current_layout() {
        assert_eq!(
            canonical_name("bert.embeddings.LayerNorm.gamma"),
            "embeddings.LayerNorm.weight"
        );
        assert_eq!(
            canonical_name("encoder.layer.3.output.LayerNorm.beta"),
            "encoder.layer.3.output.LayerNorm.bias"
        );
        assert_eq!(
            canonical_name("bert.encoder.layer.0.attention.self.query.weight"),
            "encoder.layer.0.attention.self.query.weight"
        );
        assert_eq!(
            canonical_name("embeddings.word_embeddings.weight"),
            "embeddings.word_embeddings.weight"
        );
    }
}
