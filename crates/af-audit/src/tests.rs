use std::collections::HashMap;

use super::*;
use crate::synthetic::{questions, Planted};

/// A stand-in for a learned detector: each token's log-odds of being in a right option, learned
/// on the training questions; an option scores the mean over its tokens, so (like fastText's
/// mean of embeddings) it cannot see length.
struct MeanLogOdds;

impl Learner for MeanLogOdds {
    type Error = std::convert::Infallible;

    fn train_and_score(
        &mut self,
        _: &MemberName,
        train: &[LearnerQuestion],
        eval: &[LearnerQuestion],
        _: u64,
    ) -> Result<Vec<Vec<f32>>, Self::Error> {
        let mut counts: HashMap<&str, (f64, f64)> = HashMap::new();
        for q in train {
            for (o, opt) in q.options.iter().enumerate() {
                for t in &opt.tokens[opt.marked.end..] {
                    let c = counts.entry(t).or_default();
                    if o == q.label {
                        c.0 += 1.0;
                    } else {
                        c.1 += 1.0 / (q.options.len() - 1) as f64;
                    }
                }
            }
        }
        Ok(eval
            .iter()
            .map(|q| {
                q.options
                    .iter()
                    .map(|opt| {
                        let ending = &opt.tokens[opt.marked.end..];
                        let sum: f64 = ending
                            .iter()
                            .map(|t| {
                                counts
                                    .get(t.as_str())
                                    .map_or(0.0, |(r, w)| ((r + 1.0) / (w + 1.0)).ln())
                            })
                            .sum();
                        (sum / ending.len().max(1) as f64) as f32
                    })
                    .collect()
            })
            .collect())
    }
}

fn run(planted: Planted, seed: u64) -> AuditReport {
    run_with(planted, 4, seed)
}

fn run_with(planted: Planted, options: usize, seed: u64) -> AuditReport {
    let config = AuditConfig {
        models: af_core::member_names(&["ngram"]),
        ..Default::default()
    };
    let mut calls = Vec::new();
    let report = audit(
        questions(800, options, planted, seed),
        None,
        &config,
        &[],
        seed,
        &mut MeanLogOdds,
        &mut |done, total, name| calls.push((done, total, name.to_string())),
    )
    .unwrap();
    assert_eq!(
        calls.last().unwrap().0,
        3,
        "three views, one model: {calls:?}"
    );
    report
}

fn flagged(r: &AuditReport) -> Vec<&str> {
    r.detectors
        .iter()
        .filter(|d| d.flagged)
        .map(|d| d.name.as_str())
        .collect()
}

#[test]
fn a_planted_word_is_flagged_by_token_statistics_the_learned_detectors_and_its_length() {
    let r = run(Planted::Word("zzgold"), 1);
    // And by the longest-words baseline: six characters in place of two to four.
    assert_eq!(
        flagged(&r),
        [
            "longest-words-ending",
            "token-statistics/ending",
            "ngram/ending",
            "ngram/second-sentence",
            "ngram/full"
        ],
        "{:#?}",
        r.detectors
    );
    assert_eq!(r.tokens.top[0].token, "zzgold");
    assert_eq!(r.tokens.significant, 1, "{:?}", r.tokens.top);
    assert_eq!((r.split.train + r.split.eval, r.split.eval), (800, 160));
}

#[test]
fn right_answers_always_longest_are_flagged_by_the_longest_ending_baseline_only() {
    let r = run(Planted::Longest, 2);
    assert_eq!(flagged(&r), ["longest-ending"], "{:#?}", r.detectors);
    let longest = r
        .detectors
        .iter()
        .find(|d| d.name == "longest-ending")
        .unwrap();
    assert_eq!(longest.accuracy, 1.0);
    assert_eq!(
        r.tokens.significant,
        0,
        "the length-adjusted no-artifact rate absorbs length: {:?}",
        &r.tokens.top[..3]
    );
}

#[test]
fn right_answers_with_longer_words_are_flagged_by_the_longest_words_baseline_not_by_length() {
    let r = run(Planted::LongWords, 3);
    let flagged = flagged(&r);
    assert!(flagged.contains(&"longest-words-ending"), "{flagged:?}");
    for quiet in [
        "shortest-words-ending",
        "shortest-ending",
        "longest-ending",
        "median-length-ending",
        "random",
    ] {
        assert!(!flagged.contains(&quiet), "{quiet}: {flagged:?}");
    }
    let longest = r
        .detectors
        .iter()
        .find(|d| d.name == "longest-words-ending")
        .unwrap();
    assert!(longest.accuracy > 0.8, "{longest:?}");
}

#[test]
fn right_answers_of_the_median_length_are_flagged_by_the_median_length_baseline_only() {
    let r = run_with(Planted::MedianLength, 5, 4);
    assert_eq!(flagged(&r), ["median-length-ending"], "{:#?}", r.detectors);
    let median = r
        .detectors
        .iter()
        .find(|d| d.name == "median-length-ending")
        .unwrap();
    assert_eq!(median.accuracy, 1.0);
    for extreme in ["longest-ending", "shortest-ending"] {
        assert_eq!(
            r.detectors
                .iter()
                .find(|d| d.name == extreme)
                .unwrap()
                .accuracy,
            0.0,
            "{extreme}"
        );
    }
}

#[test]
fn a_clean_dataset_leaves_every_detector_within_its_interval_of_chance() {
    let r = run(Planted::Nothing, 3);
    assert_eq!(flagged(&r), Vec::<&str>::new());
    for d in &r.detectors {
        assert!(
            d.ci_low <= d.chance && d.chance <= d.ci_high,
            "{} at {:.3} [{:.3}, {:.3}]",
            d.name,
            d.accuracy,
            d.ci_low,
            d.ci_high
        );
    }
}

#[test]
fn twins_are_kept_together_and_the_transforms_run_on_blank_questions() {
    // WinoGrande-style twins: the same options, the answer flipped by one word.
    let mut qs = Vec::new();
    for i in 0..200 {
        for twin in 1..=2 {
            let trigger = if twin == 1 { "liked" } else { "hated" };
            let blank = af_core::Blank {
                before: format!("Ann met Bo at w{i} because"),
                after: format!("{trigger} it."),
                options: vec!["Ann".to_string(), "Bo".to_string()],
            };
            qs.push(Question {
                id: format!("Q{i}-{twin}"),
                group: format!("Q{i}"),
                context: blank.before.clone(),
                prefix: String::new(),
                endings: (0..2).map(|o| blank.filled_ending(o)).collect(),
                label: twin - 1,
                split: None,
                blank: Some(blank),
                line: 0,
            });
        }
    }
    let config = AuditConfig {
        models: af_core::member_names(&["ngram"]),
        ..Default::default()
    };
    let r = audit(
        qs,
        None,
        &config,
        &[],
        5,
        &mut MeanLogOdds,
        &mut |_, _, _| {},
    )
    .unwrap();
    let twins = r.twins.as_ref().unwrap();
    assert_eq!(
        (twins.source, twins.pairs, twins.eval_pairs * 2),
        (TwinSource::Groups, 200, r.split.eval),
        "every held-out question has its twin held out"
    );
    let random = r
        .detectors
        .iter()
        .find(|d| d.name == "random")
        .unwrap()
        .twins
        .clone()
        .unwrap();
    assert!((random.chance - 0.25).abs() < 1e-12);
    assert_eq!(
        r.transforms
            .iter()
            .map(|t| (t.transform, t.excluded))
            .collect::<Vec<_>>(),
        [
            (Transform::NoCandidates, 0),
            (Transform::PartialSentence, 0)
        ]
    );
    for name in ["ngram/no-candidates", "ngram/partial-sentence"] {
        let d = r.detectors.iter().find(|d| d.name == name).unwrap();
        assert_eq!(d.eval_questions, r.split.eval, "{name}");
    }
    assert!(r.skipped.iter().any(|s| s.what == "view second-sentence"));
}

#[test]
fn a_twin_pair_counts_only_when_both_are_right() {
    // Four questions, two pairs: (0, 1) both right, (2, 3) one right.
    let scores = vec![
        vec![1.0, 0.0],
        vec![0.0, 1.0],
        vec![1.0, 0.0],
        vec![1.0, 0.0],
    ];
    let scorer = |chance: Vec<f64>, labels: Vec<usize>, pairs: Vec<(usize, usize)>| Scorer {
        ids: (0..labels.len()).map(|i| i.to_string()).collect(),
        chance,
        labels,
        pairs,
        train: 10,
    };
    let r = scorer(vec![0.5; 4], vec![0, 1, 0, 1], vec![(0, 1), (2, 3)])
        .result("d", "learned", None, None, &scores);
    assert_eq!(r.accuracy, 0.75);
    let t = r.twins.unwrap();
    assert_eq!((t.pairs, t.accuracy, t.chance), (2, 0.5, 0.25));
    // A tie between the two options earns half a question and a quarter of its pair.
    let r = scorer(vec![0.5; 2], vec![0, 1], vec![(0, 1)]).result(
        "d",
        "learned",
        None,
        None,
        &[vec![0.0, 0.0], vec![0.0, 1.0]],
    );
    assert_eq!((r.right, r.twins.unwrap().accuracy), (1.5, 0.5));
}

#[test]
fn a_split_field_or_a_separate_file_decides_the_split() {
    let mut qs = questions(100, 4, Planted::Nothing, 4);
    for (i, q) in qs.iter_mut().enumerate() {
        q.split = Some(if i < 70 { "train" } else { "val" }.into());
    }
    let config = AuditConfig {
        models: vec![],
        ..Default::default()
    };
    let r = audit(
        qs.clone(),
        None,
        &config,
        &[],
        1,
        &mut MeanLogOdds,
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!(
        (r.split.train, r.split.eval, r.split.method.as_str()),
        (70, 30, "split field (train against val)")
    );
    let r = audit(
        qs[..60].to_vec(),
        Some(qs[60..].to_vec()),
        &config,
        &[],
        1,
        &mut MeanLogOdds,
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!((r.split.train, r.split.eval), (60, 40));
}

#[test]
fn cross_fitting_measures_every_question_once_with_detectors_that_never_trained_on_it() {
    /// The questions (by their first option's tokens) one call trained on, and those it scored.
    type Call = (HashSet<Vec<String>>, Vec<Vec<String>>);
    /// Records, per call, which questions trained and which were scored.
    struct Recording {
        inner: MeanLogOdds,
        calls: Vec<Call>,
    }
    impl Learner for Recording {
        type Error = std::convert::Infallible;
        fn train_and_score(
            &mut self,
            m: &MemberName,
            train: &[LearnerQuestion],
            eval: &[LearnerQuestion],
            seed: u64,
        ) -> Result<Vec<Vec<f32>>, Self::Error> {
            let key = |q: &LearnerQuestion| q.options[0].tokens.clone();
            self.calls.push((
                train.iter().map(key).collect(),
                eval.iter().map(key).collect(),
            ));
            self.inner.train_and_score(m, train, eval, seed)
        }
    }
    let qs = questions(800, 4, Planted::Word("zzgold"), 1);
    let config = AuditConfig {
        models: af_core::member_names(&["ngram"]),
        eval_folds: 5,
        ..Default::default()
    };
    let mut learner = Recording {
        inner: MeanLogOdds,
        calls: Vec::new(),
    };
    let mut shown = Vec::new();
    let r = audit(
        qs.clone(),
        None,
        &config,
        &[],
        1,
        &mut learner,
        &mut |done, total, name| shown.push((done, total, name.to_string())),
    )
    .unwrap();
    assert_eq!(
        (r.split.folds, r.split.eval, r.split.train),
        (5, 800, 640),
        "{}",
        r.split.method
    );
    assert_eq!(
        shown.last().map(|s| (s.0, s.1)),
        Some((15, 15)),
        "three views x five folds"
    );
    assert!(
        shown.iter().any(|s| s.2 == "ngram/full (fold 5/5)"),
        "{shown:?}"
    );
    // On the ending view, the five calls score disjoint sets covering every question, none of it trained on.
    let mut scored = HashSet::new();
    for (train, eval) in &learner.calls[..5] {
        for q in eval {
            assert!(
                !train.contains(q),
                "a question scored by a detector that trained on it"
            );
            assert!(scored.insert(q.clone()), "a question scored twice");
        }
    }
    assert_eq!(scored.len(), 800);
    for d in r.detectors.iter().filter(|d| d.family != "baseline") {
        assert_eq!(d.eval_questions, 800, "{}", d.name);
    }
    assert_eq!(
        flagged(&r),
        [
            "longest-words-ending",
            "token-statistics/ending",
            "ngram/ending",
            "ngram/second-sentence",
            "ngram/full"
        ]
    );
    // Five times the measured questions: the interval of an unflagged detector is about sqrt(5) narrower.
    let one = audit(
        qs,
        None,
        &AuditConfig {
            eval_folds: 1,
            ..config
        },
        &[],
        1,
        &mut MeanLogOdds,
        &mut |_, _, _| {},
    )
    .unwrap();
    let width = |r: &AuditReport| {
        r.detectors
            .iter()
            .find(|d| d.name == "random")
            .map(|d| d.ci_high - d.ci_low)
            .unwrap()
    };
    assert!(
        width(&r) < 0.55 * width(&one),
        "{} against {}",
        width(&r),
        width(&one)
    );
}

#[test]
fn cross_fitting_replaces_a_split_field_but_not_a_separate_file() {
    let mut qs = questions(100, 4, Planted::Nothing, 4);
    for (i, q) in qs.iter_mut().enumerate() {
        q.split = Some(if i < 70 { "train" } else { "val" }.into());
    }
    let config = AuditConfig {
        models: vec![],
        eval_folds: 4,
        ..Default::default()
    };
    let r = audit(
        qs.clone(),
        None,
        &config,
        &[],
        1,
        &mut MeanLogOdds,
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!(
        (r.split.folds, r.split.train, r.split.eval),
        (4, 75, 100),
        "{}",
        r.split.method
    );
    let r = audit(
        qs[..60].to_vec(),
        Some(qs[60..].to_vec()),
        &config,
        &[],
        1,
        &mut MeanLogOdds,
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!((r.split.folds, r.split.train, r.split.eval), (1, 60, 40));
    assert!(
        r.split.method.contains("does not apply"),
        "{}",
        r.split.method
    );
}

#[test]
fn the_paired_edge_change_sees_an_artifact_go_and_needs_the_same_questions() {
    let config = AuditConfig {
        models: af_core::member_names(&["ngram"]),
        eval_folds: 4,
        ..Default::default()
    };
    let audit_of = |planted| {
        audit(
            questions(400, 4, planted, 8),
            None,
            &config,
            &[],
            8,
            &mut MeanLogOdds,
            &mut |_, _, _| {},
        )
        .unwrap()
    };
    let (word, clean) = (
        audit_of(Planted::Word("zzgold")),
        audit_of(Planted::Nothing),
    );
    let find =
        |r: &AuditReport, name: &str| r.detectors.iter().find(|d| d.name == name).unwrap().clone();
    let (before, after) = (find(&word, "ngram/ending"), find(&clean, "ngram/ending"));
    let c = edge_change(&before, &after).expect("the same 400 questions");
    assert_eq!(c.questions, 400);
    assert!(
        (c.change - (after.edge - before.edge)).abs() < 1e-9,
        "the mean of the differences is the difference of the edges: {c:?}"
    );
    assert!(c.ci_high < 0.0 && c.ci_high - c.ci_low < 0.2, "{c:?}");
    let same = edge_change(&before, &before).unwrap();
    assert_eq!((same.change, same.ci_low, same.ci_high), (0.0, 0.0, 0.0));
    let mut other = after.clone();
    other.per_question[0].id = "elsewhere".into();
    assert_eq!(
        edge_change(&before, &other),
        None,
        "another question set is not paired"
    );
}
