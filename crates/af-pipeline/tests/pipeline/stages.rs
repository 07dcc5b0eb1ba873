//! The stages in-process, on the fixtures with tiny models: what each writes, how the pairs stage
//! reads its inputs, the runner's skipping and forcing, LM pretraining, and the filter, export and
//! report stages agreeing with each other.

use crate::common;

use af_pipeline::runner::{self, StageRun};
use af_pipeline::stages::export::NAME as EXPORT;
use af_pipeline::stages::filter::NAME as FILTER;
use af_pipeline::stages::generate::NAME as GENERATE;
use af_pipeline::stages::lm::{LmReport, NAME as LM};
use af_pipeline::stages::pairs::{PairsOutcome, NAME as PAIRS};
use af_pipeline::StageName;
use common::*;

#[test]
fn pairs_writes_items_report_config_and_the_runner_skips_what_is_up_to_date() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    let config = load(&cfg);
    let stages = until(GENERATE);
    let all = |what: &'static str| stages.iter().map(|&s| (Some(s), what)).collect::<Vec<_>>();
    let mut outcomes = Vec::new();
    let mut reported_items = None;
    runner::run_stages(&config, stages, &[], &af_pipeline::NoProgress, |r| {
        if let StageRun::Done { report, .. } = r {
            if let Some(PairsOutcome(p)) = report.downcast_ref() {
                reported_items = Some(p.items);
            }
        }
        outcomes.push(outcome(r));
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(outcomes, all("done"), "every stage it is given runs");

    let run = d.path().join("run/pairs");
    let items = std::fs::read_to_string(run.join("items.jsonl")).unwrap();
    let report = json(&run.join("report.json"));
    assert_eq!(
        reported_items,
        report["items"].as_u64(),
        "the returned report is the one written"
    );
    assert_eq!(
        items.lines().count() as u64,
        report["items"].as_u64().unwrap()
    );
    let dropped: u64 = report["dropped"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        report["items"].as_u64().unwrap() + dropped,
        report["candidate_pairs"].as_u64().unwrap()
    );
    assert_eq!(
        report["candidate_pairs"], 122,
        "163 captions in 41 videos make 122 pairs"
    );
    // Every item: the second sentence is exactly noun phrase + ending, and folds are 0..5.
    for line in items.lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(item["fold"].as_u64().unwrap() < 5);
        assert!(!item["noun_phrase"].as_str().unwrap().is_empty());
        assert!(item["ending_tokens"].as_u64().unwrap() >= 5);
    }
    assert!(std::fs::read_to_string(run.join("config.toml"))
        .unwrap()
        .contains("[pairs]"));
    assert!(run.join("vocab.tsv").exists() && run.join("stage.json").exists());
    assert!(d.path().join("run/generate/stage.json").exists());

    assert_eq!(
        run_stages(&config, stages, &[]),
        all("up-to-date"),
        "up-to-date stages are skipped"
    );
    assert_eq!(
        run_stages(&config, stages, &[PAIRS]),
        all("done"),
        "a forced stage reruns, and what depends on it"
    );
    assert_eq!(
        std::fs::read_to_string(run.join("items.jsonl")).unwrap(),
        items,
        "same seed, same items"
    );

    // A changed config is not up to date.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("threads = 1", "threads = 1\nseed = 99");
    std::fs::write(&cfg, text).unwrap();
    let changed = load(&cfg);
    assert!(!runner::up_to_date(&changed, PAIRS).unwrap());
    assert_eq!(run_stages(&changed, &[PAIRS], &[]), [(Some(PAIRS), "done")]);
}

#[test]
fn csv_jsonl_and_text_inputs_make_items_together() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let f = repo().join("fixtures/inputs");
    let cfg = config_in(
        d.path(),
        &format!(
            "[pairs]\nmin-context-tokens = 3\nmin-ending-tokens = 2\n\n\
             [[pairs.inputs]]\npath = \"{0}/sentences.csv\"\nformat = \"csv\"\ngroup-field = \"video\"\ntext-field = \"caption\"\n\n\
             [[pairs.inputs]]\npath = \"{0}/pairs.jsonl\"\nformat = \"jsonl\"\ngroup-field = \"video\"\ncontext-field = \"context\"\nsentence2-field = \"next\"\nid-field = \"id\"\n\n\
             [[pairs.inputs]]\npath = \"{0}/prose\"\nformat = \"text\"\n",
            f.display()
        ),
    );
    let run = run_stage(&load(&cfg), PAIRS, true).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(matches!(
        &run,
        StageRun::Done { report, .. } if report.downcast_ref::<PairsOutcome>().is_some()
    ));
    let items = std::fs::read_to_string(d.path().join("run/pairs/items.jsonl")).unwrap();
    let ids: Vec<String> = items
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // CSV: v1 has three rows (not adjacent), v2 two; JSONL: two given pairs; prose: one file.
    for id in ["v1-0", "v1-1", "v2-0", "p1", "p2", "village-1"] {
        assert!(ids.contains(&id.to_string()), "{id} missing from {ids:?}");
    }
    let v1: serde_json::Value =
        serde_json::from_str(items.lines().find(|l| l.contains("\"v1-1\"")).unwrap()).unwrap();
    assert_eq!(
        v1["context"], "The man then picks up a guitar and starts playing a song.",
        "trimmed, in group order"
    );
    assert_eq!(v1["noun_phrase"], "He");
}

#[test]
fn duplicate_item_ids_across_inputs_are_an_error() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let input = captions_input();
    let cfg = config_in(d.path(), &format!("{input}\n{input}"));
    let e = format!(
        "{:#}",
        run_stage(&load(&cfg), PAIRS, true)
            .err()
            .expect("two inputs with the same items")
    );
    assert!(e.contains("duplicate item id `v_fixture000-0`"), "{e}");
}

#[test]
fn inputs_are_identified_by_content_not_by_mtime() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("captions.json");
    let original = std::fs::read(repo().join("fixtures/captions/captions.json")).unwrap();
    std::fs::write(&input, &original).unwrap();
    let cfg = config_in(
        d.path(),
        &format!(
            "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            input.display()
        ),
    );
    let config = load(&cfg);
    assert_eq!(
        run_stages(&config, until(PAIRS), &[]),
        [(Some(PAIRS), "done")]
    );
    // Rewritten with the same bytes (a copy, a re-mount): still up to date. The pause makes the
    // rewrite's modification time differ from the first write's.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&input, &original).unwrap();
    assert_eq!(
        run_stages(&config, until(PAIRS), &[]),
        [(Some(PAIRS), "up-to-date")],
        "same content, same fingerprint"
    );
    // Different bytes: rerun.
    let changed = String::from_utf8(original)
        .unwrap()
        .replacen("A man", "A woman", 1);
    std::fs::write(&input, changed).unwrap();
    assert_eq!(
        run_stages(&config, until(PAIRS), &[]),
        [(Some(PAIRS), "done")]
    );
}

#[test]
fn a_missing_generator_stops_the_run_before_its_first_stage() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("no-such-generator.gguf");
    let cfg = config_in(
        d.path(),
        &format!(
            "{}\n[generate]\npretrained-endings = 2\npretrained-model = \"{}\"\n",
            captions_input(),
            missing.display()
        ),
    );
    let config = load(&cfg);
    let message = run_stages_err(&config, until(GENERATE), &[], "no generator, no run");
    assert!(
        message.contains("no-such-generator.gguf") && message.contains("pretrained-model"),
        "{message}"
    );
    assert!(
        !config.run.dir.join("pairs").exists(),
        "refused before pairs ran"
    );
}

#[test]
fn lm_pretrains_on_prose_then_fine_tunes_each_fold() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let prose = repo().join("fixtures/inputs/prose");
    let cfg = config_in(
        d.path(),
        &format!(
            "[lm]\nmin-count = 1\nembedding = 8\nhidden = 8\nmax-epochs = 1\npretrain-epochs = 2\n\n\
             [[lm.pretrain]]\npath = \"{}\"\nformat = \"text\"\n\n{}",
            prose.display(),
            captions_input()
        ),
    );
    let config = load(&cfg);
    let early = format!(
        "{:#}",
        run_stage(&config, LM, false).err().expect("no pairs yet")
    );
    assert!(
        early.contains("needs the `pairs` stage's outputs"),
        "{early}"
    );
    run_stage(&config, PAIRS, true).unwrap_or_else(|e| panic!("{e:#}"));
    let StageRun::Done { report, .. } =
        run_stage(&config, LM, false).unwrap_or_else(|e| panic!("{e:#}"))
    else {
        panic!("the lm stage ran to the end")
    };
    let lm: &LmReport = report
        .downcast_ref()
        .expect("the lm stage reports an LmReport");
    assert_eq!(
        lm.pretrain_sequences, 4,
        "5 sentences of prose in one file make 4 pairs"
    );
    assert_eq!(lm.folds.len(), 5);
    let report = json(&d.path().join("run/lm/report.json"));
    assert_eq!(report["pretrain_sequences"], 4);
    let progress = json(&d.path().join("run/lm/pretrain/progress.json"));
    assert_eq!(progress["history"].as_array().unwrap().len(), 2);
    assert_eq!(report["folds"].as_array().unwrap().len(), 5);
    for k in 0..5 {
        assert!(d
            .path()
            .join(format!("run/lm/fold-{k}/best.safetensors"))
            .exists());
    }
}

#[test]
fn filter_export_and_report_agree() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let config = load(&fixture_config(d.path(), 3, 3, ""));
    let outcomes = run_stages(&config, &af_pipeline::ALL_STAGES, &[]);
    assert!(outcomes.iter().all(|o| o.1 == "done"), "{outcomes:?}");
    let run = d.path().join("run");
    let state = json(&run.join("filter/state.json"));
    let iterations = state["iterations"].as_array().unwrap();
    assert!(!iterations.is_empty() && iterations.len() <= 6);
    assert!(state["finished"].as_bool().unwrap());

    // metrics.csv: one row per iteration and head, heads of the stage's committee plus joint.
    let metrics = std::fs::read_to_string(run.join("filter/metrics.csv")).unwrap();
    let rows: Vec<&str> = metrics.lines().skip(1).collect();
    let heads: usize = iterations
        .iter()
        .map(|i| i["heads"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows.len(), heads);
    assert!(rows[0].starts_with("0,mlp,joint,true,"), "{}", rows[0]);
    assert!(rows.iter().any(|r| r.contains(",full,pos-lstm,")) || iterations.len() <= 3);
    // The pool's floor: each row's last column is its iteration's count of held-out items whose
    // gold the driving head scored above every candidate, and the report repeats the last one.
    let floor: Vec<u64> = iterations
        .iter()
        .map(|i| i["items_gold_above_pool"].as_u64().unwrap())
        .collect();
    assert!(floor
        .iter()
        .zip(iterations)
        .all(|(&n, i)| n <= i["heldout_items"].as_u64().unwrap()));
    assert!(metrics
        .lines()
        .next()
        .unwrap()
        .ends_with(",seconds,items_gold_above_pool"));
    assert_eq!(rows[0].rsplit(',').next().unwrap(), floor[0].to_string());
    let report = common::json(&run.join("filter/report.json"));
    assert_eq!(
        report["last_gold_above_pool"].as_u64(),
        floor.last().copied()
    );
    assert_eq!(
        report["last_heldout_items"],
        iterations.last().unwrap()["heldout_items"]
    );

    // The history replays onto the random start to give the final assignment.
    let history = std::fs::read_to_string(run.join("filter/history.csv")).unwrap();
    let swaps: usize = iterations
        .iter()
        .map(|i| i["swaps"].as_u64().unwrap() as usize)
        .sum();
    assert_eq!(history.lines().count(), swaps + 1);

    // datamap.csv: every item some iteration trained on, its dynamics in [0, 1]; the ones whose
    // question is final are counted in report.json.
    let map = std::fs::read_to_string(run.join("filter/datamap.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(map.as_bytes());
    let header = reader.headers().unwrap().clone();
    assert_eq!(
        &header.iter().take(8).collect::<Vec<_>>(),
        &[
            "item_id",
            "iteration",
            "final_question",
            "confidence",
            "variability",
            "correctness",
            "forgetfulness",
            "regions"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert!(
        !rows.is_empty()
            && rows.len()
                <= json(&run.join("filter/report.json"))["items"]
                    .as_u64()
                    .unwrap() as usize
    );
    for r in &rows {
        for c in 3..6 {
            assert!((0.0..=1.0).contains(&r[c].parse::<f64>().unwrap()), "{r:?}");
        }
        assert!(r[1].parse::<usize>().unwrap() < iterations.len());
    }
    let finals = rows.iter().filter(|r| &r[2] == "true").count();
    assert_eq!(
        json(&run.join("filter/report.json"))["datamap_items"]
            .as_u64()
            .unwrap() as usize,
        finals
    );
    assert_eq!(
        finals > 0,
        run.join("filter/datamap.svg").exists() && run.join("filter/datamap.png").exists()
    );

    // dataset.jsonl: one line per item in the pool, k distinct distractors, none the gold.
    let dataset = std::fs::read_to_string(run.join("export/dataset.jsonl")).unwrap();
    let random = std::fs::read_to_string(run.join("export/random.jsonl")).unwrap();
    let items = std::fs::read_to_string(run.join("pairs/items.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(dataset.lines().count(), items);
    assert_eq!(random.lines().count(), items);
    let mut differs = 0;
    for (a, r) in dataset.lines().zip(random.lines()) {
        let (a, r): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(a).unwrap(),
            serde_json::from_str(r).unwrap(),
        );
        assert_eq!(a["id"], r["id"]);
        let ends: Vec<&str> = a["distractors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["ending"].as_str().unwrap())
            .collect();
        assert_eq!(ends.len(), 3);
        assert!(!ends.contains(&a["gold"]["ending"].as_str().unwrap()));
        let mut ids: Vec<u64> = a["distractors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["candidate"].as_u64().unwrap())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 3);
        assert_eq!(
            a["distractors"][0]["features"].as_object().unwrap().len(),
            8
        );
        differs += usize::from(a["distractors"] != r["distractors"]);
    }
    assert_eq!(
        differs > 0,
        swaps > 0,
        "AF changed exactly the items it swapped in"
    );

    // SWAG's full CSV: header with 3 distractor columns, one row per item.
    let full = std::fs::read_to_string(run.join("export/dataset-full.csv")).unwrap();
    assert!(full.starts_with("video-id,fold-ind,startphrase,gold-ending,distractor-0,distractor-1,distractor-2,gold-source,"));
    let mut reader = csv::Reader::from_reader(full.as_bytes());
    assert_eq!(reader.records().count(), items);

    // With k = 3 the regular layout is SWAG's own, header for header.
    let regular = std::fs::read_to_string(run.join("export/swag/train.csv")).unwrap();
    let header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label";
    assert_eq!(regular.lines().next().unwrap(), header);
    if let Some(data) = shared_data("filter_export_and_report_agree (SWAG header)") {
        let sample = std::fs::read_to_string(data.join("format-samples/swag/train.csv")).unwrap();
        assert_eq!(sample.lines().next().unwrap(), header);
    }

    let eval = json(&run.join("export/evaluation.json"));
    for side in ["af", "random"] {
        let names: Vec<&str> = eval[side]["detectors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "joint",
                "mlp",
                "bow",
                "cnn",
                "pos-lstm",
                "longest-ending",
                "shortest-ending",
                "median-length-ending"
            ]
        );
        for d in eval[side]["detectors"].as_array().unwrap() {
            let (a, lo, hi) = (
                d["accuracy"].as_f64().unwrap(),
                d["ci_low"].as_f64().unwrap(),
                d["ci_high"].as_f64().unwrap(),
            );
            assert!(lo <= a && a <= hi, "{d}");
        }
    }

    // The audit's detectors the committee (mlp, bow, cnn, pos-lstm on noun phrase + ending) never
    // was: every [audit] model on every view but the CNN on the committee's own view, token
    // statistics and baselines, on both datasets.
    let audit = &eval["audit"];
    assert_eq!(audit["models"], serde_json::json!(["ngram", "cnn", "lstm"]));
    assert_eq!(
        audit["left_out_as_committee_members"],
        serde_json::json!(["cnn/second-sentence"])
    );
    let compared: Vec<&str> = audit["comparison"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["detector"].as_str().unwrap())
        .collect();
    assert_eq!(
        compared,
        [
            "random",
            "shortest-ending",
            "longest-ending",
            "median-length-ending",
            "shortest-words-ending",
            "longest-words-ending",
            "token-statistics/ending",
            "ngram/ending",
            "cnn/ending",
            "lstm/ending",
            "ngram/second-sentence",
            "lstm/second-sentence",
            "ngram/full",
            "cnn/full",
            "lstm/full"
        ]
    );
    for name in ["af", "random"] {
        let full = json(&run.join(format!("export/audit-{name}.json")));
        assert_eq!(full["detectors"].as_array().unwrap().len(), compared.len());
    }
    let csv_rows = std::fs::read_to_string(run.join("export/audit-comparison.csv"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(csv_rows, compared.len() + 1);
    // Both audits measured the same questions, so every detector has its paired change of edge.
    for c in audit["comparison"].as_array().unwrap() {
        let e = &c["edge_change"];
        let (x, lo, hi) = (
            e["change"].as_f64().unwrap(),
            e["ci_low"].as_f64().unwrap(),
            e["ci_high"].as_f64().unwrap(),
        );
        let unpaired = c["af_edge"].as_f64().unwrap() - c["random_edge"].as_f64().unwrap();
        assert!(lo <= x && x <= hi && (x - unpaired).abs() < 1e-9, "{c}");
    }

    // The report: self-contained, the plot in both formats.
    let html = std::fs::read_to_string(run.join("report/report.html")).unwrap();
    for needle in [
        "Held-out accuracy during filtering",
        "random assignment",
        "Audit detectors the committee never saw",
        "Perplexity of gold endings",
        "class=\"right\"",
        "<svg",
        "Compute",
        "Generation arithmetic: fp32",
        "Data map of the filtered dataset",
        // `load` leaves the LM's evaluation off: the report and the card say so, and why.
        "Not measured: [export] eval = false.",
    ] {
        assert!(html.contains(needle), "report lacks {needle}");
    }
    let card = std::fs::read_to_string(run.join("export/README.md")).unwrap();
    assert!(card.contains("Not measured: [export] eval = false."));
    assert!(!run.join("export/eval").exists());
    // Every stage records its time and peak host memory (no device memory on the CPU).
    for stage in [PAIRS, LM, GENERATE, FILTER, EXPORT].map(StageName::dir_name) {
        let record = json(&run.join(format!("{stage}/stage.json")));
        assert!(
            record["peak_host_bytes"]
                .as_u64()
                .is_some_and(|b| b > 10 << 20),
            "{stage}: {record}"
        );
        assert!(record["device_bytes"].is_null(), "{stage}: {record}");
    }
    // The filter leaves its table for the export, which loads it rather than tagging again.
    assert!(
        run.join("filter/table/table.json").exists()
            && run.join("filter/table/part-000.safetensors").exists()
    );
    let table = json(&run.join("filter/table.json"));
    assert!(
        table["rows"].as_u64().unwrap() > 0
            && table["peak_host_bytes_after_table"].as_u64().is_some()
    );
    assert!(
        !html.contains(" src=") && !html.contains("<link") && !html.contains("<script"),
        "nothing is fetched"
    );
    assert_eq!(
        &std::fs::read(run.join("report/accuracy.png")).unwrap()[1..4],
        b"PNG"
    );
    assert!(std::fs::read_to_string(run.join("report/accuracy.svg"))
        .unwrap()
        .contains("chance"));
    assert!(std::fs::read_to_string(run.join("report/datamap.svg"))
        .unwrap()
        .contains("variability"));

    // The report is rebuilt from the run directory's files alone (what `af report RUN_DIR` does).
    std::fs::remove_file(run.join("report/report.html")).unwrap();
    af_pipeline::stages::report::write(&run, &run.join("report"))
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        std::fs::read_to_string(run.join("report/report.html")).unwrap(),
        html
    );
}

/// Issue 17: a successful `pairs`, then an input that fails halfway (its header lacks the
/// configured column): the failure leaves the last good outputs as they were and writes nothing.
#[test]
fn a_failed_stage_leaves_the_last_good_outputs_as_they_were() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("captions.csv");
    let good = "video,caption\nv1,A man walks into the room with a dog.\nv1,He sits down on the old couch and reads.\nv1,The dog jumps up next to him on the couch.\n";
    std::fs::write(&input, good).unwrap();
    let layout = format!(
        "[pairs]\nmin-context-tokens = 3\nmin-ending-tokens = 2\n\n[[pairs.inputs]]\npath = \"{}\"\nformat = \"csv\"\ngroup-field = \"video\"\ntext-field = \"caption\"\n",
        input.display()
    );
    let cfg = config_in(d.path(), &layout);
    run_stage(&load(&cfg), PAIRS, true).unwrap_or_else(|e| panic!("{e:#}"));
    let pairs = d.path().join("run/pairs");
    let read =
        |name: &str| std::fs::read(pairs.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let before: Vec<Vec<u8>> = [
        "items.jsonl",
        "vocab.tsv",
        "stage.json",
        "report.json",
        "config.toml",
    ]
    .iter()
    .map(|n| read(n))
    .collect();
    std::fs::write(&input, good.replace("caption", "text")).unwrap();
    let e = format!(
        "{:#}",
        run_stage(&load(&cfg), PAIRS, true)
            .err()
            .expect("the column is missing")
    );
    assert!(e.contains("caption"), "{e}");
    let after: Vec<Vec<u8>> = [
        "items.jsonl",
        "vocab.tsv",
        "stage.json",
        "report.json",
        "config.toml",
    ]
    .iter()
    .map(|n| read(n))
    .collect();
    assert!(before == after, "the last good outputs are untouched");
    assert!(!pairs.join("started.json").exists());
    let left: Vec<String> = std::fs::read_dir(d.path().join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["pairs"], "no work directory is left behind");
}

/// The generate report counts every validity rule on the pool and on the gold endings; rules
/// named in `[generate] reject` keep their endings out of the pool, and the draws they turned
/// away are counted.
#[test]
fn generate_counts_validity_and_rejects_what_it_is_told() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    run_stages(&load(&cfg), until(GENERATE), &[]);
    let report = json(&d.path().join("run/generate/report.json"));
    let v = &report["validity"];
    let rules: Vec<&str> = v["rules"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        rules,
        ["dangling", "length-gap", "near-copy", "no-verb", "repeat"]
    );
    assert_eq!(v["rejected_draws"], 0, "nothing rejected unless asked");
    let (valid, gold) = (
        v["valid_share"].as_f64().unwrap(),
        v["gold_valid_share"].as_f64().unwrap(),
    );
    assert!(gold > 0.8, "the captions are sentences: {gold}");
    assert!(
        valid < gold,
        "the tiny LM's endings are worse than the captions: {valid} vs {gold}"
    );
    assert!(
        v["rules"]["near-copy"]["gold"].is_null(),
        "a gold ending is not compared with itself"
    );

    let strict = std::fs::read_to_string(&cfg).unwrap().replace(
        "[generate]\n",
        "[generate]\nreject = [\"no-verb\", \"dangling\", \"repeat\"]\n",
    );
    std::fs::write(&cfg, strict).unwrap();
    assert_eq!(
        run_stages(&load(&cfg), &[GENERATE], &[]),
        [(Some(GENERATE), "done")],
        "a new rule set is a new pool"
    );
    let report = json(&d.path().join("run/generate/report.json"));
    let v = &report["validity"];
    assert_eq!(
        v["reject"],
        serde_json::json!(["no-verb", "dangling", "repeat"])
    );
    for rule in ["no-verb", "dangling", "repeat"] {
        assert_eq!(
            v["rules"][rule]["kept"], 0,
            "{rule}: rejected endings stay out of the pool"
        );
    }
    assert!(v["rejected_draws"].as_u64().unwrap() > 0);
    assert!(v["rules"]["no-verb"]["rejected_draws"].as_u64().unwrap() > 0);
    assert!(d
        .path()
        .join("run/generate/rejected/part-00000.json")
        .is_file());

    // Borrowed endings: other items' golds join each pool as candidates 1..=n, before the sampled
    // ones, each traced to its source in borrowed.tsv and counted apart in the report.
    let borrowed = std::fs::read_to_string(&cfg).unwrap().replace(
        "[generate]\n",
        "[generate]\nborrowed-endings = 2\nlimit-items = 20\n",
    );
    std::fs::write(&cfg, borrowed).unwrap();
    assert_eq!(
        run_stages(&load(&cfg), &[GENERATE], &[]),
        [(Some(GENERATE), "done")]
    );
    let report = json(&d.path().join("run/generate/report.json"));
    assert_eq!(
        (
            report["items"].as_u64(),
            report["borrowed_endings"].as_u64()
        ),
        (Some(20), Some(40))
    );
    let items = af_io::items::read_items(&d.path().join("run/pairs/items.jsonl")).unwrap();
    let rows: Vec<af_core::Candidate> = af_io::pool::parts(&d.path().join("run/generate/pool"))
        .unwrap()
        .iter()
        .flat_map(|p| af_io::pool::read_part(p).unwrap())
        .collect();
    let tsv = std::fs::read_to_string(d.path().join("run/generate/borrowed.tsv")).unwrap();
    let lines: Vec<Vec<&str>> = tsv
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(lines.len(), 40);
    for l in &lines {
        let (index, candidate, source): (u32, u32, usize) = (
            l[0].parse().unwrap(),
            l[2].parse().unwrap(),
            l[3].parse().unwrap(),
        );
        assert!((1..=2).contains(&candidate));
        let row = rows
            .iter()
            .find(|r| r.item_index == index && r.candidate == candidate)
            .unwrap();
        let (item, from) = (&items[index as usize], &items[source]);
        assert_eq!(
            row.ending, from.ending,
            "the pool holds the source's gold as it was written"
        );
        assert_eq!((from.fold, l[4]), (item.fold, from.id.as_str()));
        assert_ne!(from.group, item.group);
        assert_eq!(row.origin.as_deref(), Some("borrowed"), "the pool says so");
    }
    assert!(
        rows.iter().any(|r| r.candidate > 2),
        "sampled endings follow the borrowed ones"
    );
    // Every row's origin is stored: what borrowed.tsv lists, the golds, and the sampled rest.
    for r in &rows {
        let expected = match r.candidate {
            0 => "gold",
            1 | 2 => "borrowed",
            _ => "sampled",
        };
        assert_eq!(r.origin.as_deref(), Some(expected), "{r:?}");
    }
    assert_eq!(report["endings_by_origin"]["borrowed"], 40, "{report}");
}

/// `[run] device-memory` on the CPU: the arithmetic a GPU run uses. A budget too small for the
/// configured batches makes them smaller and says so in `stage.json`; one too small for a single
/// row stops the stage before its work, and the last good outputs stay.
#[test]
fn generate_sizes_its_batches_to_the_device_memory_budget_or_refuses_before_work() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    let with_budget = |budget: &str| {
        let text = std::fs::read_to_string(&cfg).unwrap();
        let text = match text.find("device-memory") {
            Some(_) => text
                .lines()
                .map(|l| {
                    if l.starts_with("device-memory") {
                        format!("device-memory = {budget}")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => text.replacen("[run]\n", &format!("[run]\ndevice-memory = {budget}\n"), 1),
        };
        std::fs::write(&cfg, text).unwrap();
    };
    run_stages(&load(&cfg), until(GENERATE), &[]);
    let unbounded = json(&d.path().join("run/generate/stage.json"));
    let plan = &unbounded["memory_plan"];
    assert!(
        plan["budget_bytes"].is_null(),
        "the CPU with auto: no bound"
    );
    for batch in plan["batches"].as_array().unwrap() {
        assert_eq!(batch["planned"], batch["configured"], "{batch}");
    }

    with_budget("\"4MB\"");
    assert_eq!(
        run_stages(&load(&cfg), &[GENERATE], &[GENERATE]),
        [(Some(GENERATE), "done")]
    );
    let plan = json(&d.path().join("run/generate/stage.json"))["memory_plan"].clone();
    assert_eq!(plan["budget_bytes"], 4_000_000);
    let batches = plan["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2, "{plan}");
    assert_eq!(batches[0]["key"], "[generate] batch-sequences");
    assert_eq!(batches[0]["configured"], 512);
    for batch in batches {
        let (planned, configured) = (
            batch["planned"].as_u64().unwrap(),
            batch["configured"].as_u64().unwrap(),
        );
        assert!(planned > 0 && planned < configured, "cut to fit: {batch}");
        assert!(
            batch["peak_bytes"].as_u64().unwrap() <= 3_400_000,
            "85% of 4 MB: {batch}"
        );
    }
    let report = json(&d.path().join("run/generate/report.json"));
    assert_eq!(
        report["items_short"], 0,
        "smaller batches, the same endings wanted: {report}"
    );

    with_budget("1000");
    let Err(err) = run_stage(&load(&cfg), GENERATE, true) else {
        panic!("a budget of 1,000 bytes fits no LM");
    };
    let message = format!("{err:#}");
    assert!(
        message.contains("cannot fit") && message.contains("[generate] batch-sequences"),
        "{message}"
    );
    // Refused before any work: the last good outputs are as they were.
    let kept = json(&d.path().join("run/generate/stage.json"));
    assert_eq!(kept["memory_plan"]["budget_bytes"], 4_000_000);
    assert!(af_io::pool::part_path(&d.path().join("run/generate/pool"), 0).is_file());
}

/// The filter stage's plan: every phase's training step must fit as configured (its size is
/// part of AF), and scoring batches shrink to what fits.
#[test]
fn filter_sizes_scoring_to_the_budget_and_refuses_a_training_step_that_cannot_fit() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    run_stages(&load(&cfg), until(FILTER), &[]);
    let plan = json(&d.path().join("run/filter/stage.json"))["memory_plan"].clone();
    let batches = plan["batches"].as_array().unwrap().clone();
    let names: Vec<&str> = batches
        .iter()
        .map(|b| b["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "committee training step, phase `mlp`",
            "committee scoring, phase `mlp`",
            "committee training step, phase `full`",
            "committee scoring, phase `full`"
        ]
    );
    let field = |b: &serde_json::Value, k: &str| b[k].as_u64().unwrap();
    let (train, score) = (&batches[2], &batches[3]);
    assert_eq!(
        field(train, "configured"),
        16 * 4,
        "batch-items x (k + 1) rows"
    );
    assert_eq!(
        field(score, "configured"),
        512,
        "score-batch auto on the CPU"
    );
    assert!(
        field(train, "bytes_per_unit") > field(score, "bytes_per_unit"),
        "training keeps activations for the backward pass"
    );
    assert!(
        field(score, "bytes_per_unit") > field(&batches[1], "bytes_per_unit"),
        "the full committee needs more than the MLP alone"
    );

    // A budget where the full committee scores 256 candidates at a time and trains as configured.
    let resident = field(score, "resident_bytes");
    let usable =
        resident + (256 * field(score, "bytes_per_unit")).max(64 * field(train, "bytes_per_unit"));
    let budget = (usable as f64 / af_core::memory::USABLE_SHARE).ceil() as u64 + 1;
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replacen("[run]\n", &format!("[run]\ndevice-memory = {budget}\n"), 1),
    )
    .unwrap();
    run_stages(&load(&cfg), &[FILTER], &[FILTER]);
    let plan = json(&d.path().join("run/filter/stage.json"))["memory_plan"].clone();
    let batches = plan["batches"].as_array().unwrap();
    assert_eq!(field(&batches[2], "planned"), 64, "training as configured");
    let planned = field(&batches[3], "planned");
    assert!(
        (200..512).contains(&planned),
        "scoring cut to fit: {planned}"
    );
    assert!(field(&batches[3], "peak_bytes") <= usable);

    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace(
            &format!("device-memory = {budget}"),
            &format!("device-memory = {}", resident + 1000),
        ),
    )
    .unwrap();
    let Err(err) = run_stage(&load(&cfg), FILTER, true) else {
        panic!("a budget of the table and 1,000 bytes fits no training step");
    };
    let message = format!("{err:#}");
    assert!(
        message.contains("cannot fit") && message.contains("[committee] batch-items"),
        "{message}"
    );
}

/// Length shaping toward other videos' gold lengths (the default target, `nearby-gold`) draws
/// its targets from the run's other items even when the prompts carry no examples (a run without
/// `pretrained-examples` once had none to draw from), and fills every item.
#[test]
fn generate_shapes_pretrained_lengths_without_example_captions() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&model, 3).unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    let extra = format!("[generate]\npretrained-endings = 2\npretrained-length-bias = 1.0\npretrained-model = \"{}\"\nlimit-items = 6\n", model.display());
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[generate]\n", &extra);
    std::fs::write(&cfg, text).unwrap();
    run_stages(&load(&cfg), until(GENERATE), &[]);
    let report = json(&d.path().join("run/generate/report.json"));
    assert_eq!(report["pretrained"]["endings"], 12, "{report}");
}

/// Caption adapters: one per question fold, trained before drawing, saved in the run, reported,
/// and read back (not trained again) when the stage resumes; the same adapters draw the same
/// endings.
#[test]
fn generate_trains_a_caption_adapter_per_fold_and_reuses_it() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&model, 3).unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    let extra = format!("[generate]\npretrained-endings = 2\npretrained-examples = 1\npretrained-adapt-steps = 3\npretrained-adapt-batch = 2\npretrained-adapt-learning-rate = 0.05\npretrained-model = \"{}\"\nlimit-items = 8\n", model.display());
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[generate]\n", &extra);
    std::fs::write(&cfg, text).unwrap();
    run_stages(&load(&cfg), until(GENERATE), &[]);
    let generate = d.path().join("run/generate");
    let report = json(&generate.join("report.json"));
    assert_eq!(report["pretrained"]["endings"], 16, "{report}");
    let adapters = report["pretrained"]["adapters"].as_array().unwrap().clone();
    assert!(!adapters.is_empty(), "{report}");
    for a in &adapters {
        assert_eq!(a["steps"], 3);
        assert!(a["seconds_this_run"].as_f64().unwrap() > 0.0);
        let path = generate.join(format!("pretrained/adapter-fold-{}.safetensors", a["fold"]));
        assert!(path.is_file(), "{}", path.display());
    }
    let first = std::fs::read_to_string(generate.join("pretrained/part-00000.json")).unwrap();
    // Resumed without its parts: the adapters are read back, and draw the same endings.
    for entry in std::fs::read_dir(generate.join("pretrained")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("part-")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    std::fs::remove_dir_all(generate.join("pool")).unwrap();
    std::fs::remove_file(generate.join("stage.json")).unwrap();
    run_stages(&load(&cfg), &[GENERATE], &[]);
    let report = json(&generate.join("report.json"));
    for a in report["pretrained"]["adapters"].as_array().unwrap() {
        assert_eq!(a["seconds_this_run"], 0.0, "{report}");
    }
    assert_eq!(
        std::fs::read_to_string(generate.join("pretrained/part-00000.json")).unwrap(),
        first
    );

    // Another run (its own directory) copies the adapters instead of training them: they were
    // trained on exactly its inputs, and draw the same endings.
    let other = d.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let from = generate.join("pretrained");
    let copy = |learning_rate: &str| {
        let text = std::fs::read_to_string(&cfg)
            .unwrap()
            .replace(
                "dir = \"run\"",
                &format!("dir = \"{}\"", other.join("run").display()),
            )
            .replace(
                "pretrained-endings = 2\n",
                &format!(
                    "pretrained-endings = 2\npretrained-adapters-from = \"{}\"\n",
                    from.display()
                ),
            )
            .replace(
                "pretrained-adapt-learning-rate = 0.05",
                &format!("pretrained-adapt-learning-rate = {learning_rate}"),
            );
        let path = other.join("config.toml");
        std::fs::write(&path, text).unwrap();
        load(&path)
    };
    let config = copy("0.05");
    run_stages(&config, until(GENERATE), &[]);
    let copied = other.join("run/generate");
    let report = json(&copied.join("report.json"));
    for a in report["pretrained"]["adapters"].as_array().unwrap() {
        assert_eq!(a["seconds_this_run"], 0.0, "{report}");
        let name = format!("pretrained/adapter-fold-{}.safetensors", a["fold"]);
        assert_eq!(
            std::fs::read(copied.join(&name)).unwrap(),
            std::fs::read(generate.join(&name)).unwrap()
        );
        let written = json(&copied.join(format!("pretrained/adapter-fold-{}.json", a["fold"])));
        assert_eq!(written["copied_from"], from.display().to_string());
    }
    assert_eq!(
        std::fs::read_to_string(copied.join("pretrained/part-00000.json")).unwrap(),
        first
    );
    // Up to date, the run no longer needs the directory it copied from.
    let moved = d.path().join("moved");
    std::fs::rename(&from, &moved).unwrap();
    assert_eq!(
        run_stages(&config, until(GENERATE), &[]).last().unwrap().1,
        "up-to-date"
    );
    std::fs::rename(&moved, &from).unwrap();
    // Its own generate/ directory is emptied before the stage runs: refused before any stage.
    let mut own = config.clone();
    own.generate.pretrained_adapters_from = Some(copied.join("pretrained"));
    let message = run_stages_err(
        &own,
        until(GENERATE),
        &[GENERATE],
        "a run's own adapters directory is refused",
    );
    assert!(message.contains("this run's own generate/"), "{message}");
    // Another learning rate: not the adapter this run would train, so none is copied.
    std::fs::remove_dir_all(other.join("run")).unwrap();
    let config = copy("0.01");
    let message = run_stages_err(
        &config,
        until(GENERATE),
        &[],
        "adapters trained on other settings are not copied",
    );
    assert!(
        message.contains("trained on other examples, settings or generator"),
        "{message}"
    );
}

/// The checks that read the pretrained encoder (all-MiniLM-L6-v2, which scripts/test installs):
/// shared endings kept to the scene, and `could-be-right` setting endings aside before the pool
/// is written, each one listed in set-aside.tsv and absent from its item's pool.
#[test]
fn generate_keeps_shared_endings_to_the_scene_and_sets_aside_what_could_be_right() {
    let _lock = lock();
    assert!(
        std::env::var_os(af_nn::encoder::ENCODER_DIR_ENV).is_some(),
        "AF_ENCODER_DIR is unset: run the tests with scripts/test, or `source scripts/env.sh` first"
    );
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&model, 3).unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    let with = |checks: &str| {
        let extra = format!(
            "[generate]\npretrained-endings = 4\nshared-endings = 4\npretrained-model = \"{}\"\nlimit-items = 20\n{checks}",
            model.display()
        );
        let text = std::fs::read_to_string(d.path().join("base.toml"))
            .unwrap()
            .replace("[generate]\n", &extra)
            .replace("block-items = 32", "block-items = 5");
        std::fs::write(&cfg, text).unwrap();
    };
    std::fs::copy(&cfg, d.path().join("base.toml")).unwrap();
    let generate = d.path().join("run/generate");
    // Nearly everything is as near the gold as a cosine of 0.01: set aside, and out of the pool.
    with("could-be-right = [\"similar\"]\ncould-be-right-similarity = 0.01\n");
    run_stages(&load(&cfg), until(GENERATE), &[]);
    let report = json(&generate.join("report.json"));
    assert!(report["shared"]["topic"]["mean_floor"].is_f64(), "{report}");
    // Each shared ending is at least as near its item's context as the floor it is listed with.
    let shared = std::fs::read_to_string(generate.join("shared.tsv")).unwrap();
    let near: Vec<(f32, f32)> = shared
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .map(|l| (l[4].parse().unwrap(), l[5].parse().unwrap()))
        .collect();
    assert!(!near.is_empty(), "some endings are near enough to share");
    assert!(
        near.iter().all(|(similarity, floor)| similarity >= floor),
        "{shared}"
    );
    let checks = &report["could-be-right"];
    let checked = checks["checked"].as_u64().unwrap();
    let aside = checks["set_aside"].as_u64().unwrap();
    assert_eq!(
        checked,
        80 + report["shared"]["endings"].as_u64().unwrap(),
        "every pretrained and shared ending is checked: {checks}"
    );
    // Nearly every ending is flagged, and none is kept back for k: af's LMs add 15 per item.
    assert!(aside * 2 > checked, "{checks}");
    assert_eq!(checks["kept_for_k"], 0, "{checks}");
    assert_eq!(checks["by_check"]["similar"], aside);
    let rows: Vec<af_core::Candidate> = af_io::pool::parts(&generate.join("pool"))
        .unwrap()
        .iter()
        .flat_map(|p| af_io::pool::read_part(p).unwrap())
        .collect();
    let tsv = std::fs::read_to_string(generate.join("set-aside.tsv")).unwrap();
    let listed: Vec<Vec<&str>> = tsv
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(listed.len() as u64, aside);
    for l in &listed {
        let item: u32 = l[0].parse().unwrap();
        assert!(l[4].parse::<f32>().unwrap() >= 0.01, "{l:?}");
        assert!(
            !rows
                .iter()
                .any(|r| r.item_index == item && r.ending == l[6]),
            "set aside, yet in the pool: {l:?}"
        );
    }

    // At its default threshold, only paraphrases: far fewer.
    with("could-be-right = [\"similar\"]\n");
    assert_eq!(
        run_stages(&load(&cfg), &[GENERATE], &[]),
        [(Some(GENERATE), "done")],
        "another threshold makes another pool"
    );
    let fewer = json(&generate.join("report.json"))["could-be-right"].clone();
    assert!(fewer["set_aside"].as_u64().unwrap() < aside, "{fewer}");
}

/// Pretrained endings: the generator (here the toy GGUF model af-nn writes) continues each item's
/// context and noun phrase; its endings join the pool after the item's own, each listed in
/// pretrained.tsv, counted apart in the report, and written per block so a resumed run reads them
/// back instead of drawing again.
#[test]
fn generate_joins_a_pretrained_generators_endings_to_the_pool() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&model, 3).unwrap();
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}{}", captions_input()));
    let extra = format!(
        "[generate]\npretrained-endings = 3\npretrained-model = \"{}\"\nlimit-items = 12\n",
        model.display()
    );
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[generate]\n", &extra)
        .replace("block-items = 32", "block-items = 5");
    std::fs::write(&cfg, text).unwrap();
    run_stages(&load(&cfg), until(GENERATE), &[]);
    let generate = d.path().join("run/generate");
    let report = json(&generate.join("report.json"));
    assert_eq!(report["pretrained"]["endings"], 36, "{report}");
    assert_eq!(report["pretrained"]["model"], "toy llama");
    let rows: Vec<af_core::Candidate> = af_io::pool::parts(&generate.join("pool"))
        .unwrap()
        .iter()
        .flat_map(|p| af_io::pool::read_part(p).unwrap())
        .collect();
    let tsv = std::fs::read_to_string(generate.join("pretrained.tsv")).unwrap();
    let listed: Vec<(u32, u32)> = tsv
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .map(|l| (l[0].parse().unwrap(), l[2].parse().unwrap()))
        .collect();
    assert_eq!(listed.len(), 36);
    let parts: Vec<serde_json::Value> = (0..3)
        .map(|b| json(&generate.join(format!("pretrained/part-{b:05}.json"))))
        .collect();
    let written: Vec<String> = parts
        .iter()
        .flat_map(|p| {
            p["endings"].as_array().unwrap().iter().flat_map(|e| {
                e.as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
            })
        })
        .collect();
    for (n, (index, candidate)) in listed.iter().enumerate() {
        assert!(
            (1..=3).contains(candidate),
            "the items came with no options: pretrained endings are candidates 1..=3"
        );
        let row = rows
            .iter()
            .find(|r| r.item_index == *index && r.candidate == *candidate)
            .unwrap();
        assert_eq!(
            row.ending, written[n],
            "the pool holds what the generator wrote"
        );
    }
    // The pool's origin column says the same as pretrained.tsv, row for row.
    let stored: Vec<(u32, u32)> = rows
        .iter()
        .filter(|r| r.origin.as_deref() == Some("pretrained"))
        .map(|r| (r.item_index, r.candidate))
        .collect();
    assert_eq!(stored, listed);
    // The generator's rows are in the stage's memory plan, as configured without a bound.
    let plan = json(&generate.join("stage.json"))["memory_plan"].clone();
    let rows_planned = plan["batches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == "[generate] pretrained-batch")
        .unwrap_or_else(|| panic!("{plan}"))
        .clone();
    assert_eq!(rows_planned["planned"], rows_planned["configured"]);
    assert!(rows_planned["bytes_per_unit"].as_u64().unwrap() > 0);
    let samples = std::fs::read_to_string(generate.join("samples.txt")).unwrap();
    assert!(
        samples.contains("  pretrained: ") && samples.contains("  gen:  "),
        "{samples}"
    );
    assert!(
        rows.iter().any(|r| r.candidate > 3),
        "af's LMs sample after the pretrained endings"
    );

    // A run stopped after the generator's parts (as a kill leaves it: started.json, no pool, no
    // stage.json) reads them back when resumed: a part edited by hand comes back as it is.
    let mut part = parts[1].clone();
    part["endings"][0][0] = serde_json::json!("waves at the camera.");
    std::fs::write(
        generate.join("pretrained/part-00001.json"),
        part.to_string(),
    )
    .unwrap();
    std::fs::remove_dir_all(generate.join("pool")).unwrap();
    std::fs::remove_file(generate.join("stage.json")).unwrap();
    assert_eq!(
        run_stages(&load(&cfg), &[GENERATE], &[]),
        [(Some(GENERATE), "done")]
    );
    let rows: Vec<af_core::Candidate> = af_io::pool::parts(&generate.join("pool"))
        .unwrap()
        .iter()
        .flat_map(|p| af_io::pool::read_part(p).unwrap())
        .collect();
    assert!(rows
        .iter()
        .any(|r| r.item_index == 5 && r.candidate == 1 && r.ending == "waves at the camera."));
}

/// Every config under configs/ (the top-level recipes and configs/experiments/) loads, passes the
/// config's and the member registry's checks, and points where it did before it moved: its run
/// directory under the repository's runs/, its inputs and prose under the repository or
/// ../shared/data, an adopted run under runs/. Loading reads no input data, so this runs
/// without ../shared.
#[test]
fn every_config_in_the_repository_loads_and_points_at_its_files() {
    fn tomls(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                tomls(&path, out);
            } else if path.extension().is_some_and(|e| e == "toml") {
                out.push(path);
            }
        }
    }
    let repo = repo();
    let mut files = Vec::new();
    tomls(&repo.join("configs"), &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("configs/default.toml"))
            && files
                .iter()
                .any(|f| f.starts_with(repo.join("configs/experiments"))),
        "configs/default.toml and configs/experiments/ hold configs: {files:?}"
    );
    let shared = repo.parent().unwrap().join("shared/data");
    let runs = repo.join("runs");
    for file in &files {
        let config = af_pipeline::load_config(Some(file))
            .unwrap_or_else(|e| panic!("{}: {e:#}", file.display()));
        assert!(
            config.run.dir.starts_with(&runs),
            "{}: [run] dir {} is outside {}",
            file.display(),
            config.run.dir.display(),
            runs.display()
        );
        for input in config.pairs.inputs.iter().chain(&config.lm.pretrain) {
            assert!(
                input.path.starts_with(&shared) || input.path.starts_with(&repo),
                "{}: input {} is neither in the repository nor in {}",
                file.display(),
                input.path.display(),
                shared.display()
            );
        }
        if let Some(from) = &config.lm.from {
            assert!(
                from.starts_with(&runs),
                "{}: [lm] from {} is outside {}",
                file.display(),
                from.display(),
                runs.display()
            );
        }
    }
}

/// The filter's fingerprint records the members `[ablate]` names beyond the schedule, for whom
/// the candidate table is built too (its vocabulary, its views), and nothing else of `[ablate]`:
/// an `[ablate]` over the schedule's own members leaves the filter up to date.
#[test]
fn members_ablate_names_beyond_the_schedule_enter_the_filters_fingerprint() {
    let filter = FILTER.stage().unwrap();
    let base = af_core::Config::default();
    let mut config = base.clone();
    config.ablate.members = af_core::member_names(&["bow", "cnn"]);
    assert_eq!(
        filter.inputs(&config).unwrap(),
        filter.inputs(&base).unwrap()
    );
    config
        .ablate
        .compositions
        .push(af_core::ablate::CompositionSpec {
            name: "full-input".into(),
            members: af_core::member_names(&["mlp", "lstm"]),
            stages: Vec::new(),
        });
    let stamp = filter.inputs(&config).unwrap();
    assert_eq!(
        stamp["table-members"],
        serde_json::json!(["mlp", "bow", "cnn", "pos-lstm", "lstm"])
    );
    assert_eq!(stamp["filter"], filter.inputs(&base).unwrap()["filter"]);
}
