//! The `lm-likelihood` member in a run, with a toy LM written by the test (a few kilobytes): the
//! filter scores the pool once and its committee trains the member; the export reads the scores
//! back from the run's cache; a model that is not there stops the config before any stage.

use crate::common;

use af_pipeline::stages::export::NAME as EXPORT;
use common::*;

/// The fixture config with a last stage of the MLP and the member, whose model is `model`.
fn config_with_member(dir: &std::path::Path, model: &std::path::Path) -> std::path::PathBuf {
    let cfg = fixture_config(
        dir,
        1,
        2,
        &format!(
            "[committee.member.lm-likelihood]\nmodel = \"{}\"\nbatch-size = 8\nhidden = 4\n",
            model.display()
        ),
    );
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "members = [\"mlp\", \"bow\", \"cnn\", \"pos-lstm\"]",
        "members = [\"mlp\", \"lm-likelihood\"]",
    );
    assert!(text.contains("\"lm-likelihood\"]"));
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn a_run_scores_its_pool_once_and_the_export_reads_the_scores_back() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&model, 11).unwrap();
    let cfg = config_with_member(d.path(), &model);
    let config = load(&cfg);
    let outcomes = run_stages(&config, until(af_pipeline::stages::filter::NAME), &[]);
    assert!(outcomes.iter().all(|o| o.1 == "done"), "{outcomes:?}");
    let run = d.path().join("run");
    let cache = run.join("lm-likelihood");
    assert!(cache.join("key.json").is_file() && cache.join("scores.safetensors").is_file());
    let metrics = std::fs::read_to_string(run.join("filter/metrics.csv")).unwrap();
    assert!(
        metrics.lines().any(|l| l.contains(",lm-likelihood,")),
        "the member is a head of the last stage:\n{metrics}"
    );

    // The same size, other bytes: a run that loaded the model now would fail, one that reads the
    // cache (keyed by the model's path and size and by the requests) does not load it.
    let size = std::fs::metadata(&model).unwrap().len() as usize;
    std::fs::write(&model, vec![0u8; size]).unwrap();
    let outcomes = run_stages(&config, &[EXPORT], &[]);
    assert_eq!(outcomes, [(Some(EXPORT), "done")]);
    let evaluation = json(&run.join("export/evaluation.json"));
    assert!(
        evaluation.to_string().contains("lm-likelihood"),
        "the export's committee has the member"
    );

    // A config naming a model that is not there stops at loading, naming the key.
    std::fs::remove_file(&model).unwrap();
    let e = af_pipeline::load_config(Some(&cfg)).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("[committee.member.lm-likelihood] model") && e.contains("no such file"),
        "{e}"
    );
}
