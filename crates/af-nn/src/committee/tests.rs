use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::nn;
use tch::{Device, Kind, Tensor};

use super::batch::{length_groups, LENGTH_GROUP_OVERHEAD_ROWS};
use super::members::lstm::reverse_within_length;
use super::*;
use crate::table::{CandidateTable, EncodedRows, RawCandidate, TableAssembler, Vocabularies};
use af_core::ScoreBatch;

/// Every built-in member, in the registry's order.
fn all_members() -> Vec<MemberName> {
    Registry::builtin()
        .names()
        .into_iter()
        .map(MemberName::new)
        .collect()
}

fn names(names: &[&str]) -> Vec<MemberName> {
    names.iter().map(|n| MemberName::new(*n)).collect()
}

/// One candidate given by its ids: word ids, POS-view ids (below 256), marked range, features.
struct CandidateInput {
    words: Vec<i32>,
    pos: Vec<i32>,
    marked: std::ops::Range<usize>,
    features: [f32; 8],
}

/// A table of candidates given by their ids, through the assembler (ids map to themselves).
fn table_of(
    inputs: &[CandidateInput],
    vocab: i64,
    pos_vocab: i64,
    min_len: usize,
) -> CandidateTable {
    let interned: Vec<Vec<u32>> = inputs
        .iter()
        .map(|c| c.words.iter().map(|&w| w as u32).collect())
        .collect();
    let tags: Vec<Vec<u8>> = inputs
        .iter()
        .map(|c| c.pos.iter().map(|&p| u8::try_from(p).unwrap()).collect())
        .collect();
    let mut assembler = TableAssembler::new(Device::Cpu);
    let raw: Vec<RawCandidate> = inputs
        .iter()
        .zip(&interned)
        .zip(&tags)
        .map(|((c, interned), tags)| RawCandidate {
            interned,
            tags,
            marked: c.marked.clone(),
            features: c.features,
        })
        .collect();
    assembler.push(&raw);
    let vocabularies = Vocabularies {
        word_of: (0..vocab as i32).collect(),
        pos_word_of: vec![-1; vocab as usize],
        tag_base: 0,
        vocab,
        pos_vocab,
    };
    let mut table = assembler.finish(&vocabularies, [0.0; 8], [1.0; 8], min_len);
    // Frozen embeddings for the encoder member: a function of each row's words, no context.
    let text: Vec<f32> = inputs
        .iter()
        .flat_map(|c| {
            let mut rng = ChaCha8Rng::seed_from_u64(
                c.words
                    .iter()
                    .fold(7u64, |h, &w| h.wrapping_mul(31).wrapping_add(w as u64)),
            );
            (0..ENCODED_DIM).map(move |_| rand::Rng::random_range(&mut rng, -1.0f32..1.0))
        })
        .collect();
    let text = Tensor::from_slice(&text).view([inputs.len() as i64, ENCODED_DIM]);
    // The lm-likelihood member's features, a function of the row's content as the LM's are.
    let lm = text.narrow(1, 0, LM_FEATURES).copy();
    table
        .attach_encoded(EncodedRows {
            text,
            contexts: None,
        })
        .unwrap();
    table.attach_lm_likelihood(lm).unwrap();
    table
}

const LM_FEATURES: i64 = crate::committee::members::lm_likelihood::FEATURES.len() as i64;

const ENCODED_DIM: i64 = 12;

/// Unit vectors, one per row of `x`.
fn normalized(x: Tensor) -> Tensor {
    let norm = x.norm_scalaropt_dim(2, [1], true);
    x / norm
}

/// A table where right answers contain word 5 and wrong ones never do, and where the right
/// answer's embedding lies near its question's context and the wrong ones' anywhere: every
/// text member must learn it; the MLP sees only noise and must stay near chance.
fn planted(questions: usize, width: usize, seed: u64) -> (CandidateTable, Vec<Vec<i64>>) {
    use rand::Rng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut inputs = Vec::new();
    let mut qs = Vec::new();
    for _ in 0..questions {
        let mut q = Vec::new();
        for option in 0..width {
            let mut words: Vec<i32> = (0..6).map(|_| rng.random_range(6..40)).collect();
            if option == 0 {
                let at = rng.random_range(2..6);
                words[at] = 5;
            }
            let pos = words
                .iter()
                .map(|w| if *w < 20 { *w } else { 20 + w % 3 })
                .collect();
            let features = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            q.push(inputs.len() as i64);
            inputs.push(CandidateInput {
                words,
                pos,
                marked: 0..2,
                features,
            });
        }
        qs.push(q);
    }
    let mut table = table_of(&inputs, 40, 24, 5);
    let gaussian = |n: usize, rng: &mut ChaCha8Rng| -> Tensor {
        let v: Vec<f32> = (0..n * ENCODED_DIM as usize)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        normalized(Tensor::from_slice(&v).view([n as i64, ENCODED_DIM]))
    };
    let contexts = gaussian(questions, &mut rng);
    let of: Vec<i64> = (0..questions as i64)
        .flat_map(|q| std::iter::repeat_n(q, width))
        .collect();
    let of = Tensor::from_slice(&of);
    let noise = gaussian(questions * width, &mut rng);
    let gold = Tensor::from_slice(
        &(0..questions * width)
            .map(|r| f32::from(u8::from(r % width == 0)))
            .collect::<Vec<_>>(),
    )
    .unsqueeze(1);
    let text =
        normalized(&gold * (contexts.index_select(0, &of) + &noise * 0.5) + (1.0 - &gold) * &noise);
    table
        .attach_encoded(EncodedRows {
            text,
            contexts: Some((contexts, of)),
        })
        .unwrap();
    // LM likelihoods where the right answer is the likelier, as the embeddings carry it above.
    let lm = gold.repeat([1, LM_FEATURES])
        + Tensor::randn(
            [questions as i64 * width as i64, LM_FEATURES],
            (Kind::Float, Device::Cpu),
        ) * 0.3;
    table.attach_lm_likelihood(lm).unwrap();
    (table, qs)
}

fn small(
    epochs: usize,
    validation_share: f64,
    batch_items: usize,
    learning_rate: f64,
) -> CommitteeConfig {
    CommitteeConfig {
        embedding: 16,
        mlp_hidden: 32,
        cnn_filters: 8,
        lstm_hidden: 16,
        joint_hidden: 16,
        ngram_buckets: 1000,
        epochs,
        validation_share,
        batch_items,
        learning_rate,
        ..Default::default()
    }
}

#[test]
fn text_members_find_a_planted_word_and_the_feature_mlp_does_not() {
    let _torch_rng = crate::torch_rng_lock();
    tch::manual_seed(1);
    let (table, qs) = planted(200, 4, 1);
    let vs = nn::VarStore::new(Device::Cpu);
    let settings = small(6, 0.0, 16, 1e-2);
    let model = CommitteeModel::new(
        &vs.root(),
        &settings,
        &Registry::builtin(),
        &all_members(),
        true,
        &table,
    )
    .unwrap();
    let (fit, held) = qs.split_at(140);
    train(&vs, &model, &table, fit, &settings, 1).unwrap();
    let rows: Vec<i64> = held.iter().flatten().copied().collect();
    for (head, scores) in score(&model, &table, &rows, ScoreBatch::Candidates(64)) {
        let acc = scores
            .chunks(4)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count() as f64
            / held.len() as f64;
        if head == "mlp" {
            assert!(acc < 0.45, "mlp has no signal to use: {acc}");
        } else {
            assert!(acc > 0.8, "{head} should find the planted word: {acc}");
        }
    }
}

/// The encoder member finds right answers by how their embedding relates to the context's,
/// and without the contexts (the same texts) it cannot.
#[test]
fn the_encoder_member_reads_the_context() {
    let _torch_rng = crate::torch_rng_lock();
    let (mut table, qs) = planted(200, 4, 4);
    let (fit, held) = qs.split_at(140);
    let rows: Vec<i64> = held.iter().flatten().copied().collect();
    let settings = small(6, 0.0, 16, 1e-2);
    let accuracy = |table: &CandidateTable| {
        tch::manual_seed(4);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &names(&["encoder"]),
            false,
            table,
        )
        .unwrap();
        train(&vs, &model, table, fit, &settings, 4).unwrap();
        let scores = score(&model, table, &rows, ScoreBatch::Candidates(64))
            .swap_remove(0)
            .1;
        scores
            .chunks(4)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count() as f64
            / held.len() as f64
    };
    let with_context = accuracy(&table);
    assert!(with_context > 0.8, "{with_context}");
    let text = table.encoded.take().unwrap().text;
    table
        .attach_encoded(EncodedRows {
            text,
            contexts: None,
        })
        .unwrap();
    let without = accuracy(&table);
    assert!(without < 0.45, "the texts alone carry no signal: {without}");

    let bad = table
        .attach_encoded(EncodedRows {
            text: Tensor::zeros([3, ENCODED_DIM], (Kind::Float, Device::Cpu)),
            contexts: None,
        })
        .unwrap_err();
    assert!(bad.to_string().contains("the table has 800 rows"), "{bad}");
    table.encoded = None;
    let vs = nn::VarStore::new(Device::Cpu);
    let e = CommitteeModel::new(
        &vs.root(),
        &settings,
        &Registry::builtin(),
        &names(&["encoder"]),
        false,
        &table,
    )
    .unwrap_err();
    assert!(e.to_string().contains("has none"), "{e}");
}

/// Right answers start with the word the context ends with (5 or 6), wrong ones with the
/// other: only a member that reads the context can tell. The CNN sees the pair in one window
/// of its full-view rows; on the second sentence alone it is at chance.
#[test]
fn a_member_on_the_full_view_reads_the_context() {
    use rand::Rng;
    let _torch_rng = crate::torch_rng_lock();
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (mut second, mut full, mut qs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..200 {
        let cue = rng.random_range(5..7);
        let context: Vec<i32> = (0..3)
            .map(|_| rng.random_range(8..40))
            .chain([cue])
            .collect();
        let mut q = Vec::new();
        for option in 0..4 {
            let first = if option == 0 { cue } else { 11 - cue };
            let words: Vec<i32> = std::iter::once(first)
                .chain((0..5).map(|_| rng.random_range(8..40)))
                .collect();
            let input = |words: Vec<i32>, marked| CandidateInput {
                pos: words.iter().map(|w| w % 20).collect(),
                words,
                marked,
                features: [0.0; 8],
            };
            q.push(second.len() as i64);
            full.push(input(context.iter().chain(&words).copied().collect(), 0..4));
            second.push(input(words, 0..0));
        }
        qs.push(q);
    }
    let mut table = table_of(&second, 40, 24, 5);
    table.full_view = Some(Box::new(table_of(&full, 40, 24, 5)));
    let (fit, held) = qs.split_at(140);
    let rows: Vec<i64> = held.iter().flatten().copied().collect();
    let accuracy = |view: &str| {
        tch::manual_seed(8);
        let mut settings = small(6, 0.0, 16, 1e-2);
        settings.member =
            serde_json::from_value(serde_json::json!({ "cnn": { "view": view } })).unwrap();
        let vs = nn::VarStore::new(Device::Cpu);
        let model = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &names(&["cnn"]),
            false,
            &table,
        )
        .unwrap();
        train(&vs, &model, &table, fit, &settings, 8).unwrap();
        let scores = score(&model, &table, &rows, ScoreBatch::Candidates(64))
            .swap_remove(0)
            .1;
        scores
            .chunks(4)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count() as f64
            / held.len() as f64
    };
    let (full_view, second_sentence) = (accuracy("full"), accuracy("second-sentence"));
    assert!(full_view > 0.8, "the full view holds the cue: {full_view}");
    assert!(
        second_sentence < 0.45,
        "the second sentence alone does not: {second_sentence}"
    );

    table.full_view = None;
    let mut settings = small(1, 0.0, 16, 1e-2);
    settings.member =
        serde_json::from_value(serde_json::json!({ "cnn": { "view": "full" } })).unwrap();
    let vs = nn::VarStore::new(Device::Cpu);
    let e = CommitteeModel::new(
        &vs.root(),
        &settings,
        &Registry::builtin(),
        &names(&["cnn"]),
        false,
        &table,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no full-view rows"), "{e}");
}

#[test]
fn scores_do_not_depend_on_padding_or_batch_mates() {
    let _torch_rng = crate::torch_rng_lock();
    tch::manual_seed(5);
    // Rows of lengths 1..=12, read in batches at least 5 wide and at least 30 wide.
    let inputs: Vec<CandidateInput> = (1..=12usize)
        .map(|len| CandidateInput {
            words: (0..len)
                .map(|j| 2 + ((len * 7 + j * 3) % 37) as i32)
                .collect(),
            pos: (0..len).map(|j| 2 + ((len + j) % 20) as i32).collect(),
            marked: 0..len.min(2),
            features: std::array::from_fn(|f| (f as f32 - 3.5) / 4.0),
        })
        .collect();
    let narrow = table_of(&inputs, 40, 24, 5);
    let wide = table_of(&inputs, 40, 24, 30);
    assert_eq!((narrow.width_of(&[0]), narrow.width_of(&[0, 11])), (5, 12));
    assert_eq!((wide.width_of(&[0]), wide.width_of(&[0, 11])), (30, 30));
    assert_eq!(narrow.tokens(), (1..=12).sum::<i64>(), "stored unpadded");
    let vs = nn::VarStore::new(Device::Cpu);
    let model = CommitteeModel::new(
        &vs.root(),
        &small(1, 0.0, 4, 1e-3),
        &Registry::builtin(),
        &all_members(),
        true,
        &narrow,
    )
    .unwrap();
    let rows: Vec<i64> = (0..12).rev().collect();
    let all = score(&model, &narrow, &rows, ScoreBatch::Candidates(64));
    let one_by_one = score(&model, &narrow, &rows, ScoreBatch::Candidates(1));
    let padded = score(&model, &wide, &rows, ScoreBatch::Candidates(5));
    for ((a, b), c) in all.iter().zip(&one_by_one).zip(&padded) {
        for ((x, y), z) in a.1.iter().zip(&b.1).zip(&c.1) {
            assert!(
                (x - y).abs() < 1e-5 && (x - z).abs() < 1e-5,
                "{}: {x} {y} {z}",
                a.0
            );
        }
    }
    // And the rows are really read: different rows score differently on every text head.
    for (head, s) in &all {
        assert!(
            head == "mlp" || s.windows(2).any(|w| (w[0] - w[1]).abs() > 1e-4),
            "{head}: {s:?}"
        );
    }
}

#[test]
fn length_groups_cut_where_padding_costs_more_than_a_group() {
    // One group: 44 rows x 40 columns. Two: the short rows at their own width.
    let lengths: Vec<i64> = std::iter::repeat_n(2, 40)
        .chain(std::iter::repeat_n(40, 4))
        .collect();
    assert_eq!(length_groups(&lengths, 8), vec![0..40, 40..44]);
    // Rows of nearly one length stay together; an empty batch has no group.
    assert_eq!(length_groups(&[5, 5, 6, 6, 7], 8), vec![0..5]);
    assert!(length_groups(&[], 8).is_empty());
    // Every cut covers every row once, in order.
    let mut ragged: Vec<i64> = (1..=200).map(|i| 1 + (i * i) % 97).collect();
    ragged.sort_unstable();
    let groups = length_groups(&ragged, 8);
    assert!(groups.len() > 2, "{groups:?}");
    assert_eq!(groups.first().unwrap().start, 0);
    assert_eq!(groups.last().unwrap().end, ragged.len());
    assert!(groups
        .windows(2)
        .all(|w| w[0].end == w[1].start && w[0].start < w[0].end));
}

/// A batch computed in length groups ([`Batch::by_length`]) scores every row as the row alone
/// would be scored, in the batch's order.
#[test]
fn a_batch_in_length_groups_scores_as_its_rows_alone() {
    let _torch_rng = crate::torch_rng_lock();
    tch::manual_seed(11);
    // 30 short rows and 3 long ones, interleaved: the long rows make a group of their own.
    let inputs: Vec<CandidateInput> = (0..33usize)
        .map(|i| {
            let len = if i % 11 == 5 { 40 + i % 3 } else { 2 + i % 3 };
            CandidateInput {
                words: (0..len)
                    .map(|j| 2 + ((i * 7 + j * 3) % 37) as i32)
                    .collect(),
                pos: (0..len).map(|j| 2 + ((i + j) % 20) as i32).collect(),
                marked: 0..1,
                features: [0.0; 8],
            }
        })
        .collect();
    let table = table_of(&inputs, 40, 24, 5);
    let rows: Vec<i64> = (0..33).collect();
    let sorted: Vec<i64> = {
        let mut l: Vec<i64> = rows
            .iter()
            .map(|&r| table.lengths[r as usize] as i64)
            .collect();
        l.sort_unstable();
        l
    };
    assert!(
        length_groups(&sorted, LENGTH_GROUP_OVERHEAD_ROWS).len() > 1,
        "the batch is computed in groups"
    );
    let vs = nn::VarStore::new(Device::Cpu);
    let model = CommitteeModel::new(
        &vs.root(),
        &small(1, 0.0, 4, 1e-3),
        &Registry::builtin(),
        &names(&["cnn", "lstm", "pos-lstm"]),
        false,
        &table,
    )
    .unwrap();
    let together = tch::no_grad(|| model.forward(&table, &rows, false));
    let alone = score(&model, &table, &rows, ScoreBatch::Candidates(1));
    for (t, a) in together.iter().zip(&alone) {
        let t = Vec::<f32>::try_from(&t.scores).unwrap();
        for (r, (x, y)) in t.iter().zip(&a.1).enumerate() {
            assert!(
                (x - y).abs() < 1e-5,
                "{} row {r}: {x} in the batch, {y} alone",
                a.0
            );
        }
    }
}

#[test]
fn a_saved_table_loads_back_equal() {
    let (table, _) = planted(7, 4, 3);
    let dir = tempfile::tempdir().unwrap();
    table.save(dir.path(), 5).unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1 + 6,
        "28 rows in files of 5, and table.json"
    );
    let back = CandidateTable::load(dir.path(), Device::Cpu).unwrap();
    for (a, b) in [
        (&table.words, &back.words),
        (&table.pos, &back.pos),
        (&table.indicator, &back.indicator),
        (&table.features, &back.features),
    ] {
        assert_eq!(a.kind(), b.kind());
        assert!(a.equal(b));
    }
    assert_eq!(
        (
            back.rows,
            back.vocab,
            back.pos_vocab,
            back.min_len,
            &back.lengths
        ),
        (
            table.rows,
            table.vocab,
            table.pos_vocab,
            table.min_len,
            &table.lengths
        )
    );
    std::fs::remove_file(dir.path().join("part-003.safetensors")).unwrap();
    let e = CandidateTable::load(dir.path(), Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("part-003.safetensors"), "{e}");
}

/// Issue 17: a NaN reaching the loss stops training with an error instead of training on.
#[test]
fn a_nan_loss_is_an_error() {
    let _torch_rng = crate::torch_rng_lock();
    tch::manual_seed(3);
    let inputs: Vec<CandidateInput> = (0..40)
        .map(|i| CandidateInput {
            words: vec![2 + (i % 5), 3],
            pos: vec![2, 3],
            marked: 0..1,
            features: std::array::from_fn(|f| {
                if i == 6 && f == 2 {
                    f32::NAN
                } else {
                    f as f32 / 8.0
                }
            }),
        })
        .collect();
    let table = table_of(&inputs, 40, 24, 5);
    let questions: Vec<Vec<i64>> = (0..10).map(|q| (4 * q..4 * q + 4).collect()).collect();
    let vs = nn::VarStore::new(Device::Cpu);
    let settings = small(1, 0.0, 16, 1e-3);
    let model = CommitteeModel::new(
        &vs.root(),
        &settings,
        &Registry::builtin(),
        &af_core::member_names(&["mlp"]),
        true,
        &table,
    )
    .unwrap();
    let e = train(&vs, &model, &table, &questions, &settings, 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("training loss (epoch 1) is not finite (NaN)"),
        "{e}"
    );
}

#[test]
fn reversal_within_length_leaves_padding_in_place() {
    let x = Tensor::from_slice(&[1i64, 2, 3, 0, 0, 4, 5, 6, 7, 8]).view([2, 5, 1]);
    let r = reverse_within_length(&x, &Tensor::from_slice(&[3i64, 5]));
    assert_eq!(
        Vec::<i64>::try_from(r.flatten(0, -1)).unwrap(),
        [3, 2, 1, 0, 0, 8, 7, 6, 5, 4]
    );
}

#[test]
fn the_cnn_pads_batches_narrower_than_its_widest_window() {
    let _torch_rng = crate::torch_rng_lock();
    tch::manual_seed(2);
    let inputs: Vec<CandidateInput> = (1..=4usize)
        .map(|len| CandidateInput {
            words: (0..len).map(|j| 2 + (len * 5 + j) as i32).collect(),
            pos: vec![3; len],
            marked: 0..1,
            features: [0.0; 8],
        })
        .collect();
    // min_len 1: a batch of short rows is narrower than the 5-wide window.
    let (narrow, cut) = (table_of(&inputs, 40, 24, 1), table_of(&inputs, 40, 24, 5));
    let vs = nn::VarStore::new(Device::Cpu);
    let model = CommitteeModel::new(
        &vs.root(),
        &small(1, 0.0, 4, 1e-3),
        &Registry::builtin(),
        &names(&["cnn"]),
        false,
        &narrow,
    )
    .unwrap();
    let rows = [0, 1, 2, 3];
    assert_eq!(
        score(&model, &narrow, &rows, ScoreBatch::Candidates(1)),
        score(&model, &cut, &rows, ScoreBatch::Candidates(1))
    );
}

#[test]
fn training_is_deterministic_on_cpu() {
    let _torch_rng = crate::torch_rng_lock();
    let run = || {
        tch::manual_seed(7);
        let (table, qs) = planted(60, 4, 2);
        let vs = nn::VarStore::new(Device::Cpu);
        let settings = small(2, 0.2, 8, 1e-3);
        let model = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &names(&["cnn", "pos-lstm"]),
            true,
            &table,
        )
        .unwrap();
        let report = train(&vs, &model, &table, &qs, &settings, 3).unwrap();
        (
            report,
            score(&model, &table, &[0, 1, 2, 3, 17], ScoreBatch::Candidates(2)),
        )
    };
    let (a, b) = (run(), run());
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    // A hook that scores every epoch (a data map) changes nothing in the training.
    tch::manual_seed(7);
    let (table, qs) = planted(60, 4, 2);
    let vs = nn::VarStore::new(Device::Cpu);
    let settings = small(2, 0.2, 8, 1e-3);
    let model = CommitteeModel::new(
        &vs.root(),
        &settings,
        &Registry::builtin(),
        &names(&["cnn", "pos-lstm"]),
        true,
        &table,
    )
    .unwrap();
    let mut seen = Vec::new();
    let report = train_observed(&vs, &model, &table, &qs, &settings, 3, &mut |epoch, m| {
        seen.push((
            epoch,
            score(m, &table, &[0, 1, 2, 3], ScoreBatch::Candidates(2)),
        ));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        (
            report,
            score(&model, &table, &[0, 1, 2, 3, 17], ScoreBatch::Candidates(2))
        ),
        a
    );
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        (0..a.0.epochs).collect::<Vec<_>>()
    );
    assert_eq!(
        a.1.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
        ["joint", "cnn", "pos-lstm"]
    );
}

/// A committee config from JSON in the config's spelling.
fn committee_config(json: serde_json::Value) -> CommitteeConfig {
    serde_json::from_value(json).unwrap()
}

#[test]
fn row_bytes_grow_with_tokens_dims_and_training() {
    let registry = Registry::builtin();
    let default = CommitteeConfig::default();
    for name in registry.names() {
        let Some(m) = registry.get(name).unwrap().joint() else {
            continue;
        };
        let (short, long) = (
            m.row_bytes(&default, 16, false),
            m.row_bytes(&default, 256, false),
        );
        assert!(short > 0 && short <= long, "{name}: {short} {long}");
        assert!(m.row_bytes(&default, 256, true) > long, "{name}");
        // Members over token columns grow with them; the others read one vector per row.
        let tokens = m
            .columns()
            .iter()
            .any(|c| matches!(c, Column::Words | Column::Pos | Column::Indicator));
        assert_eq!(short < long, tokens, "{name}: {short} {long}");
    }
    let bytes = |name: &str, c: &CommitteeConfig| {
        let m = registry.get(name).unwrap().joint().unwrap();
        (m.row_bytes(c, 100, false), m.row_bytes(c, 100, true))
    };
    // Each member follows the keys it reads, flat or in its own table.
    for (name, larger) in [
        ("bow", serde_json::json!({ "embedding": 300 })),
        ("ngram", serde_json::json!({ "embedding": 300 })),
        ("cnn", serde_json::json!({ "embedding": 300 })),
        ("cnn", serde_json::json!({ "cnn-filters": 256 })),
        (
            "cnn",
            serde_json::json!({ "member": { "cnn": { "widths": [2, 3, 4, 5, 6] } } }),
        ),
        ("lstm", serde_json::json!({ "lstm-hidden": 400 })),
        ("lstm", serde_json::json!({ "indicator-embedding": 64 })),
        (
            "pos-lstm",
            serde_json::json!({ "member": { "pos-lstm": { "hidden": 400 } } }),
        ),
        ("mlp", serde_json::json!({ "mlp-hidden": 2048 })),
        (
            "encoder",
            serde_json::json!({ "member": { "encoder": { "hidden": 1024 } } }),
        ),
        (
            "lm-likelihood",
            serde_json::json!({ "member": { "lm-likelihood": { "hidden": 64 } } }),
        ),
    ] {
        let (s0, t0) = bytes(name, &default);
        let (s1, t1) = bytes(name, &committee_config(larger.clone()));
        assert!(
            s1 > s0 && t1 > t0,
            "{name} {larger}: {s0} -> {s1}, {t0} -> {t1}"
        );
    }
    // The BiLSTM's hidden units dominate it: twice the units, nearly twice the bytes.
    let (s0, _) = bytes("lstm", &default);
    let (s1, _) = bytes(
        "lstm",
        &committee_config(serde_json::json!({ "lstm-hidden": 400 })),
    );
    assert!(s1 as f64 > 1.6 * s0 as f64, "{s0} {s1}");
    // The CNN's narrowest batch is its widest window.
    let cnn = registry.get("cnn").unwrap().joint().unwrap();
    assert_eq!(
        cnn.row_bytes(&default, 1, true),
        cnn.row_bytes(&default, 5, true)
    );
}

#[test]
fn the_committee_row_estimate_sums_its_joint_members_and_head() {
    let registry = Registry::builtin();
    let c = CommitteeConfig::default();
    let one = |name: &str, training| {
        registry
            .get(name)
            .unwrap()
            .joint()
            .unwrap()
            .row_bytes(&c, 64, training)
    };
    for training in [false, true] {
        let both =
            committee_row_bytes(&registry, &names(&["cnn", "bow"]), &c, 64, training).unwrap();
        let head_and_batch = both - one("cnn", training) - one("bow", training);
        assert!(
            head_and_batch > 0 && head_and_batch < both / 10,
            "{both} {head_and_batch}"
        );
        // A fine-tuned member runs apart: it adds nothing.
        assert_eq!(
            committee_row_bytes(
                &registry,
                &names(&["cnn", "bow", "encoder-ft"]),
                &c,
                64,
                training
            )
            .unwrap(),
            both
        );
        // The joint head's hidden layer counts, when there is one.
        let wider = CommitteeConfig {
            joint_hidden: 4096,
            ..c.clone()
        };
        let no_head = CommitteeConfig {
            joint: false,
            ..c.clone()
        };
        let of = |c: &CommitteeConfig| {
            committee_row_bytes(&registry, &names(&["cnn", "bow"]), c, 64, training).unwrap()
        };
        assert!(of(&wider) > both && of(&no_head) < both);
    }
    // A member on the full view adds that view's gathered columns.
    let full = committee_config(serde_json::json!({ "member": { "cnn": { "view": "full" } } }));
    assert_eq!(
        committee_row_bytes(&registry, &names(&["cnn"]), &full, 64, false).unwrap(),
        committee_row_bytes(&registry, &names(&["cnn"]), &c, 64, false).unwrap() + 48 * 64
    );
    assert_eq!(
        committee_row_bytes(&registry, &names(&["encoder-ft"]), &c, 64, true).unwrap(),
        0
    );
    let e = committee_row_bytes(&registry, &names(&["rnn"]), &c, 64, false).unwrap_err();
    assert!(
        e.to_string().contains("unknown committee member `rnn`"),
        "{e}"
    );
    let bad = committee_config(serde_json::json!({ "cnn-filters": 0 }));
    let e = committee_row_bytes(&registry, &names(&["cnn"]), &bad, 64, false).unwrap_err();
    assert!(e.to_string().contains("cnn-filters = 0"), "{e}");
    // A member that does not say gets the conservative default: 1,024 f32 per token, x3 training.
    assert_eq!(default_row_bytes(10, false), 4 * 1024 * 10);
    assert_eq!(default_row_bytes(10, true), 3 * 4 * 1024 * 10);
}

/// SWAG's committee (mlp, bow, cnn, pos-lstm) at 256 tokens under the default dims (E = 100,
/// I = 16, X = E + I = 116, cnn 128 filters of widths 2-5, BiLSTM H = 200 per direction, mlp
/// 1,024, joint 512). Scoring, in f32: the BiLSTM's one direction's gates and outputs while the
/// other's wait (7TH = 358k) and its inputs (TE + 3TX = 115k); the CNN's input (3TX = 89k) and
/// one width's outputs (2FT = 66k); the bag of words' embeddings (2TE = 51k); the mlp's [4h] =
/// 4k: about 690k f32, 2.8 MB a row. Training keeps the BiLSTM's inputs and per-token state
/// (4TX + 20TH = 1.14M) and every width's conv outputs (2F x 1014 windows = 260k) beside twice
/// the scoring peak: about 2.85M f32, 11.4 MB a row; 64 items x 4 options = 256 rows, 2.9 GB a
/// step at the widest rows. (Measured on the CPU, the same committee peaked at 1.5 MB a row
/// scoring and 6.5 MB training.)
#[test]
fn swags_committee_at_256_tokens_is_a_few_megabytes_a_row() {
    let registry = Registry::builtin();
    let c = CommitteeConfig::default();
    let swag = names(&["mlp", "bow", "cnn", "pos-lstm"]);
    let scoring = committee_row_bytes(&registry, &swag, &c, 256, false).unwrap();
    let training = committee_row_bytes(&registry, &swag, &c, 256, true).unwrap();
    assert!((2_000_000..4_000_000).contains(&scoring), "{scoring}");
    assert!((8_000_000..16_000_000).contains(&training), "{training}");
    assert!(training > 3 * scoring && training < 6 * scoring);
    // The BiLSTM is most of it.
    let pos_lstm = registry.get("pos-lstm").unwrap().joint().unwrap();
    assert!(pos_lstm.row_bytes(&c, 256, true) > training / 2);
}

#[test]
fn clipping_on_the_device_is_tchs_clipping_bit_for_bit() {
    use tch::nn::OptimizerConfig;
    let _torch_rng = crate::torch_rng_lock();
    let normal = nn::Init::Randn {
        mean: 0.0,
        stdev: 1.0,
    };
    // Variables with known gradients: their joint norm far above the bound (clipped), far below
    // it (left as they are), and NaN (left as they are: tch scales only below 1). A third
    // variable takes no part in the loss: its gradient stays undefined.
    for (scale, max) in [(1e3, 1.0), (1e-3, 100.0), (f64::NAN, 1.0)] {
        let grads = |vs: &nn::VarStore| {
            tch::manual_seed(11);
            let root = vs.root();
            let a = root.var("a", &[7, 5], normal);
            let b = root.var("b", &[3], normal);
            let _unused = root.var("c", &[2], nn::Init::Const(1.0));
            ((&a * &a).sum(Kind::Float) * scale + (&b * 3.0).sum(Kind::Float)).backward();
        };
        let (ours, theirs) = (
            nn::VarStore::new(Device::Cpu),
            nn::VarStore::new(Device::Cpu),
        );
        grads(&ours);
        grads(&theirs);
        train::clip_grad_norm(&ours, max);
        let opt = nn::Sgd::default().build(&theirs, 0.1).unwrap();
        opt.clip_grad_norm(max);
        for (name, v) in ours.variables() {
            let their = &theirs.variables()[&name];
            if !v.grad().defined() {
                assert!(!their.grad().defined(), "{name}");
                continue;
            }
            let bits = |t: &Tensor| {
                Vec::<f32>::try_from(t.grad().flatten(0, -1))
                    .unwrap()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&v), bits(their), "{name} at scale {scale}");
        }
    }
}
