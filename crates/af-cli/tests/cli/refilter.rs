//! `af refilter` as a user meets it: a SWAG-layout file of our own re-filtered end to end (what
//! it prints and writes), and a file without answers refused with its file and line, leaving
//! nothing behind. What the stages do with the questions is tested in-process in
//! crates/af-pipeline/tests/refilter.rs.

use crate::common;

use common::{af, stderr};

/// `n` questions in SWAG's regular CSV layout, four endings each, the right one at `i % 4`.
fn swag_csv(n: usize, with_labels: bool) -> String {
    let verbs = [
        "walks", "jumps", "smiles", "waves", "runs", "sits", "turns", "laughs",
    ];
    let things = [
        "the ball", "a rope", "the door", "a cup", "the dog", "a hat",
    ];
    let mut text = String::from(",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n");
    for i in 0..n {
        let ending = |j: usize| {
            format!(
                "{} toward {} and {}.",
                verbs[(i + j) % 8],
                things[(i * 3 + j) % 6],
                verbs[(i + 2 * j + 1) % 8]
            )
        };
        let label = if with_labels {
            (i % 4).to_string()
        } else {
            String::new()
        };
        text.push_str(&format!(
            "{i},video{},{i},A person stands in room {i}. They,A person stands in room {i}.,They,gold,{},{},{},{},{label}\n",
            i / 2,
            ending(0),
            ending(1),
            ending(2),
            ending(3)
        ));
    }
    text
}

#[test]
fn a_swag_file_is_refiltered_end_to_end_and_one_without_answers_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("val.csv"), swag_csv(24, true)).unwrap();
    let config = common::config_in(
        d.path(),
        &format!("{}{}", common::TINY_MODELS, common::captions_input()),
    );
    let o = af(
        &[
            "refilter",
            "val.csv",
            "--config",
            config.to_str().unwrap(),
            "--generate",
            "3",
            "--out",
            "out",
        ],
        d.path(),
    );
    let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), stderr(&o));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("refilter: 24 of 24 questions re-filtered, 4 options each before, 4 after"),
        "{out}"
    );
    assert!(
        out.contains("pairs: 24 items, every one a question read as it stands"),
        "{out}"
    );
    let run = d.path().join("out");
    for file in [
        "refilter.toml",
        "export/dataset.jsonl",
        "export/swag/val.csv",
        "refilter/audit-comparison.csv",
        "refilter/report.json",
        "report/report.html",
    ] {
        assert!(run.join(file).exists(), "{file} is written");
    }
    // The config it ran is one `af run` takes: everything is up to date.
    let o = af(
        &["run", run.join("refilter.toml").to_str().unwrap()],
        d.path(),
    );
    assert!(o.status.success() && o.stdout.is_empty(), "{}", stderr(&o));

    std::fs::write(d.path().join("test.csv"), swag_csv(24, false)).unwrap();
    let o = af(
        &[
            "refilter",
            "test.csv",
            "--config",
            config.to_str().unwrap(),
            "--out",
            "out-test",
        ],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("test.csv:2:") && e.contains("cannot be audited or re-filtered"),
        "{e}"
    );
    assert!(
        !d.path().join("out-test").exists(),
        "a failed first run leaves no run directory"
    );
}
