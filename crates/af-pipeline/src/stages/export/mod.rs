//! The `export` stage: the filtered dataset, the same pool with a random assignment beside it
//! (the baseline every AF claim is measured against), and `evaluation.json`, which measures both
//! with the same detectors.
//!
//! Files (docs/formats.md):
//! - `dataset.jsonl`, `random.jsonl`: one question per line with LM features and scores;
//! - `dataset-full.csv`, `random-full.csv`: SWAG's full CSV layout (k distractor columns);
//! - `evaluation.json`: a fresh committee (every member of the last stage, and the joint head)
//!   trained and scored on one group split of each dataset, the longest-, shortest- and
//!   median-length-ending baselines, the LM perplexity of gold endings against distractors, and
//!   (under `audit`) the audit detectors that were not in the committee, random assignment against AF;
//! - `audit-af.json`, `audit-random.json`: those two audits in full; `audit-comparison.csv`;
//! - `eval/random/`, `eval/af/`: both datasets scored by a pretrained LM, zero-shot, as `af eval`
//!   scores them, when one is installed (the [`lm`] module);
//! - `README.md`: the dataset card, in the Hugging Face layout, from the files above and the
//!   earlier stages' reports (the [`card`] module).

use std::path::Path;

use af_audit::LengthRule;
use af_core::{Candidate, Config, MemberName, LM_FEATURES};
use af_filter::{Assignment, FilterState, ItemScores};
use af_io::pool_index::Pool;
use af_nn::committee::Registry;
use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use crate::committee::{load_saved, random_assignment, TorchCommittee};
use crate::runner::StageContext;

pub mod card;
pub mod lm;

/// What the export measured, for the binary to show: the fresh committee and length baselines
/// on both datasets, and the audit detectors the committee never saw.
pub struct ExportSummary {
    pub chance: f64,
    /// (detector, random assignment's accuracy, AF's)
    pub detectors: Vec<(String, f64, f64)>,
    pub audit_chance: f64,
    pub audit: Vec<Compared>,
    /// The datasets scored by a pretrained LM, or why they were not.
    pub lm_eval: lm::Outcome,
}

impl std::fmt::Display for ExportSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "export: detectors trained afresh, held-out (k+1)-way accuracy, chance {:.3}",
            self.chance
        )?;
        for (name, random, af) in &self.detectors {
            write!(f, "\n  {name:<16} random {random:.3}  af {af:.3}")?;
        }
        write!(f, "\nexport: audit detectors not in the committee, random assignment -> AF (chance {:.3})", self.audit_chance)?;
        for c in &self.audit {
            write!(
                f,
                "\n  {:<26} random {:.3}  af {:.3}",
                c.detector, c.random, c.af
            )?;
            if let Some(x) = c.edge_shrink {
                write!(f, "  edge shrank {:.0}%", 100.0 * x)?;
            }
            if let Some(e) = c.edge_change {
                write!(f, "  paired {e}")?;
            }
        }
        write!(f, "\n{}", self.lm_eval)
    }
}

pub fn run(ctx: &StageContext) -> anyhow::Result<ExportSummary> {
    let registry = Registry::builtin();
    let config = ctx.config;
    let plan = lm::plan(config)?;
    let state_path = config.run.dir.join("filter/state.json");
    let text = std::fs::read_to_string(&state_path)
        .with_context(|| format!("cannot read {}", state_path.display()))?;
    let state: FilterState = serde_json::from_str(&text)
        .with_context(|| format!("{} is corrupted", state_path.display()))?;
    let (pool, table, device) = load_saved(config, &registry, ctx.progress)?;
    anyhow::ensure!(
        state.assignment.distractors.len() == pool.items.len(),
        "{} has {} items, the pool {}: rerun `af run --force filter`",
        state_path.display(),
        state.assignment.distractors.len(),
        pool.items.len()
    );
    let random = random_assignment(&pool, config.filter.k, config.run.seed)?;
    let chosen = Chosen::read(&pool, &[&state.assignment, &random])?;
    let e = &config.export;
    let splits = export_splits(config, &pool);
    write_jsonl(
        &ctx.dir.join("dataset.jsonl"),
        &chosen,
        &state.assignment,
        Some(&state.last_scores),
        &splits,
    )?;
    write_jsonl(
        &ctx.dir.join("random.jsonl"),
        &chosen,
        &random,
        None,
        &splits,
    )?;
    let questions = pool_questions(&chosen, &state.assignment, &splits);
    let random_questions = pool_questions(&chosen, &random, &splits);
    af_core::atomic::write(
        ctx.dir.join("dataset-full.csv"),
        &af_io::export::swag_full(&questions)?,
    )?;
    af_core::atomic::write(
        ctx.dir.join("random-full.csv"),
        &af_io::export::swag_full(&random_questions)?,
    )?;
    write_layouts(&ctx.dir, &questions, &e.task)?;
    if e.annotation {
        write_annotation(
            &ctx.dir.join("annotation"),
            &pool,
            &state.assignment,
            &questions,
            config,
        )?;
    }

    let committee = TorchCommittee::new(&pool, &table, &config.committee, &registry, device);
    let members = evaluation_members(config, &registry);
    let af = evaluate(
        "af",
        &committee,
        &chosen,
        &state.assignment,
        &members,
        config,
    )?;
    crate::resources::after_a_model("export: the fresh committee on AF's dataset");
    let baseline = evaluate("random", &committee, &chosen, &random, &members, config)?;
    crate::resources::after_a_model("export: the fresh committee on the random assignment");
    let detectors = af
        .detectors
        .iter()
        .zip(&baseline.detectors)
        .map(|(a, b)| (a.name.clone(), b.accuracy, a.accuracy))
        .collect();
    let mut evaluation = json!({
        "k": config.filter.k,
        "chance": af_filter::chance(config.filter.k),
        "members": members,
        "af": af,
        "random": baseline,
    });
    let (audit_json, audit_chance, audit) = audit_comparison(
        ctx,
        &questions,
        &random_questions,
        &members,
        &registry,
        device,
    )?;
    evaluation["audit"] = audit_json;
    let lm_eval = lm::run(ctx, &plan, &random_questions, &questions)?;
    evaluation["lm_eval"] = lm_eval.json();
    af_core::atomic::write(
        ctx.dir.join("evaluation.json"),
        serde_json::to_string_pretty(&evaluation)?.as_bytes(),
    )?;
    card::write(config, &ctx.dir)?;
    Ok(ExportSummary {
        chance: af_filter::chance(config.filter.k),
        detectors,
        audit_chance,
        audit,
        lm_eval,
    })
}

/// The candidates the export writes (every gold and every assigned distractor), read from the
/// pool's parts in one streaming pass.
pub(crate) struct Chosen<'a> {
    pool: &'a Pool,
    rows: std::collections::HashMap<i64, Candidate>,
}

impl<'a> Chosen<'a> {
    pub(crate) fn read(pool: &'a Pool, assignments: &[&Assignment]) -> anyhow::Result<Self> {
        let wanted = (0..pool.items.len()).flat_map(|i| {
            std::iter::once(0)
                .chain(
                    assignments
                        .iter()
                        .flat_map(move |a| a.distractors[i].iter().copied()),
                )
                .map(move |c| pool.row(i, c))
        });
        Ok(Self {
            pool,
            rows: pool.fetch(wanted)?,
        })
    }

    /// Candidate `c` of item `i` (0 is its gold ending).
    pub(crate) fn get(&self, i: usize, c: u32) -> &Candidate {
        &self.rows[&self.pool.row(i, c)]
    }
}

/// The pool's questions under an assignment, gold first, with their published split.
pub(crate) fn pool_questions(
    chosen: &Chosen,
    assignment: &Assignment,
    splits: &[&str],
) -> Vec<af_core::Question> {
    chosen
        .pool
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| af_core::Question {
            id: item.id.clone(),
            group: item.group.clone(),
            context: item.context.clone(),
            prefix: item.noun_phrase.clone(),
            endings: std::iter::once(item.ending.clone())
                .chain(
                    assignment.distractors[i]
                        .iter()
                        .map(|&c| chosen.get(i, c).ending.clone()),
                )
                .collect(),
            label: 0,
            split: Some(splits[i].to_string()),
            blank: None,
            line: i + 1,
        })
        .collect()
}

/// One detector of both audits.
#[derive(Serialize)]
pub struct Compared {
    pub detector: String,
    pub chance: f64,
    pub random: f64,
    pub random_ci: (f64, f64),
    pub af: f64,
    pub af_ci: (f64, f64),
    pub random_edge: f64,
    pub af_edge: f64,
    /// (random edge - AF edge) / random edge, where the random assignment's detector is flagged.
    pub edge_shrink: Option<f64>,
    pub random_flagged: bool,
    pub af_flagged: bool,
    /// AF's edge - the random assignment's, question by question (paired), with its interval.
    pub edge_change: Option<af_audit::EdgeChange>,
}

/// The audit's detectors that were not in the committee (a committee architecture counts as in
/// it only on the view the committee reads), on the random assignment and on AF's, with the same
/// seed (so the same group split): what AF removed that it was not trained against.
fn audit_comparison(
    ctx: &StageContext,
    af: &[af_core::Question],
    random: &[af_core::Question],
    committee: &[MemberName],
    registry: &Registry,
    device: tch::Device,
) -> anyhow::Result<(serde_json::Value, f64, Vec<Compared>)> {
    let config = ctx.config;
    // A member is excluded on the view it reads: the same architecture on another view is a
    // detector AF never trained against.
    let exclude: Vec<(MemberName, af_core::View)> = committee
        .iter()
        .map(|m| Ok((m.clone(), registry.lookup(m)?.view(&config.committee))))
        .collect::<Result<_, af_nn::NnError>>()?;
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let auditor = crate::audit::Auditor {
        config,
        registry,
        exclude: &exclude,
        tagger: &tagger,
        device,
        progress: ctx.progress,
    };
    let mut reports = Vec::new();
    for (name, questions) in [("random", random), ("af", af)] {
        reports.push(auditor.audit_named(&ctx.dir, name, questions)?);
    }
    let (random_report, af_report) = (&reports[0], &reports[1]);
    let rows: Vec<Compared> = random_report
        .detectors
        .iter()
        .zip(&af_report.detectors)
        .map(|(r, a)| Compared {
            detector: r.name.clone(),
            chance: r.chance,
            random: r.accuracy,
            random_ci: (r.ci_low, r.ci_high),
            af: a.accuracy,
            af_ci: (a.ci_low, a.ci_high),
            random_edge: r.edge,
            af_edge: a.edge,
            edge_shrink: r.edge_shrink(a),
            random_flagged: r.flagged,
            af_flagged: a.flagged,
            edge_change: af_audit::edge_change(r, a),
        })
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "detector",
        "chance",
        "random",
        "random_ci_low",
        "random_ci_high",
        "af",
        "af_ci_low",
        "af_ci_high",
        "random_edge",
        "af_edge",
        "edge_shrink",
        "random_flagged",
        "af_flagged",
        "edge_change",
        "edge_change_ci_low",
        "edge_change_ci_high",
    ])?;
    for c in &rows {
        w.write_record(
            [
                c.detector.clone(),
                format!("{:.4}", c.chance),
                format!("{:.4}", c.random),
                format!("{:.4}", c.random_ci.0),
                format!("{:.4}", c.random_ci.1),
                format!("{:.4}", c.af),
                format!("{:.4}", c.af_ci.0),
                format!("{:.4}", c.af_ci.1),
                format!("{:.4}", c.random_edge),
                format!("{:.4}", c.af_edge),
                c.edge_shrink.map_or(String::new(), |x| format!("{x:.3}")),
                c.random_flagged.to_string(),
                c.af_flagged.to_string(),
            ]
            .into_iter()
            .chain(crate::refilter::edge_change_fields(c.edge_change)),
        )?;
    }
    af_core::atomic::write(
        ctx.dir.join("audit-comparison.csv"),
        &w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?,
    )?;
    let summary = json!({
        "models": config.audit.models,
        "left_out_as_committee_members": exclude
            .iter()
            .filter(|(m, _)| config.audit.models.contains(m))
            .map(|(m, view)| format!("{m}/{}", view.name()))
            .collect::<Vec<_>>(),
        "split": af_report.split,
        "alpha": af_report.alpha,
        "detector_alpha": af_report.detector_alpha,
        "comparison": rows,
    });
    Ok((summary, random_report.chance, rows))
}

/// Every member any phase used, in the registry's order.
fn evaluation_members(config: &Config, registry: &Registry) -> Vec<MemberName> {
    registry
        .names()
        .into_iter()
        .map(MemberName::new)
        .filter(|m| config.filter.stages.iter().any(|s| s.members.contains(m)))
        .collect()
}

fn features_json(c: &Candidate) -> serde_json::Value {
    LM_FEATURES
        .iter()
        .zip(c.features)
        .map(|(n, v)| (n.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Each item's published split (`train`, `validation`, `test`), by group, seeded by the run.
pub(crate) fn export_splits(config: &Config, pool: &Pool) -> Vec<&'static str> {
    let e = &config.export;
    af_core::split::train_validation_test(
        &pool.groups(),
        e.train_share,
        e.validation_share,
        config.run.seed ^ 0x7370_6c69,
    )
}

pub(crate) fn write_jsonl(
    path: &Path,
    chosen: &Chosen,
    assignment: &Assignment,
    scores: Option<&[Option<ItemScores>]>,
    splits: &[&str],
) -> anyhow::Result<()> {
    let mut out = String::new();
    for (i, item) in chosen.pool.items.iter().enumerate() {
        let s = scores.and_then(|s| s[i].as_ref());
        let gold = chosen.get(i, 0);
        let distractors: Vec<serde_json::Value> = assignment.distractors[i]
            .iter()
            .enumerate()
            .map(|(slot, &c)| {
                let cand = chosen.get(i, c);
                json!({
                    "candidate": c,
                    "ending": cand.ending,
                    "tokens": cand.tokens,
                    "truncated": cand.truncated,
                    "features": features_json(cand),
                    "score": s.map(|s| s.distractors[slot]),
                })
            })
            .collect();
        let line = json!({
            "id": item.id,
            "group": item.group,
            "fold": item.fold,
            "split": splits[i],
            "context": item.context,
            "noun_phrase": item.noun_phrase,
            "gold": {"ending": item.ending, "tokens": gold.tokens, "features": features_json(gold), "score": s.map(|s| s.gold)},
            "distractors": distractors,
            "scored_iteration": s.map(|s| s.iteration),
            "score_head": s.map(|s| s.head.clone()),
        });
        out.push_str(&serde_json::to_string(&line)?);
        out.push('\n');
    }
    af_core::atomic::write(path, out.as_bytes())?;
    Ok(())
}

/// A dataset in every published layout, one file per split (docs/formats.md), written into
/// `dir`; the lm-eval task names its files relative to its own folder, through its loader. The
/// export stage writes the AF dataset so, `af assemble` the validated one.
pub fn write_layouts(
    dir: &Path,
    questions: &[af_core::Question],
    task: &str,
) -> anyhow::Result<()> {
    use af_io::export;
    let names = [
        ("train", "train", "train"),
        ("validation", "val", "validation"),
        ("test", "test", "test"),
    ];
    let mut lm_files = Vec::new();
    for (split, swag_name, hf_name) in names {
        let part: Vec<af_core::Question> = questions
            .iter()
            .filter(|q| q.split.as_deref() == Some(split))
            .cloned()
            .collect();
        if part.is_empty() {
            continue;
        }
        af_core::atomic::write(
            dir.join(format!("swag/{swag_name}.csv")),
            &export::swag_regular(&part)?,
        )?;
        af_core::atomic::write(
            dir.join(format!("swag/{swag_name}_full.csv")),
            &export::swag_full(&part)?,
        )?;
        af_core::atomic::write(
            dir.join(format!("hellaswag/hellaswag_{swag_name}.jsonl")),
            export::hellaswag(&part).as_bytes(),
        )?;
        af_core::atomic::write(
            dir.join(format!("hf/{hf_name}.jsonl")),
            export::hf_jsonl(&part).as_bytes(),
        )?;
        let lm_name = format!("lm-eval/{task}_{hf_name}.jsonl");
        af_core::atomic::write(dir.join(&lm_name), export::lm_eval_jsonl(&part).as_bytes())?;
        lm_files.push((hf_name, format!("{task}_{hf_name}.jsonl")));
    }
    af_core::atomic::write(
        dir.join(format!("lm-eval/{task}.yaml")),
        export::lm_eval_yaml(task, &lm_files).as_bytes(),
    )?;
    af_core::atomic::write(
        dir.join(format!(
            "lm-eval/{}.py",
            export::lm_eval_loader_module(task)
        )),
        export::LM_EVAL_LOADER.as_bytes(),
    )?;
    Ok(())
}

/// Annotation sheets (CSV and HTML form, `sheet-items` items each) and their key.
fn write_annotation(
    dir: &Path,
    pool: &Pool,
    assignment: &Assignment,
    questions: &[af_core::Question],
    config: &Config,
) -> anyhow::Result<()> {
    let items: Vec<(af_core::Question, Vec<u32>)> = questions
        .iter()
        .cloned()
        .zip(assignment.distractors.iter().cloned())
        .collect();
    debug_assert_eq!(items.len(), pool.items.len());
    let key = af_annotate::build_key(
        &items,
        config.export.annotation_distractors,
        config.export.sheet_items,
        config.run.seed,
    );
    let mut lines = String::new();
    for k in &key {
        lines.push_str(&serde_json::to_string(k)?);
        lines.push('\n');
    }
    af_core::atomic::write(dir.join("key.jsonl"), lines.as_bytes())?;
    for sheet in key.chunk_by(|a, b| a.sheet == b.sheet) {
        let rows: Vec<&af_annotate::KeyItem> = sheet.iter().collect();
        af_core::atomic::write(
            dir.join(format!("{}.csv", rows[0].sheet)),
            &af_annotate::sheet_csv(&rows)?,
        )?;
        af_core::atomic::write(
            dir.join(format!("{}.html", rows[0].sheet)),
            af_annotate::sheet_html(&rows).as_bytes(),
        )?;
    }
    Ok(())
}

/// An accuracy with its 95% Wilson interval.
#[derive(Serialize)]
pub struct Detector {
    pub name: String,
    pub accuracy: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub items: usize,
}

impl Detector {
    fn new(name: &str, right: f64, n: usize) -> Self {
        let (low, high) = af_audit::stats::wilson(right, n);
        Self {
            name: name.into(),
            accuracy: right / n.max(1) as f64,
            ci_low: low,
            ci_high: high,
            items: n,
        }
    }
}

#[derive(Serialize)]
struct Summary {
    mean: f64,
    median: f64,
    count: usize,
}

fn summary(mut v: Vec<f64>) -> Summary {
    v.sort_by(f64::total_cmp);
    let count = v.len();
    let mean = v.iter().sum::<f64>() / count.max(1) as f64;
    let median = if count == 0 { f64::NAN } else { v[count / 2] };
    Summary {
        mean,
        median,
        count,
    }
}

#[derive(Serialize)]
struct DatasetEvaluation {
    dataset: String,
    train_items: usize,
    heldout_items: usize,
    /// Committee heads on the held-out items, then the length baselines on every item.
    detectors: Vec<Detector>,
    /// Mean NLL per token of the ending given context and noun phrase (the forward LM's).
    gold_logppl: Summary,
    distractor_logppl: Summary,
    gold_tokens: Summary,
    distractor_tokens: Summary,
}

fn evaluate(
    name: &str,
    committee: &TorchCommittee,
    chosen: &Chosen,
    assignment: &Assignment,
    members: &[MemberName],
    config: &Config,
) -> anyhow::Result<DatasetEvaluation> {
    let pool = committee.pool;
    let mut rng = {
        use rand::SeedableRng;
        rand_chacha::ChaCha8Rng::seed_from_u64(config.run.seed ^ 0x6576_616c)
    };
    let (train, heldout) =
        af_filter::split_by_group(&pool.groups(), config.filter.train_share, &mut rng);
    let questions: Vec<Vec<i64>> = train
        .iter()
        .map(|&i| committee.question(i, assignment))
        .collect();
    let (_vs, model) = committee.train(members, &questions, config.run.seed ^ 0x6576_616c)?;
    let rows: Vec<i64> = heldout
        .iter()
        .flat_map(|&i| committee.question(i, assignment))
        .collect();
    let width = assignment.k + 1;
    let mut detectors = Vec::new();
    for (head, scores) in
        af_nn::committee::score(&model, committee.table, &rows, config.committee.score_batch)
    {
        let right = scores
            .chunks(width)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count();
        detectors.push(Detector::new(&head, right as f64, heldout.len()));
    }
    // Ties are broken at random: the expected credit is 1 / (options tied).
    let rules = [
        LengthRule::Longest,
        LengthRule::Shortest,
        LengthRule::Median,
    ];
    let mut length_rights = rules.map(|_| 0.0);
    let (mut gold_ppl, mut dis_ppl, mut gold_len, mut dis_len) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..pool.items.len() {
        let lens: Vec<f32> = std::iter::once(0)
            .chain(assignment.distractors[i].iter().copied())
            .map(|c| chosen.get(i, c).tokens as f32)
            .collect();
        for (rule, right) in rules.iter().zip(&mut length_rights) {
            *right += af_audit::credit(&rule.scores(&lens), 0);
        }
        let gold = chosen.get(i, 0);
        gold_ppl.push(f64::from(gold.features[0]));
        gold_len.push(f64::from(gold.tokens));
        for &c in &assignment.distractors[i] {
            let d = chosen.get(i, c);
            dis_ppl.push(f64::from(d.features[0]));
            dis_len.push(f64::from(d.tokens));
        }
    }
    for (rule, right) in rules.iter().zip(length_rights) {
        detectors.push(Detector::new(rule.name(), right, pool.items.len()));
    }
    Ok(DatasetEvaluation {
        dataset: name.into(),
        train_items: train.len(),
        heldout_items: heldout.len(),
        detectors,
        gold_logppl: summary(gold_ppl),
        distractor_logppl: summary(dis_ppl),
        gold_tokens: summary(gold_len),
        distractor_tokens: summary(dis_len),
    })
}

/// The `export` stage.
pub struct Export;

/// The stage's name (its directory, its `--force` spelling).
pub const NAME: crate::runner::StageName = crate::runner::StageName::new("export");

impl crate::runner::Stage for Export {
    fn name(&self) -> crate::runner::StageName {
        NAME
    }

    fn upstream(&self) -> Option<crate::runner::StageName> {
        Some(super::filter::NAME)
    }

    fn uses_device(&self) -> bool {
        true
    }

    fn check(&self, config: &af_core::Config) -> anyhow::Result<()> {
        lm::plan(config).map(drop)
    }

    /// `[export]` and `[audit]`; the pretrained LM it scores with, when it runs one (by default
    /// it depends on what is installed); and the inputs' `source` and `license`, which the
    /// dataset card shows (recorded only where set, as runs before them had none).
    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use serde_json::json;
        let mut stamp =
            json!({"export": config.export.fingerprint(), "audit": config.audit.fingerprint()});
        if let Some(model) = lm::plan(config)?.fingerprint() {
            stamp["eval-lm"] = model;
        }
        let described: Vec<serde_json::Value> = config
            .pairs
            .inputs
            .iter()
            .filter(|i| i.source.is_some() || i.license.is_some())
            .map(|i| json!({"path": i.path, "source": i.source, "license": i.license}))
            .collect();
        if !described.is_empty() {
            stamp["card-inputs"] = json!(described);
        }
        Ok(stamp)
    }

    fn run(
        &self,
        ctx: &crate::runner::StageContext,
    ) -> anyhow::Result<(Box<dyn super::StageOutcome>, bool)> {
        Ok((Box::new(run(ctx)?), true))
    }
}
