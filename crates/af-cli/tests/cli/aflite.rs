//! `af aflite` on synthetic features: a planted artifact is removed first and almost only it;
//! features without signal leave the set alone.

use crate::common;

use std::path::Path;

use common::*;
use rand::{Rng, SeedableRng};

/// 600 WinoGrande-style twins (qIDs `q<k>-1`, `q<k>-2`), 16-d uniform noise; the first
/// `planted` instances carry their label in dimension 0.
fn write_inputs(dir: &Path, planted: usize) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let (n, d) = (600, 16);
    let mut jsonl = String::new();
    let mut csv = String::new();
    for i in 0..n {
        // Twins answer differently, as in WinoGrande: every group, and so every partition, is balanced.
        let label = 1 + i % 2;
        jsonl.push_str(&format!(
            "{{\"qID\": \"q{}-{}\", \"sentence\": \"A _ b.\", \"option1\": \"x\", \"option2\": \"y\", \"answer\": \"{label}\"}}\n",
            i / 2,
            1 + i % 2
        ));
        let mut row: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
        if i < planted {
            row[0] = if label == 1 { 2.5 } else { -2.5 };
        }
        csv.push_str(
            &row.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
        csv.push('\n');
    }
    std::fs::write(dir.join("w.jsonl"), jsonl).unwrap();
    std::fs::write(dir.join("f.csv"), csv).unwrap();
}

fn aflite(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "aflite",
        "--winogrande",
        "--instances",
        "w.jsonl",
        "--features",
        "f.csv",
        "--out",
        "out",
        "--device",
        "cpu",
        "--threads",
        "1",
    ];
    args.extend(extra);
    af(&args, dir)
}

#[test]
fn planted_instances_are_removed_with_high_precision_and_recall() {
    let d = tempfile::tempdir().unwrap();
    write_inputs(d.path(), 120);
    // The paper's rule (a fixed tau, no null): the calibrated default is tested in af-pipeline.
    let o = aflite(
        d.path(),
        &[
            "--m",
            "64",
            "--t",
            "200",
            "--k",
            "40",
            "--steps",
            "60",
            "--tau",
            "0.75",
            "--null-permutations",
            "0",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let removed: Vec<serde_json::Value> =
        std::fs::read_to_string(d.path().join("out/removed.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let planted_ids: std::collections::HashSet<String> = (0..120)
        .map(|i| format!("q{}-{}", i / 2, 1 + i % 2))
        .collect();
    let hits = removed
        .iter()
        .filter(|r| planted_ids.contains(r["qID"].as_str().unwrap()))
        .count();
    let recall = hits as f64 / 120.0;
    assert!(
        recall >= 0.85,
        "recall {recall:.3} ({hits} of 120 planted removed, {} in all)",
        removed.len()
    );
    // Planted instances go first: every iteration but the last removes (almost) only them. The
    // last also removes the few noise instances that the pool's own chance correlations make
    // predictable (docs/decisions/045-aflite-s-threshold-is-winogrande-s-fixed.md), then stops
    // because fewer than k qualified.
    let scores = std::fs::read_to_string(d.path().join("out/scores.csv")).unwrap();
    let rows: Vec<Vec<&str>> = scores
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let last = rows
        .iter()
        .filter_map(|r| r[5].parse::<usize>().ok())
        .max()
        .unwrap();
    let early: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[5].parse::<usize>().is_ok_and(|i| i < last))
        .collect();
    let early_hits = early.iter().filter(|r| planted_ids.contains(r[0])).count();
    assert!(
        early.len() >= 80 && early_hits * 100 >= early.len() * 85,
        "{early_hits} of {} removed before the last iteration were planted",
        early.len()
    );
    let kept = std::fs::read_to_string(d.path().join("out/kept.jsonl")).unwrap();
    let input = std::fs::read_to_string(d.path().join("w.jsonl")).unwrap();
    assert_eq!(kept.lines().count() + removed.len(), 600);
    assert!(
        kept.lines().all(|l| input.lines().any(|i| i == l)),
        "kept lines are the input's, unchanged"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("out/report.json")).unwrap())
            .unwrap();
    let (before, after) = (
        report["probe_accuracy_before"].as_f64().unwrap(),
        report["probe_accuracy_after"].as_f64().unwrap(),
    );
    assert!(
        before > after + 0.05,
        "a fresh probe loses its edge: {before} -> {after}"
    );
    assert_eq!(scores.lines().count(), 601);
    assert!(std::fs::read_to_string(d.path().join("out/aflite.svg"))
        .unwrap()
        .contains("chance"));
    assert_eq!(
        &std::fs::read(d.path().join("out/aflite.png")).unwrap()[1..4],
        b"PNG"
    );

    // The output directory is not overwritten by accident.
    let again = aflite(d.path(), &["--m", "4", "--t", "200"]);
    assert!(
        !again.status.success() && stderr(&again).contains("--force"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn features_without_signal_remove_nothing() {
    let d = tempfile::tempdir().unwrap();
    write_inputs(d.path(), 0);
    let o = aflite(
        d.path(),
        &["--m", "64", "--t", "150", "--k", "60", "--steps", "60"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Only the pool's chance correlations are left to find: fewer than k instances, one
    // iteration, a fresh probe at chance before. (After, it is below chance: removing the
    // instances that agree with the pool's chance direction leaves ones that disagree with it;
    // docs/notebook/2026-11-30-aflite-synthetic.md.)
    let removed = std::fs::read_to_string(d.path().join("out/removed.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert!(removed < 60, "{removed} of 600 removed (k = 60)");
    let iterations = std::fs::read_to_string(d.path().join("out/iterations.csv")).unwrap();
    assert_eq!(
        iterations.lines().count(),
        2,
        "one iteration: fewer than k qualified\n{iterations}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("out/report.json")).unwrap())
            .unwrap();
    let before = report["probe_accuracy_before"].as_f64().unwrap();
    assert!((before - 0.5).abs() < 0.08, "probe before: {before}");

    // A feature file that does not match the instances.
    std::fs::write(d.path().join("f.csv"), "1,2\n3,4\n").unwrap();
    let o = aflite(d.path(), &["--force"]);
    assert!(
        !o.status.success() && stderr(&o).contains("has 2 rows but"),
        "{}",
        stderr(&o)
    );
}

/// WinoGrande-style twins where the right option always comes right after "the": a style cue
/// af's encoders can learn from the slice.
#[test]
fn af_features_encode_winogrande_for_aflite_and_drop_their_training_slice() {
    let d = tempfile::tempdir().unwrap();
    let names = ["Ann", "Ben", "Cid", "Dee", "Eve", "Fay", "Gus", "Hal"];
    let mut lines = String::new();
    for i in 0..120 {
        let (a, b) = (names[i % 8], names[(i + 3) % 8]);
        for twin in 1..=2 {
            let verb = if twin == 1 { "won" } else { "lost" };
            lines.push_str(&format!(
                "{{\"qID\": \"w{i}-{twin}\", \"sentence\": \"{a} played {b} and the _ {verb} the game.\", \"option1\": \"{a}\", \"option2\": \"{b}\", \"answer\": \"{twin}\"}}\n"
            ));
        }
    }
    std::fs::write(d.path().join("wino.jsonl"), &lines).unwrap();
    let o = af(
        &[
            "features",
            "--winogrande",
            "wino.jsonl",
            "--out",
            "feat",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--epochs",
            "2",
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let kept = std::fs::read_to_string(d.path().join("feat/instances.jsonl")).unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("feat/report.json")).unwrap())
            .unwrap();
    assert_eq!(
        kept.lines().count() as u64,
        report["kept"].as_u64().unwrap()
    );
    assert_eq!(
        report["kept"].as_u64().unwrap() + report["slice"].as_u64().unwrap(),
        240
    );
    assert!(
        kept.lines().all(|l| lines.lines().any(|i| i == l)),
        "kept lines are the input's"
    );
    let features = af_io::features::read_features(&d.path().join("feat/features.npy")).unwrap();
    assert_eq!(features.rows as u64, report["kept"].as_u64().unwrap());
    assert_eq!(features.dim as u64, report["dim"].as_u64().unwrap());
    // Twins stay together: the slice takes whole groups.
    let ids: std::collections::HashSet<&str> =
        kept.lines().map(|l| l.split('"').nth(3).unwrap()).collect();
    for id in &ids {
        let twin = if let Some(stem) = id.strip_suffix("-1") {
            format!("{stem}-2")
        } else {
            format!("{}-1", id.strip_suffix("-2").unwrap())
        };
        assert!(ids.contains(twin.as_str()), "{id} kept without its twin");
    }
    let o = af(
        &[
            "aflite",
            "--winogrande",
            "--instances",
            "feat/instances.jsonl",
            "--features",
            "feat/features.npy",
            "--out",
            "al",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--m",
            "8",
            "--t",
            "60",
            "--k",
            "10",
            "--steps",
            "20",
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(d.path().join("al/kept.jsonl").exists());
}

/// Issue 44: a constant column of 3e38 (a valid float32) made every score NaN and removed
/// nothing; standardised in float64 it is a column of zeros and the planted feature still leads.
/// No output file may hold a NaN.
#[test]
fn a_constant_3e38_column_leaves_no_nan_in_any_output() {
    let d = tempfile::tempdir().unwrap();
    write_inputs(d.path(), 120);
    let csv = std::fs::read_to_string(d.path().join("f.csv")).unwrap();
    let wide: String = csv.lines().map(|l| format!("{l},3e38,-3.4e38\n")).collect();
    std::fs::write(d.path().join("f.csv"), wide).unwrap();
    let o = aflite(
        d.path(),
        &[
            "--m",
            "32",
            "--t",
            "200",
            "--k",
            "40",
            "--steps",
            "40",
            "--tau",
            "0.75",
            "--null-permutations",
            "0",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["scores.csv", "iterations.csv"] {
        let text = std::fs::read_to_string(d.path().join("out").join(name)).unwrap();
        for cell in text.lines().skip(1).flat_map(|l| l.split(',')) {
            assert!(
                cell.parse::<f64>().map_or(true, f64::is_finite),
                "{name} holds {cell}:\n{}",
                &text[..text.len().min(2000)]
            );
        }
    }
    let scores = std::fs::read_to_string(d.path().join("out/scores.csv")).unwrap();
    let confident = scores
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(4).is_some_and(|c| !c.is_empty()))
        .count();
    assert!(confident > 500, "{confident} of 600 rows have a confidence");
    let removed = std::fs::read_to_string(d.path().join("out/removed.jsonl")).unwrap();
    assert!(
        removed.lines().count() >= 60,
        "the planted feature is still found: {} removed",
        removed.lines().count()
    );
}

/// Issue 44: duplicate ids and an empty label are refused as every reader refuses them, with
/// `file:line:column`; CR-only line endings are read as `\n` endings are, in both files.
#[test]
fn instances_refuse_duplicate_ids_and_empty_labels_and_cr_endings_are_read() {
    let d = tempfile::tempdir().unwrap();
    write_inputs(d.path(), 0);
    let lines = std::fs::read_to_string(d.path().join("w.jsonl")).unwrap();
    let run = |d: &Path| {
        af(
            &[
                "aflite",
                "--instances",
                "i.jsonl",
                "--features",
                "f.csv",
                "--out",
                "out",
                "--device",
                "cpu",
                "--threads",
                "1",
                "--m",
                "4",
                "--t",
                "100",
                "--k",
                "10",
                "--steps",
                "5",
                "--id-field",
                "qID",
                "--label-field",
                "answer",
                "--force",
            ],
            d,
        )
    };
    let dup = lines.replacen("\"qID\": \"q1-1\"", "\"qID\": \"q0-1\"", 1);
    std::fs::write(d.path().join("i.jsonl"), dup).unwrap();
    let o = run(d.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("i.jsonl:3:9: duplicate id `q0-1` (first on line 1)"),
        "{}",
        stderr(&o)
    );
    let empty = lines.replacen("\"answer\": \"1\"", "\"answer\": \"\"", 1);
    std::fs::write(d.path().join("i.jsonl"), empty).unwrap();
    let o = run(d.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("i.jsonl:1:") && stderr(&o).contains(": field `answer` is empty"),
        "{}",
        stderr(&o)
    );
    // CR-only endings in both files: read, as `af pairs` reads them.
    std::fs::write(d.path().join("i.jsonl"), lines.replace('\n', "\r")).unwrap();
    let csv = std::fs::read_to_string(d.path().join("f.csv")).unwrap();
    std::fs::write(d.path().join("f.csv"), csv.replace('\n', "\r")).unwrap();
    let o = run(d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let scores = std::fs::read_to_string(d.path().join("out/scores.csv")).unwrap();
    assert_eq!(scores.lines().count(), 601);
}
