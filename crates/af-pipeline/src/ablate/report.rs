//! What `af ablate` writes and prints: the summary per composition, the CSV files, `ablate.json`,
//! the cross-matrix heat map and `ablate.html`.

use af_core::ablate::{Composition, RANDOM};
use af_core::{Config, MemberName};
use serde::Serialize;
use serde_json::json;

use super::{AblateRun, Cell, CompositionRun, PairedChange, SplitSizes};

/// A composition at a glance: how far its own driving head got, and the mean edge left to the
/// detectors inside it and outside it ("transfer": what it removed for detectors it never saw).
#[derive(Clone, Debug, Serialize)]
pub struct SummaryRow {
    pub composition: String,
    pub members: String,
    pub driving_head_first: Option<f64>,
    pub driving_head_last: Option<f64>,
    pub chance: f64,
    pub detectors_inside: usize,
    pub mean_edge_inside: Option<f64>,
    pub detectors_outside: usize,
    pub mean_edge_outside: Option<f64>,
    /// Detectors (inside or outside) whose paired change from the random assignment has a 95%
    /// interval wholly below 0 / wholly above 0; none for the random assignment.
    pub detectors_down: Option<usize>,
    pub detectors_up: Option<usize>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// One row per dataset: the random assignment's, then each composition's.
pub(super) fn summarise(
    compositions: &[Composition],
    runs: &[CompositionRun],
    cells: &[Cell],
    chance: f64,
) -> Vec<SummaryRow> {
    let row = |name: &str, members: String, run: Option<&CompositionRun>| {
        let mine: Vec<&Cell> = cells.iter().filter(|c| c.composition == name).collect();
        // The random baseline is a check of the scoring, not a detector anything could fool.
        let (inside, outside): (Vec<&Cell>, Vec<&Cell>) = mine
            .into_iter()
            .filter(|c| c.score.detector != "random")
            .partition(|c| c.in_composition);
        let edges = |v: &[&Cell]| v.iter().map(|c| c.score.edge).collect::<Vec<_>>();
        let changes: Vec<af_audit::EdgeChange> = inside
            .iter()
            .chain(&outside)
            .filter_map(|c| c.edge_change)
            .collect();
        let count = |f: fn(&af_audit::EdgeChange) -> bool| {
            run.map(|_| changes.iter().filter(|e| f(e)).count())
        };
        SummaryRow {
            composition: name.to_string(),
            members,
            driving_head_first: run.map(|r| r.report.driving_head_first),
            driving_head_last: run.map(|r| r.report.driving_head_last),
            chance,
            detectors_inside: inside.len(),
            mean_edge_inside: mean(&edges(&inside)),
            detectors_outside: outside.len(),
            mean_edge_outside: mean(&edges(&outside)),
            detectors_down: count(|e| e.ci_high < 0.0),
            detectors_up: count(|e| e.ci_low > 0.0),
        }
    };
    std::iter::once(row(RANDOM, String::new(), None))
        .chain(compositions.iter().zip(runs).map(|(c, r)| {
            row(
                &c.name,
                c.members
                    .iter()
                    .map(MemberName::as_str)
                    .collect::<Vec<_>>()
                    .join("+"),
                Some(r),
            )
        }))
        .collect()
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |x| format!("{x:.4}"))
}

/// Every file of `run` but the compositions' own, in `run.dir`.
pub(super) fn write_outputs(config: &Config, run: &AblateRun) -> anyhow::Result<()> {
    let AblateRun {
        dir,
        compositions: runs,
        cells,
        pairs,
        summary,
        split,
        seconds,
    } = run;
    let split = *split;
    let csv_bytes =
        |w: csv::Writer<Vec<u8>>| w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "composition",
        "detector",
        "family",
        "questions",
        "accuracy",
        "ci_low",
        "ci_high",
        "chance",
        "edge",
        "p_value",
        "in_composition",
        "edge_change",
        "edge_change_ci_low",
        "edge_change_ci_high",
    ])?;
    for c in cells {
        let s = &c.score;
        let [change, change_low, change_high] = crate::refilter::edge_change_fields(c.edge_change);
        w.write_record([
            c.composition.clone(),
            s.detector.clone(),
            s.family.clone(),
            s.questions.to_string(),
            format!("{:.4}", s.accuracy),
            format!("{:.4}", s.ci_low),
            format!("{:.4}", s.ci_high),
            format!("{:.4}", s.chance),
            format!("{:.4}", s.edge),
            format!("{:.3e}", s.p_value),
            c.in_composition.to_string(),
            change,
            change_low,
            change_high,
        ])?;
    }
    af_core::atomic::write(dir.join("cross-matrix.csv"), &csv_bytes(w)?)?;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "composition",
        "members",
        "driving_head_first",
        "driving_head_last",
        "chance",
        "detectors_inside",
        "mean_edge_inside",
        "detectors_outside",
        "mean_edge_outside",
        "detectors_down",
        "detectors_up",
    ])?;
    for r in summary {
        w.write_record([
            r.composition.clone(),
            r.members.clone(),
            opt(r.driving_head_first),
            opt(r.driving_head_last),
            format!("{:.4}", r.chance),
            r.detectors_inside.to_string(),
            opt(r.mean_edge_inside),
            r.detectors_outside.to_string(),
            opt(r.mean_edge_outside),
            r.detectors_down.map_or(String::new(), |n| n.to_string()),
            r.detectors_up.map_or(String::new(), |n| n.to_string()),
        ])?;
    }
    af_core::atomic::write(dir.join("summary.csv"), &csv_bytes(w)?)?;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "before",
        "after",
        "detector",
        "questions",
        "edge_change",
        "edge_change_ci_low",
        "edge_change_ci_high",
    ])?;
    for p in pairs {
        let [change, low, high] = crate::refilter::edge_change_fields(Some(p.change));
        w.write_record([
            p.before.clone(),
            p.after.clone(),
            p.detector.clone(),
            p.change.questions.to_string(),
            change,
            low,
            high,
        ])?;
    }
    af_core::atomic::write(dir.join("composition-pairs.csv"), &csv_bytes(w)?)?;
    let record = json!({
        "run": config.run.dir,
        "k": config.filter.k,
        "chance": af_filter::chance(config.filter.k),
        "split": split,
        "members": config.ablate.members(&config.filter),
        "compositions": runs,
        "summary": summary,
        "cells": cells,
        "pairs": pairs,
        "seconds": seconds,
    });
    af_core::atomic::write(
        dir.join("ablate.json"),
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    let map = heatmap(summary, cells);
    let svg = af_report::heatmap_svg(&map)?;
    af_core::atomic::write(dir.join("cross-matrix.svg"), svg.as_bytes())?;
    af_report::heatmap_png(&map, &dir.join("cross-matrix.png"))?;
    af_core::atomic::write(
        dir.join("ablate.html"),
        html(summary, cells, pairs, runs, &svg, split).as_bytes(),
    )?;
    Ok(())
}

/// Detectors down, datasets across (detector names are long, dataset names short).
fn heatmap(summary: &[SummaryRow], cells: &[Cell]) -> af_report::Heatmap<'static> {
    let columns: Vec<String> = summary.iter().map(|r| r.composition.clone()).collect();
    let mut rows: Vec<String> = Vec::new();
    for c in cells {
        if !rows.contains(&c.score.detector) {
            rows.push(c.score.detector.clone());
        }
    }
    let find = |d: &str, comp: &str| {
        cells
            .iter()
            .find(|c| c.score.detector == d && c.composition == comp)
    };
    let values = rows
        .iter()
        .map(|d| {
            columns
                .iter()
                .map(|comp| find(d, comp).map(|c| c.score.edge))
                .collect()
        })
        .collect();
    let marked = rows
        .iter()
        .map(|d| {
            columns
                .iter()
                .map(|comp| find(d, comp).is_some_and(|c| c.in_composition))
                .collect()
        })
        .collect();
    af_report::Heatmap {
        title: "Cross-matrix: each detector's edge over chance on each dataset",
        legend: "red: the detector beats chance, blue: below it; outlined: the composition's committee held this detector",
        rows,
        columns,
        values,
        marked,
    }
}

fn html(
    summary: &[SummaryRow],
    cells: &[Cell],
    pairs: &[PairedChange],
    runs: &[CompositionRun],
    svg: &str,
    split: SplitSizes,
) -> String {
    let pair_rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|p| {
            let c = p.change;
            let verdict = if c.ci_high < 0.0 {
                format!("{} leaves less", p.after)
            } else if c.ci_low > 0.0 {
                format!("{} leaves less", p.before)
            } else {
                "no difference measured".into()
            };
            vec![
                p.before.clone(),
                p.after.clone(),
                p.detector.clone(),
                c.to_string(),
                verdict,
            ]
        })
        .collect();
    let summary_rows: Vec<Vec<String>> = summary
        .iter()
        .map(|r| {
            vec![
                r.composition.clone(),
                r.members.clone(),
                r.driving_head_first
                    .zip(r.driving_head_last)
                    .map_or("-".into(), |(a, b)| format!("{a:.3} → {b:.3}")),
                r.mean_edge_inside
                    .map_or("-".into(), |x| format!("{x:+.3} ({})", r.detectors_inside)),
                r.mean_edge_outside
                    .map_or("-".into(), |x| format!("{x:+.3} ({})", r.detectors_outside)),
                r.detectors_down
                    .zip(r.detectors_up)
                    .map_or("-".into(), |(down, up)| format!("{down} / {up}")),
            ]
        })
        .collect();
    let cell_rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let s = &c.score;
            vec![
                c.composition.clone(),
                s.detector.clone(),
                format!("{:.3}", s.accuracy),
                format!("{:.3}-{:.3}", s.ci_low, s.ci_high),
                format!("{:.3}", s.chance),
                format!("{:+.3}", s.edge),
                c.edge_change.map_or("-".into(), |e| e.to_string()),
                if c.in_composition { "yes" } else { "" }.into(),
            ]
        })
        .collect();
    let schedules: String = runs
        .iter()
        .map(|r| {
            let phases: Vec<String> = r
                .stages
                .iter()
                .map(|p| {
                    format!(
                        "{} ({}, up to {} iterations)",
                        p.name,
                        p.members
                            .iter()
                            .map(MemberName::as_str)
                            .collect::<Vec<_>>()
                            .join("+"),
                        p.iterations
                    )
                })
                .collect();
            format!(
                "<li><b>{}</b>: {}; ran {} iterations, {} swaps, {:.0} s</li>",
                af_report::escape(&r.name),
                af_report::escape(&phases.join(", then ")),
                r.report.iterations,
                r.report.swaps,
                r.report.seconds
            )
        })
        .collect();
    af_report::Page {
        title: "Ablation over committee compositions".into(),
        subtitle: format!(
            "{} compositions and the random assignment, every detector on {} ({} training, {} evaluation items); every number is in ablate.json and cross-matrix.csv",
            runs.len(),
            if split.folds > 1 { format!("{} group folds, cross-fitted", split.folds) } else { "one group split".into() },
            split.train,
            split.eval
        ),
        sections: vec![
            af_report::Section {
                title: "Summary".into(),
                html: format!(
                    "<p>Own driving head: first and last held-out accuracy of the AF run. Inside / outside: the mean edge over chance of the detectors the composition's committee held / did not hold (their number in brackets); the outside edge is what the composition's filtering leaves to detectors it never trained against. Down / up: the detectors whose edge is lower / higher than on the random assignment, question by question on the same items, with a 95% interval that excludes 0.</p>{}",
                    af_report::table(&["composition", "members", "own driving head", "mean edge inside", "mean edge outside", "detectors down / up"], &summary_rows)
                ),
            },
            af_report::Section { title: "Cross-matrix".into(), html: svg.to_string() },
            af_report::Section { title: "Schedules".into(), html: format!("<ul>{schedules}</ul>") },
            af_report::Section {
                title: "Composition against composition".into(),
                html: if pair_rows.is_empty() {
                    "<p>One composition: nothing to compare.</p>".into()
                } else {
                    format!(
                        "<p>Each detector's edge on the second composition's dataset less its edge on the first's, question by question on the same items, with a 95% interval (composition-pairs.csv).</p>{}",
                        af_report::table(&["first", "second", "detector", "edge change (95% interval)", "reading"], &pair_rows)
                    )
                },
            },
            af_report::Section {
                title: "Every cell".into(),
                html: af_report::table(&["dataset", "detector", "accuracy", "95% interval", "chance", "edge", "edge change from random, paired (95% interval)", "in composition"], &cell_rows),
            },
        ],
        questions: Vec::new(),
    }
    .render()
}

impl std::fmt::Display for AblateRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ablate: {} compositions; mean edge over chance of the detectors inside / outside each committee", self.compositions.len())?;
        let show = |x: Option<f64>| x.map_or("    -".to_string(), |x| format!("{x:+.3}"));
        for r in &self.summary {
            let driving = r
                .driving_head_last
                .map_or(String::new(), |x| format!("  own driving head -> {x:.3}"));
            let moved = r
                .detectors_down
                .zip(r.detectors_up)
                .map_or(String::new(), |(down, up)| {
                    format!("  detectors down {down}, up {up}")
                });
            write!(
                f,
                "\n  {:<22} inside {}  outside {}{driving}{moved}",
                r.composition,
                show(r.mean_edge_inside),
                show(r.mean_edge_outside)
            )?;
        }
        write!(f, "\n  (down / up: edge lower / higher than on the random assignment, paired on the same items, 95% interval excluding 0)")?;
        write!(
            f,
            "\nablate: {:.1} s; cross-matrix in {}",
            self.seconds,
            self.dir.join("ablate.html").display()
        )
    }
}
