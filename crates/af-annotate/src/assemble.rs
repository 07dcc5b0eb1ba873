//! The final dataset from filled sheets, by SWAG's rules (docs/design.md §1.7):
//! - the found ending ranked best or second best: the item is kept, its distractors the shown
//!   endings that are neither the found one, nor ranked best, nor (by majority) gibberish;
//! - a generated ending ranked best with the found one second: also an extra item with the
//!   generated ending as gold, for the training split only (and only from training items, so no
//!   evaluation context leaks into training);
//! - fewer than three such distractors: the item goes to a re-annotation queue with its other AF
//!   distractors as replacements;
//! - the found ending ranked neither best nor second: the item is dropped.
//!
//! Several annotators per item: each ending's label by majority (a tie goes to the worse label:
//! gibberish before unlikely before likely); best and second by plurality, and an item whose best
//! is tied goes to the re-annotation queue.
//!
//! [`DistractorRule::Unlikely`] is the stricter rule of a validated benchmark (HellaSwag's
//! validation removed endings people found plausible): a distractor must also have been labelled
//! unlikely by more than half of the item's annotators, so that no ending people judged a likely
//! next event stays as a wrong answer (decision 476). [`DistractorRule::NoneLikely`] goes one
//! step further: one annotator's `likely` vetoes the ending, because blind reads found the
//! endings that any annotator called likely to be second right answers most of the time
//! (decision 479). [`DistractorRule::AllUnlikely`] also lets one `gibberish` set an ending aside:
//! blind reads found those endings fluent half as often as the rest (decision 480).
//!
//! Under every rule, the second-answer check (crate::check) has the last word: a distractor any
//! checker answered `could be right` for, or most answered `not fluent` for, is set aside
//! (decision 481), and an item's replacements that the check passed are usable after its shown
//! endings (decision 482).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::agreement::{krippendorff_alpha, pairwise_agreement};
use crate::check::{ToCheck, Verdict};
use crate::sheet::{Annotation, KeyItem, Label, SlotSource};

/// Distractors a kept item needs (a four-way question, as SWAG's).
pub const MIN_DISTRACTORS: usize = 3;

/// Which shown endings may stay as distractors (always: not the found one, not ranked best).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DistractorRule {
    /// SWAG's: any ending the majority did not call gibberish, likely ones included.
    #[default]
    Swag,
    /// Only endings more than half of the annotators called unlikely: grammatical and not a
    /// likely next event, so not a second right answer.
    Unlikely,
    /// As `Unlikely`, and no annotator called it likely: one reader who takes it for a possible
    /// answer is enough to set it aside.
    NoneLikely,
    /// Every annotator called it unlikely: no one took it for a possible answer, and no one
    /// for garbled English.
    AllUnlikely,
}

impl DistractorRule {
    /// The rule's name, as `--distractors` and `stats.json` spell it.
    pub fn name(self) -> &'static str {
        match self {
            DistractorRule::Swag => "swag",
            DistractorRule::Unlikely => "unlikely",
            DistractorRule::NoneLikely => "none-likely",
            DistractorRule::AllUnlikely => "all-unlikely",
        }
    }

    /// What a usable distractor is, for the re-annotation queue's reason.
    fn describes(self) -> &'static str {
        match self {
            DistractorRule::Swag => "not found, not best, not gibberish",
            DistractorRule::Unlikely => {
                "not found, not best, labelled unlikely by more than half of the annotators"
            }
            DistractorRule::NoneLikely => {
                "not found, not best, labelled unlikely by more than half of the annotators and likely by none"
            }
            DistractorRule::AllUnlikely => "not found, not best, labelled unlikely by every annotator",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Outcome {
    Kept {
        distractors: Vec<usize>,
        extra_gold: Option<usize>,
    },
    Reannotate {
        reason: String,
    },
    Dropped {
        reason: String,
    },
    Unannotated,
}

/// An item after the vote.
#[derive(Clone, Debug, Serialize)]
pub struct Decided {
    pub item: String,
    pub annotators: usize,
    pub labels: Vec<Label>,
    pub best: Option<usize>,
    pub second: Option<usize>,
    /// The endings that may be distractors: the shown ones the rule allows (neither the found
    /// one nor the best) and the check did not set aside, then the replacements the check passed
    /// (slots past the shown ones). A kept item's distractors; for the re-annotation queue, what
    /// is left to build on.
    pub usable: Vec<usize>,
    /// Candidates a checker answered `could be right` for: set aside.
    pub set_aside_could_be_right: Vec<usize>,
    /// Candidates most checkers answered `not fluent` for: set aside.
    pub set_aside_not_fluent: Vec<usize>,
    pub outcome: Outcome,
}

/// Table 2 of the paper: per ending type, the share of judgements per label, and how often that
/// type was ranked best and second best.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TypeStats {
    pub judgements: usize,
    pub likely: f64,
    pub unlikely: f64,
    pub gibberish: f64,
    pub best: f64,
    pub second: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Assembled {
    pub decided: Vec<Decided>,
    pub found: TypeStats,
    pub generated: TypeStats,
    pub label_alpha: Option<f64>,
    pub label_pairwise_agreement: Option<f64>,
    pub best_alpha: Option<f64>,
    pub best_pairwise_agreement: Option<f64>,
    pub annotations: usize,
    pub annotators: usize,
}

fn worse(l: Label) -> u8 {
    match l {
        Label::Gibberish => 2,
        Label::Unlikely => 1,
        Label::Likely => 0,
    }
}

/// Applies the rules to every key item (in key order) given the good annotations and the
/// second-answer check's verdicts ([`crate::check::verdicts`]; empty: no check).
pub fn assemble(
    key: &[KeyItem],
    annotations: &[Annotation],
    rule: DistractorRule,
    verdicts: &HashMap<ToCheck, Verdict>,
) -> Assembled {
    let mut by_item: HashMap<&str, Vec<&Annotation>> = HashMap::new();
    for a in annotations {
        by_item.entry(a.item.as_str()).or_default().push(a);
    }
    let (mut label_units, mut best_units) = (Vec::new(), Vec::new());
    let mut stats: HashMap<SlotSource, (usize, [usize; 3], usize, usize)> = HashMap::new();
    let decided = key
        .iter()
        .map(|k| {
            let votes = by_item.get(k.item.as_str()).cloned().unwrap_or_default();
            let n = k.slots.len();
            for a in &votes {
                for (s, slot) in k.slots.iter().enumerate() {
                    let e = stats.entry(slot.source).or_default();
                    e.0 += 1;
                    e.1[worse(a.labels[s]) as usize] += 1;
                    e.2 += usize::from(a.best == s);
                    e.3 += usize::from(a.second == s);
                }
            }
            for s in 0..n {
                label_units.push(votes.iter().map(|a| a.labels[s]).collect::<Vec<_>>());
            }
            best_units.push(votes.iter().map(|a| a.best).collect::<Vec<_>>());
            if votes.is_empty() {
                return Decided {
                    item: k.item.clone(),
                    annotators: 0,
                    labels: vec![],
                    best: None,
                    second: None,
                    usable: vec![],
                    set_aside_could_be_right: vec![],
                    set_aside_not_fluent: vec![],
                    outcome: Outcome::Unannotated,
                };
            }
            let labels: Vec<Label> = (0..n)
                .map(|s| {
                    let mut count: BTreeMap<u8, usize> = BTreeMap::new();
                    for a in &votes {
                        *count.entry(worse(a.labels[s])).or_default() += 1;
                    }
                    let top = *count.values().max().expect("votes");
                    let w = count
                        .iter()
                        .filter(|(_, c)| **c == top)
                        .map(|(w, _)| *w)
                        .max()
                        .expect("a winner");
                    [Label::Likely, Label::Unlikely, Label::Gibberish][w as usize]
                })
                .collect();
            let plurality = |pick: &dyn Fn(&Annotation) -> usize| -> Option<usize> {
                let mut count = vec![0usize; n];
                for a in &votes {
                    count[pick(a)] += 1;
                }
                let top = *count.iter().max().expect("slots");
                let winners: Vec<usize> = (0..n).filter(|&s| count[s] == top).collect();
                (winners.len() == 1).then(|| winners[0])
            };
            let best = plurality(&|a| a.best);
            let second = plurality(&|a| a.second).filter(|s| Some(*s) != best);
            let found = k.found();
            let allowed = (0..n)
                .filter(|&s| s != found && Some(s) != best)
                .filter(|&s| {
                    let called =
                        |label: Label| votes.iter().filter(|a| a.labels[s] == label).count();
                    let most_unlikely = || 2 * called(Label::Unlikely) > votes.len();
                    match rule {
                        DistractorRule::Swag => labels[s] != Label::Gibberish,
                        DistractorRule::Unlikely => most_unlikely(),
                        DistractorRule::NoneLikely => most_unlikely() && called(Label::Likely) == 0,
                        DistractorRule::AllUnlikely => called(Label::Unlikely) == votes.len(),
                    }
                });
            let verdict = |slot: usize| {
                verdicts.get(&ToCheck {
                    item: k.item.clone(),
                    slot,
                })
            };
            // A replacement was never labelled: only a complete check makes it usable.
            let replacements =
                (n..k.candidates()).filter(|&s| verdict(s).is_some_and(|v| v.complete()));
            let (mut usable, mut set_aside_could_be_right, mut set_aside_not_fluent) =
                (Vec::new(), Vec::new(), Vec::new());
            for s in allowed.chain(replacements) {
                match verdict(s) {
                    Some(v) if v.could_be_right() => set_aside_could_be_right.push(s),
                    Some(v) if v.not_fluent() => set_aside_not_fluent.push(s),
                    _ => usable.push(s),
                }
            }
            let outcome = match best {
                None => Outcome::Reannotate {
                    reason: "annotators disagree on the best ending (tie)".into(),
                },
                Some(b) if b == found || second == Some(found) => {
                    if usable.len() < MIN_DISTRACTORS {
                        let check = if set_aside_could_be_right.is_empty()
                            && set_aside_not_fluent.is_empty()
                        {
                            ""
                        } else {
                            ", not set aside by the second-answer check; or replacements it passed"
                        };
                        Outcome::Reannotate {
                            reason: format!(
                                "{} usable distractors ({}{check}), fewer than {MIN_DISTRACTORS}",
                                usable.len(),
                                rule.describes()
                            ),
                        }
                    } else {
                        let extra_gold = (b != found && k.split == "train").then_some(b);
                        Outcome::Kept {
                            distractors: usable.clone(),
                            extra_gold,
                        }
                    }
                }
                Some(_) => Outcome::Dropped {
                    reason: "the found ending was ranked neither best nor second best".into(),
                },
            };
            Decided {
                item: k.item.clone(),
                annotators: votes.len(),
                labels,
                best,
                second,
                usable,
                set_aside_could_be_right,
                set_aside_not_fluent,
                outcome,
            }
        })
        .collect();
    let type_stats = |source: SlotSource| -> TypeStats {
        let Some((n, labels, best, second)) = stats.get(&source) else {
            return TypeStats::default();
        };
        let r = |x: usize| x as f64 / (*n).max(1) as f64;
        TypeStats {
            judgements: *n,
            likely: r(labels[0]),
            unlikely: r(labels[1]),
            gibberish: r(labels[2]),
            best: r(*best),
            second: r(*second),
        }
    };
    let mut annotators: Vec<&str> = annotations.iter().map(|a| a.annotator.as_str()).collect();
    annotators.sort_unstable();
    annotators.dedup();
    Assembled {
        decided,
        found: type_stats(SlotSource::Found),
        generated: type_stats(SlotSource::Generated),
        label_alpha: krippendorff_alpha(&label_units),
        label_pairwise_agreement: pairwise_agreement(&label_units),
        best_alpha: krippendorff_alpha(&best_units),
        best_pairwise_agreement: pairwise_agreement(&best_units),
        annotations: annotations.len(),
        annotators: annotators.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{verdicts, Ask, Check};
    use crate::sheet::Slot;

    fn key(item: &str, split: &str) -> KeyItem {
        // Slot 2 is the found ending; 0, 1, 3, 4, 5 generated.
        let slots = (0..6)
            .map(|s| Slot {
                source: if s == 2 {
                    SlotSource::Found
                } else {
                    SlotSource::Generated
                },
                candidate: if s == 2 { 0 } else { s as u32 + 1 },
                ending: format!("e{s}"),
            })
            .collect();
        KeyItem {
            sheet: "sheet-001".into(),
            row: 1,
            item: item.into(),
            group: "g".into(),
            split: split.into(),
            context: "c".into(),
            prefix: "p".into(),
            slots,
            replacements: vec![],
        }
    }

    /// A kept item's outcome with no extra training item.
    fn kept(distractors: &[usize]) -> Outcome {
        Outcome::Kept {
            distractors: distractors.to_vec(),
            extra_gold: None,
        }
    }

    fn ann(who: &str, item: &str, labels: &str, best: usize, second: usize) -> Annotation {
        let labels = labels
            .chars()
            .map(|c| match c {
                'l' => Label::Likely,
                'u' => Label::Unlikely,
                _ => Label::Gibberish,
            })
            .collect();
        Annotation {
            annotator: who.into(),
            item: item.into(),
            labels,
            best,
            second,
            file: "s.csv".into(),
            line: 2,
        }
    }

    #[test]
    fn the_papers_rules() {
        let keys = vec![
            key("kept", "train"),
            key("extra", "train"),
            key("extra-test", "test"),
            key("few", "train"),
            key("dropped", "train"),
            key("none", "train"),
        ];
        let anns = vec![
            ann("a", "kept", "ulluug", 2, 0),
            ann("a", "extra", "llluul", 0, 2),
            ann("a", "extra-test", "llluul", 0, 2),
            ann("a", "few", "ggluug", 2, 3),
            ann("a", "dropped", "llulll", 0, 1),
        ];
        let r = assemble(&keys, &anns, DistractorRule::Swag, &HashMap::new());
        let outcome = |i: usize| r.decided[i].outcome.clone();
        assert_eq!(outcome(0), kept(&[0, 1, 3, 4]), "slot 5 is gibberish");
        assert_eq!(
            outcome(1),
            Outcome::Kept {
                distractors: vec![1, 3, 4, 5],
                extra_gold: Some(0)
            }
        );
        assert_eq!(
            outcome(2),
            kept(&[1, 3, 4, 5]),
            "no extra item from a test item"
        );
        assert!(
            matches!(outcome(3), Outcome::Reannotate { .. }),
            "only slots 3 and 4 are usable"
        );
        assert!(matches!(outcome(4), Outcome::Dropped { .. }));
        assert_eq!(outcome(5), Outcome::Unannotated);
        // Table 2: the found ending was judged 5 times, ranked best twice and second twice.
        assert_eq!(r.found.judgements, 5);
        assert!((r.found.best - 0.4).abs() < 1e-12 && (r.found.second - 0.4).abs() < 1e-12);
        assert_eq!(r.generated.judgements, 25);
    }

    #[test]
    fn strict_rules_set_aside_endings_by_likely_and_gibberish_votes() {
        let keys = vec![
            key("x", "train"),
            key("few", "train"),
            key("no-likely", "train"),
            key("gibberish", "train"),
        ];
        let anns = vec![
            // Slot 0: u, u, l -> usable under `unlikely` only; 1: l, l, u -> not; 3: u, l, g ->
            // not (no majority for unlikely, though the vote's label is gibberish by the tie
            // rule); 4, 5: unlikely.
            ann("a", "x", "ulluuu", 2, 0),
            ann("b", "x", "ullluu", 2, 1),
            ann("c", "x", "lulguu", 2, 0),
            // Two annotators: an ending both call unlikely is usable, one they split on is not
            // (the vote's tie rule would call it unlikely).
            ann("a", "few", "uuuluu", 2, 0),
            ann("b", "few", "ululul", 2, 0),
            // No `likely` anywhere, but slot 0 (u, g, g) and slot 1 (g, g, g) lack a majority
            // for unlikely: usable under neither strict rule.
            ann("a", "no-likely", "ugluuu", 2, 3),
            ann("b", "no-likely", "ggluuu", 2, 3),
            ann("c", "no-likely", "ggluuu", 2, 3),
            // Slot 0: u, u, g (its majority unlikely, no `likely`); slots 3, 4, 5: unlikely from
            // all three.
            ann("a", "gibberish", "uluuuu", 2, 1),
            ann("b", "gibberish", "uluuuu", 2, 1),
            ann("c", "gibberish", "gluuuu", 2, 1),
        ];
        let swag = assemble(&keys, &anns, DistractorRule::Swag, &HashMap::new());
        assert_eq!(swag.decided[0].outcome, kept(&[0, 1, 4, 5]));
        let strict = assemble(&keys, &anns, DistractorRule::Unlikely, &HashMap::new());
        assert_eq!(strict.decided[0].outcome, kept(&[0, 4, 5]));
        assert!(
            matches!(&strict.decided[1].outcome, Outcome::Reannotate { reason } if reason.starts_with("2 usable distractors (not found, not best, labelled unlikely")),
            "{:?}",
            strict.decided[1].outcome
        );
        // None likely: slot 0's one `likely` (annotator c) sets it aside, which leaves "x" two.
        let none_likely = assemble(&keys, &anns, DistractorRule::NoneLikely, &HashMap::new());
        assert!(
            matches!(&none_likely.decided[0].outcome, Outcome::Reannotate { reason } if reason.starts_with("2 usable distractors") && reason.contains("and likely by none)")),
            "{:?}",
            none_likely.decided[0].outcome
        );
        assert_eq!(none_likely.decided[0].usable, vec![4, 5]);
        for rule in [DistractorRule::Unlikely, DistractorRule::NoneLikely] {
            let r = assemble(&keys, &anns, rule, &HashMap::new());
            assert_eq!(r.decided[2].outcome, kept(&[3, 4, 5]), "{}", rule.name());
        }
        assert_eq!(none_likely.decided[3].outcome, kept(&[0, 3, 4, 5]));
        // All unlikely: "no-likely"'s slot 3 (u, u, u) stays; one `likely` (x's slot 0) or one
        // `gibberish` ("gibberish"'s slot 0) is enough to set an ending aside.
        let all = assemble(&keys, &anns, DistractorRule::AllUnlikely, &HashMap::new());
        assert_eq!(all.decided[0].usable, vec![4, 5]);
        assert_eq!(all.decided[2].outcome, kept(&[3, 4, 5]));
        assert_eq!(all.decided[3].outcome, kept(&[3, 4, 5]));
    }

    /// One checker's answer: `c` could be right, `w` wrong; `f` fluent, `n` not; `-` not asked.
    fn check(who: &str, item: &str, slot: usize, answers: &str) -> Check {
        let answer = |c: char| match c {
            'c' | 'f' => Some(true),
            'w' | 'n' => Some(false),
            _ => None,
        };
        let a: Vec<char> = answers.chars().collect();
        Check {
            checker: who.into(),
            item: item.into(),
            slot,
            could_be_right: answer(a[0]),
            fluent: answer(a[1]),
            file: "c.csv".into(),
            line: 2,
        }
    }

    #[test]
    fn one_checkers_yes_sets_a_distractor_aside() {
        let keys = vec![key("x", "train"), key("few", "train")];
        let anns = vec![
            ann("a", "x", "uuuuuu", 2, 0),
            ann("a", "few", "uuuuuu", 2, 0),
        ];
        let checks = vec![
            // x: slot 1 is a second right answer to p, not to q or r; slot 3 to no one.
            check("p", "x", 1, "c-"),
            check("q", "x", 1, "w-"),
            check("r", "x", 1, "w-"),
            check("p", "x", 3, "w-"),
            // few: three of its five distractors flagged leaves two.
            check("p", "few", 0, "c-"),
            check("q", "few", 1, "c-"),
            check("q", "few", 3, "c-"),
        ];
        let r = assemble(&keys, &anns, DistractorRule::NoneLikely, &verdicts(&checks));
        assert_eq!(r.decided[0].outcome, kept(&[0, 3, 4, 5]));
        assert_eq!(r.decided[0].set_aside_could_be_right, vec![1]);
        assert!(
            matches!(&r.decided[1].outcome, Outcome::Reannotate { reason } if reason.starts_with("2 usable distractors") && reason.contains("not set aside by the second-answer check")),
            "{:?}",
            r.decided[1].outcome
        );
        assert_eq!(r.decided[1].usable, vec![4, 5]);
        // Without the checks both keep all five.
        let unchecked = assemble(&keys, &anns, DistractorRule::NoneLikely, &HashMap::new());
        assert_eq!(unchecked.decided[1].outcome, kept(&[0, 1, 3, 4, 5]));
    }

    #[test]
    fn most_checkers_not_fluent_sets_aside_and_checked_replacements_fill_in() {
        let mut k = key("x", "train");
        k.replacements = (0..3)
            .map(|j| Slot {
                source: SlotSource::Generated,
                candidate: 20 + j,
                ending: format!("r{j}"),
            })
            .collect();
        let anns = vec![ann("a", "x", "uuuuuu", 2, 0)];
        let mut checks = vec![
            // Shown slots 0, 1, 3: two of three read 0 and 1 as not fluent, one reads 3 so.
            check("p", "x", 0, "wn"),
            check("q", "x", 0, "wn"),
            check("r", "x", 0, "wf"),
            check("p", "x", 1, "-n"),
            check("q", "x", 1, "wn"),
            check("p", "x", 3, "wn"),
            check("q", "x", 3, "wf"),
            check("r", "x", 3, "wf"),
            // Slot 4: one `no` of two is not a majority, and it has no could_be_right answer
            // yet; slot 5 has no fluent answer yet.
            check("p", "x", 4, "-n"),
            check("q", "x", 4, "-f"),
            check("p", "x", 5, "w-"),
        ];
        let keys = vec![k.clone()];
        let r = assemble(&keys, &anns, DistractorRule::NoneLikely, &verdicts(&checks));
        assert_eq!(r.decided[0].set_aside_not_fluent, vec![0, 1]);
        // Slots 3, 4, 5 are left: kept, and its replacements are not needed yet.
        assert_eq!(r.decided[0].outcome, kept(&[3, 4, 5]));
        let v = crate::check::verdicts(&checks);
        let next = crate::check::next_checks(&keys, &r.decided, &v);
        let asked: Vec<(usize, Ask)> = next.iter().map(|t| (t.at.slot, t.ask)).collect();
        assert_eq!(
            asked,
            [(4, Ask::CouldBeRight), (5, Ask::Fluent)],
            "only what is unanswered; slot 3 is complete"
        );
        // 4 and 5 fail the check: short, so its replacements (slots 6, 7, 8) are asked for.
        checks.extend([check("r", "x", 4, "c-"), check("q", "x", 5, "-n")]);
        let v = crate::check::verdicts(&checks);
        let r = assemble(&keys, &anns, DistractorRule::NoneLikely, &verdicts(&checks));
        assert!(matches!(r.decided[0].outcome, Outcome::Reannotate { .. }));
        let next = crate::check::next_checks(&keys, &r.decided, &v);
        let asked: Vec<(usize, Ask)> = next.iter().map(|t| (t.at.slot, t.ask)).collect();
        assert_eq!(asked, [(6, Ask::Both), (7, Ask::Both), (8, Ask::Both)]);
        // A replacement is usable only when both questions are answered and it passes both:
        // 7 lacks a fluent answer, 8 a could_be_right one.
        checks.extend([
            check("p", "x", 6, "wf"),
            check("p", "x", 7, "w-"),
            check("p", "x", 8, "-f"),
        ]);
        let r = assemble(&keys, &anns, DistractorRule::NoneLikely, &verdicts(&checks));
        assert!(matches!(r.decided[0].outcome, Outcome::Reannotate { .. }));
        assert_eq!(r.decided[0].usable, [3, 6]);
        checks.push(check("q", "x", 8, "w-"));
        let r = assemble(&keys, &anns, DistractorRule::NoneLikely, &verdicts(&checks));
        assert_eq!(r.decided[0].outcome, kept(&[3, 6, 8]));
        assert_eq!(k.candidate(6).candidate, 20);
    }

    #[test]
    fn majority_vote_and_ties() {
        let keys = vec![key("x", "train"), key("tie", "train")];
        let anns = vec![
            ann("a", "x", "llluug", 2, 0),
            ann("b", "x", "lglulg", 2, 1),
            ann("c", "x", "llllul", 3, 2),
            ann("a", "tie", "llllll", 0, 2),
            ann("b", "tie", "llllll", 2, 0),
        ];
        let r = assemble(&keys, &anns, DistractorRule::Swag, &HashMap::new());
        let x = &r.decided[0];
        assert_eq!(x.best, Some(2));
        // Slot 1: l, g, l -> likely; slot 5: g, g, l -> gibberish; slot 3: u, u, l -> unlikely.
        assert_eq!(
            (x.labels[1], x.labels[5], x.labels[3]),
            (Label::Likely, Label::Gibberish, Label::Unlikely)
        );
        assert_eq!(x.outcome, kept(&[0, 1, 3, 4]));
        assert!(
            matches!(&r.decided[1].outcome, Outcome::Reannotate { reason } if reason.contains("tie"))
        );
        assert_eq!(r.annotators, 2 + 1);
        assert!(r.label_alpha.is_some() && r.label_pairwise_agreement.is_some());
    }
}
