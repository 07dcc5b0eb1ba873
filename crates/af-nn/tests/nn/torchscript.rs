//! The TorchScript backend of the encoder and the `torchscript` member, on a toy module each test
//! writes itself (`af_nn::encoder::toy`: an embedding lookup with masked mean pooling, traced with
//! tch, and a WordLevel tokenizer.json): the encoder returns the module's vectors, normalised, in
//! input order, whatever the batches; a module that does not fit the interface is refused at load,
//! naming the file; the member's settings name their keys in errors; only one frozen-embedding
//! member per committee; and the member learns from the context in a committee.
//!
//! `exported_minilm_matches_afs_bert` (ignored: it needs a module exported by
//! scripts/export-torchscript, named by AF_TORCHSCRIPT_DIR) compares an exported all-MiniLM-L6-v2
//! with af's own BERT on the encoder's reference sentences.

use std::path::{Path, PathBuf};

use af_core::{CommitteeConfig, MemberName};
use af_nn::committee::{score, train};
use af_nn::encoder::toy::{toy_forward, write_toy_encoder, ToyEncoder};
use af_nn::encoder::{Encoder, EncoderOptions, EncoderSource};
use af_nn::table::{CandidateTable, EncodedRows};
use af_nn::{CommitteeModel, Registry};
use tch::{nn, Device, Kind, Tensor};

const WORDS: &[&str] = &[
    "the", "a", "man", "woman", "plays", "guitar", "dives", "into", "pool", "volcano", "ocean",
    "erupts", "waves", ".",
];

fn toy(dir: &Path) -> ToyEncoder {
    write_toy_encoder(dir, WORDS, 8, 11).unwrap()
}

fn options(batch_size: usize, max_length: Option<usize>) -> EncoderOptions {
    EncoderOptions {
        batch_size,
        max_length,
        half: false,
    }
}

/// The toy module's vector of one text, computed here from its embedding table and normalised.
fn expected(toy: &ToyEncoder, text: &str, max_length: usize) -> Tensor {
    let mut tokenizer = tokenizers::Tokenizer::from_file(&toy.tokenizer).unwrap();
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length,
            ..Default::default()
        }))
        .unwrap();
    let ids: Vec<i64> = tokenizer
        .encode(text, true)
        .unwrap()
        .get_ids()
        .iter()
        .map(|&i| i as i64)
        .collect();
    let n = ids.len() as i64;
    let v = toy_forward(
        &toy.weight,
        &Tensor::from_slice(&ids).view([1, n]),
        &Tensor::ones([1, n], (Kind::Int64, Device::Cpu)),
    )
    .squeeze_dim(0);
    &v / v.norm()
}

fn max_difference(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn the_backend_gives_the_modules_vectors_normalised_in_input_order() {
    let _lock = af_test_support::lock();
    let dir = tempfile::tempdir().unwrap();
    let toy = toy(dir.path());
    let texts = [
        "The man plays the guitar.",
        "A woman dives",
        "",
        "The volcano erupts and the OCEAN waves, a man plays the guitar into the pool.",
        "unknown words here",
        "waves",
        "The woman dives into the pool.",
    ];
    // Three texts per call: several batches, each padded to its own longest.
    let encoder =
        Encoder::load_torchscript(&toy.module, &toy.tokenizer, Device::Cpu, &options(3, None))
            .unwrap();
    assert_eq!(encoder.dim(), 8);
    assert_eq!(encoder.max_length(), 256);
    assert_eq!(
        encoder.source(),
        &EncoderSource::TorchScript {
            module: toy.module.clone(),
            tokenizer: toy.tokenizer.clone()
        }
    );
    let got = encoder.encode(&texts).unwrap();
    assert_eq!(got.size(), [texts.len() as i64, 8]);
    for (i, text) in texts.iter().enumerate() {
        let want = expected(&toy, text, 256);
        assert!(
            max_difference(&got.get(i as i64), &want) < 1e-5,
            "text {i} {text:?}: {:?} against {:?}",
            got.get(i as i64),
            want
        );
    }
    let norms =
        Vec::<f64>::try_from(got.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false)).unwrap();
    assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-6), "{norms:?}");
    // The toy's own vectors are not unit length: the encoder normalised them.
    let raw = toy_forward(
        &toy.weight,
        &Tensor::from_slice(&[2i64, 6, 3]).view([1, 3]),
        &Tensor::ones([1, 3], (Kind::Int64, Device::Cpu)),
    );
    assert!((raw.norm().double_value(&[]) - 1.0).abs() > 1e-3);

    // `max_length` cuts each text to that many tokens, [CLS] and [SEP] included.
    let short = Encoder::load_torchscript(
        &toy.module,
        &toy.tokenizer,
        Device::Cpu,
        &options(64, Some(4)),
    )
    .unwrap();
    let cut = short.encode(&texts[3..4]).unwrap();
    assert!(
        max_difference(&cut.get(0), &expected(&toy, "the volcano", 256)) < 1e-5,
        "[CLS] the volcano [SEP]"
    );
    assert!(max_difference(&cut.get(0), &got.get(3)) > 1e-3);
}

#[test]
fn a_module_that_does_not_fit_the_interface_is_refused_at_load_naming_the_file() {
    let _lock = af_test_support::lock();
    let dir = tempfile::tempdir().unwrap();
    let toy = toy(dir.path());
    let load = |module: &Path, tokenizer: &Path| {
        Encoder::load_torchscript(module, tokenizer, Device::Cpu, &options(8, None))
            .unwrap_err()
            .to_string()
    };

    let missing = dir.path().join("missing.pt");
    let e = load(&missing, &toy.tokenizer);
    assert!(
        e.contains("missing.pt") && e.contains("no such file"),
        "{e}"
    );
    let garbage = dir.path().join("garbage.pt");
    std::fs::write(&garbage, b"not a zip archive").unwrap();
    let e = load(&garbage, &toy.tokenizer);
    assert!(
        e.contains("garbage.pt") && e.contains("not a TorchScript module"),
        "{e}"
    );
    let e = load(&toy.module, &dir.path().join("none.json"));
    assert!(e.contains("none.json") && e.contains("tokenizer"), "{e}");

    // Token vectors instead of one vector per text.
    let example = [
        Tensor::from_slice(&[2i64, 4, 3]).view([1, 3]),
        Tensor::ones([1, 3], (Kind::Int64, Device::Cpu)),
    ];
    let weight = toy.weight.shallow_clone();
    let tokens = tch::CModule::create_by_tracing("Tokens", "forward", &example, &mut |x| {
        vec![Tensor::embedding(&weight, &x[0], -1, false, false) * x[1].unsqueeze(-1)]
    })
    .unwrap();
    let per_token = dir.path().join("per-token.pt");
    tokens.save(&per_token).unwrap();
    let e = load(&per_token, &toy.tokenizer);
    assert!(
        e.contains("per-token.pt") && e.contains("expected [1, D]"),
        "{e}"
    );

    // A forward that takes the ids alone.
    let ids_only = tch::CModule::create_by_tracing("IdsOnly", "forward", &example[..1], &mut |x| {
        vec![Tensor::embedding(&weight, &x[0], -1, false, false).mean_dim(1, false, Kind::Float)]
    })
    .unwrap();
    let one_input = dir.path().join("one-input.pt");
    ids_only.save(&one_input).unwrap();
    let e = load(&one_input, &toy.tokenizer);
    assert!(
        e.contains("one-input.pt") && e.contains("attention_mask"),
        "{e}"
    );
}

/// A committee config with `[committee.member.torchscript]` (and `encoder`, when given) tables.
fn config(torchscript: toml::Table) -> CommitteeConfig {
    let mut c = CommitteeConfig {
        embedding: 16,
        joint_hidden: 16,
        epochs: 8,
        validation_share: 0.0,
        batch_items: 16,
        learning_rate: 1e-2,
        ..Default::default()
    };
    c.member.insert("torchscript".into(), torchscript);
    c
}

/// A member table from TOML text.
fn table(text: &str) -> toml::Table {
    text.parse().unwrap()
}

fn refs(texts: &[String]) -> Vec<&str> {
    texts.iter().map(String::as_str).collect()
}

fn names(names: &[&str]) -> Vec<MemberName> {
    names.iter().map(|n| MemberName::new(*n)).collect()
}

#[test]
fn the_members_settings_name_their_keys_and_one_frozen_encoder_per_committee() {
    let _lock = af_test_support::lock();
    let dir = tempfile::tempdir().unwrap();
    let toy = toy(dir.path());
    let registry = Registry::builtin();
    let member = registry.get("torchscript").unwrap();
    let ts = names(&["torchscript"]);
    let error = |c: &CommitteeConfig| registry.frozen_encoder(&ts, c).unwrap_err().to_string();

    // Settings are checked whether the member is used or not; the module only when it is.
    let none = config(toml::Table::new());
    assert_eq!(
        member.settings(&none).unwrap(),
        serde_json::json!({ "hidden": 256, "dropout": 0.2, "module": null, "tokenizer": null, "max-length": 256, "batch-size": 64 })
    );
    let e = error(&none);
    assert!(
        e.starts_with("[committee.member.torchscript] module: ")
            && e.contains("scripts/export-torchscript"),
        "{e}"
    );
    let e = error(&config(table(r#"module = "/nonexistent/model.pt""#)));
    assert!(
        e.contains("[committee.member.torchscript] module") && e.contains("/nonexistent/model.pt"),
        "{e}"
    );
    let garbage = dir.path().join("garbage.pt");
    std::fs::write(&garbage, b"not a module").unwrap();
    let spec = registry
        .frozen_encoder(
            &ts,
            &config(table(&format!(
                "module = {:?}",
                garbage.display().to_string()
            ))),
        )
        .unwrap()
        .unwrap();
    let e = spec.load(Device::Cpu).unwrap_err().to_string();
    assert!(
        e.starts_with("[committee.member.torchscript] module: ") && e.contains("garbage.pt"),
        "{e}"
    );
    let e = member
        .settings(&config(table("max-length = 1")))
        .unwrap_err();
    assert!(
        e.contains("[committee.member.torchscript] max-length = 1"),
        "{e}"
    );
    let e = member
        .settings(&config(table(r#"model = "x""#)))
        .unwrap_err();
    assert!(
        e.starts_with("[committee.member.torchscript]: ") && e.contains("`model`"),
        "{e}"
    );

    // The tokenizer beside the module unless named; max-length and batch-size reach the encoder.
    let module = toy.module.display().to_string();
    let spec = registry
        .frozen_encoder(
            &ts,
            &config(table(&format!(
                "module = {module:?}\nmax-length = 12\nbatch-size = 5"
            ))),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        spec.source,
        EncoderSource::TorchScript {
            module: toy.module.clone(),
            tokenizer: toy.tokenizer.clone()
        }
    );
    assert_eq!(
        (
            spec.member,
            spec.model(),
            spec.options.max_length,
            spec.options.batch_size
        ),
        ("torchscript", toy.module.as_path(), Some(12), 5)
    );
    let elsewhere = dir.path().join("elsewhere.json");
    let e = error(&config(table(&format!(
        "module = {module:?}\ntokenizer = {:?}",
        elsewhere.display().to_string()
    ))));
    assert!(
        e.starts_with("[committee.member.torchscript] tokenizer = ")
            && e.contains("elsewhere.json"),
        "{e}"
    );
    std::fs::copy(&toy.tokenizer, &elsewhere).unwrap();
    let spec = registry
        .frozen_encoder(
            &ts,
            &config(table(&format!(
                "module = {module:?}\ntokenizer = {:?}",
                elsewhere.display().to_string()
            ))),
        )
        .unwrap()
        .unwrap();
    assert!(
        matches!(&spec.source, EncoderSource::TorchScript { tokenizer, .. } if *tokenizer == elsewhere)
    );
    assert_eq!(spec.load(Device::Cpu).unwrap().dim(), 8);
    let alone = dir.path().join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::copy(&toy.module, alone.join("model.pt")).unwrap();
    let e = error(&config(table(&format!(
        "module = {:?}",
        alone.join("model.pt").display().to_string()
    ))));
    assert!(e.contains("no tokenizer.json beside it"), "{e}");

    // One frozen-embedding member per committee: they fill the same column of the table.
    let both = config(table(&format!("module = {module:?}")));
    let e = registry
        .frozen_encoder(&names(&["cnn", "encoder", "mlp", "torchscript"]), &both)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`encoder` and `torchscript` both read frozen sentence embeddings"),
        "{e}"
    );
    assert!(registry
        .encoded_member(&names(&["torchscript", "cnn", "torchscript"]))
        .unwrap()
        .is_some_and(|m| m.name() == "torchscript"));
    assert!(registry
        .encoded_member(&names(&["cnn", "lstm"]))
        .unwrap()
        .is_none());
    assert!(registry
        .frozen_encoder(&names(&["cnn"]), &both)
        .unwrap()
        .is_none());
}

/// Each context names a topic (volcano or ocean); the right ending is about the same topic and the
/// wrong ones about the other, with the same filler words: only a member that reads the context
/// can tell. The `torchscript` member, over the toy module's embeddings of both, learns it.
#[test]
fn the_torchscript_member_learns_from_the_context_in_a_committee() {
    let _lock = af_test_support::lock();
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    // Wider than the other tests' toy, so the filler words' random vectors drown the topic less.
    let toy = write_toy_encoder(dir.path(), WORDS, 32, 11).unwrap();
    let c = CommitteeConfig {
        epochs: 20,
        ..config(table(&format!(
            "module = {:?}\nhidden = 32\nbatch-size = 16",
            toy.module.display().to_string()
        )))
    };
    let registry = Registry::builtin();
    let encoder = registry
        .frozen_encoder(&names(&["torchscript"]), &c)
        .unwrap()
        .unwrap()
        .load(Device::Cpu)
        .unwrap();

    let (questions, width) = (160usize, 4usize);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let filler = [
        "the", "a", "man", "woman", "plays", "guitar", "dives", "into", "pool",
    ];
    let phrase = |topic: &str, rng: &mut rand_chacha::ChaCha8Rng| {
        let mut words: Vec<&str> = (0..5)
            .map(|_| filler[rng.random_range(0..filler.len())])
            .collect();
        words.insert(rng.random_range(0..=5), topic);
        words.join(" ")
    };
    let (mut contexts, mut texts) = (Vec::new(), Vec::new());
    for _ in 0..questions {
        let (topic, other) = if rng.random_bool(0.5) {
            ("volcano erupts", "ocean waves")
        } else {
            ("ocean waves", "volcano erupts")
        };
        contexts.push(phrase(topic, &mut rng));
        texts.push(phrase(topic, &mut rng));
        for _ in 1..width {
            texts.push(phrase(other, &mut rng));
        }
    }
    let text = encoder.encode(&refs(&texts)).unwrap();
    let context = encoder.encode(&refs(&contexts)).unwrap();
    let rows = (questions * width) as i64;
    let of =
        Tensor::arange(rows, (Kind::Int64, Device::Cpu)).divide_scalar_mode(width as i64, "floor");
    let blank = Tensor::ones([rows, 4], (Kind::Int, Device::Cpu));
    let mut table = CandidateTable::from_tensors(
        blank.shallow_clone(),
        blank.shallow_clone(),
        blank,
        Tensor::zeros([rows, 8], (Kind::Float, Device::Cpu)),
        4,
        4,
        1,
    );
    table
        .attach_encoded(EncodedRows {
            text: text.shallow_clone(),
            contexts: Some((context, of)),
        })
        .unwrap();

    let qs: Vec<Vec<i64>> = (0..questions)
        .map(|q| (0..width).map(|o| (q * width + o) as i64).collect())
        .collect();
    let (fit, held) = qs.split_at(120);
    let accuracy = |table: &CandidateTable| {
        tch::manual_seed(5);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = CommitteeModel::new(
            &vs.root(),
            &c,
            &registry,
            &names(&["torchscript"]),
            false,
            table,
        )
        .unwrap();
        train(&vs, &model, table, fit, &c, 5).unwrap();
        let rows: Vec<i64> = held.iter().flatten().copied().collect();
        let scores = score(&model, table, &rows, af_core::ScoreBatch::Candidates(64))
            .swap_remove(0)
            .1;
        scores
            .chunks(width)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count() as f64
            / held.len() as f64
    };
    let with_context = accuracy(&table);
    eprintln!("with the context {with_context}");
    assert!(with_context > 0.9, "{with_context}");
    // The same texts without their contexts: half the right answers are about each topic.
    table.encoded = None;
    table
        .attach_encoded(EncodedRows {
            text,
            contexts: None,
        })
        .unwrap();
    let without = accuracy(&table);
    eprintln!("without {without}");
    assert!(
        without < 0.6,
        "the endings alone do not say which is right: {without}"
    );
}

/// The encoder's reference sentences and sentence-transformers' vectors of them
/// (tests/fixtures/minilm-reference.json, written by scripts/encoder-reference).
fn reference() -> (Vec<String>, Vec<Vec<f32>>) {
    #[derive(serde::Deserialize)]
    struct Fixture {
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        sentence: String,
        embedding: Vec<f32>,
    }
    let path = af_test_support::crate_dir().join("tests/fixtures/minilm-reference.json");
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fixture
        .items
        .into_iter()
        .map(|i| (i.sentence, i.embedding))
        .unzip()
}

/// Each row's cosine between `a` and `b`, and the least with its row.
fn row_cosines(a: &Tensor, b: &Tensor) -> (Vec<f64>, usize, f64) {
    let dots = (a * b).sum_dim_intlist(1, false, Kind::Double);
    let norms = a.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false)
        * b.to_kind(Kind::Double).norm_scalaropt_dim(2, [1], false);
    let cosines = Vec::<f64>::try_from(dots / norms).unwrap();
    let (worst, least) =
        cosines.iter().enumerate().fold(
            (0, f64::MAX),
            |acc, (i, &c)| if c < acc.1 { (i, c) } else { acc },
        );
    (cosines, worst, least)
}

/// A module written by `scripts/export-torchscript $AF_ENCODER_DIR $AF_TORCHSCRIPT_DIR` gives
/// af's own BERT vectors within cosine 0.9999 on the encoder's reference sentences (24, two of
/// them over 128 tokens and one over 256), and sentence-transformers' as closely.
/// No set-up script exports the module (it needs Python's transformers), so the test says
/// SKIPPED without it, whatever `AF_TEST_REQUIRE` says.
#[test]
fn exported_minilm_matches_afs_bert() {
    let _lock = af_test_support::lock();
    let Some(exported) = af_test_support::installed(
        "exported_minilm_matches_afs_bert",
        "AF_TORCHSCRIPT_DIR",
        af_test_support::Need::Extra,
        "scripts/export-torchscript $AF_ENCODER_DIR DIR writes the module; set it to DIR",
    ) else {
        return;
    };
    let bert_dir = PathBuf::from(
        std::env::var_os(af_nn::encoder::ENCODER_DIR_ENV)
            .expect("AF_ENCODER_DIR (source scripts/env.sh)"),
    );
    let (sentences, vectors) = reference();
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let bert = Encoder::load(&bert_dir, Device::Cpu, &options(8, None)).unwrap();
    let script = Encoder::load_torchscript(
        &exported.join("model.pt"),
        &exported.join("tokenizer.json"),
        Device::Cpu,
        &options(8, Some(bert.max_length())),
    )
    .unwrap();
    assert_eq!(script.dim(), bert.dim());
    let ours = script.encode(&texts).unwrap();
    let flat: Vec<f32> = vectors.concat();
    let sentence_transformers =
        Tensor::from_slice(&flat).view([texts.len() as i64, script.dim() as i64]);
    for (against, other) in [
        ("af's BERT", bert.encode(&texts).unwrap()),
        ("sentence-transformers", sentence_transformers),
    ] {
        let (cosines, worst, least) = row_cosines(&ours, &other);
        eprintln!("torchscript vs {against} on {} sentences: minimum cosine {least:.9} (1 - {:.1e}), sentence {worst}", texts.len(), 1.0 - least);
        for (i, c) in cosines.iter().enumerate() {
            assert!(
                *c >= 0.9999,
                "against {against}, sentence {i} {:?}: cosine {c:.6} < 0.9999",
                texts[i]
            );
        }
    }
}
