//! The `encoder` member with the real all-MiniLM-L6-v2 (set up by `scripts/test` through
//! `scripts/env.sh`, as for the encoder's reference test): a pool's embeddings are the model's
//! vectors of each second sentence and context, encoded once and read back from the run's cache;
//! the audit's `encoder` detector finds a planted word and trains on every view it is given.

use crate::common;

use af_audit::synthetic::Planted;
use af_core::{CommitteeConfig, Config, MemberName, View};
use af_io::pool_index::{write_synthetic_pool, Pool};
use af_pipeline::audit::AuditRequest;
use af_pipeline::NoProgress;
use tch::{Device, Kind, Tensor};

fn model_dir() -> std::path::PathBuf {
    let dir = std::env::var_os(af_nn::encoder::ENCODER_DIR_ENV)
        .expect("AF_ENCODER_DIR is unset: run the tests with scripts/test, or `source scripts/env.sh` first (it installs the model)");
    std::path::PathBuf::from(dir)
}

/// A synthetic pool of 12 items (5 candidates each) in a fresh directory.
fn synthetic_pool() -> (tempfile::TempDir, Pool) {
    let dir = tempfile::tempdir().unwrap();
    write_synthetic_pool(dir.path(), 12, 6, 5).unwrap();
    let pool = Pool::load(dir.path()).unwrap();
    (dir, pool)
}

#[test]
fn a_pools_embeddings_are_the_models_vectors_encoded_once_per_run() {
    let _lock = common::lock();
    let (dir, pool) = synthetic_pool();
    let config = CommitteeConfig::default();
    let tagger = af_text::Tagger::builtin();
    let cache = dir.path().join("encoded");
    let table_of = || {
        af_pipeline::table::candidate_table(&pool, &config, &tagger, Device::Cpu)
            .unwrap()
            .0
    };
    let registry = af_nn::Registry::builtin();
    let encoder_of = |c: &CommitteeConfig| {
        registry
            .frozen_encoder(&[MemberName::new("encoder")], c)
            .unwrap()
            .unwrap()
    };

    let mut first = table_of();
    let done = af_pipeline::encoded::attach_pool(
        &mut first,
        &pool,
        &encoder_of(&config),
        &cache,
        &NoProgress,
    )
    .unwrap();
    assert!(!done.cached);
    assert_eq!((done.rows, done.contexts, done.dim), (pool.rows, 12, 384));
    assert!(cache.join("encoded.json").is_file() && cache.join("encoded.safetensors").is_file());

    // Row r is item i's second sentence; its context row is item i's.
    let encoded = first.encoded.as_ref().unwrap();
    let (contexts, of) = encoded.contexts.as_ref().unwrap();
    let item = 3;
    let row = pool.row(item, 2);
    assert_eq!(of.int64_value(&[row]), item as i64);
    let candidate = pool.fetch([row]).unwrap().remove(&row).unwrap();
    let encoder =
        af_nn::encoder::Encoder::load(&model_dir(), Device::Cpu, &Default::default()).unwrap();
    let sentence = format!("{} {}", pool.items[item].noun_phrase, candidate.ending);
    let want = encoder
        .encode(&[&sentence, &pool.items[item].context])
        .unwrap();
    let close = |a: Tensor, b: Tensor| (a - b).abs().max().double_value(&[]) < 2e-3;
    assert!(
        close(encoded.text.get(row), want.get(0)),
        "the second sentence's vector, f16-rounded"
    );
    assert!(
        close(contexts.get(item as i64), want.get(1)),
        "the context's vector"
    );

    // Read back, not encoded again, and exactly the same.
    let mut second = table_of();
    assert!(
        af_pipeline::encoded::attach_pool(
            &mut second,
            &pool,
            &encoder_of(&config),
            &cache,
            &NoProgress
        )
        .unwrap()
        .cached
    );
    assert!(second.encoded.as_ref().unwrap().text.equal(&encoded.text));
    // A cache for another model is not taken.
    let mut other = config.clone();
    other.member.insert(
        "encoder".into(),
        toml::toml! { model = "/nonexistent/model" },
    );
    let e = af_pipeline::encoded::attach_pool(
        &mut table_of(),
        &pool,
        &encoder_of(&other),
        &cache,
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("[committee.member.encoder] model")
            && format!("{e:#}").contains("/nonexistent/model"),
        "{e:#}"
    );
    assert_eq!(encoded.text.kind(), Kind::Float);
}

/// A progress that panics once `after` chunks are done: a run killed while encoding its pool.
struct KillAfter {
    after: u64,
    done: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl af_pipeline::Progress for KillAfter {
    fn bar(&self, _: &str, _: u64) -> Box<dyn af_pipeline::Bar> {
        Box::new(KillAfter {
            after: self.after,
            done: self.done.clone(),
        })
    }
}

impl af_pipeline::Bar for KillAfter {
    fn inc(&self, _: u64) {
        if self.done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == self.after {
            panic!("killed while encoding (the test's simulated kill)");
        }
    }
    fn set_position(&self, _: u64) {}
    fn set_length(&self, _: u64) {}
    fn set_message(&self, _: String) {}
    fn finish(&self) {}
}

#[test]
fn a_killed_pool_encoding_resumes_from_the_chunks_it_kept() {
    let _lock = common::lock();
    let (dir, pool) = synthetic_pool();
    let config = CommitteeConfig::default();
    let tagger = af_text::Tagger::builtin();
    let table_of = || {
        af_pipeline::table::candidate_table(&pool, &config, &tagger, Device::Cpu)
            .unwrap()
            .0
    };
    let registry = af_nn::Registry::builtin();
    let encoder = registry
        .frozen_encoder(&[MemberName::new("encoder")], &config)
        .unwrap()
        .unwrap();
    let attach = |table: &mut af_nn::table::CandidateTable,
                  cache: &std::path::Path,
                  progress: &dyn af_pipeline::Progress| {
        af_pipeline::encoded::attach_pool_in_chunks(table, &pool, &encoder, cache, progress, 16)
    };
    let mut whole = table_of();
    attach(&mut whole, &dir.path().join("whole"), &NoProgress).unwrap();
    let whole = whole.encoded.unwrap().text;

    let cache = dir.path().join("encoded");
    let kill = KillAfter {
        after: 3,
        done: Default::default(),
    };
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        attach(&mut table_of(), &cache, &kill)
    }));
    assert!(killed.is_err());
    assert!(
        !cache.join("encoded.json").exists(),
        "no cache key before the whole pool is encoded"
    );
    let mut kept: Vec<String> = std::fs::read_dir(cache.join("partial"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        [
            "key.json",
            "text-000000.safetensors",
            "text-000001.safetensors",
            "text-000002.safetensors"
        ]
    );
    // Chunk 0 marked, so that the resumed encoding shows it read the chunk rather than encoding it.
    let marked = Tensor::zeros([16, 384], (Kind::Half, Device::Cpu));
    Tensor::write_safetensors(
        &[("text", &marked)],
        cache.join("partial/text-000000.safetensors"),
    )
    .unwrap();

    let mut resumed = table_of();
    let done = attach(&mut resumed, &cache, &NoProgress).unwrap();
    assert_eq!((done.cached, done.resumed), (false, 48));
    let text = resumed.encoded.unwrap().text;
    assert_eq!(
        text.narrow(0, 0, 16)
            .abs()
            .sum(Kind::Float)
            .double_value(&[]),
        0.0,
        "chunk 0 read back"
    );
    let rest = pool.rows as i64 - 16;
    assert!(
        text.narrow(0, 16, rest).equal(&whole.narrow(0, 16, rest)),
        "the kept and the newly encoded chunks are the whole run's"
    );
    assert!(
        cache.join("encoded.json").is_file() && !cache.join("partial").exists(),
        "chunks removed once the cache is whole"
    );

    // Chunks kept for another chunk size are not taken.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        attach(
            &mut table_of(),
            &dir.path().join("other"),
            &KillAfter {
                after: 2,
                done: Default::default(),
            },
        )
    }));
    let done = af_pipeline::encoded::attach_pool_in_chunks(
        &mut table_of(),
        &pool,
        &encoder,
        &dir.path().join("other"),
        &NoProgress,
        32,
    )
    .unwrap();
    assert_eq!(done.resumed, 0);
}

/// The `encoder` detector's (name, accuracy, flagged) on each of `views` of `n` synthetic
/// questions with `planted` in them.
fn encoder_audit(
    planted: Planted,
    n: usize,
    views: &[View],
    seed: u64,
) -> Vec<(String, f64, bool)> {
    encoder_audit_folds(planted, n, views, seed, 1)
        .into_iter()
        .map(|(name, accuracy, flagged, _)| (name, accuracy, flagged))
        .collect()
}

/// As [`encoder_audit`], cross-fitted over `folds`; also each detector's measured questions.
fn encoder_audit_folds(
    planted: Planted,
    n: usize,
    views: &[View],
    seed: u64,
    folds: usize,
) -> Vec<(String, f64, bool, usize)> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("questions.jsonl");
    common::write_synthetic_questions(&data, n, 4, planted, seed);
    let mut config = Config::default();
    config.committee.epochs = 4;
    config.committee.validation_share = 0.0;
    config.audit.models = vec![MemberName::new("encoder")];
    config.audit.views = views.to_vec();
    config.audit.eval_folds = folds;
    let out = dir.path().join("out");
    let request = AuditRequest {
        dataset: &data,
        eval: None,
        format: None,
        skip_bad: false,
        config: &config,
        seed,
        threads: 2,
        device: "cpu".into(),
        out: &out,
        force: false,
        lm_eval: None,
    };
    let run = af_pipeline::audit::run(&request, &NoProgress).unwrap_or_else(|e| panic!("{e:#}"));
    let found: Vec<_> = run
        .report
        .detectors
        .iter()
        .filter(|d| d.name.starts_with("encoder/"))
        .map(|d| (d.name.clone(), d.accuracy, d.flagged, d.eval_questions))
        .collect();
    println!("{planted:?}: {found:?}");
    found
}

#[test]
fn the_audits_encoder_detector_finds_a_planted_word_and_nothing_in_a_clean_set() {
    let _lock = common::lock();
    let found = encoder_audit(
        Planted::Word("volcano"),
        200,
        &[View::Ending, View::Full],
        5,
    );
    assert_eq!(
        found.iter().map(|d| d.0.as_str()).collect::<Vec<_>>(),
        ["encoder/ending", "encoder/full"]
    );
    for (name, accuracy, flagged) in &found {
        assert!(
            *flagged && *accuracy > 0.5,
            "{name}: {accuracy} (chance 0.25)"
        );
    }
    let clean = encoder_audit(Planted::Nothing, 200, &[View::Ending], 6);
    assert_eq!(clean.len(), 1);
    assert!(
        !clean[0].2,
        "nothing to find in a clean set: {:?}",
        clean[0]
    );
}

#[test]
fn a_cross_fitted_encoder_audit_measures_every_question_and_encodes_each_text_once() {
    let _lock = common::lock();
    let found = encoder_audit_folds(Planted::Word("volcano"), 120, &[View::Ending], 7, 3);
    assert_eq!(found.len(), 1);
    let (name, accuracy, flagged, measured) = &found[0];
    assert!(
        *flagged && *accuracy > 0.5 && *measured == 120,
        "{name}: {accuracy} on {measured} questions"
    );

    // The memo the folds share: a text is encoded once, and gives what encoding it afresh gives.
    let encoder =
        af_nn::encoder::Encoder::load(&model_dir(), Device::Cpu, &Default::default()).unwrap();
    let mut memo = af_pipeline::encoded::TextMemo::default();
    let texts = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    let first = af_pipeline::encoded::encode_texts(
        &encoder,
        &texts(&[
            "a man rides a bike .",
            "she stirs the pot .",
            "a man rides a bike .",
        ]),
        &mut memo,
        Device::Cpu,
        &NoProgress,
    )
    .unwrap();
    assert_eq!((first.size(), memo.len()), (vec![3, 384], 2));
    let second = af_pipeline::encoded::encode_texts(
        &encoder,
        &texts(&["she stirs the pot .", "the dog runs away ."]),
        &mut memo,
        Device::Cpu,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(memo.len(), 3, "only the new text was encoded");
    let fresh = encoder
        .encode(&["she stirs the pot .", "the dog runs away ."])
        .unwrap();
    let gap = (second - fresh).abs().max().double_value(&[]);
    assert!(
        gap < 2e-3,
        "the memo's vectors are the encoder's, f16-rounded: {gap}"
    );
    assert!((first.get(0) - first.get(2)).abs().max().double_value(&[]) == 0.0);
}
