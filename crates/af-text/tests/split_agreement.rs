//! The subject/ending split against captions split by hand (fixtures/text/splits.tsv, written
//! for this project in the style of ActivityNet Captions), with the built-in tagger.

use std::path::PathBuf;

use af_text::split::{split_sentence, AdverbSide};
use af_text::{tokenize, Tagger};

fn fixture(name: &str) -> String {
    // Read at run time: a test binary another checkout built into a shared target directory
    // would carry that checkout's path.
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let p = crate_dir.join("../../fixtures/text").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn split(tagger: &Tagger, sentence: &str) -> Option<(String, String)> {
    let t = tokenize(sentence);
    let (i, _) = split_sentence(tagger, &t.to_vec(), AdverbSide::NounPhrase).ok()?;
    let cut = t.spans[i].start;
    Some((
        sentence[..cut].trim_end().to_string(),
        sentence[cut..].to_string(),
    ))
}

#[test]
fn hand_split_captions_agree_at_least_95_percent() {
    let tagger = Tagger::builtin();
    let text = fixture("splits.tsv");
    let rows: Vec<(&str, &str)> = text
        .lines()
        .skip(1)
        .map(|l| l.split_once('\t').expect("two columns"))
        .collect();
    assert!(
        rows.len() >= 150,
        "the fixture must hold at least 150 captions"
    );
    let mut wrong = Vec::new();
    for (np, ending) in &rows {
        let sentence = format!("{np} {ending}");
        let got = split(&tagger, &sentence);
        if got.as_ref().map(|(a, b)| (a.as_str(), b.as_str())) != Some((np, ending)) {
            wrong.push(format!(
                "{sentence:?}: expected {np:?} | {ending:?}, got {got:?}"
            ));
        }
    }
    let agreement = 1.0 - wrong.len() as f64 / rows.len() as f64;
    eprintln!(
        "split agreement {:.1}% on {} captions",
        100.0 * agreement,
        rows.len()
    );
    for w in &wrong {
        eprintln!("  {w}");
    }
    assert!(agreement >= 0.95, "agreement {agreement:.3} below 0.95");
}

#[test]
fn sentences_without_a_clause_are_dropped_not_guessed() {
    let tagger = Tagger::builtin();
    let text = fixture("unsplittable.txt");
    let guessed: Vec<_> = text
        .lines()
        .filter_map(|l| split(&tagger, l).map(|s| (l, s)))
        .collect();
    // At most one in ten may slip through: the rules see tags, not meaning.
    assert!(
        guessed.len() * 10 <= text.lines().count(),
        "split anyway: {guessed:?}"
    );
}
