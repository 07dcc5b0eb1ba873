//! Word tokenization in the style of the Penn Treebank and UD English-EWT (which the tagger is
//! trained on): punctuation is split off, and so are English clitics (`'s`, `n't`, `'re`, `'ll`,
//! `'ve`, `'d`, `'m`; `can't` -> `ca n't`). Every token is a byte range of the input, so a split
//! between tokens maps back to the exact original text. [`detokenize`] is the inverse for exports.

use std::ops::Range;

const CLITICS: [&str; 7] = ["'s", "'re", "'ve", "'ll", "'d", "'m", "n't"];
const OPENERS: &[char] = &['(', '[', '{', '"', '\'', '`', '“', '‘', '«', '$', '#'];
const CLOSERS: &[char] = &[
    '.', ',', '!', '?', ';', ':', ')', ']', '}', '"', '\'', '”', '’', '»', '%', '…',
];
/// Words whose final period belongs to them.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "prof", "capt", "col", "gen", "rev",
    "no", "mt", "ft", "approx", "inc", "ltd", "co",
];

/// A tokenized text: the input and the byte range of every token.
#[derive(Clone, Debug)]
pub struct Tokens<'a> {
    pub text: &'a str,
    pub spans: Vec<Range<usize>>,
}

impl<'a> Tokens<'a> {
    pub fn len(&self) -> usize {
        self.spans.len()
    }
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
    pub fn get(&self, i: usize) -> &'a str {
        &self.text[self.spans[i].clone()]
    }
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.spans.iter().map(|r| &self.text[r.clone()])
    }
    pub fn to_vec(&self) -> Vec<&'a str> {
        self.iter().collect()
    }
}

/// Splits `text` into tokens.
pub fn tokenize(text: &str) -> Tokens<'_> {
    let mut spans = Vec::with_capacity(text.len() / 4 + 1);
    let mut start = None;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                split_chunk(text, s, i, &mut spans);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        split_chunk(text, s, text.len(), &mut spans);
    }
    Tokens { text, spans }
}

/// Convenience: the tokens as owned strings.
pub fn tokenize_owned(text: &str) -> Vec<String> {
    tokenize(text).iter().map(str::to_owned).collect()
}

/// The tokens lowercased, as the committee and the audit's detectors read text.
pub fn tokenize_lowercase(text: &str) -> Vec<String> {
    tokenize(text).iter().map(str::to_lowercase).collect()
}

fn is_clitic(s: &str) -> bool {
    let s = s.replace('’', "'");
    CLITICS.iter().any(|c| s.eq_ignore_ascii_case(c))
}

fn split_chunk(text: &str, mut start: usize, mut end: usize, out: &mut Vec<Range<usize>>) {
    // A chunk that is itself a clitic (already tokenized input such as "John 's") stays whole.
    if is_clitic(&text[start..end]) {
        out.push(start..end);
        return;
    }
    // Leading punctuation, one character at a time.
    while start < end {
        let c = text[start..end].chars().next().unwrap();
        if OPENERS.contains(&c) && end - start > c.len_utf8() {
            out.push(start..start + c.len_utf8());
            start += c.len_utf8();
        } else {
            break;
        }
    }
    // Trailing punctuation, collected right to left.
    let mut trailing = Vec::new();
    while start < end {
        let chunk = &text[start..end];
        if chunk.ends_with("...") && chunk.len() > 3 {
            trailing.push(end - 3..end);
            end -= 3;
            continue;
        }
        let c = chunk.chars().next_back().unwrap();
        if !CLOSERS.contains(&c) || chunk.len() == c.len_utf8() {
            break;
        }
        if c == '.' && keeps_final_period(&chunk[..chunk.len() - 1]) {
            break;
        }
        trailing.push(end - c.len_utf8()..end);
        end -= c.len_utf8();
    }
    split_core(text, start, end, out);
    out.extend(trailing.into_iter().rev());
}

/// `U.S.`, `e.g.`, `Mr.`, `J.`: the period is part of the word.
fn keeps_final_period(word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    if word.contains('.') && word.chars().all(|c| c.is_alphabetic() || c == '.') {
        return true;
    }
    if word.chars().count() == 1 && word.chars().all(|c| c.is_uppercase()) {
        return true;
    }
    ABBREVIATIONS.iter().any(|a| word.eq_ignore_ascii_case(a))
}

/// The word itself: clitics and inner commas (not between digits) split off.
fn split_core(text: &str, start: usize, end: usize, out: &mut Vec<Range<usize>>) {
    if start >= end {
        return;
    }
    let word = &text[start..end];
    // Inner comma between letters ("apples,pears") is two words and a comma.
    if let Some(pos) = word.find(',') {
        let before = word[..pos].chars().next_back();
        let after = word[pos + 1..].chars().next();
        let numeric =
            before.is_some_and(|c| c.is_ascii_digit()) && after.is_some_and(|c| c.is_ascii_digit());
        if !numeric && pos > 0 && pos + 1 < word.len() {
            split_core(text, start, start + pos, out);
            out.push(start + pos..start + pos + 1);
            split_core(text, start + pos + 1, end, out);
            return;
        }
    }
    let lower = word.to_lowercase().replace('’', "'");
    if lower.len() == word.len() {
        for clitic in CLITICS {
            if lower.len() > clitic.len() && lower.ends_with(clitic) {
                let cut = end - clitic.len();
                out.push(start..cut);
                out.push(cut..end);
                return;
            }
        }
    } else if let Some(cut) = typographic_clitic(word) {
        out.push(start..start + cut);
        out.push(start + cut..end);
        return;
    }
    out.push(start..end);
}

/// Clitics written with ’ (three bytes): the byte position where one starts, if any.
fn typographic_clitic(word: &str) -> Option<usize> {
    for (i, _) in word.char_indices().skip(1) {
        if is_clitic(&word[i..]) {
            return Some(i);
        }
    }
    None
}

fn no_space_before(tok: &str) -> bool {
    matches!(
        tok,
        "." | "," | "!" | "?" | ";" | ":" | "%" | ")" | "]" | "}" | "”" | "’" | "»" | "..." | "…"
    ) || is_clitic(tok)
}

fn no_space_after(tok: &str) -> bool {
    matches!(tok, "(" | "[" | "{" | "$" | "#" | "“" | "‘" | "«" | "`")
}

/// Joins tokens back into running text: no space before punctuation or clitics, none after
/// opening brackets, straight double quotes alternating between opening and closing.
pub fn detokenize<S: AsRef<str>>(tokens: &[S]) -> String {
    let mut out = String::new();
    let mut quote_open = false;
    let mut glue_next = true;
    for tok in tokens {
        let tok = tok.as_ref();
        let mut glue = glue_next || no_space_before(tok);
        glue_next = no_space_after(tok);
        if tok == "\"" || tok == "'" && !quote_open && out.ends_with(|c: char| c.is_alphanumeric())
        {
            if tok == "\"" {
                if quote_open {
                    glue = true;
                } else {
                    glue_next = true;
                }
                quote_open = !quote_open;
            } else {
                glue = true; // possessive of a plural: "kids '" -> "kids'"
            }
        }
        if !glue && !out.is_empty() {
            out.push(' ');
        }
        out.push_str(tok);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<&str> {
        tokenize(s).to_vec()
    }

    #[test]
    fn splits_punctuation_and_clitics() {
        assert_eq!(
            toks("The man's dog doesn't bark."),
            ["The", "man", "'s", "dog", "does", "n't", "bark", "."]
        );
        assert_eq!(
            toks("They can't, won't (really) go!"),
            ["They", "ca", "n't", ",", "wo", "n't", "(", "really", ")", "go", "!"]
        );
        assert_eq!(
            toks("She's done... \"Yes,\" he said."),
            ["She", "'s", "done", "...", "\"", "Yes", ",", "\"", "he", "said", "."]
        );
        assert_eq!(
            toks("We'll see; I'm sure they've left."),
            ["We", "'ll", "see", ";", "I", "'m", "sure", "they", "'ve", "left", "."]
        );
    }

    #[test]
    fn clitics_with_typographic_apostrophe() {
        assert_eq!(
            toks("It’s the woman’s turn"),
            ["It", "’s", "the", "woman", "’s", "turn"]
        );
    }

    #[test]
    fn keeps_abbreviations_numbers_and_hyphens() {
        assert_eq!(
            toks("Mr. Smith paid $3.50 in the U.S. for 1,000 t-shirts."),
            [
                "Mr.", "Smith", "paid", "$", "3.50", "in", "the", "U.S.", "for", "1,000",
                "t-shirts", "."
            ]
        );
    }

    #[test]
    fn already_tokenized_text_is_stable() {
        let once = toks("The man 's dog does n't bark .");
        assert_eq!(
            once,
            ["The", "man", "'s", "dog", "does", "n't", "bark", "."]
        );
    }

    #[test]
    fn spans_point_into_the_input() {
        let t = tokenize("  A man  is seen.");
        assert_eq!(t.spans, vec![2..3, 4..7, 9..11, 12..16, 16..17]);
    }

    #[test]
    fn detokenize_inverts_tokenize() {
        for s in [
            "The man's dog doesn't bark.",
            "A woman (in a red shirt) is seen talking to the camera, then she walks away!",
            "They can't, won't go; it's 5% of $20.",
            "He said \"hello there\" and left.",
            "The kids' toys are on the floor.",
            "It’s the woman’s turn.",
        ] {
            assert_eq!(detokenize(&toks(s)), s);
        }
    }
}
