//! The export's `af eval`: the random assignment and the AF dataset scored by a pretrained causal
//! LM, zero-shot, on the same questions of the test split (at most `[export] eval-questions`,
//! drawn with the run's seed). Each dataset gets the folder `af eval` writes, `eval/random/` and
//! `eval/af/`, with the questions it scored beside it (`questions.jsonl`, the Hugging Face layout
//! with the options in their published order: `af eval eval/af/questions.jsonl` scores them
//! again, and they are the lines of `hf/test.jsonl` with those ids).

use std::path::{Path, PathBuf};

use af_core::config::ExportConfig;
use af_core::{Config, Question};
use af_io::questions::QuestionFormat;
use anyhow::Context;
use rand::seq::index::sample;
use rand::SeedableRng;
use serde_json::json;

use crate::eval::{EvalRequest, EvalSummary};
use crate::runner::StageContext;

/// The datasets scored, in the order the export writes and shows them.
pub const DATASETS: [&str; 2] = ["random", "af"];

/// Sequences per forward pass: `af eval`'s default.
const BATCH: usize = 32;

/// Whether the export scores its datasets with a pretrained LM, and with which file.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    Run {
        model: PathBuf,
    },
    /// Not scored, and why: a line the export prints and `evaluation.json` keeps.
    Skip {
        why: String,
    },
}

/// How a user gets the default model, for the messages.
const INSTALL: &str =
    "scripts/setup installs SmolLM2-135M, and `eval \"$(scripts/setup --env)\"` sets AF_CAUSAL_LM";

impl Plan {
    /// `[export]`'s eval keys against what `AF_CAUSAL_LM` holds (`env`, unchecked): the model
    /// they name, a skip where none is installed and none was asked for, or the error where one
    /// was asked for and is missing.
    pub fn of(e: &ExportConfig, env: Option<PathBuf>) -> anyhow::Result<Plan> {
        if e.eval == Some(false) {
            return Ok(Plan::Skip {
                why: "[export] eval = false".into(),
            });
        }
        if let Some(model) = &e.eval_model {
            anyhow::ensure!(
                model.is_file(),
                "[export] eval-model = {}: no such file",
                model.display()
            );
            return Ok(Plan::Run {
                model: model.clone(),
            });
        }
        let env_var = af_nn::causal_lm::CAUSAL_LM_ENV;
        let missing = match env {
            Some(p) if p.is_file() => return Ok(Plan::Run { model: p }),
            Some(p) => format!("{env_var}={} is not a file", p.display()),
            None => format!("{env_var} is not set"),
        };
        if e.eval == Some(true) {
            anyhow::bail!(
                "[export] eval = true, but no pretrained LM: {missing}; set [export] eval-model = \"FILE.gguf\", or {INSTALL}"
            );
        }
        Ok(Plan::Skip {
            why: format!("no pretrained LM ({missing}; {INSTALL})"),
        })
    }

    /// What the export stage's fingerprint records beside `[export]`: the model it runs, by path
    /// and size; nothing when it is skipped, so that a run of a config that does not mention
    /// eval, where no model is installed, keeps the fingerprint it had before eval existed.
    pub fn fingerprint(&self) -> Option<serde_json::Value> {
        match self {
            Plan::Run { model } => Some(json!({
                "model": model,
                "bytes": std::fs::metadata(model).map(|m| m.len()).unwrap_or(0),
            })),
            Plan::Skip { .. } => None,
        }
    }
}

/// The plan for `config` in this process's environment.
pub fn plan(config: &Config) -> anyhow::Result<Plan> {
    Plan::of(
        &config.export,
        std::env::var_os(af_nn::causal_lm::CAUSAL_LM_ENV).map(PathBuf::from),
    )
}

/// The questions scored: at most `n` of those in the test split, drawn with `seed`, in the
/// pool's order.
pub fn chosen(splits: &[&str], n: usize, seed: u64) -> Vec<usize> {
    let test: Vec<usize> = (0..splits.len()).filter(|&i| splits[i] == "test").collect();
    if test.len() <= n {
        return test;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6c6d_6576_616c);
    let mut picked: Vec<usize> = sample(&mut rng, test.len(), n)
        .into_iter()
        .map(|i| test[i])
        .collect();
    picked.sort_unstable();
    picked
}

/// Both datasets' results.
pub struct Evaluated {
    pub test_questions: usize,
    /// In [`DATASETS`]' order.
    pub summaries: Vec<EvalSummary>,
}

/// What the export's evaluation by a pretrained LM came to.
pub enum Outcome {
    Skipped(String),
    Ran(Box<Evaluated>),
}

impl Outcome {
    /// `evaluation.json`'s `lm_eval`: why it was skipped, or where the results are.
    pub fn json(&self) -> serde_json::Value {
        match self {
            Outcome::Skipped(why) => json!({"skipped": why}),
            Outcome::Ran(e) => {
                let s = &e.summaries[0];
                json!({
                    "model": s.model,
                    "model_name": s.model_name,
                    "split": "test",
                    "test_questions": e.test_questions,
                    "questions": s.questions,
                    "results": DATASETS.iter().map(|d| (d.to_string(), json!(format!("eval/{d}/eval.json")))).collect::<serde_json::Map<_, _>>(),
                })
            }
        }
    }
}

/// Scores `random` and `af` (the same questions under the two assignments, with their splits)
/// as `plan` says, into `ctx.dir/eval/`.
pub fn run(
    ctx: &StageContext,
    plan: &Plan,
    random: &[Question],
    af: &[Question],
) -> anyhow::Result<Outcome> {
    let model = match plan {
        Plan::Skip { why } => return Ok(Outcome::Skipped(why.clone())),
        Plan::Run { model } => model,
    };
    let config = ctx.config;
    let splits: Vec<&str> = af
        .iter()
        .map(|q| q.split.as_deref().unwrap_or("train"))
        .collect();
    let test_questions = splits.iter().filter(|&&s| s == "test").count();
    let picked = chosen(&splits, config.export.eval_questions, config.run.seed);
    if picked.is_empty() {
        return Ok(Outcome::Skipped(
            "the test split is empty ([export] test-share)".into(),
        ));
    }
    let mut summaries = Vec::new();
    for (name, questions) in DATASETS.into_iter().zip([random, af]) {
        let relative = Path::new("eval").join(name);
        let dir = ctx.dir.join(&relative);
        let subset: Vec<Question> = picked.iter().map(|&i| questions[i].clone()).collect();
        let file = dir.join("questions.jsonl");
        af_core::atomic::write(&file, af_io::export::hf_jsonl(&subset).as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?;
        let shown = relative.join("questions.jsonl");
        let summary = crate::eval::run(
            &EvalRequest {
                dataset: &file,
                name: Some(&shown),
                format: Some(QuestionFormat::GENERIC),
                skip_bad: false,
                model,
                ways: None,
                seed: config.run.seed,
                batch_size: BATCH,
                device: config.run.device.clone(),
                threads: config.run.threads,
                out: &dir,
                force: true,
            },
            ctx.progress,
        )
        .with_context(|| format!("export: af eval of the {name} dataset"))?;
        crate::resources::after_a_model("export: af eval");
        summaries.push(summary);
    }
    Ok(Outcome::Ran(Box::new(Evaluated {
        test_questions,
        summaries,
    })))
}

/// Both datasets' `eval.json`, read back from an export folder, in [`DATASETS`]' order; `None`
/// where the export did not score them (`lm_eval` of `evaluation.json` says why).
pub fn read(export_dir: &Path) -> anyhow::Result<Option<Vec<EvalSummary>>> {
    if !export_dir.join("eval").is_dir() {
        return Ok(None);
    }
    DATASETS
        .iter()
        .map(|d| {
            let path = export_dir.join("eval").join(d).join("eval.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{} is corrupted", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .map(Some)
}

/// The results as rows: per condition and measure, random and AF with their intervals.
pub fn rows(summaries: &[EvalSummary]) -> Vec<Vec<String>> {
    let (random, af) = (&summaries[0], &summaries[1]);
    let mut rows = Vec::new();
    for (r, a) in random.conditions.iter().zip(&af.conditions) {
        for (measure, ra, aa) in [
            ("acc", &r.acc, &a.acc),
            ("acc_norm", &r.acc_norm, &a.acc_norm),
        ] {
            rows.push(vec![
                r.condition.clone(),
                measure.to_string(),
                ra.to_string(),
                aa.to_string(),
                format!("{:.1}%", 100.0 * af.chance),
            ]);
        }
    }
    // The same scores read the other way (decision 483), where both files have the probe.
    if let (Some(r), Some(a)) = (&random.likelihood_probe, &af.likelihood_probe) {
        for (measure, ra, aa) in [
            ("probe trained on the scores", &r.probe, &a.probe),
            (
                "least likely per character",
                &r.least_likely,
                &a.least_likely,
            ),
        ] {
            rows.push(vec![
                "full".to_string(),
                measure.to_string(),
                ra.to_string(),
                aa.to_string(),
                format!("{:.1}%", 100.0 * af.chance),
            ]);
        }
    }
    rows
}

/// The columns of [`rows`].
pub const COLUMNS: [&str; 5] = [
    "scored",
    "measure",
    "random assignment [95%]",
    "AF [95%]",
    "chance",
];

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Skipped(why) => write!(f, "export: af eval skipped: {why}"),
            Outcome::Ran(e) => {
                let (random, af) = (&e.summaries[0], &e.summaries[1]);
                write!(
                    f,
                    "export: af eval, {} zero-shot on {} of the {} test questions (chance {:.3}), random assignment -> AF",
                    af.model_name, af.questions, e.test_questions, af.chance
                )?;
                for (r, a) in random.conditions.iter().zip(&af.conditions) {
                    write!(
                        f,
                        "\n  {:<13} acc {:.3} -> {:.3}  acc_norm {:.3} -> {:.3}",
                        r.condition,
                        r.acc.accuracy,
                        a.acc.accuracy,
                        r.acc_norm.accuracy,
                        a.acc_norm.accuracy
                    )?;
                }
                if let (Some(r), Some(a)) = (&random.likelihood_probe, &af.likelihood_probe) {
                    write!(
                        f,
                        "\n  read the other way: probe {:.3} -> {:.3}  least likely {:.3} -> {:.3}",
                        r.probe.accuracy,
                        a.probe.accuracy,
                        r.least_likely.accuracy,
                        a.least_likely.accuracy
                    )?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_follows_the_keys_and_what_is_installed() {
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let missing = d.path().join("none.gguf");
        let auto = ExportConfig::default();
        assert_eq!(
            Plan::of(&auto, Some(model.clone())).unwrap(),
            Plan::Run {
                model: model.clone()
            }
        );
        for (env, says) in [
            (None, "AF_CAUSAL_LM is not set"),
            (Some(missing.clone()), "is not a file"),
        ] {
            let plan = Plan::of(&auto, env.clone()).unwrap();
            let Plan::Skip { why } = &plan else {
                panic!("{plan:?}")
            };
            assert!(why.contains(says) && why.contains("scripts/setup"), "{why}");
            assert_eq!(plan.fingerprint(), None);
            let asked = ExportConfig {
                eval: Some(true),
                ..auto.clone()
            };
            let err = Plan::of(&asked, env).unwrap_err().to_string();
            assert!(err.contains("eval = true") && err.contains(says), "{err}");
        }
        let off = ExportConfig {
            eval: Some(false),
            ..auto.clone()
        };
        assert!(
            matches!(Plan::of(&off, Some(model.clone())).unwrap(), Plan::Skip { why } if why == "[export] eval = false")
        );
        let named = ExportConfig {
            eval_model: Some(model.clone()),
            ..auto.clone()
        };
        let plan = Plan::of(&named, None).unwrap();
        assert_eq!(plan.fingerprint().unwrap()["bytes"], 4);
        let gone = ExportConfig {
            eval_model: Some(missing),
            ..auto
        };
        let err = Plan::of(&gone, Some(model)).unwrap_err().to_string();
        assert!(
            err.contains("eval-model") && err.contains("no such file"),
            "{err}"
        );
    }

    #[test]
    fn at_most_n_test_questions_are_drawn_the_same_way_each_time() {
        let splits: Vec<&str> = (0..50)
            .map(|i| if i % 5 == 0 { "test" } else { "train" })
            .collect();
        assert_eq!(
            chosen(&splits, 100, 1),
            (0..50).step_by(5).collect::<Vec<_>>()
        );
        let a = chosen(&splits, 4, 1);
        assert_eq!(a.len(), 4);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a.iter().all(|&i| splits[i] == "test"));
        assert_eq!(a, chosen(&splits, 4, 1));
        assert!(
            (0..10).any(|s| chosen(&splits, 4, s) != a),
            "the seed draws"
        );
        assert!(chosen(&["train"; 3], 4, 1).is_empty());
    }
}
