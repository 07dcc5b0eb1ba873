//! CoNLL-U treebanks (Universal Dependencies), as training and test data for the tagger.

use std::path::Path;

use af_text::tagger::{training_tag, TaggedSentence};

use crate::{read_utf8, ReadError};

/// Reads the word lines of a CoNLL-U file (multiword-token ranges and empty nodes are skipped,
/// as UPOS is given on the words). Each sentence's tags are the tagger's training tags.
pub fn read_conllu(path: &Path) -> Result<Vec<TaggedSentence>, ReadError> {
    let text = read_utf8(path)?;
    let text = crate::text::strip_bom(&text);
    let mut out = Vec::new();
    let mut current = TaggedSentence {
        words: Vec::new(),
        tags: Vec::new(),
    };
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            if !current.words.is_empty() {
                out.push(std::mem::replace(
                    &mut current,
                    TaggedSentence {
                        words: Vec::new(),
                        tags: Vec::new(),
                    },
                ));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != 10 {
            return Err(ReadError::record(
                path,
                line_no,
                None,
                format!("expected 10 tab-separated fields, found {}", fields.len()),
            ));
        }
        let id = fields[0];
        if id.contains('-') || id.contains('.') {
            continue;
        }
        if id.parse::<u32>().is_err() {
            return Err(ReadError::record(
                path,
                line_no,
                Some(1),
                format!("field ID: `{id}` is not a word index"),
            ));
        }
        if fields[3] == "_" || fields[3].is_empty() {
            // Fields 1-3 and their tabs come before UPOS.
            let column = fields[..3].iter().map(|f| f.len() + 1).sum::<usize>() + 1;
            return Err(ReadError::record(
                path,
                line_no,
                Some(column),
                "field UPOS is empty",
            ));
        }
        current.words.push(fields[1].to_string());
        current.tags.push(training_tag(fields[3], fields[4]));
    }
    if !current.words.is_empty() {
        out.push(current);
    }
    if out.is_empty() {
        return Err(ReadError::Invalid {
            path: path.to_path_buf(),
            message: "no sentences in this CoNLL-U file".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_words_and_skips_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.conllu");
        std::fs::write(
            &p,
            "# text = I don't.\n1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_\n2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n2\tdo\tdo\tAUX\tVBP\t_\t0\troot\t_\t_\n3\tn't\tnot\tPART\tRB\t_\t2\tadvmod\t_\t_\n4\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_\n\n",
        )
        .unwrap();
        let s = read_conllu(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].words, ["I", "do", "n't", "."]);
        assert_eq!(s[0].tags, ["PRON", "AUX_VBP", "PART", "PUNCT"]);
    }

    #[test]
    fn bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.conllu");
        std::fs::write(&p, "# c\n1\tI\tI\tPRON\n").unwrap();
        let e = read_conllu(&p).unwrap_err().to_string();
        assert!(
            e.ends_with("t.conllu:2: expected 10 tab-separated fields, found 4"),
            "{e}"
        );
    }
}
