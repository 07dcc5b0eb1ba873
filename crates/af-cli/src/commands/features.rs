//! `af features`: af's own encoders as a feature extractor for AFLite, as WinoGrande used a
//! fine-tuned RoBERTa. On a WinoGrande-style file, each instance becomes a two-way question (the
//! sentence with each option filled in for `_`); the committee's text members (bag of words, CNN,
//! POS-BiLSTM) and joint head are trained on a slice of the instances, which is then discarded,
//! and the rest get their features: the members' representations of both filled-in sentences,
//! side by side.
//!
//! Writes into `--out`: `features.npy` (float32, one row per kept instance), `instances.jsonl`
//! (their lines, unchanged, in the same order), `report.json` (sizes, and the encoders' own two-way
//! accuracy on the kept instances: how far style alone gets on this data).

use std::path::PathBuf;
use std::process::ExitCode;

use af_core::{CommitteeConfig, Member};
use af_io::features::{read_instances, write_npy, FeatureMatrix, InstanceFields};
use af_nn::committee::{self as nnc, CommitteeModel};
use clap::Args;
use serde_json::json;
use tch::nn;

#[derive(Args)]
pub struct FeaturesArgs {
    /// WinoGrande-style JSONL: `qID`, `sentence` (with one `_`), `option1`, `option2`, `answer`.
    #[arg(long)]
    winogrande: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// Share of instances (whole twin groups) that train the encoders and are then dropped.
    #[arg(long, default_value_t = 0.15)]
    slice: f64,
    #[arg(long, default_value_t = 5)]
    epochs: usize,
    #[command(flatten)]
    compute: super::ComputeArgs,
}

pub fn run(a: FeaturesArgs) -> anyhow::Result<ExitCode> {
    af_nn::runtime::set_threads(a.compute.threads);
    anyhow::ensure!(a.slice > 0.0 && a.slice < 1.0, "--slice must be strictly between 0 and 1");
    let fields = InstanceFields { id: "qID".into(), label: "answer".into(), group: None, twins_from_id: true };
    let instances = read_instances(&a.winogrande, &fields)?;
    // Each instance: two sentences (tokens, the option's token range), in option order.
    let file = af_io::questions::read_questions(&a.winogrande, Some(af_io::questions::QuestionFormat::Winogrande), false)?;
    anyhow::ensure!(file.questions.len() == instances.len(), "{}: {} questions but {} lines", a.winogrande.display(), file.questions.len(), instances.len());
    let lower = af_text::tokenize_lowercase;
    let mut sentences = Vec::with_capacity(instances.len() * 2);
    for q in &file.questions {
        let blank = q.blank.as_ref().expect("the WinoGrande reader fills the blank");
        for option in &blank.options {
            let (b, o, z) = (lower(&blank.before), lower(option), lower(&blank.after));
            let marked = b.len()..b.len() + o.len();
            sentences.push(([b, o, z].concat(), marked));
        }
    }
    let answers: Vec<usize> = file.questions.iter().map(|q| q.label).collect();
    let tagger = super::load_tagger(None)?;
    let config = CommitteeConfig { epochs: a.epochs, ..Default::default() };
    let device = super::device_named(&a.compute.device)?;
    let refs: Vec<(&[String], std::ops::Range<usize>)> = sentences.iter().map(|(w, m)| (w.as_slice(), m.clone())).collect();
    let table = super::table::sentence_table(&refs, refs.len(), &config, &tagger, device);

    let groups: Vec<String> = instances.iter().map(|i| i.group.clone()).collect();
    let mut rng = {
        use rand::SeedableRng;
        rand_chacha::ChaCha8Rng::seed_from_u64(a.compute.seed)
    };
    let (slice, rest) = af_filter::split_by_group(&groups, a.slice, &mut rng);
    anyhow::ensure!(slice.len() >= 10 && !rest.is_empty(), "the slice ({} instances) or the rest ({}) is too small", slice.len(), rest.len());
    // A question: the right filled-in sentence first.
    let question = |i: usize| -> Vec<i64> {
        let (right, wrong) = (2 * i + answers[i], 2 * i + 1 - answers[i]);
        vec![right as i64, wrong as i64]
    };
    let questions: Vec<Vec<i64>> = slice.iter().map(|&i| question(i)).collect();
    tch::manual_seed(a.compute.seed as i64);
    let vs = nn::VarStore::new(device);
    let members = [Member::Bow, Member::Cnn, Member::PosLstm];
    let model = CommitteeModel::new(&vs.root(), &config, &members, true, &table);
    let training = nnc::train(&vs, &model, &table, &questions, &config, a.compute.seed)?;
    let rest_rows: Vec<i64> = rest.iter().flat_map(|&i| question(i)).collect();
    let scores = nnc::score(&model, &table, &rest_rows, config.score_batch);
    let accuracy: Vec<(String, f64)> = scores
        .iter()
        .map(|(head, s)| (head.clone(), s.chunks(2).filter(|p| p[0] > p[1]).count() as f64 / rest.len() as f64))
        .collect();

    // Features: option 1's representation, then option 2's, for every kept instance.
    let rows: Vec<i64> = rest.iter().flat_map(|&i| [2 * i as i64, 2 * i as i64 + 1]).collect();
    let mut data = Vec::new();
    let mut dim = 0;
    tch::no_grad(|| -> anyhow::Result<()> {
        for chunk in rows.chunks(8192) {
            let r = model.represent(&table, chunk).to_kind(tch::Kind::Float).to(tch::Device::Cpu);
            dim = 2 * r.size()[1] as usize;
            data.extend(Vec::<f32>::try_from(&r.view([-1]))?);
        }
        Ok(())
    })?;
    super::empty_out_dir(&a.out, a.compute.force)?;
    write_npy(&a.out.join("features.npy"), &FeatureMatrix { rows: rest.len(), dim, data })?;
    let lines: String = rest.iter().map(|&i| format!("{}\n", instances[i].line)).collect();
    af_core::atomic::write(a.out.join("instances.jsonl"), lines.as_bytes())?;
    let report = json!({
        "input": a.winogrande, "instances": instances.len(), "slice": slice.len(), "kept": rest.len(), "dim": dim,
        "members": members.iter().map(|m| m.name()).collect::<Vec<_>>(), "training": training,
        "two_way_accuracy_on_kept": accuracy.iter().map(|(h, v)| (h.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "device": format!("{device:?}"), "seed": a.compute.seed,
    });
    af_core::atomic::write(a.out.join("report.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    println!(
        "features: {} instances trained the encoders and were dropped; {} kept with {dim}-d features in {} (encoders' own two-way accuracy on them: {})",
        slice.len(),
        rest.len(),
        a.out.display(),
        accuracy.iter().map(|(h, v)| format!("{h} {v:.3}")).collect::<Vec<_>>().join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
