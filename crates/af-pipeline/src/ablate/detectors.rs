//! The detectors of the cross-matrix: each ablated member trained alone, their joint committee,
//! and the audit's detectors, each trained on a fold's training items and measured on the rest.

use af_core::{CommitteeConfig, MemberName};
use af_filter::Assignment;
use af_nn::committee::{self as nnc, MemberKind};
use anyhow::Context;

use super::cross_matrix::Fold;
use super::{Ablation, DetectorScore};
use crate::audit::{unsplit_file, Auditor};
use crate::committee::TorchCommittee;

/// Each ablated member trained fresh alone, then the joint committee of all of them, on each
/// fold's training items' questions; scored on its evaluation items'.
pub(super) fn committee_detectors(
    ablation: &Ablation,
    members: &[MemberName],
    assignment: &Assignment,
    folds: &[Fold],
) -> anyhow::Result<Vec<DetectorScore>> {
    let Ablation {
        pool,
        table,
        device,
        ..
    } = *ablation;
    let (config, registry) = (ablation.config(), ablation.registry());
    let alone = CommitteeConfig {
        joint: false,
        ..config.committee.clone()
    };
    let joint = CommitteeConfig {
        joint: true,
        ..config.committee.clone()
    };
    // A fine-tuned member (`encoder-ft`) has no detector of its own here: it is not a member of
    // a joint committee, and training it per composition would cost more than the ablation.
    let members: Vec<MemberName> = members
        .iter()
        .filter(|m| {
            !registry
                .get(m.as_str())
                .is_some_and(MemberKind::is_fine_tuned)
        })
        .cloned()
        .collect();
    let mut runs: Vec<(MemberName, Vec<MemberName>, &CommitteeConfig)> = members
        .iter()
        .map(|m| (m.clone(), vec![m.clone()], &alone))
        .collect();
    runs.push((
        MemberName::new(af_core::JOINT_HEAD),
        members.to_vec(),
        &joint,
    ));
    let width = assignment.k + 1;
    let chance = af_filter::chance(assignment.k);
    let mut out = Vec::new();
    for (head, on, committee_config) in runs {
        let name = format!("committee:{head}");
        let committee = TorchCommittee::new(pool, table, committee_config, registry, device);
        let mut per_question = Vec::new();
        for (fold, (train, eval)) in folds.iter().enumerate() {
            let questions: Vec<Vec<i64>> = train
                .iter()
                .map(|&i| committee.question(i, assignment))
                .collect();
            // Fold 0 keeps the seed one split gives (the measured runs reproduce).
            let seed = (config.run.seed ^ af_core::hash::fnv1a64(name.as_bytes()))
                .wrapping_add(fold as u64);
            let (_vs, model) = committee
                .train(&on, &questions, seed)
                .with_context(|| format!("detector {name}"))?;
            let rows: Vec<i64> = eval
                .iter()
                .flat_map(|&i| committee.question(i, assignment))
                .collect();
            let flat = nnc::score(&model, table, &rows, committee_config.score_batch)
                .into_iter()
                .find(|(h, _)| h.as_str() == head.as_str())
                .with_context(|| format!("detector {name}: the committee has no head `{head}`"))?
                .1;
            per_question.extend(eval.iter().zip(flat.chunks(width)).map(|(&i, s)| {
                af_audit::QuestionCredit {
                    id: pool.items[i].id.clone(),
                    credit: af_audit::credit(s, 0),
                    chance,
                }
            }));
        }
        let right: f64 = per_question.iter().map(|q| q.credit).sum();
        let measured = per_question.len();
        let (ci_low, ci_high) = af_audit::stats::wilson(right, measured);
        let accuracy = right / measured.max(1) as f64;
        out.push(DetectorScore {
            detector: name,
            family: "committee".into(),
            model: Some(head.to_string()),
            view: None,
            questions: measured,
            accuracy,
            ci_low,
            ci_high,
            chance,
            edge: accuracy - chance,
            p_value: af_audit::stats::above_chance_p(right, &vec![chance; measured]),
            per_question,
        });
    }
    Ok(out)
}

/// The audit's detectors (none excluded) trained on the training items' questions and measured
/// on the evaluation items'; cross-fitted by the audit itself over the same folds when there are
/// several.
pub(super) fn audit_detectors(
    ablation: &Ablation,
    name: &str,
    questions: &[af_core::Question],
    folds: &[Fold],
    tagger: &af_text::Tagger,
) -> anyhow::Result<Vec<DetectorScore>> {
    let auditor = Auditor {
        config: ablation.config(),
        registry: ablation.registry(),
        exclude: &[],
        tagger,
        device: ablation.device,
        progress: ablation.progress,
    };
    let seed = ablation.config().run.seed;
    let file = |idx: &[usize], part: &str| {
        unsplit_file(
            ablation.dir.join(name).join(format!("{part} questions")),
            idx.iter().map(|&i| &questions[i]),
        )
    };
    let (report, _) = match folds {
        [(train, eval)] => auditor.audit(
            &file(train, "training"),
            Some(&file(eval, "evaluation")),
            seed,
        )?,
        _ => {
            let every: Vec<usize> = (0..questions.len()).collect();
            let (report, cut) = auditor.audit(&file(&every, "all"), None, seed)?;
            anyhow::ensure!(
                report.split.folds == folds.len(),
                "the audit made {} folds where {} were asked",
                report.split.folds,
                folds.len()
            );
            (report, cut)
        }
    };
    Ok(report
        .detectors
        .into_iter()
        .map(|d| DetectorScore {
            detector: d.name,
            family: d.family,
            model: d.model,
            view: d.view,
            questions: d.eval_questions,
            accuracy: d.accuracy,
            ci_low: d.ci_low,
            ci_high: d.ci_high,
            chance: d.chance,
            edge: d.edge,
            p_value: d.p_value,
            per_question: d.per_question,
        })
        .collect())
}
