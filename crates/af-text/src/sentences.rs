//! Sentence splitting for plain prose (the `text` input of `af pairs`, e.g. novels standing in
//! for BookCorpus). Rule-based: a sentence ends at `.`, `!` or `?` (with any closing quotes or
//! brackets) before whitespace and an uppercase letter, digit or opening quote, unless the word
//! is an abbreviation or an initial. A blank line always ends a sentence, so headings stand alone.

const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "prof", "capt", "col", "gen", "rev", "mt",
    "no", "messrs",
];

pub fn split_sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for paragraph in text.split("\n\n").flat_map(|p| p.split("\r\n\r\n")) {
        let words: Vec<&str> = paragraph.split_whitespace().collect();
        let mut current: Vec<&str> = Vec::new();
        for (i, w) in words.iter().enumerate() {
            current.push(w);
            let next = words.get(i + 1);
            if ends_sentence(w) && next.is_none_or(|n| starts_sentence(n)) {
                out.push(current.join(" "));
                current.clear();
            }
        }
        if !current.is_empty() {
            out.push(current.join(" "));
        }
    }
    out
}

fn ends_sentence(word: &str) -> bool {
    let core = word.trim_end_matches(['"', '\'', ')', ']', '”', '’', '_']);
    let Some(last) = core.chars().last() else {
        return false;
    };
    if !matches!(last, '.' | '!' | '?') {
        return false;
    }
    if last == '.' {
        let stem = core
            .trim_end_matches('.')
            .trim_start_matches(['"', '\'', '(', '“', '‘', '_']);
        let is_initial = stem.chars().count() == 1 && stem.chars().all(char::is_uppercase);
        if is_initial || ABBREVIATIONS.iter().any(|a| stem.eq_ignore_ascii_case(a)) {
            return false;
        }
    }
    true
}

fn starts_sentence(word: &str) -> bool {
    let first = word
        .trim_start_matches(['"', '\'', '(', '“', '‘', '_'])
        .chars()
        .next();
    first.is_some_and(|c| c.is_uppercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_prose() {
        let text = "CHAPTER I\n\nMr. Knightley came in. \"Is it so?\" said she. He\nnodded; then\nleft! The end";
        assert_eq!(
            split_sentences(text),
            [
                "CHAPTER I",
                "Mr. Knightley came in.",
                "\"Is it so?\" said she.",
                "He nodded; then left!",
                "The end",
            ]
        );
    }

    #[test]
    fn initials_do_not_end_sentences() {
        assert_eq!(
            split_sentences("J. Smith arrived. It rained."),
            ["J. Smith arrived.", "It rained."]
        );
    }
}
