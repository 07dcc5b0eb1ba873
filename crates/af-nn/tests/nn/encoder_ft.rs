//! The cross-encoder behind `encoder-ft`, on a tiny BERT directory the test writes
//! (af_nn::encoder::toy::write_toy_bert): pairs are read as one input with segments, fine-tuning
//! learns what tells the right option, and every fresh encoder starts again from the file.

use af_nn::encoder::toy::write_toy_bert;
use af_nn::encoder::{CrossEncoder, FineTuneOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::Device;

const WORDS: [&str; 14] = [
    "the", "man", "woman", "walks", "runs", "to", "a", "door", "car", "tree", "then", "opens",
    "it", "now",
];

/// libtorch's generator is global and the tests of this file run on parallel threads: each test
/// holds this lock, so a seeded draw is not interleaved with another test's.
fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    af_test_support::lock()
}

fn toy_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_toy_bert(dir.path(), &WORDS, 32, 2, 2, 3).unwrap();
    dir
}

fn options() -> FineTuneOptions {
    FineTuneOptions {
        max_length: 32,
        batch_size: 16,
        epochs: 4,
        learning_rate: 1e-3,
        batch_items: 4,
        dropout: 0.0,
        ..FineTuneOptions::default()
    }
}

/// `n` questions of 4 options, each (context, second sentence); the right one first, and only it
/// ends with "now".
fn questions(n: usize, seed: u64) -> Vec<Vec<(String, String)>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pick = |from: &[&str]| from[rng.random_range(0..from.len())].to_string();
    (0..n)
        .map(|_| {
            let context = format!(
                "{} {} to the {}",
                pick(&["the man", "a woman"]),
                pick(&["walks", "runs"]),
                pick(&["door", "car", "tree"])
            );
            (0..4)
                .map(|o| {
                    let mut ending = format!(
                        "then {} opens {}",
                        pick(&["the man", "the woman"]),
                        pick(&["the door", "a car", "it"])
                    );
                    if o == 0 {
                        ending.push_str(" now");
                    }
                    (context.clone(), ending)
                })
                .collect()
        })
        .collect()
}

fn accuracy(encoder: &CrossEncoder, qs: &[Vec<(String, String)>]) -> f64 {
    let pairs: Vec<(&str, &str)> = qs
        .iter()
        .flatten()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let scores = encoder.score(&encoder.tokenize_pairs(&pairs).unwrap());
    scores
        .chunks(4)
        .filter(|s| s[1..].iter().all(|&d| s[0] > d))
        .count() as f64
        / qs.len() as f64
}

#[test]
fn pairs_are_one_input_with_segments_cut_to_the_limit() {
    let _lock = torch_rng_lock();
    let dir = toy_dir();
    let mut short = options();
    short.max_length = 8;
    let encoder = CrossEncoder::fresh(dir.path(), Device::Cpu, &short).unwrap();
    let e = encoder
        .tokenize_pairs(&[
            ("the man", "it opens"),
            (
                "the man walks to the door then the man runs",
                "it opens now",
            ),
        ])
        .unwrap();
    // [CLS] the man [SEP] it opens [SEP]: ids 2 and 3 frame and split the pair.
    assert_eq!(e[0].get_ids(), [2, 4, 5, 3, 16, 15, 3]);
    assert_eq!(e[0].get_type_ids(), [0, 0, 0, 0, 1, 1, 1]);
    assert_eq!(e[1].get_ids().len(), 8, "cut to max-length");
    // The longer text is cut to the shorter's length first: 10 + 3 words become 3 + 2.
    let ones = e[1].get_type_ids().iter().filter(|&&t| t == 1).count();
    assert_eq!(
        (8 - ones, ones),
        (5, 3),
        "[CLS], 3 context words, [SEP]; 2 ending words, [SEP]"
    );
    // The context is read: the same ending after another context scores differently.
    let s = encoder.score(
        &encoder
            .tokenize_pairs(&[
                ("the man walks", "then it opens"),
                ("a woman runs", "then it opens"),
            ])
            .unwrap(),
    );
    assert!((s[0] - s[1]).abs() > 1e-6, "{s:?}");

    let Err(e) = CrossEncoder::fresh(&dir.path().join("missing"), Device::Cpu, &options()) else {
        panic!("a missing directory loaded")
    };
    assert!(e.to_string().contains("is not a directory"), "{e}");
}

#[test]
fn fine_tuning_learns_the_right_option_and_each_encoder_starts_from_the_file() {
    let _lock = torch_rng_lock();
    let dir = toy_dir();
    let (train, held) = (questions(120, 1), questions(60, 2));
    tch::manual_seed(5);
    let mut encoder = CrossEncoder::fresh(dir.path(), Device::Cpu, &options()).unwrap();
    let before = accuracy(&encoder, &held);
    let pairs: Vec<(&str, &str)> = train
        .iter()
        .flatten()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let encodings = encoder.tokenize_pairs(&pairs).unwrap();
    let questions: Vec<Vec<usize>> = (0..train.len())
        .map(|q| (4 * q..4 * q + 4).collect())
        .collect();
    let report = encoder.fine_tune(&encodings, &questions, 7).unwrap();
    let after = accuracy(&encoder, &held);
    println!("before {before}, after {after}, {report:?}");
    assert_eq!(report.steps, 4 * 30);
    assert!(
        report.train_loss.last().unwrap() < &report.train_loss[0],
        "{report:?}"
    );
    assert!(
        after > 0.9 && before < 0.6,
        "before {before}, after {after} (chance 0.25)"
    );

    // A fresh encoder with the same seed is the first one before its fine-tuning.
    tch::manual_seed(5);
    let again = CrossEncoder::fresh(dir.path(), Device::Cpu, &options()).unwrap();
    assert_eq!(accuracy(&again, &held), before);
}
