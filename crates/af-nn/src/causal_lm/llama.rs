//! The Llama decoder (SmolLM2's architecture) on tch, with a key/value cache for sampling.
//!
//! Pre-norm blocks (RMSNorm), grouped-query attention with rotary positions, a SwiGLU
//! feed-forward, the output projection tied to the token embeddings. Rotary positions rotate
//! adjacent pairs of each head's dimensions: GGUF files of Llama models hold Q and K permuted for
//! that layout (llama.cpp's "normal" rope), so the weights are used as they are stored.

use tch::{Device, Kind, Tensor};

use super::gguf::Gguf;
use super::CausalLmError;

#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub rope_base: f64,
    pub norm_eps: f64,
    pub vocab: usize,
}

impl LlamaConfig {
    pub fn from_gguf(g: &Gguf) -> Result<Self, CausalLmError> {
        let arch = g.str("general.architecture")?;
        if arch != "llama" {
            return Err(CausalLmError::File {
                path: g.path.clone(),
                message: format!(
                    "architecture `{arch}`; af runs `llama` models (SmolLM2, TinyLlama, Llama)"
                ),
            });
        }
        let int = |k: &str| g.int(&format!("llama.{k}")).map(|v| v as usize);
        Ok(Self {
            layers: int("block_count")?,
            hidden: int("embedding_length")?,
            heads: int("attention.head_count")?,
            kv_heads: int("attention.head_count_kv")?,
            rope_base: g.float("llama.rope.freq_base").unwrap_or(10_000.0),
            norm_eps: g.float("llama.attention.layer_norm_rms_epsilon")?,
            vocab: g.strs("tokenizer.ggml.tokens")?.len(),
        })
    }

    fn head_dim(&self) -> i64 {
        (self.hidden / self.heads) as i64
    }
}

struct Block {
    attn_norm: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    ffn_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

pub struct Llama {
    pub config: LlamaConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    out_norm: Tensor,
    /// Per pair of head dimensions: base^(-2i/d).
    inv_freq: Tensor,
    /// Low-rank adapters on the query and value projections, when set ([`Lora`]).
    adapter: Option<Lora>,
}

/// Low-rank adapters (LoRA, Hu et al. 2021) on every block's query and value projections: the
/// projection `W x` becomes `W x + scale * B (A x)`, with `A` [rank, in] and `B` [out, rank]
/// trained and `W` frozen. With `B` zero the model is the base model exactly.
#[derive(Debug)]
pub struct Lora {
    pub rank: i64,
    /// alpha / rank.
    pub scale: f64,
    /// Per block: (A, B) of the query projection, then of the value projection.
    pub blocks: Vec<[(Tensor, Tensor); 2]>,
}

impl Lora {
    /// The projections adapted, in the order of [`Lora::blocks`]' pairs.
    pub const TARGETS: [&'static str; 2] = ["attn_q", "attn_v"];

    /// Tensor names as saved: `blk.{i}.{target}.lora_a` / `.lora_b`.
    pub fn name(block: usize, target: &str, half: &str) -> String {
        format!("blk.{block}.{target}.lora_{half}")
    }

    /// Every (name, tensor), in a fixed order.
    pub fn named(&self) -> Vec<(String, &Tensor)> {
        let mut out = Vec::new();
        for (i, pairs) in self.blocks.iter().enumerate() {
            for (target, (a, b)) in Self::TARGETS.iter().zip(pairs) {
                out.push((Self::name(i, target, "a"), a));
                out.push((Self::name(i, target, "b"), b));
            }
        }
        out
    }

    /// The same tensors (shared storage): the model sees an optimiser's updates.
    pub fn shallow_clone(&self) -> Self {
        Self {
            rank: self.rank,
            scale: self.scale,
            blocks: self
                .blocks
                .iter()
                .map(|p| {
                    [
                        (p[0].0.shallow_clone(), p[0].1.shallow_clone()),
                        (p[1].0.shallow_clone(), p[1].1.shallow_clone()),
                    ]
                })
                .collect(),
        }
    }

    /// `base` (x W^T) plus the adapter's term for `x`.
    fn add(&self, base: Tensor, x: &Tensor, (a, b): &(Tensor, Tensor)) -> Tensor {
        base + x.matmul(&a.tr()).matmul(&b.tr()) * self.scale
    }
}

/// The keys and values of every layer for the rows of a batch, in slots allocated once for the
/// whole continuation ([B, kv heads, capacity, head dim] each), so a step writes its token in place
/// instead of copying the cache.
pub struct Cache {
    layers: Vec<(Tensor, Tensor)>,
    /// Which slots hold real tokens (not left padding, not yet written): [B, capacity] bool.
    key_mask: Tensor,
    /// Slots written so far (the same for every row: prompts are left-padded).
    len: i64,
    /// The position the next token of each row takes: [B].
    next_position: Tensor,
}

impl Cache {
    /// Keeps the rows `rows` (a [R] int64 index, repeats allowed) of every tensor.
    pub fn select(&self, rows: &Tensor) -> Cache {
        Cache {
            layers: self
                .layers
                .iter()
                .map(|(k, v)| (k.index_select(0, rows), v.index_select(0, rows)))
                .collect(),
            key_mask: self.key_mask.index_select(0, rows),
            len: self.len,
            next_position: self.next_position.index_select(0, rows),
        }
    }
}

impl Llama {
    pub fn load(g: &Gguf, device: Device) -> Result<Self, CausalLmError> {
        let config = LlamaConfig::from_gguf(g)?;
        let load = |name: &str, want: &[usize]| -> Result<Tensor, CausalLmError> {
            let (dims, values) = g.tensor(name)?;
            if dims != want {
                return Err(CausalLmError::File {
                    path: g.path.clone(),
                    message: format!(
                        "tensor `{name}` has shape {dims:?}, the config says {want:?}"
                    ),
                });
            }
            let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            Ok(Tensor::from_slice(&values)
                .view(shape.as_slice())
                .to_device(device))
        };
        let (h, v) = (config.hidden, config.vocab);
        let kv = config.kv_heads * (config.hidden / config.heads);
        let ffn = g.int("llama.feed_forward_length")? as usize;
        let embed = load("token_embd.weight", &[v, h])?;
        let mut blocks = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            blocks.push(Block {
                attn_norm: load(&n("attn_norm"), &[h])?,
                wq: load(&n("attn_q"), &[h, h])?,
                wk: load(&n("attn_k"), &[kv, h])?,
                wv: load(&n("attn_v"), &[kv, h])?,
                wo: load(&n("attn_output"), &[h, h])?,
                ffn_norm: load(&n("ffn_norm"), &[h])?,
                gate: load(&n("ffn_gate"), &[ffn, h])?,
                up: load(&n("ffn_up"), &[ffn, h])?,
                down: load(&n("ffn_down"), &[h, ffn])?,
            });
        }
        if g.tensors.contains_key("output.weight") {
            return Err(CausalLmError::File { path: g.path.clone(), message: "an untied `output.weight`: af runs models whose output projection is the token embedding".into() });
        }
        let out_norm = load("output_norm.weight", &[h])?;
        let d = config.head_dim();
        let inv_freq = (Tensor::arange_start_step(0, d, 2, (Kind::Float, device)) / d as f64
            * -config.rope_base.ln())
        .exp();
        Ok(Self {
            config,
            embed,
            blocks,
            out_norm,
            inv_freq,
            adapter: None,
        })
    }

    /// Sets (or removes) the adapter every later forward pass uses.
    pub fn set_adapter(&mut self, adapter: Option<Lora>) {
        self.adapter = adapter;
    }

    pub fn adapter(&self) -> Option<&Lora> {
        self.adapter.as_ref()
    }

    /// (out, in) of the adapted projections: the query's, then the value's.
    pub fn adapted_shapes(&self) -> [(i64, i64); 2] {
        let c = &self.config;
        let kv = (c.kv_heads as i64) * c.head_dim();
        [(c.hidden as i64, c.hidden as i64), (kv, c.hidden as i64)]
    }

    pub fn parameters(&self) -> i64 {
        let b: i64 = self
            .blocks
            .iter()
            .map(|b| {
                [
                    &b.attn_norm,
                    &b.wq,
                    &b.wk,
                    &b.wv,
                    &b.wo,
                    &b.ffn_norm,
                    &b.gate,
                    &b.up,
                    &b.down,
                ]
                .iter()
                .map(|t| t.numel() as i64)
                .sum::<i64>()
            })
            .sum();
        b + self.embed.numel() as i64 + self.out_norm.numel() as i64
    }

    fn rms_norm(&self, x: &Tensor, w: &Tensor) -> Tensor {
        x * (x.square().mean_dim(-1, true, Kind::Float) + self.config.norm_eps).rsqrt() * w
    }

    /// The rotation of each position [B, T]: (cos, sin), [B, 1, T, D/2] each, shared by every
    /// layer's queries and keys.
    fn rotation(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let angles = positions.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq; // [B, T, D/2]
        (angles.cos().unsqueeze(1), angles.sin().unsqueeze(1))
    }

    /// Rotary positions on [B, H, T, D], by [`Self::rotation`]'s (cos, sin).
    fn rope(x: &Tensor, (cos, sin): &(Tensor, Tensor)) -> Tensor {
        let size = x.size();
        let pairs = x.view([size[0], size[1], size[2], size[3] / 2, 2]);
        let (x0, x1) = (pairs.select(-1, 0), pairs.select(-1, 1));
        Tensor::stack(&[&x0 * cos - &x1 * sin, &x0 * sin + &x1 * cos], -1).view(size.as_slice())
    }

    /// An empty cache for `b` rows of up to `capacity` tokens, `mask` [B, T] marking the real
    /// tokens of the first `T` slots.
    fn new_cache(&self, mask: &Tensor, capacity: i64) -> Cache {
        let (b, t) = (mask.size()[0], mask.size()[1]);
        let c = &self.config;
        let dev = mask.device();
        let shape = [b, c.kv_heads as i64, capacity, c.head_dim()];
        let layers = (0..c.layers)
            .map(|_| {
                (
                    Tensor::zeros(shape, (Kind::Float, dev)),
                    Tensor::zeros(shape, (Kind::Float, dev)),
                )
            })
            .collect();
        let key_mask = Tensor::zeros([b, capacity], (Kind::Bool, dev));
        key_mask.narrow(1, 0, t).copy_(&mask.gt(0));
        Cache {
            layers,
            key_mask,
            len: 0,
            next_position: mask.sum_dim_intlist(1, false, Kind::Int64),
        }
    }

    /// Runs `tokens` [B, T] whose positions are `positions` [B, T] through the model, writing
    /// their keys and values into the cache's next `T` slots (whose `key_mask` is already set);
    /// returns the final normalised hidden states [B, T, hidden].
    fn run(&self, tokens: &Tensor, positions: &Tensor, cache: &mut Cache) -> Tensor {
        let (b, t) = (tokens.size()[0], tokens.size()[1]);
        let c = &self.config;
        let (heads, kv_heads, d) = (c.heads as i64, c.kv_heads as i64, c.head_dim());
        let group = heads / kv_heads;
        let (start, capacity) = (cache.len, cache.key_mask.size()[1]);
        assert!(start + t <= capacity, "the cache holds {capacity} tokens");
        // A query sees the real keys at or before its own slot; a large negative rather than -inf
        // keeps rows of padding (which see no real key) finite.
        let causal = Tensor::ones([t, capacity], (Kind::Bool, tokens.device())).tril(start);
        let allowed = causal
            .unsqueeze(0)
            .logical_and(&cache.key_mask.unsqueeze(1)); // [B, T, capacity]
        let bias = Tensor::zeros([b, 1, 1, t, capacity], (Kind::Float, tokens.device()))
            .masked_fill(&allowed.logical_not().view([b, 1, 1, t, capacity]), -1e9);
        let rotation = self.rotation(positions);
        let mut x =
            self.embed
                .index_select(0, &tokens.flatten(0, -1))
                .view([b, t, c.hidden as i64]);
        for (i, blk) in self.blocks.iter().enumerate() {
            let h = self.rms_norm(&x, &blk.attn_norm);
            let (mut q, mut v) = (h.matmul(&blk.wq.tr()), h.matmul(&blk.wv.tr()));
            if let Some(lora) = &self.adapter {
                q = lora.add(q, &h, &lora.blocks[i][0]);
                v = lora.add(v, &h, &lora.blocks[i][1]);
            }
            let q = q.view([b, t, heads, d]).transpose(1, 2);
            let k = h
                .matmul(&blk.wk.tr())
                .view([b, t, kv_heads, d])
                .transpose(1, 2);
            let v = v.view([b, t, kv_heads, d]).transpose(1, 2);
            let (q, k) = (Self::rope(&q, &rotation), Self::rope(&k, &rotation));
            let (kc, vc) = &cache.layers[i];
            kc.narrow(2, start, t).copy_(&k);
            vc.narrow(2, start, t).copy_(&v);
            // Grouped-query attention without copying keys per head: the query heads that share a
            // key/value head (consecutive, `group` of them) are stacked along the query axis.
            let q = q.reshape([b, kv_heads, group * t, d]);
            let scores = (q.matmul(&kc.transpose(-2, -1)) / (d as f64).sqrt())
                .view([b, kv_heads, group, t, capacity])
                + &bias;
            let probs = scores
                .softmax(-1, Kind::Float)
                .view([b, kv_heads, group * t, capacity]);
            let a = probs
                .matmul(vc)
                .view([b, heads, t, d])
                .transpose(1, 2)
                .reshape([b, t, c.hidden as i64]);
            x = x + a.matmul(&blk.wo.tr());
            let h = self.rms_norm(&x, &blk.ffn_norm);
            let f = h.matmul(&blk.gate.tr()).silu() * h.matmul(&blk.up.tr());
            x = x + f.matmul(&blk.down.tr());
        }
        cache.len += t;
        self.rms_norm(&x, &self.out_norm)
    }

    /// Next-token logits from hidden states: [..., hidden] -> [..., V].
    fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.matmul(&self.embed.tr())
    }

    /// Left-padded prompts `tokens` [B, T] with `mask` [B, T] (1: a token): a cache with room for
    /// `more` tokens after them, and the next-token logits after each prompt.
    pub fn prefill(&self, tokens: &Tensor, mask: &Tensor, more: i64) -> (Cache, Tensor) {
        let positions = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        let mut cache = self.new_cache(mask, tokens.size()[1] + more);
        let hidden = self.run(tokens, &positions, &mut cache);
        (cache, self.logits(&hidden.select(1, tokens.size()[1] - 1)))
    }

    /// One token per row [B]: writes it into the cache, returns the next logits [B, V].
    pub fn step(&self, token: &Tensor, cache: &mut Cache) -> Tensor {
        let positions = cache.next_position.unsqueeze(1);
        let _ = cache.key_mask.narrow(1, cache.len, 1).fill_(1);
        let hidden = self.run(&token.unsqueeze(1), &positions, cache);
        cache.next_position = &cache.next_position + 1;
        self.logits(&hidden.select(1, 0))
    }

    /// Right-padded `inputs` [B, T] with `mask` [B, T] (1: a token, then 0s): at the flat
    /// positions `rows` [N] (indices into B * T), the log-probability of `targets` [N] as the next
    /// token, and whether it is the most likely next token (lm-eval's `is_greedy`): ([N] float,
    /// [N] bool). Only those positions' logits are computed: a context's positions are read but
    /// not scored, and a [T, V] vocabulary product per sequence is most of what scoring costs
    /// beyond the model's body.
    pub fn next_token_scores_at(
        &self,
        inputs: &Tensor,
        mask: &Tensor,
        rows: &Tensor,
        targets: &Tensor,
    ) -> (Tensor, Tensor) {
        let positions = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        let mut cache = self.new_cache(mask, inputs.size()[1]);
        let hidden = self
            .run(inputs, &positions, &mut cache)
            .flatten(0, 1)
            .index_select(0, rows);
        let logprobs = self.logits(&hidden).log_softmax(-1, Kind::Float);
        let chosen = logprobs
            .gather(1, &targets.unsqueeze(1), false)
            .squeeze_dim(1);
        let greedy = logprobs.argmax(-1, false).eq_tensor(targets);
        (chosen, greedy)
    }

    /// Right-padded `inputs` [B, T] with `mask` [B, T]: the log-probability of `targets` [N] as the
    /// next token at the flat positions `rows` [N] (indices into B * T), with gradients when any
    /// tensor requires them. Only those positions' logits are computed: an adapter's loss reads
    /// the ending's tokens, a small share of the sequence and of the [T, V] logits.
    pub fn logprobs_at(
        &self,
        inputs: &Tensor,
        mask: &Tensor,
        rows: &Tensor,
        targets: &Tensor,
    ) -> Tensor {
        let positions = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        let mut cache = self.new_cache(mask, inputs.size()[1]);
        let hidden = self
            .run(inputs, &positions, &mut cache)
            .flatten(0, 1)
            .index_select(0, rows);
        self.logits(&hidden)
            .log_softmax(-1, Kind::Float)
            .gather(1, &targets.unsqueeze(1), false)
            .squeeze_dim(1)
    }

    /// Per-token log-likelihoods of `tokens` [B, T] (no padding) under the model, from the second
    /// token on: [B, T-1].
    pub fn token_logprobs(&self, tokens: &Tensor) -> Tensor {
        let t = tokens.size()[1];
        let mask = tokens.ones_like();
        let positions = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        let mut cache = self.new_cache(&mask, t);
        let logits = self.logits(&self.run(tokens, &positions, &mut cache).narrow(1, 0, t - 1));
        logits
            .log_softmax(-1, Kind::Float)
            .gather(2, &tokens.narrow(1, 1, t - 1).unsqueeze(2), false)
            .squeeze_dim(2)
    }
}
