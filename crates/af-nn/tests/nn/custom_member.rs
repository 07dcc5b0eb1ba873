//! A member defined outside af-nn, through the public API only: registered beside the built-in
//! ones, trained and scored with them.

use af_core::{CommitteeConfig, MemberName};
use af_nn::committee::{score, train};
use af_nn::table::{CandidateTable, RawCandidate, TableAssembler, Vocabularies};
use af_nn::{Batch, BuildContext, Column, CommitteeModel, Member, MemberNet, NnError, Registry};
use rand::{Rng, SeedableRng};
use tch::{nn, Device, Kind, Tensor};

/// Scores a candidate by how often it contains one word.
struct CountWord(i64);

#[derive(Debug)]
struct CountWordNet(i64);

impl Member for CountWord {
    fn name(&self) -> &'static str {
        "count-word"
    }

    fn describe(&self) -> &'static str {
        "how often a candidate has one word"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Words]
    }

    fn settings(&self, _: &CommitteeConfig) -> Result<serde_json::Value, String> {
        Ok(serde_json::json!({ "word": self.0 }))
    }

    fn build(&self, _: &nn::Path, _: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        Ok(Box::new(CountWordNet(self.0)))
    }
}

impl MemberNet for CountWordNet {
    fn width(&self) -> i64 {
        1
    }

    fn represent(&self, b: &Batch, _train: bool) -> Tensor {
        b.words
            .eq(self.0)
            .logical_and(&b.mask)
            .to_kind(Kind::Float)
            .sum_dim_intlist(1, true, Kind::Float)
    }
}

/// Questions of 4 options whose right answer (first) has word 5 and the others never.
fn planted(questions: usize) -> (CandidateTable, Vec<Vec<i64>>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let (mut words, mut qs) = (Vec::new(), Vec::new());
    for q in 0..questions {
        let mut options = Vec::new();
        for option in 0..4 {
            let mut w: Vec<u32> = (0..6).map(|_| rng.random_range(6..40)).collect();
            if option == 0 {
                w[rng.random_range(2..6)] = 5;
            }
            options.push((q * 4 + option) as i64);
            words.push(w);
        }
        qs.push(options);
    }
    let tags: Vec<Vec<u8>> = words
        .iter()
        .map(|w| w.iter().map(|&x| (x % 20) as u8).collect())
        .collect();
    let raw: Vec<RawCandidate> = words
        .iter()
        .zip(&tags)
        .map(|(w, t)| RawCandidate {
            interned: w,
            tags: t,
            marked: 0..2,
            features: [0.0; 8],
        })
        .collect();
    let mut assembler = TableAssembler::new(Device::Cpu);
    assembler.push(&raw);
    let vocabularies = Vocabularies {
        word_of: (0..40).collect(),
        pos_word_of: vec![-1; 40],
        tag_base: 0,
        vocab: 40,
        pos_vocab: 20,
    };
    (assembler.finish(&vocabularies, [0.0; 8], [1.0; 8], 5), qs)
}

#[test]
fn a_registered_member_trains_and_scores_beside_a_builtin_one() {
    let _lock = af_test_support::lock();
    let mut registry = Registry::builtin();
    registry.register(CountWord(5)).unwrap();
    assert_eq!(registry.names().last(), Some(&"count-word"));
    assert!(registry.text_members().contains(&"count-word"));
    assert!(matches!(
        registry.register(CountWord(6)),
        Err(NnError::DuplicateMember(_))
    ));

    tch::manual_seed(3);
    let (table, qs) = planted(150);
    // Enough steps for the count's score weight to turn positive from its initial value (down to
    // about -2.4 for one input).
    let config = CommitteeConfig {
        embedding: 16,
        joint_hidden: 8,
        epochs: 12,
        validation_share: 0.0,
        batch_items: 16,
        learning_rate: 5e-2,
        ..Default::default()
    };
    let vs = nn::VarStore::new(Device::Cpu);
    let members = [MemberName::new("bow"), MemberName::new("count-word")];
    let model =
        CommitteeModel::new(&vs.root(), &config, &registry, &members, true, &table).unwrap();
    assert_eq!(
        model.heads().into_iter().map(|h| h.0).collect::<Vec<_>>(),
        ["joint", "bow", "count-word"]
    );
    assert!(vs.variables().contains_key("count-word.score.weight"));

    let (fit, held) = qs.split_at(100);
    train(&vs, &model, &table, fit, &config, 1).unwrap();
    let rows: Vec<i64> = held.iter().flatten().copied().collect();
    for (head, scores) in score(&model, &table, &rows, af_core::ScoreBatch::Candidates(32)) {
        let right = scores
            .chunks(4)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count() as f64
            / held.len() as f64;
        // The count is the whole signal: once its weight is positive, the right answer wins.
        let least = if head == "count-word" { 0.99 } else { 0.5 };
        assert!(right > least, "{head}: {right}");
    }

    // Without it, the name is unknown.
    let e = CommitteeModel::new(
        &nn::VarStore::new(Device::Cpu).root(),
        &config,
        &Registry::builtin(),
        &members,
        true,
        &table,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("`count-word`") && e.contains("mlp, bow, cnn, pos-lstm, ngram, lstm"),
        "{e}"
    );
}
