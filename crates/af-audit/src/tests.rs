use std::collections::HashMap;

use super::*;
use crate::synthetic::{questions, Planted};

/// A stand-in for a learned detector: each token's log-odds of being in a right option, learned
/// on the training questions; an option scores the mean over its tokens, so (like fastText's
/// mean of embeddings) it cannot see length.
struct MeanLogOdds;

impl Learner for MeanLogOdds {
    type Error = std::convert::Infallible;

    fn train_and_score(&mut self, _: &MemberName, train: &[LearnerQuestion], eval: &[LearnerQuestion], _: u64) -> Result<Vec<Vec<f32>>, Self::Error> {
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
                        let sum: f64 = ending.iter().map(|t| counts.get(t.as_str()).map_or(0.0, |(r, w)| ((r + 1.0) / (w + 1.0)).ln())).sum();
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
    let config = AuditConfig { models: af_core::member_names(&["ngram"]), ..Default::default() };
    let mut calls = Vec::new();
    let report = audit(questions(800, options, planted, seed), None, &config, &[], seed, &mut MeanLogOdds, &mut |done, total, name| {
        calls.push((done, total, name.to_string()))
    })
    .unwrap();
    assert_eq!(calls.last().unwrap().0, 3, "three views, one model: {calls:?}");
    report
}

fn flagged(r: &AuditReport) -> Vec<&str> {
    r.detectors.iter().filter(|d| d.flagged).map(|d| d.name.as_str()).collect()
}

#[test]
fn a_planted_word_is_flagged_by_token_statistics_and_the_learned_detectors_only() {
    let r = run(Planted::Word("zzgold"), 1);
    assert_eq!(
        flagged(&r),
        ["token-statistics/ending", "ngram/ending", "ngram/second-sentence", "ngram/full"],
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
    let longest = r.detectors.iter().find(|d| d.name == "longest-ending").unwrap();
    assert_eq!(longest.accuracy, 1.0);
    assert_eq!(r.tokens.significant, 0, "the length-adjusted no-artifact rate absorbs length: {:?}", &r.tokens.top[..3]);
}

#[test]
fn right_answers_of_the_median_length_are_flagged_by_the_median_length_baseline_only() {
    let r = run_with(Planted::MedianLength, 5, 4);
    assert_eq!(flagged(&r), ["median-length-ending"], "{:#?}", r.detectors);
    let median = r.detectors.iter().find(|d| d.name == "median-length-ending").unwrap();
    assert_eq!(median.accuracy, 1.0);
    for extreme in ["longest-ending", "shortest-ending"] {
        assert_eq!(r.detectors.iter().find(|d| d.name == extreme).unwrap().accuracy, 0.0, "{extreme}");
    }
}

#[test]
fn a_clean_dataset_leaves_every_detector_within_its_interval_of_chance() {
    let r = run(Planted::Nothing, 3);
    assert_eq!(flagged(&r), Vec::<&str>::new());
    for d in &r.detectors {
        assert!(d.ci_low <= d.chance && d.chance <= d.ci_high, "{} at {:.3} [{:.3}, {:.3}]", d.name, d.accuracy, d.ci_low, d.ci_high);
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
    let config = AuditConfig { models: af_core::member_names(&["ngram"]), ..Default::default() };
    let r = audit(qs, None, &config, &[], 5, &mut MeanLogOdds, &mut |_, _, _| {}).unwrap();
    let twins = r.twins.as_ref().unwrap();
    assert_eq!((twins.source, twins.pairs, twins.eval_pairs * 2), (TwinSource::Groups, 200, r.split.eval), "every held-out question has its twin held out");
    let random = r.detectors.iter().find(|d| d.name == "random").unwrap().twins.clone().unwrap();
    assert!((random.chance - 0.25).abs() < 1e-12);
    assert_eq!(r.transforms.iter().map(|t| (t.transform, t.excluded)).collect::<Vec<_>>(), [(Transform::NoCandidates, 0), (Transform::PartialSentence, 0)]);
    for name in ["ngram/no-candidates", "ngram/partial-sentence"] {
        let d = r.detectors.iter().find(|d| d.name == name).unwrap();
        assert_eq!(d.eval_questions, r.split.eval, "{name}");
    }
    assert!(r.skipped.iter().any(|s| s.what == "view second-sentence"));
}

#[test]
fn a_twin_pair_counts_only_when_both_are_right() {
    // Four questions, two pairs: (0, 1) both right, (2, 3) one right.
    let scores = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 0.0], vec![1.0, 0.0]];
    let r = result("d", "learned", None, None, &scores, &[0.5; 4], &[0, 1, 0, 1], &[(0, 1), (2, 3)], 10);
    assert_eq!(r.accuracy, 0.75);
    let t = r.twins.unwrap();
    assert_eq!((t.pairs, t.accuracy, t.chance), (2, 0.5, 0.25));
    // A tie between the two options earns half a question and a quarter of its pair.
    let r = result("d", "learned", None, None, &[vec![0.0, 0.0], vec![0.0, 1.0]], &[0.5; 2], &[0, 1], &[(0, 1)], 10);
    assert_eq!((r.right, r.twins.unwrap().accuracy), (1.5, 0.5));
}

#[test]
fn a_split_field_or_a_separate_file_decides_the_split() {
    let mut qs = questions(100, 4, Planted::Nothing, 4);
    for (i, q) in qs.iter_mut().enumerate() {
        q.split = Some(if i < 70 { "train" } else { "val" }.into());
    }
    let config = AuditConfig { models: vec![], ..Default::default() };
    let r = audit(qs.clone(), None, &config, &[], 1, &mut MeanLogOdds, &mut |_, _, _| {}).unwrap();
    assert_eq!((r.split.train, r.split.eval, r.split.method.as_str()), (70, 30, "split field (train against val)"));
    let r = audit(qs[..60].to_vec(), Some(qs[60..].to_vec()), &config, &[], 1, &mut MeanLogOdds, &mut |_, _, _| {}).unwrap();
    assert_eq!((r.split.train, r.split.eval), (60, 40));
}
