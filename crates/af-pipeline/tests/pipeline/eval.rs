//! `af eval` in-process: its scores of the installed LM against lm-evaluation-harness's
//! (reference scores stored beside the fixtures, made by scripts/check-lm-eval-scores), and with
//! a toy model what it writes, how it resumes and what `--ways` keeps.

use crate::common;

use std::path::{Path, PathBuf};

use af_nn::causal_lm::{toy::write_toy_llama, CausalLm};
use af_pipeline::eval::{self, EvalRequest, ScoredQuestion};
use af_pipeline::NoProgress;
use common::*;

fn fixture(name: &str) -> PathBuf {
    repo().join("fixtures/eval").join(name)
}

fn request<'a>(dataset: &'a Path, model: &'a Path, out: &'a Path) -> EvalRequest<'a> {
    EvalRequest {
        dataset,
        name: None,
        format: None,
        skip_bad: false,
        model,
        ways: None,
        seed: 3,
        batch_size: 5,
        device: "cpu".into(),
        threads: 1,
        out,
        force: false,
    }
}

/// Per option and condition within 1e-3 nats of lm-eval's HFLM over transformers' reading of
/// the same GGUF file; the same argmax on every question.
#[test]
fn scores_match_lm_evaluation_harness_on_the_fixtures() {
    let Some(model) = causal_lm("scores_match_lm_evaluation_harness_on_the_fixtures") else {
        return;
    };
    let _lock = lock();
    af_nn::runtime::set_threads(1);
    let lm = CausalLm::load(&model, tch::Device::Cpu).unwrap();
    for name in ["hellaswag-lm-eval", "winogrande-lm-eval"] {
        let file =
            af_io::questions::read_questions(&fixture(&format!("{name}.jsonl")), None, false)
                .unwrap();
        let reference: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture(&format!("{name}.reference.json"))).unwrap(),
        )
        .unwrap();
        let prompts = eval::prompts(&file, None, 0).unwrap();
        let mut scored: Vec<ScoredQuestion> = Vec::new();
        eval::score_questions(&lm, &prompts, 7, 3, |s| {
            scored.extend_from_slice(s);
            Ok(())
        })
        .unwrap();
        assert_eq!(scored.len(), file.questions.len());
        let mut worst = 0f64;
        for q in &scored {
            let theirs = &reference["logprob"][&q.id];
            for (o, ours) in q.logprob.iter().enumerate() {
                for c in 0..3 {
                    let t = theirs[o][c].as_f64().unwrap();
                    worst = worst.max((t - ours[c]).abs());
                }
            }
            let argmax = |c: usize| {
                (0..q.logprob.len())
                    .max_by(|&a, &b| {
                        let v = |o: usize| theirs[o][c].as_f64().unwrap();
                        v(a).total_cmp(&v(b)).then(b.cmp(&a))
                    })
                    .unwrap()
            };
            assert_eq!(q.choice(0, false), argmax(0), "{name} {}", q.id);
        }
        eprintln!("{name}: largest difference from lm-eval {worst:.2e} nats");
        assert!(worst < 1e-3, "{name}: {worst} nats from lm-eval");
    }
}

/// The outputs, a rerun that scores nothing again, a killed run's partial file resumed to the
/// same scores, `--ways 2`, and other settings refused without --force.
#[test]
fn eval_writes_its_files_resumes_and_keeps_k_ways() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("toy.gguf");
    write_toy_llama(&model, 4).unwrap();
    let data = fixture("hellaswag-lm-eval.jsonl");
    let out = d.path().join("eval");
    let first = eval::run(&request(&data, &model, &out), &NoProgress).unwrap();
    assert_eq!((first.questions, first.scored_now), (5, 5));
    assert!((first.chance - 0.25).abs() < 1e-12);
    assert_eq!(first.conditions.len(), 3);
    for f in ["eval.json", "scores.csv", "eval.html", "scores.jsonl"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let csv = std::fs::read_to_string(out.join("scores.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 5 * 4);
    let html = std::fs::read_to_string(out.join("eval.html")).unwrap();
    assert!(html.contains("acc_norm") && html.contains("choices-only"));

    let again = eval::run(&request(&data, &model, &out), &NoProgress).unwrap();
    assert_eq!(again.scored_now, 0);
    assert_eq!(again.conditions, first.conditions);

    // Killed after two questions, mid-line: the rest, and the half-written one, are scored.
    let jsonl = std::fs::read_to_string(out.join("scores.jsonl")).unwrap();
    let lines: Vec<&str> = jsonl.lines().collect();
    let partial = format!("{}\n{}\n{}", lines[0], lines[1], &lines[2][..20]);
    std::fs::write(out.join("scores.jsonl"), partial).unwrap();
    let resumed = eval::run(&request(&data, &model, &out), &NoProgress).unwrap();
    assert_eq!(resumed.scored_now, 3);
    assert_eq!(resumed.conditions, first.conditions);
    assert_eq!(
        std::fs::read_to_string(out.join("scores.csv"))
            .unwrap()
            .lines()
            .count(),
        csv.lines().count()
    );

    let ways = EvalRequest {
        ways: Some(2),
        ..request(&data, &model, &out)
    };
    let refused = eval::run(&ways, &NoProgress).unwrap_err().to_string();
    assert!(refused.contains("--force"), "{refused}");
    let two = eval::run(
        &EvalRequest {
            force: true,
            ..ways
        },
        &NoProgress,
    )
    .unwrap();
    assert_eq!((two.scored_now, two.chance), (5, 0.5));
    let csv = std::fs::read_to_string(out.join("scores.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 5 * 2);
    // The gold is among the two kept, marked once per question.
    assert_eq!(
        csv.lines()
            .skip(1)
            .filter(|l| l.split(',').nth(2) == Some("1"))
            .count(),
        5
    );
}
