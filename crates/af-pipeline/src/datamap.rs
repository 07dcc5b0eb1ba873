//! Data maps (Dataset Cartography, Swayamdipta et al. 2020) of any multiple-choice file `af audit`
//! reads: af's committee trains on the questions for a fixed number of epochs, and after every
//! epoch each question's probability of its gold option (softmax over its options) is recorded.
//! Per question: confidence (mean over epochs), variability (their standard deviation),
//! correctness (share of epochs the gold option scored highest) and forgetfulness (epochs where
//! it went from right to wrong).
//!
//! Folds (docs/decisions/127-one-committee-per-group-fold-each-instance.md): the questions are split by group into `folds` parts and
//! one committee trains on each part; a question's dynamics come from the one committee that
//! trained on it, as Cartography's come from the model trained on it. One fold (the default) is
//! Cartography's setting; more folds bound each model's size on large files.
//!
//! Writes into `out` (docs/formats.md): `datamap.csv`, `datamap.json` (settings and counts),
//! `datamap.svg`/`.png`, and `easy-to-learn`, `ambiguous`, `hard-to-learn` subsets as files in
//! the input's own layout (its rows, unchanged, with the input's extension).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use af_core::{CommitteeConfig, Config, MemberName, Question};
use af_io::questions::{read_questions, QuestionFormat, Syntax};
use af_nn::committee::{self as nnc, Column, CommitteeModel, Registry, JOINT};
use af_text::Tagger;
use anyhow::Context;
use serde::Serialize;
use tch::{nn, Device};

/// The map's settings (`af datamap` options).
#[derive(Clone, Debug, Serialize)]
pub struct DatamapOptions {
    /// Epochs each committee trains (every epoch is recorded; no early stop).
    pub epochs: usize,
    /// Group folds, one committee each.
    pub folds: usize,
    /// Share of questions in each region: the most confident, the most variable, the least
    /// confident (chosen independently, as in Cartography: a question may be in two).
    pub easy: f64,
    pub ambiguous: f64,
    pub hard: f64,
}

impl Default for DatamapOptions {
    fn default() -> Self {
        Self {
            epochs: 6,
            folds: 1,
            easy: 0.33,
            ambiguous: 0.33,
            hard: 0.33,
        }
    }
}

/// One question's training dynamics.
#[derive(Clone, Debug, Serialize)]
pub struct Dynamics {
    pub confidence: f64,
    pub variability: f64,
    pub correctness: f64,
    pub forgetfulness: usize,
    pub fold: usize,
    /// The gold option's probability after each epoch.
    pub gold_probability: Vec<f64>,
}

impl Dynamics {
    pub(crate) fn from_epochs(probabilities: Vec<f64>, right: &[bool], fold: usize) -> Self {
        let n = probabilities.len().max(1) as f64;
        let confidence = probabilities.iter().sum::<f64>() / n;
        // Population standard deviation, as Cartography (numpy's default).
        let variability = (probabilities
            .iter()
            .map(|p| (p - confidence).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        let correctness = right.iter().filter(|&&r| r).count() as f64 / n;
        let forgetfulness = right.windows(2).filter(|w| w[0] && !w[1]).count();
        Self {
            confidence,
            variability,
            correctness,
            forgetfulness,
            fold,
            gold_probability: probabilities,
        }
    }
}

/// The three regions, as question indices (most typical first).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Regions {
    pub easy: Vec<usize>,
    pub ambiguous: Vec<usize>,
    pub hard: Vec<usize>,
}

/// Cartography's regions: the `easy` share with the highest confidence, the `ambiguous` share
/// with the highest variability, the `hard` share with the lowest confidence (ties by index).
pub fn regions(dynamics: &[Dynamics], options: &DatamapOptions) -> Regions {
    let take = |share: f64| ((dynamics.len() as f64 * share).round() as usize).min(dynamics.len());
    let ranked = |key: &dyn Fn(&Dynamics) -> f64| {
        let mut order: Vec<usize> = (0..dynamics.len()).collect();
        order.sort_by(|&a, &b| {
            key(&dynamics[b])
                .total_cmp(&key(&dynamics[a]))
                .then(a.cmp(&b))
        });
        order
    };
    Regions {
        easy: ranked(&|d| d.confidence)[..take(options.easy)].to_vec(),
        ambiguous: ranked(&|d| d.variability)[..take(options.ambiguous)].to_vec(),
        hard: ranked(&|d| -d.confidence)[..take(options.hard)].to_vec(),
    }
}

/// The members a map trains: those asked for, or the last `[filter]` phase's, less any that read
/// LM features (a dataset file has none) or are fine-tuned apart from the committee
/// (`encoder-ft`). Returns (members, left out).
pub fn members_for(
    config: &Config,
    registry: &Registry,
    asked: Option<&[MemberName]>,
) -> anyhow::Result<(Vec<MemberName>, Vec<MemberName>)> {
    let unusable = |name: &MemberName| {
        registry.get(name.as_str()).is_some_and(|m| {
            m.joint()
                .is_none_or(|m| m.columns().contains(&Column::Features))
        })
    };
    if let Some(asked) = asked {
        for name in asked {
            anyhow::ensure!(
                registry.get(name.as_str()).is_some() && !unusable(name),
                "--members: `{name}` is not a member that reads text: expected some of {}",
                registry.text_members().join(", ")
            );
        }
        return Ok((asked.to_vec(), Vec::new()));
    }
    let phase = config
        .filter
        .stages
        .last()
        .map(|p| p.members.clone())
        .unwrap_or_default();
    let (dropped, kept): (Vec<MemberName>, Vec<MemberName>) =
        phase.into_iter().partition(|m| unusable(m));
    anyhow::ensure!(
        !kept.is_empty(),
        "the last [[filter.stages]] has no member that reads text: name some with --members"
    );
    Ok((kept, dropped))
}

/// The full view of a question as the committee reads it: context and second-sentence start
/// (marked), then each ending.
fn options_of(q: &Question) -> Vec<(Vec<String>, std::ops::Range<usize>)> {
    let given: Vec<String> = af_text::tokenize_lowercase(&q.context)
        .into_iter()
        .chain(af_text::tokenize_lowercase(&q.prefix))
        .collect();
    q.endings
        .iter()
        .map(|e| {
            (
                given
                    .iter()
                    .cloned()
                    .chain(af_text::tokenize_lowercase(e))
                    .collect(),
                0..given.len(),
            )
        })
        .collect()
}

/// Group folds: groups shuffled by `seed`, dealt round-robin. Returns each question's fold.
pub fn fold_of(questions: &[Question], folds: usize, seed: u64) -> Vec<usize> {
    let groups: Vec<&str> = questions.iter().map(|q| q.group.as_str()).collect();
    af_core::split::folds_by_group(&groups, folds, seed)
}

/// The committee a data map trains: its settings and members, the tagger that reads the options,
/// and the device it trains on.
pub struct MapCommittee<'a> {
    pub config: &'a CommitteeConfig,
    pub registry: &'a Registry,
    pub members: &'a [MemberName],
    pub tagger: &'a Tagger,
    pub device: Device,
}

/// Trains the committee on each fold and records every question's dynamics.
pub fn dynamics(
    questions: &[Question],
    committee: &MapCommittee,
    options: &DatamapOptions,
    seed: u64,
    progress: &dyn crate::Progress,
) -> anyhow::Result<Vec<Dynamics>> {
    let &MapCommittee {
        config: committee,
        registry,
        members,
        tagger,
        device,
    } = committee;
    anyhow::ensure!(
        options.epochs >= 2,
        "a data map needs at least 2 epochs (variability is a spread across epochs)"
    );
    anyhow::ensure!(options.folds >= 1, "folds must be at least 1");
    // Every epoch is recorded and every question trains: no held-out share, no early stop.
    // The dataset's options are the rows, whatever view a member reads in a pool's committee.
    let config = CommitteeConfig {
        epochs: options.epochs,
        validation_share: 0.0,
        ..nnc::members::reading_given_rows(committee)
    };
    let fold = fold_of(questions, options.folds, seed);
    let mut out: Vec<Option<Dynamics>> = vec![None; questions.len()];
    let bar = progress.bar("data map epochs", (options.folds * options.epochs) as u64);
    let mut encoder = None;
    for f in 0..options.folds {
        let mine: Vec<usize> = (0..questions.len()).filter(|&q| fold[q] == f).collect();
        anyhow::ensure!(
            !mine.is_empty(),
            "fold {f} of {} is empty: fewer groups than folds",
            options.folds
        );
        let tokens: Vec<Vec<(Vec<String>, std::ops::Range<usize>)>> =
            mine.iter().map(|&q| options_of(&questions[q])).collect();
        let flat: Vec<(&[String], std::ops::Range<usize>)> = tokens
            .iter()
            .flatten()
            .map(|(t, m)| (t.as_slice(), m.clone()))
            .collect();
        let (mut table, cut) =
            crate::table::sentence_table(&flat, flat.len(), &config, tagger, device);
        if let Some(frozen) = registry.frozen_encoder(members, &config)? {
            if encoder.is_none() {
                encoder = Some(frozen.load(device)?);
            }
            let encoder = encoder.as_ref().expect("loaded above");
            let texts: Vec<String> = flat.iter().map(|(tokens, _)| tokens.join(" ")).collect();
            // Folds hold disjoint questions: nothing to reuse across them.
            crate::encoded::attach_texts(
                &mut table,
                encoder,
                &texts,
                &mut crate::encoded::TextMemo::default(),
                progress,
            )?;
        }
        if cut > 0 {
            tracing::warn!("{cut} options are longer than [committee] max-tokens = {} and were cut to their last tokens", config.max_tokens);
        }
        // Rows in file order per question, and the committee's order (gold first) for training.
        let mut rows: Vec<Vec<i64>> = Vec::with_capacity(mine.len());
        let mut at = 0i64;
        for &q in &mine {
            let n = questions[q].endings.len() as i64;
            rows.push((at..at + n).collect());
            at += n;
        }
        let train: Vec<Vec<i64>> = mine
            .iter()
            .zip(&rows)
            .map(|(&q, r)| {
                let gold = questions[q].label;
                std::iter::once(r[gold])
                    .chain(
                        r.iter()
                            .enumerate()
                            .filter(|(o, _)| *o != gold)
                            .map(|(_, &x)| x),
                    )
                    .collect()
            })
            .collect();
        let all_rows: Vec<i64> = rows.iter().flatten().copied().collect();
        tch::manual_seed(seed.wrapping_add(f as u64) as i64);
        let vs = nn::VarStore::new(device);
        let model =
            CommitteeModel::new(&vs.root(), &config, registry, members, config.joint, &table)?;
        let mut probability: Vec<Vec<f64>> = vec![Vec::with_capacity(options.epochs); mine.len()];
        let mut right: Vec<Vec<bool>> = vec![Vec::with_capacity(options.epochs); mine.len()];
        let mut on_epoch = |_epoch: usize, m: &CommitteeModel| -> Result<(), af_nn::NnError> {
            let heads = nnc::score(m, &table, &all_rows, config.score_batch);
            let shapes: Vec<(usize, usize)> = mine
                .iter()
                .map(|&q| (questions[q].endings.len(), questions[q].label))
                .collect();
            for (i, (p, r)) in nnc::gold_probabilities(&heads, &shapes)
                .into_iter()
                .enumerate()
            {
                probability[i].push(p);
                right[i].push(r);
            }
            bar.inc(1);
            Ok(())
        };
        nnc::train_observed(
            &vs,
            &model,
            &table,
            &train,
            &config,
            seed.wrapping_add(f as u64),
            &mut on_epoch,
        )
        .with_context(|| format!("training the committee of fold {f}"))?;
        for (i, &q) in mine.iter().enumerate() {
            out[q] = Some(Dynamics::from_epochs(
                std::mem::take(&mut probability[i]),
                &right[i],
                f,
            ));
        }
    }
    bar.finish();
    Ok(out
        .into_iter()
        .map(|d| d.expect("every question is in a fold"))
        .collect())
}

/// What `af datamap` is asked to do.
pub struct DatamapRequest<'a> {
    pub dataset: &'a Path,
    pub format: Option<QuestionFormat>,
    pub skip_bad: bool,
    /// `[committee]`, `[filter]` (the default members) and `[tagger]` are read from it.
    pub config: &'a Config,
    /// Members to train (None: the last filter phase's text members).
    pub members: Option<Vec<MemberName>>,
    pub options: DatamapOptions,
    pub seed: u64,
    pub threads: usize,
    pub device: String,
    pub out: &'a Path,
    pub force: bool,
}

/// A finished map (every number is also in `out/datamap.json`).
#[derive(Serialize)]
pub struct DatamapRun {
    pub dataset: PathBuf,
    pub format: QuestionFormat,
    pub questions: usize,
    pub members: Vec<MemberName>,
    /// Members of the default composition left out because they read LM features.
    pub left_out: Vec<MemberName>,
    /// `joint`, or `mean of members`.
    pub head: String,
    pub options: DatamapOptions,
    pub seed: u64,
    pub device: String,
    pub seconds: f64,
    pub easy: usize,
    pub ambiguous: usize,
    pub hard: usize,
    pub mean_confidence: f64,
    pub mean_correctness: f64,
    pub out: PathBuf,
}

impl std::fmt::Display for DatamapRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: Vec<&str> = self.members.iter().map(MemberName::as_str).collect();
        write!(
            f,
            "datamap: {} questions, committee {} ({}), {} epochs x {} fold(s) in {:.1} s; mean confidence {:.3}, correctness {:.3}; \
             easy-to-learn {}, ambiguous {}, hard-to-learn {}; outputs in {}",
            self.questions,
            members.join("+"),
            self.head,
            self.options.epochs,
            self.options.folds,
            self.seconds,
            self.mean_confidence,
            self.mean_correctness,
            self.easy,
            self.ambiguous,
            self.hard,
            self.out.display()
        )?;
        if !self.left_out.is_empty() {
            let left: Vec<&str> = self.left_out.iter().map(MemberName::as_str).collect();
            write!(f, " (left out, they read LM features: {})", left.join(", "))?;
        }
        Ok(())
    }
}

/// Maps a file and writes every output into `request.out`.
pub fn run(request: &DatamapRequest, progress: &dyn crate::Progress) -> anyhow::Result<DatamapRun> {
    let config = request.config;
    af_nn::runtime::set_threads(request.threads);
    let device = crate::setup::device_named(&request.device)?;
    let registry = Registry::builtin();
    let (members, left_out) = members_for(config, &registry, request.members.as_deref())?;
    let file = read_questions(request.dataset, request.format, request.skip_bad)?;
    let raw = raw_rows(request.dataset, file.format)?;
    crate::setup::empty_out_dir(request.out, request.force)?;
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let start = std::time::Instant::now();
    let committee = MapCommittee {
        config: &config.committee,
        registry: &registry,
        members: &members,
        tagger: &tagger,
        device,
    };
    let d = dynamics(
        &file.questions,
        &committee,
        &request.options,
        request.seed,
        progress,
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let r = regions(&d, &request.options);

    let write = |name: &str, bytes: &[u8]| {
        af_core::atomic::write(request.out.join(name), bytes)
            .with_context(|| format!("cannot write {}", request.out.join(name).display()))
    };
    let mut in_region: Vec<Vec<&str>> = vec![Vec::new(); d.len()];
    for (name, list) in [
        ("easy-to-learn", &r.easy),
        ("ambiguous", &r.ambiguous),
        ("hard-to-learn", &r.hard),
    ] {
        for &q in list {
            in_region[q].push(name);
        }
    }
    let mut csv = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "id",
        "confidence",
        "variability",
        "correctness",
        "forgetfulness",
        "fold",
        "regions",
    ]
    .map(String::from)
    .to_vec();
    header.extend((1..=request.options.epochs).map(|e| format!("gold_probability_{e}")));
    csv.write_record(&header)?;
    for ((q, dy), regions) in file.questions.iter().zip(&d).zip(&in_region) {
        let mut row = vec![
            q.id.clone(),
            format!("{:.4}", dy.confidence),
            format!("{:.4}", dy.variability),
            format!("{:.4}", dy.correctness),
            dy.forgetfulness.to_string(),
            dy.fold.to_string(),
            regions.join(";"),
        ];
        row.extend(dy.gold_probability.iter().map(|p| format!("{p:.4}")));
        csv.write_record(&row)?;
    }
    write(
        "datamap.csv",
        &csv.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?,
    )?;
    let ext = request
        .dataset
        .extension()
        .map_or("jsonl".into(), |e| e.to_string_lossy().into_owned());
    for (name, list) in [
        ("easy-to-learn", &r.easy),
        ("ambiguous", &r.ambiguous),
        ("hard-to-learn", &r.hard),
    ] {
        let mut lines: Vec<usize> = list.iter().map(|&q| file.questions[q].line).collect();
        lines.sort_unstable();
        let mut text = raw.header.clone();
        for line in lines {
            text.push_str(raw.rows.get(&line).with_context(|| {
                format!(
                    "{}: no row starts on line {line}",
                    request.dataset.display()
                )
            })?);
        }
        write(&format!("{name}.{ext}"), text.as_bytes())?;
    }
    let points: Vec<af_report::MapPoint> = d
        .iter()
        .map(|x| af_report::MapPoint {
            variability: x.variability,
            confidence: x.confidence,
            correctness: x.correctness,
        })
        .collect();
    let title = format!(
        "Data map of {}",
        request
            .dataset
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    );
    write(
        "datamap.svg",
        af_report::datamap_svg(&points, &title)?.as_bytes(),
    )?;
    af_report::datamap_png(&points, &title, &request.out.join("datamap.png"))?;
    let n = d.len().max(1) as f64;
    let run = DatamapRun {
        dataset: request.dataset.to_path_buf(),
        format: file.format,
        questions: d.len(),
        head: if config.committee.joint {
            JOINT.to_string()
        } else {
            "mean of members".into()
        },
        members,
        left_out,
        options: request.options.clone(),
        seed: request.seed,
        device: format!("{device:?}"),
        seconds,
        easy: r.easy.len(),
        ambiguous: r.ambiguous.len(),
        hard: r.hard.len(),
        mean_confidence: d.iter().map(|x| x.confidence).sum::<f64>() / n,
        mean_correctness: d.iter().map(|x| x.correctness).sum::<f64>() / n,
        out: request.out.to_path_buf(),
    };
    write(
        "datamap.json",
        serde_json::to_string_pretty(&run)?.as_bytes(),
    )?;
    Ok(run)
}

/// The input's rows as they are in the file, by the line they start on (what `Question::line`
/// says), and what comes before the first (a CSV header).
struct RawRows {
    header: String,
    rows: BTreeMap<usize, String>,
}

fn raw_rows(path: &Path, format: QuestionFormat) -> anyhow::Result<RawRows> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bom = text.starts_with('\u{feff}');
    let body = text.trim_start_matches('\u{feff}');
    let mut rows = BTreeMap::new();
    let with_newline = |s: &str| {
        if s.ends_with('\n') {
            s.to_string()
        } else {
            format!("{s}\n")
        }
    };
    match format.syntax() {
        Syntax::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .flexible(true)
                .from_reader(body.as_bytes());
            reader
                .headers()
                .with_context(|| format!("{}: the header", path.display()))?;
            let mut record = csv::StringRecord::new();
            let mut first = None;
            while reader
                .read_record(&mut record)
                .with_context(|| format!("reading {}", path.display()))?
            {
                let at = record
                    .position()
                    .expect("a read record has a position")
                    .clone();
                let end = reader.position().byte() as usize;
                first.get_or_insert(at.byte() as usize);
                rows.insert(
                    at.line() as usize,
                    with_newline(&body[at.byte() as usize..end]),
                );
            }
            let header = &body[..first.unwrap_or(body.len())];
            Ok(RawRows {
                header: format!(
                    "{}{}",
                    if bom { "\u{feff}" } else { "" },
                    with_newline(header)
                ),
                rows,
            })
        }
        Syntax::JsonLines => {
            for (i, line) in body
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                rows.insert(i + 1, format!("{line}\n"));
            }
            Ok(RawRows {
                header: String::new(),
                rows,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// 300 generic questions of 4 options: the right ending holds the word "indeed", the others
    /// never; 30 labels are then flipped to a wrong ending. The flipped ones must be hard to learn.
    #[test]
    fn flipped_labels_land_in_hard_to_learn() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let words = [
            "red", "blue", "dog", "cat", "runs", "sits", "the", "a", "tree", "car", "big", "small",
            "walks", "green", "house", "sky",
        ];
        let mut text = String::new();
        let mut flipped = Vec::new();
        for q in 0..300 {
            let mut endings: Vec<String> = (0..4)
                .map(|_| {
                    (0..5)
                        .map(|_| words[rng.random_range(0..words.len())])
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            let right = rng.random_range(0..4);
            endings[right] = format!("{} indeed", endings[right]);
            let label = if q % 10 == 0 {
                flipped.push(format!("q{q}"));
                (right + 1 + rng.random_range(0..3)) % 4
            } else {
                right
            };
            text.push_str(&serde_json::json!({"id": format!("q{q}"), "context": "someone is outside .", "endings": endings, "label": label}).to_string());
            text.push('\n');
        }
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("noisy.jsonl");
        std::fs::write(&input, &text).unwrap();
        let config = Config {
            committee: CommitteeConfig {
                embedding: 16,
                cnn_filters: 8,
                lstm_hidden: 16,
                joint_hidden: 16,
                learning_rate: 1e-2,
                batch_items: 16,
                ..Default::default()
            },
            ..Default::default()
        };
        let out = dir.path().join("map");
        let request = DatamapRequest {
            dataset: &input,
            format: None,
            skip_bad: false,
            config: &config,
            members: Some(af_core::member_names(&["bow", "cnn"])),
            options: DatamapOptions {
                epochs: 5,
                ..Default::default()
            },
            seed: 1,
            threads: 1,
            device: "cpu".into(),
            out: &out,
            force: false,
        };
        let run = run(&request, &crate::NoProgress).unwrap();
        assert_eq!(
            (run.questions, run.easy, run.ambiguous, run.hard),
            (300, 99, 99, 99)
        );
        let hard = std::fs::read_to_string(out.join("hard-to-learn.jsonl")).unwrap();
        let hard_ids: Vec<String> = hard
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert!(hard.lines().all(|l| text.contains(l)), "rows unchanged");
        let found = flipped.iter().filter(|id| hard_ids.contains(id)).count();
        assert!(
            found * 10 >= flipped.len() * 8,
            "recall of flipped labels in hard-to-learn: {found} of {}",
            flipped.len()
        );
        let csv = std::fs::read_to_string(out.join("datamap.csv")).unwrap();
        assert!(csv.starts_with(
            "id,confidence,variability,correctness,forgetfulness,fold,regions,gold_probability_1,"
        ));
        assert_eq!(csv.lines().count(), 301);
        for name in [
            "datamap.svg",
            "datamap.png",
            "datamap.json",
            "easy-to-learn.jsonl",
            "ambiguous.jsonl",
        ] {
            assert!(out.join(name).exists(), "{name}");
        }
    }

    #[test]
    fn dynamics_and_regions_follow_cartography() {
        let d = Dynamics::from_epochs(vec![0.2, 0.8, 0.6, 0.2], &[false, true, true, false], 0);
        assert!((d.confidence - 0.45).abs() < 1e-12);
        assert!(
            (d.variability - (0.0675f64).sqrt()).abs() < 1e-12,
            "{}",
            d.variability
        );
        assert_eq!((d.correctness, d.forgetfulness), (0.5, 1));
        let many: Vec<Dynamics> = (0..10)
            .map(|i| {
                Dynamics::from_epochs(
                    vec![i as f64 / 10.0, (i * 3 % 10) as f64 / 10.0],
                    &[true, false],
                    0,
                )
            })
            .collect();
        let r = regions(
            &many,
            &DatamapOptions {
                easy: 0.2,
                ambiguous: 0.3,
                hard: 0.1,
                ..Default::default()
            },
        );
        assert_eq!((r.easy.len(), r.ambiguous.len(), r.hard.len()), (2, 3, 1));
        assert!(many[r.easy[0]].confidence >= many[r.easy[1]].confidence);
        assert!(many
            .iter()
            .all(|x| x.confidence >= many[r.hard[0]].confidence));
    }

    #[test]
    fn csv_rows_come_back_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.csv");
        std::fs::write(&p, "a,b\n1,\"x\ny\"\n2,z\n").unwrap();
        let raw = raw_rows(&p, QuestionFormat::SWAG).unwrap();
        assert_eq!(raw.header, "a,b\n");
        assert_eq!(
            raw.rows.values().cloned().collect::<Vec<_>>(),
            ["1,\"x\ny\"\n", "2,z\n"]
        );
        assert_eq!(raw.rows.keys().copied().collect::<Vec<_>>(), [2, 4]);
    }
}
