//! af's BERT encoder against the reference implementation: the sentence embeddings that
//! sentence-transformers computes with all-MiniLM-L6-v2 (tests/fixtures/minilm-reference.json,
//! written by scripts/encoder-reference) must be matched within cosine 0.9999 on every sentence.
//!
//! The model is the directory scripts/setup installs and exports as AF_ENCODER_DIR; scripts/test
//! (and anything that sources scripts/env.sh, which every af build needs) sets it. Without it this
//! test fails and says so: it never skips, because then the comparison would silently not run.

use std::path::PathBuf;

use af_nn::encoder::{Encoder, EncoderError, EncoderOptions, ENCODER_DIR_ENV};
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

#[derive(Deserialize)]
struct Fixture {
    max_seq_length: usize,
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    sentence: String,
    tokens_untruncated: usize,
    embedding: Vec<f32>,
}

/// libtorch's generator is global and tests run on parallel threads: those that seed it hold this.
fn rng_lock() -> std::sync::MutexGuard<'static, ()> {
    af_test_support::lock()
}

fn model_dir() -> PathBuf {
    let dir = std::env::var_os(ENCODER_DIR_ENV).unwrap_or_else(|| {
        panic!(
            "{ENCODER_DIR_ENV} is not set: run the tests through scripts/test, or `source scripts/env.sh` first \
             (scripts/setup installs all-MiniLM-L6-v2 and exports its directory)"
        )
    });
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("model.safetensors").is_file(),
        "{ENCODER_DIR_ENV}={} has no model.safetensors: run scripts/setup",
        dir.display()
    );
    dir
}

fn fixture() -> Fixture {
    let path = af_test_support::crate_dir().join("tests/fixtures/minilm-reference.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn cosines(a: &Tensor, b: &Tensor) -> Vec<f64> {
    let dots = (a * b).sum_dim_intlist(1, false, Kind::Double);
    let norms = a.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false)
        * b.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false);
    Vec::<f64>::try_from(dots / norms).unwrap()
}

#[test]
fn minilm_matches_sentence_transformers_on_every_fixture_sentence() {
    let fx = fixture();
    assert!(fx.items.len() >= 20);
    assert!(
        fx.items
            .iter()
            .any(|i| i.tokens_untruncated > fx.max_seq_length),
        "the fixture must hold a text that is truncated"
    );
    let encoder = Encoder::load(
        &model_dir(),
        Device::Cpu,
        &EncoderOptions {
            batch_size: 8,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(encoder.max_length(), fx.max_seq_length);
    let texts: Vec<&str> = fx.items.iter().map(|i| i.sentence.as_str()).collect();
    let ours = encoder.encode(&texts).unwrap();
    let dim = encoder.dim() as i64;
    let flat: Vec<f32> = fx
        .items
        .iter()
        .flat_map(|i| i.embedding.iter().copied())
        .collect();
    let reference = Tensor::from_slice(&flat).view([texts.len() as i64, dim]);
    let cos = cosines(&ours, &reference);
    let (worst, min) =
        cos.iter().enumerate().fold(
            (0, f64::MAX),
            |acc, (i, &c)| if c < acc.1 { (i, c) } else { acc },
        );
    eprintln!(
        "encoder vs sentence-transformers: minimum cosine {min:.9} (1 - {:.1e}), sentence {worst}",
        1.0 - min
    );
    for (i, c) in cos.iter().enumerate() {
        assert!(
            *c >= 0.9999,
            "sentence {i} {:?}: cosine {c:.6} < 0.9999",
            texts[i]
        );
    }
    // Unit length, as the reference normalises.
    let norms =
        Vec::<f64>::try_from(ours.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false)).unwrap();
    assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-5), "{norms:?}");

    // One text per batch (no padding) gives the same vectors as the length-sorted, padded batches.
    let single = Encoder::load(
        &model_dir(),
        Device::Cpu,
        &EncoderOptions {
            batch_size: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let alone = single.encode(&texts).unwrap();
    let same = cosines(&ours, &alone);
    assert!(
        same.iter().all(|&c| c > 0.99999),
        "padding changed a vector: {same:?}"
    );
}

/// A tiny random BERT written with the legacy names of old checkpoints (`bert.` prefix,
/// `LayerNorm.gamma`/`beta`) loads and encodes exactly as the same weights under today's names.
#[test]
fn legacy_tensor_names_load_like_current_ones() {
    let model = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let (h, layers, inter, vocab, positions) = (8i64, 2, 16i64, 30522i64, 64i64);
    let config = serde_json::json!({
        "model_type": "bert", "vocab_size": vocab, "hidden_size": h, "num_hidden_layers": layers,
        "num_attention_heads": 2, "intermediate_size": inter, "hidden_act": "gelu",
        "max_position_embeddings": positions, "type_vocab_size": 2, "layer_norm_eps": 1e-12
    });
    let _rng = rng_lock();
    tch::manual_seed(7);
    let mut tensors: Vec<(String, Tensor)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            Tensor::randn([vocab, h], (Kind::Float, Device::Cpu)),
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            Tensor::randn([positions, h], (Kind::Float, Device::Cpu)),
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            Tensor::randn([2, h], (Kind::Float, Device::Cpu)),
        ),
        (
            "embeddings.LayerNorm.weight".into(),
            Tensor::rand([h], (Kind::Float, Device::Cpu)) + 0.5,
        ),
        (
            "embeddings.LayerNorm.bias".into(),
            Tensor::randn([h], (Kind::Float, Device::Cpu)),
        ),
    ];
    for l in 0..layers {
        let p = format!("encoder.layer.{l}");
        for (name, o, i) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", inter, h),
            ("output.dense", h, inter),
        ] {
            tensors.push((
                format!("{p}.{name}.weight"),
                Tensor::randn([o, i], (Kind::Float, Device::Cpu)) * 0.3,
            ));
            tensors.push((
                format!("{p}.{name}.bias"),
                Tensor::randn([o], (Kind::Float, Device::Cpu)) * 0.1,
            ));
        }
        for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
            tensors.push((
                format!("{p}.{ln}.weight"),
                Tensor::rand([h], (Kind::Float, Device::Cpu)) + 0.5,
            ));
            tensors.push((
                format!("{p}.{ln}.bias"),
                Tensor::randn([h], (Kind::Float, Device::Cpu)) * 0.1,
            ));
        }
    }
    let legacy: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, t)| {
            let n = n
                .replace("LayerNorm.weight", "LayerNorm.gamma")
                .replace("LayerNorm.bias", "LayerNorm.beta");
            (format!("bert.{n}"), t.shallow_clone())
        })
        .collect();
    let write = |name: &str, weights: &[(String, Tensor)]| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        std::fs::copy(model.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
        Tensor::write_safetensors(weights, dir.join("model.safetensors")).unwrap();
        dir
    };
    let current = write("current", &tensors);
    let old = write("legacy", &legacy);
    let texts = [
        "A man plays the guitar.",
        "She dives into the pool and swims a length.",
    ];
    let a = Encoder::load(&current, Device::Cpu, &EncoderOptions::default())
        .unwrap()
        .encode(&texts)
        .unwrap();
    let b = Encoder::load(&old, Device::Cpu, &EncoderOptions::default())
        .unwrap()
        .encode(&texts)
        .unwrap();
    assert_eq!(a.size(), [2, h]);
    assert!(
        a.allclose(&b, 0.0, 0.0, false),
        "legacy names changed the output"
    );

    // A missing tensor is named, with the file.
    let mut short = legacy;
    short.retain(|(n, _)| !n.ends_with("encoder.layer.1.output.LayerNorm.gamma"));
    let broken = write("broken", &short);
    let err = Encoder::load(&broken, Device::Cpu, &EncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.safetensors")
            && err.contains("encoder.layer.1.output.LayerNorm.weight"),
        "{err}"
    );
}

#[test]
fn missing_and_malformed_model_files_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Encoder::load(tmp.path(), Device::Cpu, &EncoderOptions::default()).unwrap_err();
    assert!(matches!(err, EncoderError::Dir { .. }), "{err}");
    assert!(err.to_string().contains("has no config.json"), "{err}");

    std::fs::write(
        tmp.path().join("config.json"),
        "{\"hidden_size\": 8,\n \"vocab_size\": }",
    )
    .unwrap();
    let err = Encoder::load(tmp.path(), Device::Cpu, &EncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("line 2"),
        "{err}"
    );

    let cfg = r#"{"model_type": "bert", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16}"#;
    std::fs::write(tmp.path().join("config.json"), cfg).unwrap();
    std::fs::write(tmp.path().join("pytorch_model.bin"), b"pickle").unwrap();
    let err = Encoder::load(tmp.path(), Device::Cpu, &EncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("has no model.safetensors") && err.contains("pytorch_model.bin"),
        "{err}"
    );

    std::fs::write(tmp.path().join("model.safetensors"), b"not safetensors").unwrap();
    std::fs::write(tmp.path().join("tokenizer.json"), b"{}").unwrap();
    let err = Encoder::load(tmp.path(), Device::Cpu, &EncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("tokenizer.json"), "{err}");

    let cfg = r#"{"model_type": "roberta", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16}"#;
    std::fs::write(tmp.path().join("config.json"), cfg).unwrap();
    let err = af_nn::encoder::inspect(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("roberta"),
        "{err}"
    );
}

/// The benchmark's stand-in for a model whose weights cannot travel: the architecture and the
/// tokenizer of the directory, weights drawn from a seed (the same for the same seed).
#[test]
fn random_weights_need_only_config_and_tokenizer() {
    let model = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
        std::fs::copy(model.join(f), tmp.path().join(f)).unwrap();
    }
    let texts = [
        "A man plays the guitar.",
        "Two boys kick a ball across the field.",
    ];
    let options = EncoderOptions::default();
    let _rng = rng_lock();
    let a = Encoder::load_with_random_weights(tmp.path(), Device::Cpu, &options, 3)
        .unwrap()
        .encode(&texts)
        .unwrap();
    let b = Encoder::load_with_random_weights(tmp.path(), Device::Cpu, &options, 3)
        .unwrap()
        .encode(&texts)
        .unwrap();
    assert_eq!(a.size(), [2, 384]);
    assert!(a.allclose(&b, 0.0, 0.0, false));
    let norms =
        Vec::<f64>::try_from(a.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false)).unwrap();
    assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-5), "{norms:?}");
    let err = Encoder::load(tmp.path(), Device::Cpu, &options)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no model.safetensors"), "{err}");
}
