//! af's own encoders as a feature extractor for AFLite, as WinoGrande used a
//! fine-tuned RoBERTa. On a WinoGrande-style file, each instance becomes a two-way question (the
//! sentence with each option filled in for `_`); the committee's text members (bag of words, CNN,
//! POS-BiLSTM) and joint head are trained on a slice of the instances, which is then discarded,
//! and the rest get their features: the members' representations of both filled-in sentences,
//! side by side.
//!
//! Writes into `out`: `features.npy` (float32, one row per kept instance), `instances.jsonl`
//! (their lines, unchanged, in the same order), `report.json` (sizes, and the encoders' own two-way
//! accuracy on the kept instances: how far style alone gets on this data).

use std::path::{Path, PathBuf};

use af_core::{member_names, CommitteeConfig};
use af_io::features::{read_instances, write_npy, FeatureMatrix, InstanceFields};
use af_nn::committee::{self as nnc, CommitteeModel, Registry};
use serde_json::json;
use tch::nn;

/// What `af features` is asked to do.
pub struct FeaturesRequest<'a> {
    /// WinoGrande-style JSONL.
    pub winogrande: &'a Path,
    pub out: &'a Path,
    /// Share of instances (whole twin groups) that train the encoders and are then dropped.
    pub slice: f64,
    pub epochs: usize,
    pub seed: u64,
    pub device: String,
    pub threads: usize,
    pub force: bool,
}

/// The features written (every number is also in `out/report.json`).
pub struct FeaturesRun {
    pub kept: usize,
    pub dim: usize,
    pub slice: usize,
    /// Each head's two-way accuracy on the kept instances.
    pub accuracy: Vec<(String, f64)>,
    pub out: PathBuf,
}

/// Trains the encoders on a slice, encodes the rest and writes the features.
pub fn run(a: &FeaturesRequest) -> anyhow::Result<FeaturesRun> {
    af_nn::runtime::set_threads(a.threads);
    anyhow::ensure!(
        a.slice > 0.0 && a.slice < 1.0,
        "the slice share must be strictly between 0 and 1 (--slice)"
    );
    let fields = InstanceFields {
        id: "qID".into(),
        label: "answer".into(),
        group: None,
        twins_from_id: true,
    };
    let instances = read_instances(a.winogrande, &fields)?;
    // Each instance: two sentences (tokens, the option's token range), in option order.
    let file = af_io::questions::read_questions(
        a.winogrande,
        Some(af_io::questions::QuestionFormat::WINOGRANDE),
        false,
    )?;
    anyhow::ensure!(
        file.questions.len() == instances.len(),
        "{}: {} questions but {} lines",
        a.winogrande.display(),
        file.questions.len(),
        instances.len()
    );
    let lower = af_text::tokenize_lowercase;
    let mut sentences = Vec::with_capacity(instances.len() * 2);
    for q in &file.questions {
        let blank = q
            .blank
            .as_ref()
            .expect("the WinoGrande reader fills the blank");
        for option in &blank.options {
            let (b, o, z) = (lower(&blank.before), lower(option), lower(&blank.after));
            let marked = b.len()..b.len() + o.len();
            sentences.push(([b, o, z].concat(), marked));
        }
    }
    let answers: Vec<usize> = file.questions.iter().map(|q| q.label).collect();
    let tagger = crate::setup::load_tagger(None)?;
    let config = CommitteeConfig {
        epochs: a.epochs,
        ..Default::default()
    };
    let device = crate::setup::device_named(&a.device)?;
    let refs: Vec<(&[String], std::ops::Range<usize>)> = sentences
        .iter()
        .map(|(w, m)| (w.as_slice(), m.clone()))
        .collect();
    let (table, _) = crate::table::sentence_table(&refs, refs.len(), &config, &tagger, device);

    let groups: Vec<String> = instances.iter().map(|i| i.group.clone()).collect();
    let mut rng = {
        use rand::SeedableRng;
        rand_chacha::ChaCha8Rng::seed_from_u64(a.seed)
    };
    let (slice, rest) = af_filter::split_by_group(&groups, a.slice, &mut rng);
    anyhow::ensure!(
        slice.len() >= 10 && !rest.is_empty(),
        "the slice ({} instances) or the rest ({}) is too small",
        slice.len(),
        rest.len()
    );
    // A question: the right filled-in sentence first.
    let question = |i: usize| -> Vec<i64> {
        let (right, wrong) = (2 * i + answers[i], 2 * i + 1 - answers[i]);
        vec![right as i64, wrong as i64]
    };
    let questions: Vec<Vec<i64>> = slice.iter().map(|&i| question(i)).collect();
    tch::manual_seed(a.seed as i64);
    let vs = nn::VarStore::new(device);
    let members = member_names(&["bow", "cnn", "pos-lstm"]);
    let model = CommitteeModel::new(
        &vs.root(),
        &config,
        &Registry::builtin(),
        &members,
        true,
        &table,
    )?;
    let training = nnc::train(&vs, &model, &table, &questions, &config, a.seed)?;
    let rest_rows: Vec<i64> = rest.iter().flat_map(|&i| question(i)).collect();
    let scores = nnc::score(&model, &table, &rest_rows, config.score_batch);
    let accuracy: Vec<(String, f64)> = scores
        .iter()
        .map(|(head, s)| {
            (
                head.clone(),
                s.chunks(2).filter(|p| p[0] > p[1]).count() as f64 / rest.len() as f64,
            )
        })
        .collect();

    // Features: option 1's representation, then option 2's, for every kept instance.
    let rows: Vec<i64> = rest
        .iter()
        .flat_map(|&i| [2 * i as i64, 2 * i as i64 + 1])
        .collect();
    let mut data = Vec::new();
    let mut dim = 0;
    tch::no_grad(|| -> anyhow::Result<()> {
        for chunk in rows.chunks(8192) {
            let r = model
                .represent(&table, chunk)
                .to_kind(tch::Kind::Float)
                .to(tch::Device::Cpu);
            dim = 2 * r.size()[1] as usize;
            data.extend(Vec::<f32>::try_from(&r.view([-1]))?);
        }
        Ok(())
    })?;
    crate::setup::empty_out_dir(a.out, a.force)?;
    write_npy(
        &a.out.join("features.npy"),
        &FeatureMatrix {
            rows: rest.len(),
            dim,
            data,
        },
    )?;
    let lines: String = rest
        .iter()
        .map(|&i| format!("{}\n", instances[i].line))
        .collect();
    af_core::atomic::write(a.out.join("instances.jsonl"), lines.as_bytes())?;
    let report = json!({
        "input": a.winogrande, "instances": instances.len(), "slice": slice.len(), "kept": rest.len(), "dim": dim,
        "members": members, "training": training,
        "two_way_accuracy_on_kept": accuracy.iter().map(|(h, v)| (h.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "device": format!("{device:?}"), "seed": a.seed,
    });
    af_core::atomic::write(
        a.out.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    Ok(FeaturesRun {
        kept: rest.len(),
        dim,
        slice: slice.len(),
        accuracy,
        out: a.out.to_path_buf(),
    })
}

impl std::fmt::Display for FeaturesRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "features: {} instances trained the encoders and were dropped; {} kept with {}-d features in {} (encoders' own two-way accuracy on them: {})",
            self.slice,
            self.kept,
            self.dim,
            self.out.display(),
            self.accuracy.iter().map(|(h, v)| format!("{h} {v:.3}")).collect::<Vec<_>>().join(", ")
        )
    }
}
