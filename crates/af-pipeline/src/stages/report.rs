//! `af report RUN_DIR` and the `report` stage: the accuracy plot (`accuracy.svg`, `accuracy.png`)
//! the data map (`datamap.svg`, `datamap.png`) and `report.html`, built only from files in the
//! run directory: `filter/state.json` (with the dynamics `filter/datamap.csv` lists) and
//! `filter/report.json`, `export/evaluation.json`, `export/dataset.jsonl` and `export/random.jsonl`,
//! and `export/eval/{random,af}/eval.json` where the export scored them with a pretrained LM.

use std::collections::BTreeMap;
use std::path::Path;

use af_filter::FilterState;
use af_report::{escape, table, Curve, Page, Question, Section};
use anyhow::Context;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::Value;

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {} (has the run finished that stage?)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// A number of a report's JSON, NaN where it is missing.
pub(crate) fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// An audit comparison's `edge_change` as `+0.012 [-0.010, +0.034]`, or `-` where it has none.
pub(crate) fn edge_change_cell(comparison: &Value) -> String {
    let e = &comparison["edge_change"];
    if !e.is_object() {
        return "-".into();
    }
    format!(
        "{:+.3} [{:+.3}, {:+.3}]",
        num(e, "change"),
        num(e, "ci_low"),
        num(e, "ci_high")
    )
}

/// The export's detectors trained afresh, the random assignment beside AF (`evaluation.json`):
/// per detector its name, each accuracy with its 95% interval, and chance.
pub(crate) fn fresh_detector_rows(evaluation: &Value, chance: f64) -> Vec<Vec<String>> {
    let detectors = |which: &str| -> Vec<Value> {
        evaluation[which]["detectors"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let with_interval = |d: &Value| {
        format!(
            "{:.3} [{:.3}, {:.3}]",
            num(d, "accuracy"),
            num(d, "ci_low"),
            num(d, "ci_high")
        )
    };
    detectors("random")
        .iter()
        .zip(detectors("af"))
        .map(|(r, a)| {
            vec![
                r["name"].as_str().unwrap_or("?").to_string(),
                with_interval(r),
                with_interval(&a),
                format!("{chance:.3}"),
            ]
        })
        .collect()
}

fn read_jsonl(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not valid JSON", path.display(), i + 1))
        })
        .collect()
}

/// Writes the plots and the page into `out`.
pub fn write(run_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let state_path = run_dir.join("filter/state.json");
    let state: FilterState =
        serde_json::from_str(&std::fs::read_to_string(&state_path).with_context(|| {
            format!(
                "cannot read {}: is {} an af run directory?",
                state_path.display(),
                run_dir.display()
            )
        })?)
        .with_context(|| format!("{} is corrupted", state_path.display()))?;
    let summary = read_json(&run_dir.join("filter/report.json"))?;
    let evaluation = read_json(&run_dir.join("export/evaluation.json"))?;
    let dataset = read_jsonl(&run_dir.join("export/dataset.jsonl"))?;
    let random = read_jsonl(&run_dir.join("export/random.jsonl"))?;
    let k = state.assignment.k;
    let chance = af_filter::chance(k);
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;

    let mut curves: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for it in &state.iterations {
        for h in &it.heads {
            curves
                .entry(h.head.clone())
                .or_default()
                .push((it.iteration as f64, h.accuracy));
        }
    }
    // The joint head first: it drives by default.
    let mut curves: Vec<Curve> = curves
        .into_iter()
        .map(|(name, points)| Curve { name, points })
        .collect();
    curves.sort_by_key(|c| c.name != af_core::JOINT_HEAD);
    let title = format!("Held-out {}-way accuracy per head", k + 1);
    let svg = af_report::accuracy_svg(&curves, chance, &title)?;
    af_core::atomic::write(out.join("accuracy.svg"), svg.as_bytes())?;
    af_report::accuracy_png(&curves, chance, &title, &out.join("accuracy.png"))?;

    let mut sections = Vec::new();
    let meaning = super::filter::what_it_means(
        num(&summary, "driving_head_first"),
        num(&summary, "driving_head_last"),
        chance,
    );
    sections.push(Section {
        title: "Summary".into(),
        html: format!("<p>{}</p>", escape(&meaning))
            + &table(
                &["", "value"],
                &[
                    vec!["items".into(), format!("{}", num(&summary, "items"))],
                    vec!["options per question".into(), format!("{}", k + 1)],
                    vec!["chance".into(), format!("{chance:.3}")],
                    vec![
                        "AF iterations".into(),
                        format!("{}", num(&summary, "iterations")),
                    ],
                    vec!["swaps".into(), format!("{}", num(&summary, "swaps"))],
                    vec![
                        "items ever changed".into(),
                        format!("{}", num(&summary, "items_ever_changed")),
                    ],
                    vec![
                        "driving head, first iteration".into(),
                        format!("{:.3}", num(&summary, "driving_head_first")),
                    ],
                    vec![
                        "driving head, last iteration".into(),
                        format!("{:.3}", num(&summary, "driving_head_last")),
                    ],
                    vec![
                        "filter seconds".into(),
                        format!("{:.1}", num(&summary, "seconds")),
                    ],
                ],
            ),
    });
    let mut stages: Vec<String> = Vec::new();
    for (i, it) in state.iterations.iter().enumerate() {
        if i == 0 || state.iterations[i - 1].phase != it.phase {
            stages.push(format!("{} from iteration {}", it.phase, it.iteration));
        }
    }
    sections.push(Section {
        title: "Held-out accuracy during filtering".into(),
        html: format!(
            "<p>Each iteration trains a fresh committee on 80% of the groups and scores the held-out rest before swapping; stages: {}. Dashed: chance. Numbers: <code>filter/metrics.csv</code>.</p>{svg}",
            escape(&stages.join("; "))
        ),
    });
    sections.push(datamap_section(&state, out)?);
    let swaps: Vec<(f64, f64)> = state
        .iterations
        .iter()
        .map(|i| (i.iteration as f64, i.swaps as f64))
        .collect();
    sections.push(Section {
        title: "Swaps per iteration".into(),
        html: af_report::bars_svg(&swaps, "swaps", "Distractors swapped")?,
    });

    let rows = fresh_detector_rows(&evaluation, chance);
    sections.push(Section {
        title: "Detectors trained afresh: random distractors vs AF".into(),
        html: format!(
            "<p>A new committee (members: {}) trained on one group split of each dataset and scored on its held-out part ({} items); length baselines on every item, ties broken at random. 95% Wilson intervals. Numbers: <code>export/evaluation.json</code>.</p>{}",
            escape(&evaluation["members"].as_array().map(|m| m.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()),
            num(&evaluation["af"], "heldout_items"),
            table(&["detector", "random assignment", "AF assignment", "chance"], &rows)
        ),
    });

    if let Some(compared) = evaluation["audit"]["comparison"].as_array() {
        let pair = |v: &Value| {
            (
                v[0].as_f64().unwrap_or(f64::NAN),
                v[1].as_f64().unwrap_or(f64::NAN),
            )
        };
        let bars: Vec<af_report::DetectorBar> = compared
            .iter()
            .map(|c| af_report::DetectorBar {
                name: c["detector"].as_str().unwrap_or("?").to_string(),
                accuracy: num(c, "random"),
                ci: pair(&c["random_ci"]),
                chance: num(c, "chance"),
                compare: Some((num(c, "af"), pair(&c["af_ci"]))),
            })
            .collect();
        let rows: Vec<Vec<String>> = compared
            .iter()
            .map(|c| {
                vec![
                    c["detector"].as_str().unwrap_or("?").to_string(),
                    format!("{:.3}", num(c, "random")),
                    format!("{:.3}", num(c, "af")),
                    format!("{:.3}", num(c, "chance")),
                    c["edge_shrink"]
                        .as_f64()
                        .map_or("-".into(), |x| format!("{:.0}%", 100.0 * x)),
                    edge_change_cell(c),
                ]
            })
            .collect();
        let chart = af_report::detectors_svg(
            &bars,
            "Audit detectors not in the committee",
            Some(("random assignment", "AF assignment")),
        )?;
        sections.push(Section {
            title: "Audit detectors the committee never saw: random distractors vs AF".into(),
            html: format!(
                "<p>Detectors: {} on every view, token statistics and the baselines (split: {}); the last column compares the two assignments question by question, a 95% interval. Numbers: <code>export/evaluation.json</code>, in full <code>export/audit-af.json</code> and <code>export/audit-random.json</code>.</p>{chart}{}",
                escape(&evaluation["audit"]["models"].as_array().map(|m| m.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()),
                escape(evaluation["audit"]["split"]["method"].as_str().unwrap_or("?")),
                table(&["detector", "random assignment", "AF assignment", "chance", "edge shrank", "AF - random edge, paired"], &rows)
            ),
        });
    }

    if let Some(section) = lm_section(run_dir, &evaluation)? {
        sections.push(section);
    }

    let feature = |rows: &[Value], gold: bool, key: &str| -> Vec<f64> {
        rows.iter()
            .flat_map(|r| {
                if gold {
                    vec![r["gold"]["features"][key].as_f64().unwrap_or(f64::NAN)]
                } else {
                    r["distractors"]
                        .as_array()
                        .map(|d| {
                            d.iter()
                                .map(|x| x["features"][key].as_f64().unwrap_or(f64::NAN))
                                .collect()
                        })
                        .unwrap_or_default()
                }
            })
            .collect()
    };
    let key = "fwd_logppl_v_given_sn";
    let (g, a, r) = (
        feature(&dataset, true, key),
        feature(&dataset, false, key),
        feature(&random, false, key),
    );
    let hist = af_report::histogram_svg(
        &[
            ("gold endings", &g),
            ("AF distractors", &a),
            ("random distractors", &r),
        ],
        30,
        "log perplexity of the ending given context (forward LM)",
        "Fluency: gold vs distractors",
    )?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    sections.push(Section {
        title: "Perplexity of gold endings and distractors".into(),
        html: format!(
            "<p>Mean log perplexity: gold {:.3}, AF distractors {:.3}, random distractors {:.3}. From the <code>features</code> of <code>export/dataset.jsonl</code> and <code>export/random.jsonl</code>.</p>{hist}",
            mean(&g),
            mean(&a),
            mean(&r)
        ),
    });

    sections.push(compute_section(run_dir));

    let questions = dataset
        .iter()
        .take(8)
        .map(question)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let page = Page {
        title: format!(
            "af report: {}",
            run_dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("run")
        ),
        subtitle: format!("{} (af {})", run_dir.display(), env!("CARGO_PKG_VERSION")),
        sections,
        questions,
    };
    af_core::atomic::write(out.join("report.html"), page.render().as_bytes())?;
    Ok(())
}

/// How hard both datasets are for a pretrained LM, from `export/eval/{random,af}/eval.json`, or
/// why the export did not measure it (`lm_eval` in `export/evaluation.json`); none for an export
/// of an af before it measured that.
fn lm_section(run_dir: &Path, evaluation: &Value) -> anyhow::Result<Option<Section>> {
    use crate::stages::export::lm;
    let title = "How hard it is for a pretrained LM: random distractors vs AF".to_string();
    let Some(summaries) = lm::read(&run_dir.join("export"))? else {
        return Ok(evaluation["lm_eval"]["skipped"]
            .as_str()
            .map(|why| Section {
                title,
                html: format!(
                "<p>Not measured: {}. <code>af eval export/hf/test.jsonl</code> measures it.</p>",
                escape(why)
            ),
            }));
    };
    let af = &summaries[1];
    Ok(Some(Section {
        title,
        html: format!(
            "<p>{}, zero-shot, on {} questions of the test split, the same questions with random and with AF's distractors. Numbers: <code>export/eval/random/eval.json</code>, <code>export/eval/af/eval.json</code> (per option: <code>scores.csv</code> beside them).</p>{}<p class=\"sub\">{}</p>",
            escape(&af.model_name),
            af.questions,
            table(&lm::COLUMNS, &lm::rows(&summaries)),
            escape(crate::eval::CONDITIONS_NOTE)
        ),
    }))
}

/// The data map of the filtered dataset (`datamap.svg`, `datamap.png` beside the page), from the
/// dynamics in `filter/state.json` that `filter/datamap.csv` lists.
fn datamap_section(state: &FilterState, out: &Path) -> anyhow::Result<Section> {
    let rows = crate::stages::filter::final_dynamics(state);
    let points: Vec<af_report::MapPoint> = rows
        .iter()
        .filter(|r| r.final_question)
        .map(|r| af_report::MapPoint {
            variability: r.dynamics.variability,
            confidence: r.dynamics.confidence,
            correctness: r.dynamics.correctness,
        })
        .collect();
    let title = "Data map of the filtered dataset";
    if points.is_empty() {
        return Ok(Section {
            title: title.into(),
            html: "<p>No training dynamics in <code>filter/state.json</code> (a filter run of an af before 2026-12-01, or no item trained on with its final question).</p>".into(),
        });
    }
    let svg = af_report::datamap_svg(&points, title)?;
    af_core::atomic::write(out.join("datamap.svg"), svg.as_bytes())?;
    af_report::datamap_png(&points, title, &out.join("datamap.png"))?;
    let n = points.len() as f64;
    let mean = |f: &dyn Fn(&af_report::MapPoint) -> f64| points.iter().map(f).sum::<f64>() / n;
    let epochs: Vec<usize> = rows
        .iter()
        .filter(|r| r.final_question)
        .map(|r| r.dynamics.gold_probability.len())
        .collect();
    Ok(Section {
        title: title.into(),
        html: format!(
            "<p>Each item's training dynamics from the last AF iteration that trained on it, for the {} of {} items whose question has not changed since (the others were swapped later, so their dynamics describe a question that is no longer in the dataset). After each epoch of that iteration's training ({}), the committee's probability of the gold ending (joint head, else the members' mean): confidence is its mean, variability its spread, correctness the share of epochs the gold ending was the top choice. Mean confidence {:.3}, mean correctness {:.3}. Numbers: <code>filter/datamap.csv</code>.</p>{svg}",
            points.len(),
            state.assignment.distractors.len(),
            epoch_range(&epochs),
            mean(&|p| p.confidence),
            mean(&|p| p.correctness),
        ),
    })
}

/// "2 epochs", or "1 to 3 epochs: early stopping ends some sooner".
fn epoch_range(epochs: &[usize]) -> String {
    let (min, max) = (
        epochs.iter().min().copied().unwrap_or(0),
        epochs.iter().max().copied().unwrap_or(0),
    );
    if min == max {
        format!("{max} epochs")
    } else {
        format!("{min} to {max} epochs: early stopping ends some sooner")
    }
}

/// Time and memory of each stage, from the stages' `stage.json` (a stage without one is left out:
/// `af report` may be run on a directory whose earlier stages were copied without it).
fn compute_section(run_dir: &Path) -> Section {
    let gb = |v: &Value| {
        v.as_f64()
            .map_or("-".to_string(), |b| format!("{:.2} GB", b / 1e9))
    };
    let mut rows = Vec::new();
    for stage in ["pairs", "lm", "generate", "filter", "export"] {
        let Ok(record) = read_json(&run_dir.join(stage).join("stage.json")) else {
            continue;
        };
        rows.push(vec![
            stage.to_string(),
            record["seconds"]
                .as_f64()
                .map_or("-".to_string(), |s| format!("{s:.1}")),
            gb(&record["host_bytes_at_start"]),
            gb(&record["peak_host_bytes"]),
            gb(&record["device_bytes"]),
        ]);
    }
    let precision = read_json(&run_dir.join("generate/report.json"))
        .ok()
        .and_then(|r| r["precision"].as_str().map(str::to_string));
    Section {
        title: "Compute".into(),
        html: format!(
            "<p>Seconds; host memory (resident set) at the stage's start and at its peak (under <code>af run</code> a stage starts with what earlier stages left the process); device memory in use at the stage's end (the caching allocator's high-water mark; - on the CPU). Generation arithmetic: {}. Numbers: <code>STAGE/stage.json</code>.</p>{}",
            escape(precision.as_deref().unwrap_or("not recorded")),
            table(&["stage", "seconds", "host memory at start", "peak host memory", "device memory"], &rows)
        ),
    }
}

/// One exported line as a reader sees it: options in an order seeded by the item's id.
fn question(v: &Value) -> anyhow::Result<Question> {
    let s = |x: &Value| {
        x.as_str()
            .map(str::to_string)
            .context("export/dataset.jsonl: a field is not text")
    };
    let id = s(&v["id"])?;
    let mut options = vec![s(&v["gold"]["ending"])?];
    for d in v["distractors"].as_array().context("no distractors")? {
        options.push(s(&d["ending"])?);
    }
    let seed = af_core::hash::fnv1a64(id.as_bytes());
    let mut order: Vec<usize> = (0..options.len()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    let answer = order
        .iter()
        .position(|&o| o == 0)
        .expect("gold is an option");
    Ok(Question {
        id,
        context: s(&v["context"])?,
        noun_phrase: s(&v["noun_phrase"])?,
        options: order.into_iter().map(|o| options[o].clone()).collect(),
        answer,
    })
}

/// The `report` stage.
pub struct Report;

/// The stage's name (its directory, its `--force` spelling).
pub const NAME: crate::runner::StageName = crate::runner::StageName::new("report");

/// What the stage reports: the page it wrote.
pub struct ReportPage(pub std::path::PathBuf);

impl std::fmt::Display for ReportPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "report: {}", self.0.display())
    }
}

impl crate::runner::Stage for Report {
    fn name(&self) -> crate::runner::StageName {
        NAME
    }

    fn upstream(&self) -> Option<crate::runner::StageName> {
        Some(super::export::NAME)
    }

    fn inputs(&self, _config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        // The report reads only upstream outputs.
        Ok(serde_json::json!({}))
    }

    fn run(
        &self,
        ctx: &crate::runner::StageContext,
    ) -> anyhow::Result<(Box<dyn super::StageOutcome>, bool)> {
        write(&ctx.config.run.dir, &ctx.dir)?;
        // ctx.dir is where the stage works; the page ends up in the run's report/.
        let page = ctx.config.run.dir.join(NAME.dir_name()).join("report.html");
        Ok((Box::new(ReportPage(page)), true))
    }
}
