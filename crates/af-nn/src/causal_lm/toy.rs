//! A toy generator written from Rust, for tests (nothing downloaded, a few kilobytes): a GGUF file
//! of a two-layer Llama with random F32 weights over a byte-level vocabulary (the 256 byte symbols
//! and a space-led token per lower-case letter), which [`super::CausalLm`] loads as it loads a
//! real model. What it writes is noise; what it tests is the plumbing. The same writer makes a
//! random model of SmolLM2-135M's shape for `af bench pretrained --random-weights`, where the
//! real file cannot go (the GPU machine).

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A metadata value for [`write_gguf`].
pub enum Meta<'a> {
    U32(u32),
    F32(f32),
    Str(&'a str),
    Strs(Vec<String>),
    I32s(Vec<i32>),
}

/// Writes a GGUF (version 3) file with `metadata` and F32 `tensors` (name, dims outermost first,
/// values row-major).
pub fn write_gguf(
    path: &Path,
    metadata: &[(&str, Meta)],
    tensors: &[(String, Vec<usize>, Vec<f32>)],
) -> std::io::Result<()> {
    fn string(b: &mut Vec<u8>, t: &str) {
        b.extend((t.len() as u64).to_le_bytes());
        b.extend(t.as_bytes());
    }
    let mut b = Vec::new();
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        string(&mut b, key);
        match value {
            Meta::U32(v) => {
                b.extend(4u32.to_le_bytes());
                b.extend(v.to_le_bytes());
            }
            Meta::F32(v) => {
                b.extend(6u32.to_le_bytes());
                b.extend(v.to_le_bytes());
            }
            Meta::Str(s) => {
                b.extend(8u32.to_le_bytes());
                string(&mut b, s);
            }
            Meta::Strs(v) => {
                b.extend(9u32.to_le_bytes());
                b.extend(8u32.to_le_bytes());
                b.extend((v.len() as u64).to_le_bytes());
                for s in v {
                    string(&mut b, s);
                }
            }
            Meta::I32s(v) => {
                b.extend(9u32.to_le_bytes());
                b.extend(5u32.to_le_bytes());
                b.extend((v.len() as u64).to_le_bytes());
                for i in v {
                    b.extend(i.to_le_bytes());
                }
            }
        }
    }
    let mut offset = 0u64;
    for (name, dims, values) in tensors {
        string(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims.iter().rev() {
            b.extend((*d as u64).to_le_bytes());
        }
        b.extend(0u32.to_le_bytes()); // F32
        b.extend(offset.to_le_bytes());
        offset += (values.len() * 4).div_ceil(32) as u64 * 32;
    }
    for (_, _, values) in tensors {
        while b.len() % 32 != 0 {
            b.push(0);
        }
        b.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    std::fs::write(path, b)
}

/// GPT-2's byte-to-symbol table: printable bytes stand for themselves, the rest map past U+0100.
fn byte_symbols() -> Vec<char> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut extra = 0;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).expect("a byte")
            } else {
                extra += 1;
                char::from_u32(255 + extra).expect("below U+0200")
            }
        })
        .collect()
}

/// The shape of a random Llama: the toy's for tests, SmolLM2-135M's for benchmarks.
#[derive(Clone, Copy, Debug)]
pub struct LlamaShape {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
    /// At least 283 (the byte symbols, the space-led letters and one control token); the rest
    /// are filler tokens the tokenizer never produces but sampling may draw.
    pub vocab: usize,
}

impl LlamaShape {
    pub const TOY: Self = Self {
        layers: 2,
        hidden: 16,
        heads: 2,
        kv_heads: 1,
        ffn: 32,
        vocab: 283,
    };
    /// SmolLM2-135M's architecture, for speed measurements without its weights.
    pub const SMOLLM2_135M: Self = Self {
        layers: 30,
        hidden: 576,
        heads: 9,
        kv_heads: 3,
        ffn: 1536,
        vocab: 49152,
    };
}

/// Writes the toy model to `path`; weights drawn from `seed`.
pub fn write_toy_llama(path: &Path, seed: u64) -> std::io::Result<()> {
    write_random_llama(path, LlamaShape::TOY, seed)
}

/// Writes a Llama of `shape` with random weights (uniform in +-0.3, norms 1) to `path`.
pub fn write_random_llama(path: &Path, shape: LlamaShape, seed: u64) -> std::io::Result<()> {
    let symbols = byte_symbols();
    let space = symbols[b' ' as usize];
    let mut tokens = vec!["<|endoftext|>".to_string()];
    tokens.extend(symbols.iter().map(char::to_string));
    let letters: Vec<char> = ('a'..='z').collect();
    tokens.extend(letters.iter().map(|c| format!("{space}{c}")));
    let merges: Vec<String> = letters.iter().map(|c| format!("{space} {c}")).collect();
    let filler = shape.vocab.saturating_sub(tokens.len());
    tokens.extend((0..filler).map(|i| format!("tok{i}")));
    let mut kinds = vec![3i32];
    kinds.extend(std::iter::repeat_n(1, tokens.len() - 1));
    let LlamaShape {
        layers,
        hidden,
        ffn,
        heads,
        kv_heads,
        ..
    } = shape;
    let vocab = tokens.len();
    let kv = kv_heads * hidden / heads;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut random = |dims: Vec<usize>| -> Vec<f32> {
        (0..dims.iter().product::<usize>())
            .map(|_| rng.random_range(-0.3f32..0.3))
            .collect()
    };
    let mut tensors = vec![(
        "token_embd.weight".to_string(),
        vec![vocab, hidden],
        random(vec![vocab, hidden]),
    )];
    for i in 0..layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        for (name, dims) in [
            ("attn_q", vec![hidden, hidden]),
            ("attn_k", vec![kv, hidden]),
            ("attn_v", vec![kv, hidden]),
            ("attn_output", vec![hidden, hidden]),
            ("ffn_gate", vec![ffn, hidden]),
            ("ffn_up", vec![ffn, hidden]),
            ("ffn_down", vec![hidden, ffn]),
        ] {
            let values = random(dims.clone());
            tensors.push((n(name), dims, values));
        }
        tensors.push((n("attn_norm"), vec![hidden], vec![1.0; hidden]));
        tensors.push((n("ffn_norm"), vec![hidden], vec![1.0; hidden]));
    }
    tensors.push((
        "output_norm.weight".to_string(),
        vec![hidden],
        vec![1.0; hidden],
    ));
    let metadata = [
        ("general.architecture", Meta::Str("llama")),
        ("general.name", Meta::Str("toy llama")),
        ("llama.block_count", Meta::U32(layers as u32)),
        ("llama.embedding_length", Meta::U32(hidden as u32)),
        ("llama.feed_forward_length", Meta::U32(ffn as u32)),
        ("llama.attention.head_count", Meta::U32(heads as u32)),
        ("llama.attention.head_count_kv", Meta::U32(kv_heads as u32)),
        ("llama.rope.freq_base", Meta::F32(10_000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
        ("tokenizer.ggml.model", Meta::Str("gpt2")),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.token_type", Meta::I32s(kinds)),
        ("tokenizer.ggml.merges", Meta::Strs(merges)),
        ("tokenizer.ggml.bos_token_id", Meta::U32(0)),
    ];
    write_gguf(path, &metadata, &tensors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causal_lm::{CausalLm, CausalSampleSettings, PromptJob};

    /// The toy model written to a temporary directory (kept alive with it) and loaded.
    fn toy_lm() -> (tempfile::TempDir, CausalLm) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toy.gguf");
        write_toy_llama(&path, 5).unwrap();
        let lm = CausalLm::load(&path, tch::Device::Cpu).unwrap();
        (dir, lm)
    }

    #[test]
    fn the_toy_model_loads_samples_reproducibly_and_starts_each_ending_with_a_word() {
        let (_dir, lm) = toy_lm();
        assert_eq!(lm.name, "toy llama");
        let uniforms: Vec<f32> = (0..3 * 6)
            .map(|i| ((i * 29 % 97) as f32 + 0.5) / 97.0)
            .collect();
        let s = CausalSampleSettings::new(6, 1.0, 0, 1.0);
        let job = |prompt, uniforms| PromptJob {
            prompt,
            count: 3,
            uniforms,
            lengths: &[],
        };
        let one = lm.sample(&[job("a man walks. he", &uniforms)], &s).unwrap();
        let two = lm
            .sample(
                &[
                    job("the dog barks loudly at night. it", &uniforms),
                    job("a man walks. he", &uniforms),
                ],
                &s,
            )
            .unwrap();
        assert_eq!(
            one[0], two[1],
            "left padding does not change an item's endings"
        );
        // The first token is a space-led letter: the ending starts a new word after the noun phrase.
        assert!(
            one[0]
                .iter()
                .all(|e| e.starts_with(|c: char| c.is_ascii_lowercase())),
            "{:?}",
            one[0]
        );
        assert!(lm.mean_nll("a man walks.").unwrap() > 0.0);
    }

    /// Length shaping: no sentence end more than `length_floor` words short of the target, a
    /// strong pull to end at it, and a job without a target in the same batch drawn as without.
    #[test]
    fn length_shaping_ends_endings_near_their_target_and_leaves_other_jobs_alone() {
        let (_dir, lm) = toy_lm();
        assert_eq!(
            lm.words("a b.").unwrap(),
            3,
            "two space-led words and a full stop"
        );
        // Most of the toy's tokens are bytes inside a word: enough steps to reach every target.
        let (count, max_tokens) = (40, 64);
        let uniforms: Vec<f32> = (0..count * max_tokens)
            .map(|i| ((i * 7919 % 1009) as f32 + 0.5) / 1009.0)
            .collect();
        let plain = CausalSampleSettings::new(max_tokens, 1.0, 0, 1.0);
        let shaped = CausalSampleSettings {
            length_bias: 40.0,
            length_floor: 1,
            ..plain.clone()
        };
        let job = |prompt, lengths| PromptJob {
            prompt,
            count,
            uniforms: &uniforms,
            lengths,
        };
        let free = lm
            .sample(&[job("a man walks. he", &[])], &plain)
            .unwrap()
            .remove(0);
        // Each ending its own target: 3 words for the first half, 5 for the second.
        let targets: Vec<usize> = (0..count)
            .map(|e| if e < count / 2 { 3 } else { 5 })
            .collect();
        let out = lm
            .sample(
                &[
                    job("the dog barks. it", &targets),
                    job("a man walks. he", &[]),
                ],
                &shaped,
            )
            .unwrap();
        assert_eq!(
            out[1], free,
            "a job without lengths is drawn as without shaping"
        );
        let ends = |e: &String| e.ends_with(['.', '!', '?']);
        assert!(
            free.iter().filter(|e| ends(e)).count() < count,
            "the toy's endings do not all stop by themselves: {free:?}"
        );
        for (e, target) in out[0].iter().zip(&targets) {
            assert!(ends(e), "{e:?} does not end a sentence");
            let n = lm.words(e).unwrap();
            assert!(
                (target - 1..=*target).contains(&n),
                "{e:?}: {n} words, target {target}, floor 1"
            );
        }
    }
}
