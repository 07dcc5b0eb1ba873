//! The `torchscript` member through the pipeline, on a toy TorchScript module the test writes
//! (af_nn::encoder::toy): a pool's embeddings are the module's vectors, cached under the member's
//! and the module's name so another module (or the `encoder` member) does not take them; the
//! audit's `torchscript` detector finds a planted word; a config holds at most one
//! frozen-embedding member in its committee and in its audit.

use crate::common;

use af_audit::synthetic::Planted;
use af_core::{CommitteeConfig, Config, MemberName, View};
use af_io::pool_index::{write_synthetic_pool, Pool};
use af_nn::encoder::toy::{write_toy_encoder, ToyEncoder};
use af_nn::Registry;
use af_pipeline::audit::AuditRequest;
use af_pipeline::NoProgress;
use tch::{Device, Tensor};

/// The toy module over the words of af-io's synthetic pool and af-audit's synthetic questions.
fn toy(dir: &std::path::Path) -> ToyEncoder {
    let mut words: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    words.extend(
        [
            "volcano", "the", "man", "a", "dog", "someone", "is", "outside", ".",
        ]
        .map(String::from),
    );
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    write_toy_encoder(dir, &words, 64, 3).unwrap()
}

/// `[committee.member.torchscript]` naming `module`.
fn with_module(config: &mut CommitteeConfig, module: &std::path::Path) {
    let table: toml::Table = format!("module = {:?}", module.display().to_string())
        .parse()
        .unwrap();
    config.member.insert("torchscript".into(), table);
}

fn names(names: &[&str]) -> Vec<MemberName> {
    names.iter().map(|n| MemberName::new(*n)).collect()
}

#[test]
fn a_pools_embeddings_are_the_modules_vectors_cached_under_its_name() {
    let _lock = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let toy = toy(dir.path());
    write_synthetic_pool(dir.path(), 12, 6, 5).unwrap();
    let pool = Pool::load(dir.path()).unwrap();
    let mut config = CommitteeConfig::default();
    with_module(&mut config, &toy.module);
    let tagger = af_text::Tagger::builtin();
    let cache = dir.path().join("encoded");
    let table_of = || {
        af_pipeline::table::candidate_table(&pool, &config, &tagger, Device::Cpu)
            .unwrap()
            .0
    };
    let registry = Registry::builtin();
    let encoder_of = |member: &str, c: &CommitteeConfig| {
        registry
            .frozen_encoder(&names(&[member]), c)
            .unwrap()
            .unwrap()
    };
    let torchscript = encoder_of("torchscript", &config);

    let mut first = table_of();
    let done =
        af_pipeline::encoded::attach_pool(&mut first, &pool, &torchscript, &cache, &NoProgress)
            .unwrap();
    assert!(!done.cached);
    assert_eq!(
        (done.member, done.rows, done.contexts, done.dim),
        ("torchscript", pool.rows, 12, 64)
    );
    let key = common::json(&cache.join("encoded.json"));
    assert_eq!(key["member"], "torchscript");
    assert_eq!(key["model"], toy.module.display().to_string());
    assert_eq!(key["tokenizer"], toy.tokenizer.display().to_string());
    assert_eq!(key["max_length"], 256);

    // Row r is item i's second sentence; its context row is item i's.
    let encoded = first.encoded.as_ref().unwrap();
    let (contexts, _) = encoded.contexts.as_ref().unwrap();
    let (item, row) = (4, pool.row(4, 3));
    let candidate = pool.fetch([row]).unwrap().remove(&row).unwrap();
    let encoder = torchscript.load(Device::Cpu).unwrap();
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

    // Read back for the same module; encoded again for another module file or another limit.
    assert!(
        af_pipeline::encoded::attach_pool(
            &mut table_of(),
            &pool,
            &torchscript,
            &cache,
            &NoProgress
        )
        .unwrap()
        .cached
    );
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["model.pt", "tokenizer.json"] {
        std::fs::copy(dir.path().join(f), copy.join(f)).unwrap();
    }
    let mut other = config.clone();
    with_module(&mut other, &copy.join("model.pt"));
    let again = af_pipeline::encoded::attach_pool(
        &mut table_of(),
        &pool,
        &encoder_of("torchscript", &other),
        &cache,
        &NoProgress,
    )
    .unwrap();
    assert!(!again.cached, "another module's cache is not taken");
    let mut shorter = encoder_of("torchscript", &other);
    shorter.options.max_length = Some(8);
    assert!(
        !af_pipeline::encoded::attach_pool(&mut table_of(), &pool, &shorter, &cache, &NoProgress)
            .unwrap()
            .cached
    );
    // The encoder member does not take the module's vectors: it loads its own model.
    let mut bert = config.clone();
    bert.member.insert(
        "encoder".into(),
        "model = \"/nonexistent/model\"".parse().unwrap(),
    );
    let e = af_pipeline::encoded::attach_pool(
        &mut table_of(),
        &pool,
        &encoder_of("encoder", &bert),
        &cache,
        &NoProgress,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("/nonexistent/model"), "{e:#}");
}

#[test]
fn the_audits_torchscript_detector_finds_a_planted_word() {
    let _lock = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let toy = toy(dir.path());
    let data = dir.path().join("questions.jsonl");
    common::write_synthetic_questions(&data, 200, 4, Planted::Word("volcano"), 5);
    let mut config = Config::default();
    config.committee.epochs = 4;
    config.committee.validation_share = 0.0;
    with_module(&mut config.committee, &toy.module);
    config.audit.models = names(&["torchscript"]);
    config.audit.views = vec![View::Ending, View::Full];
    let out = dir.path().join("out");
    let request = |config: &Config, out: &std::path::Path| {
        let request = AuditRequest {
            dataset: &data,
            eval: None,
            format: None,
            skip_bad: false,
            config,
            seed: 5,
            threads: 2,
            device: "cpu".into(),
            out,
            force: true,
            lm_eval: None,
        };
        af_pipeline::audit::run(&request, &NoProgress)
    };
    let run = request(&config, &out).unwrap_or_else(|e| panic!("{e:#}"));
    let found: Vec<(String, f64, bool)> = run
        .report
        .detectors
        .iter()
        .filter(|d| d.name.starts_with("torchscript/"))
        .map(|d| (d.name.clone(), d.accuracy, d.flagged))
        .collect();
    println!("{found:?}");
    assert_eq!(
        found.iter().map(|d| d.0.as_str()).collect::<Vec<_>>(),
        ["torchscript/ending", "torchscript/full"]
    );
    for (name, accuracy, flagged) in &found {
        assert!(
            *flagged && *accuracy > 0.5,
            "{name}: {accuracy} (chance 0.25)"
        );
    }

    // Both frozen-embedding detectors in one audit: refused before any detector trains.
    config.audit.models = names(&["ngram", "encoder", "torchscript"]);
    let Err(e) = request(&config, &dir.path().join("both")) else {
        panic!("an audit with both frozen-embedding detectors ran")
    };
    assert!(format!("{e:#}").contains("[audit] models: members `encoder` and `torchscript` both read frozen sentence embeddings"), "{e:#}");
}

#[test]
fn a_config_holds_one_frozen_embedding_member_in_its_committee_and_its_audit() {
    let _lock = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let write = |extra: &str| {
        common::config_in(
            dir.path(),
            &format!(
                "[[filter.stages]]\nname = \"mlp\"\nmembers = [\"mlp\"]\niterations = 1\n\n\
                 [[filter.stages]]\nname = \"full\"\nmembers = [\"mlp\", \"encoder\"]\niterations = 1\n\n{extra}"
            ),
        )
    };
    // The module is needed when the member is used, not to load a config that could use it.
    common::load(&write("[committee.member.torchscript]\nmax-length = 128\n"));
    let e = af_pipeline::load_config(Some(&write(
        "[[filter.stages]]\nname = \"ts\"\nmembers = [\"torchscript\"]\niterations = 1\n",
    )))
    .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("members `encoder` and `torchscript` both read frozen sentence embeddings"),
        "{e}"
    );
    let e = af_pipeline::load_config(Some(&write(
        "[audit]\nmodels = [\"torchscript\", \"encoder\"]\n",
    )))
    .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("[audit] models: members `torchscript` and `encoder`"),
        "{e}"
    );
}
