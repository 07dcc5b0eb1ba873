//! The committee's candidate table, built from text: tokenizing, tagging and interning on the
//! host (rayon), in batches, handed to af-nn's assembler on the device. The pool's table and the
//! audit's tables of sentences both come from here.

use std::collections::HashMap;

use af_core::CommitteeConfig;
use af_nn::committee::members::{CnnSettings, PosLstmSettings};
use af_nn::table::{CandidateTable, RawCandidate, TableAssembler, Vocabularies};
use af_text::{tokenize_lowercase, Tagger};
use rayon::prelude::*;
use tch::Device;

use af_io::pool_index::Pool;

/// What the candidate table holds, for the stage report.
#[derive(Debug, serde::Serialize)]
pub struct TableSummary {
    pub rows: usize,
    pub vocabulary: usize,
    pub pos_vocabulary: usize,
    pub max_tokens: usize,
    pub mean_tokens: f64,
    pub feature_mean: [f64; 8],
    pub feature_std: [f64; 8],
    /// The table's tensors on the device.
    pub device_bytes: u64,
    /// Rows longer than `[committee] max-tokens`, cut to their last max-tokens tokens.
    pub truncated_rows: usize,
}

/// One sentence for the table: lowercased tokens, the marked range, raw LM features.
pub struct TableSentence {
    pub words: Vec<String>,
    pub marked: std::ops::Range<usize>,
    pub features: [f32; 8],
    /// Whether its words count toward the vocabularies (the training side only, where the rest
    /// is held out: a word seen only there is unknown, as it would be to a deployed detector).
    pub counted: bool,
}

/// Builds the committee's table one batch of sentences at a time: tags and interns them on the
/// host, counts words and feature moments, and hands the ids to af-nn's assembler on the device.
/// Words are ranked by count (ties by the word): the `max-vocab` most frequent get ids 2..
/// (0 pad, 1 unknown); in the POS view the `pos-words` most frequent stay words and every other
/// token becomes its tag.
pub struct TableBuilder<'a> {
    tagger: &'a Tagger,
    config: &'a CommitteeConfig,
    interned: HashMap<String, u32>,
    words: Vec<String>,
    counts: Vec<u64>,
    assembler: TableAssembler,
    sum: [f64; 8],
    sq: [f64; 8],
    /// Rows longer than `[committee] max-tokens`, cut to it.
    truncated_rows: usize,
    /// Whether to tag: when no member reads the POS view, every tag is 0.
    tag: bool,
    /// The full-view rows, when a member reads them (never tagged: no full-view member reads
    /// the POS view).
    full: Option<TableAssembler>,
}

impl<'a> TableBuilder<'a> {
    pub fn new(tagger: &'a Tagger, config: &'a CommitteeConfig, device: Device) -> Self {
        Self {
            tagger,
            config,
            interned: HashMap::new(),
            words: Vec::new(),
            counts: Vec::new(),
            assembler: TableAssembler::new(device),
            sum: [0.0; 8],
            sq: [0.0; 8],
            truncated_rows: 0,
            tag: true,
            full: None,
        }
    }

    /// A builder that also builds the table's full-view rows ([`Self::push_full`]).
    pub fn with_full_view(mut self, device: Device) -> Self {
        self.full = Some(TableAssembler::new(device));
        self
    }

    /// Full-view rows (context + second sentence), in the same order as the rows pushed with
    /// [`Self::push`]; their words count toward the vocabulary too.
    pub fn push_full(&mut self, sentences: &[TableSentence]) {
        let kept = self.cut(sentences);
        let tags: Vec<Vec<u8>> = kept.iter().map(|(words, _)| vec![0; words.len()]).collect();
        let ids = self.intern(sentences, &kept);
        let raw: Vec<RawCandidate> = kept
            .iter()
            .zip(&ids)
            .zip(&tags)
            .map(|(((_, marked), interned), tags)| RawCandidate {
                interned,
                tags,
                marked: marked.clone(),
                features: [0.0; 8],
            })
            .collect();
        self.full
            .as_mut()
            .expect("a builder made with_full_view")
            .push(&raw);
    }

    /// Each sentence cut to its last `max-tokens` tokens, with its marked range moved along;
    /// counts the cut rows.
    fn cut<'s>(
        &mut self,
        sentences: &'s [TableSentence],
    ) -> Vec<(&'s [String], std::ops::Range<usize>)> {
        // A row keeps its last `max-tokens` tokens: the ending, which tells a question's options
        // apart, is at the end; the shared context or noun phrase at the start goes first.
        let cap = self.config.max_tokens;
        self.truncated_rows += sentences.iter().filter(|s| s.words.len() > cap).count();
        sentences
            .iter()
            .map(|s| {
                let skip = s.words.len().saturating_sub(cap);
                (
                    &s.words[skip..],
                    s.marked.start.saturating_sub(skip)..s.marked.end.saturating_sub(skip),
                )
            })
            .collect()
    }

    /// Interned ids of the kept words; counts the words of counted sentences.
    fn intern(
        &mut self,
        sentences: &[TableSentence],
        kept: &[(&[String], std::ops::Range<usize>)],
    ) -> Vec<Vec<u32>> {
        let mut ids: Vec<Vec<u32>> = Vec::with_capacity(sentences.len());
        for (s, (words, _)) in sentences.iter().zip(kept) {
            let row: Vec<u32> = words
                .iter()
                .map(|w| match self.interned.get(w) {
                    Some(&id) => id,
                    None => {
                        let id = self.words.len() as u32;
                        self.interned.insert(w.clone(), id);
                        self.words.push(w.clone());
                        self.counts.push(0);
                        id
                    }
                })
                .collect();
            if s.counted {
                for &id in &row {
                    self.counts[id as usize] += 1;
                }
            }
            ids.push(row);
        }
        ids
    }

    /// A builder that leaves the POS view untagged (all tags 0), for tables no member reads
    /// it from: tagging is most of the time an audit's table takes.
    pub fn without_pos(mut self) -> Self {
        self.tag = false;
        self
    }

    pub fn push(&mut self, sentences: &[TableSentence]) {
        let kept = self.cut(sentences);
        let tags: Vec<Vec<u8>> = if self.tag {
            kept.par_iter()
                .map(|(words, _)| {
                    self.tagger
                        .tag_ids(words)
                        .into_iter()
                        .map(|t| u8::try_from(t).expect("fewer than 256 tags"))
                        .collect()
                })
                .collect()
        } else {
            kept.iter().map(|(words, _)| vec![0; words.len()]).collect()
        };
        let ids = self.intern(sentences, &kept);
        for s in sentences {
            for f in 0..8 {
                let x = f64::from(s.features[f]);
                self.sum[f] += x;
                self.sq[f] += x * x;
            }
        }
        let raw: Vec<RawCandidate> = sentences
            .iter()
            .zip(&kept)
            .zip(&ids)
            .zip(&tags)
            .map(|(((s, (_, marked)), interned), tags)| RawCandidate {
                interned,
                tags,
                marked: marked.clone(),
                features: s.features,
            })
            .collect();
        self.assembler.push(&raw);
    }

    /// The table; `standardize` scales the features to mean 0 and deviation 1 over all rows.
    pub fn finish(self, standardize: bool) -> (CandidateTable, TableSummary) {
        let c = self.config;
        let mut ranked: Vec<u32> = (0..self.words.len() as u32)
            .filter(|&id| self.counts[id as usize] > 0)
            .collect();
        ranked.sort_unstable_by(|&a, &b| {
            self.counts[b as usize]
                .cmp(&self.counts[a as usize])
                .then_with(|| self.words[a as usize].cmp(&self.words[b as usize]))
        });
        let mut word_of = vec![1i32; self.words.len()];
        let mut pos_word_of = vec![-1i32; self.words.len()];
        let kept = ranked.len().min(c.max_vocab - 2);
        // The POS view is pos-lstm's, as its settings say; a config was checked when loaded.
        let pos_words = PosLstmSettings::resolve(c).map_or(c.pos_words, |s| s.words);
        let pos_kept = ranked.len().min(pos_words);
        for (rank, &id) in ranked.iter().enumerate() {
            if rank < kept {
                word_of[id as usize] = rank as i32 + 2;
            }
            if rank < pos_kept {
                pos_word_of[id as usize] = rank as i32 + 2;
            }
        }
        let tag_base = pos_kept as i32 + 2;
        let vocab = Vocabularies {
            word_of,
            pos_word_of,
            tag_base,
            vocab: kept as i64 + 2,
            pos_vocab: i64::from(tag_base) + self.tagger.tags().len() as i64,
        };
        let n = self.assembler.rows().max(1) as f64;
        let (mut mean, mut std) = ([0f64; 8], [1f64; 8]);
        if standardize {
            for f in 0..8 {
                mean[f] = self.sum[f] / n;
                std[f] = (self.sq[f] / n - mean[f] * mean[f])
                    .max(0.0)
                    .sqrt()
                    .max(1e-6);
            }
        }
        let rows = self.assembler.rows();
        // The CNN pads a narrower batch itself; cutting batches no narrower than its widest
        // window keeps the arithmetic as it always was.
        let min_len = CnnSettings::resolve(c).map_or(1, |s| s.widest()) as usize;
        let mut table = self.assembler.finish(
            &vocab,
            mean.map(|m| m as f32),
            std.map(|s| s as f32),
            min_len,
        );
        if let Some(full) = self.full {
            assert_eq!(full.rows(), rows, "a full-view row for every row");
            table.full_view = Some(Box::new(full.finish(&vocab, [0.0; 8], [1.0; 8], min_len)));
        }
        let summary = TableSummary {
            rows,
            vocabulary: vocab.vocab as usize,
            pos_vocabulary: vocab.pos_vocab as usize,
            max_tokens: table.lengths.iter().copied().max().unwrap_or(0) as usize,
            mean_tokens: table.tokens() as f64 / n,
            feature_mean: mean,
            feature_std: std,
            device_bytes: table.bytes(),
            truncated_rows: self.truncated_rows,
        };
        (table, summary)
    }
}

/// The committee's table of a pool, built one part at a time: each candidate is its item's
/// noun phrase then its ending, tagged as a whole, with the noun phrase marked.
pub fn candidate_table(
    pool: &Pool,
    c: &CommitteeConfig,
    tagger: &Tagger,
    device: Device,
) -> anyhow::Result<(CandidateTable, TableSummary)> {
    candidate_table_with(pool, c, tagger, device, false)
}

/// [`candidate_table`], with the full-view rows too when `full_view` (a member reads them): each
/// candidate's item's context, noun phrase and ending, the context and noun phrase marked, as
/// the audit's full view reads a question.
pub fn candidate_table_with(
    pool: &Pool,
    c: &CommitteeConfig,
    tagger: &Tagger,
    device: Device,
    full_view: bool,
) -> anyhow::Result<(CandidateTable, TableSummary)> {
    let np_tokens: Vec<Vec<String>> = pool
        .items
        .par_iter()
        .map(|i| tokenize_lowercase(&i.noun_phrase))
        .collect();
    let context_tokens: Vec<Vec<String>> = if full_view {
        pool.items
            .par_iter()
            .map(|i| tokenize_lowercase(&i.context))
            .collect()
    } else {
        Vec::new()
    };
    let mut item_at = 0;
    let builder = TableBuilder::new(tagger, c, device);
    let mut builder = if full_view {
        builder.with_full_view(device)
    } else {
        builder
    };
    pool.for_each_part(|first, part| -> anyhow::Result<()> {
        // A NaN feature would spread to every row through the standardisation.
        if let Some((c, f)) = part.iter().find_map(|c| c.features.iter().position(|x| !x.is_finite()).map(|f| (c, f))) {
            anyhow::bail!(
                "candidate {} of item `{}` in the pool has a non-finite LM feature ({} = {}): rerun the generate stage (`af run --force generate`)",
                c.candidate,
                c.item_id,
                af_core::LM_FEATURES[f],
                c.features[f]
            );
        }
        // The item of each row: items are in row order, so walk forward.
        let mut items = Vec::with_capacity(part.len());
        for r in first..first + part.len() {
            while item_at + 1 < pool.offsets.len() && pool.offsets[item_at + 1] <= r {
                item_at += 1;
            }
            items.push(item_at);
        }
        let sentences: Vec<TableSentence> = part
            .par_iter()
            .zip(&items)
            .map(|(cand, &i)| {
                let mut words = np_tokens[i].clone();
                words.extend(tokenize_lowercase(&cand.ending));
                TableSentence { words, marked: 0..np_tokens[i].len(), features: cand.features, counted: true }
            })
            .collect();
        builder.push(&sentences);
        if full_view {
            let full: Vec<TableSentence> = sentences
                .par_iter()
                .zip(&items)
                .map(|(s, &i)| {
                    let mut words = context_tokens[i].clone();
                    words.extend(s.words.iter().cloned());
                    TableSentence { words, marked: 0..context_tokens[i].len() + np_tokens[i].len(), features: [0.0; 8], counted: true }
                })
                .collect();
            builder.push_full(&full);
        }
        Ok(())
    })?;
    Ok(builder.finish(true))
}

/// The table of sentences without LM features (an audit's options, WinoGrande's filled-in
/// sentences): each sentence's lowercased tokens and its marked range; vocabularies from the
/// first `counted` sentences. Also returns how many sentences were cut to `max-tokens`.
pub fn sentence_table(
    sentences: &[(&[String], std::ops::Range<usize>)],
    counted: usize,
    c: &CommitteeConfig,
    tagger: &Tagger,
    device: Device,
) -> (CandidateTable, usize) {
    sentence_table_with(sentences, counted, c, tagger, true, device)
}

/// [`sentence_table`], tagging the POS view only when `pos` (a member reads it).
pub fn sentence_table_with(
    sentences: &[(&[String], std::ops::Range<usize>)],
    counted: usize,
    c: &CommitteeConfig,
    tagger: &Tagger,
    pos: bool,
    device: Device,
) -> (CandidateTable, usize) {
    let builder = TableBuilder::new(tagger, c, device);
    let mut builder = if pos { builder } else { builder.without_pos() };
    let rows: Vec<TableSentence> = sentences
        .iter()
        .enumerate()
        .map(|(i, (w, marked))| TableSentence {
            words: w.to_vec(),
            marked: marked.clone(),
            features: [0.0; 8],
            counted: i < counted,
        })
        .collect();
    builder.push(&rows);
    let (table, summary) = builder.finish(false);
    (table, summary.truncated_rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir(items: usize, per_item: usize, part_items: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        af_io::pool_index::write_synthetic_pool(dir.path(), items, per_item, part_items).unwrap();
        dir
    }

    fn same(a: &tch::Tensor, b: &tch::Tensor) -> bool {
        a.size() == b.size() && a.kind() == b.kind() && a.equal(b)
    }

    /// Issue 17: a NaN LM feature in the pool is an error naming the candidate, not a table of NaN.
    #[test]
    fn a_non_finite_feature_in_the_pool_is_an_error() {
        let dir = run_dir(4, 3, 4);
        let part = af_io::pool::part_path(&dir.path().join("generate/pool"), 0);
        let mut rows = af_io::pool::read_part(&part).unwrap();
        rows[6].features[3] = f32::NAN;
        af_io::pool::write_part(&part, &rows).unwrap();
        let pool = Pool::load(dir.path()).unwrap();
        let tagger = crate::setup::load_tagger(None).unwrap();
        let e = candidate_table(&pool, &CommitteeConfig::default(), &tagger, Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("candidate 2 of item `item-1`") && e.contains("= NaN"),
            "{e}"
        );
    }

    /// Full-view rows: each candidate's context, noun phrase and ending, the first two marked,
    /// in the same vocabulary as the second-sentence rows; saved and loaded with the table.
    #[test]
    fn full_view_rows_hold_the_context_before_the_second_sentence() {
        let dir = run_dir(5, 4, 2);
        let pool = Pool::load(dir.path()).unwrap();
        let tagger = crate::setup::load_tagger(None).unwrap();
        let config = CommitteeConfig::default();
        let (plain, _) = candidate_table(&pool, &config, &tagger, Device::Cpu).unwrap();
        assert!(plain.full_view.is_none());
        let (table, _) = candidate_table_with(&pool, &config, &tagger, Device::Cpu, true).unwrap();
        let full = table.full_view.as_deref().unwrap();
        assert_eq!(full.rows, table.rows);
        let row = pool.row(3, 2) as usize;
        let context = tokenize_lowercase(&pool.items[3].context).len();
        let np = tokenize_lowercase(&pool.items[3].noun_phrase).len();
        let (n, m) = (
            usize::from(table.lengths[row]),
            usize::from(full.lengths[row]),
        );
        assert_eq!(m, context + n);
        let ids = |t: &CandidateTable, r: usize, len: usize| -> Vec<i64> {
            let start = t.starts.int64_value(&[r as i64]);
            Vec::<i64>::try_from(
                t.words
                    .narrow(0, start, len as i64)
                    .to_kind(tch::Kind::Int64),
            )
            .unwrap()
        };
        assert_eq!(
            ids(full, row, m)[context..],
            ids(&table, row, n)[..],
            "the same words, the same ids, after the context"
        );
        let marks = |t: &CandidateTable, r: usize, len: usize| -> Vec<i64> {
            let start = t.starts.int64_value(&[r as i64]);
            Vec::<i64>::try_from(
                t.indicator
                    .narrow(0, start, len as i64)
                    .to_kind(tch::Kind::Int64),
            )
            .unwrap()
        };
        let want: Vec<i64> = (0..m)
            .map(|j| if j < context + np { 1 } else { 2 })
            .collect();
        assert_eq!(marks(full, row, m), want);

        let saved = dir.path().join("table");
        table.save(&saved, 7).unwrap();
        let back = CandidateTable::load(&saved, Device::Cpu).unwrap();
        let back_full = back.full_view.as_deref().expect("loaded with the table");
        assert!(same(&back_full.words, &full.words) && same(&back_full.indicator, &full.indicator));
        // Saved again without it, the old full view goes.
        plain.save(&saved, 7).unwrap();
        assert!(CandidateTable::load(&saved, Device::Cpu)
            .unwrap()
            .full_view
            .is_none());
    }

    #[test]
    fn a_row_longer_than_max_tokens_keeps_its_last_tokens_and_is_counted() {
        let tagger = crate::setup::load_tagger(None).unwrap();
        let config = CommitteeConfig {
            max_tokens: 4,
            max_vocab: 20,
            ..Default::default()
        };
        let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let long = words("the man on the left runs away");
        let short = words("a dog sits");
        let (table, cut) = sentence_table(
            &[(&long, 0..2), (&short, 0..1)],
            2,
            &config,
            &tagger,
            Device::Cpu,
        );
        assert_eq!(cut, 1);
        assert_eq!(table.lengths, [4, 3]);
        // "the man" was marked; cut to "left runs away" plus one, nothing of it is left.
        let ind = Vec::<i64>::try_from(table.indicator.narrow(0, 0, 4).to_kind(tch::Kind::Int64))
            .unwrap();
        assert_eq!(ind, [2, 2, 2, 2]);
    }

    #[test]
    fn the_table_does_not_depend_on_how_the_pool_is_cut_into_parts() {
        let tagger = crate::setup::load_tagger(None).unwrap();
        let config = CommitteeConfig {
            pos_words: 5,
            max_vocab: 12,
            ..Default::default()
        };
        let one = run_dir(10, 6, 10);
        let many = run_dir(10, 6, 3);
        // And parts that cut items in two: the same rows, rewritten 5 to a part.
        let cut = run_dir(10, 6, 10);
        let pool_dir = cut.path().join("generate/pool");
        let rows = af_io::pool::read_part(&af_io::pool::part_path(&pool_dir, 0)).unwrap();
        std::fs::remove_file(af_io::pool::part_path(&pool_dir, 0)).unwrap();
        for (b, chunk) in rows.chunks(5).enumerate() {
            af_io::pool::write_part(&af_io::pool::part_path(&pool_dir, b), chunk).unwrap();
        }
        let (p1, pn, pc) = (
            Pool::load(one.path()).unwrap(),
            Pool::load(many.path()).unwrap(),
            Pool::load(cut.path()).unwrap(),
        );
        assert_eq!(
            (p1.offsets.clone(), p1.sizes.clone(), p1.rows),
            (pn.offsets.clone(), pn.sizes.clone(), pn.rows)
        );
        assert_eq!(
            (p1.offsets.clone(), p1.sizes.clone(), p1.rows),
            (pc.offsets.clone(), pc.sizes.clone(), pc.rows)
        );
        let (tc, _) = candidate_table(&pc, &config, &tagger, Device::Cpu).unwrap();
        assert_eq!(pn.rows, 70);
        let (t1, s1) = candidate_table(&p1, &config, &tagger, Device::Cpu).unwrap();
        let (tn, sn) = candidate_table(&pn, &config, &tagger, Device::Cpu).unwrap();
        assert!(
            same(&t1.words, &tn.words)
                && same(&t1.pos, &tn.pos)
                && same(&t1.indicator, &tn.indicator)
        );
        assert!(
            same(&t1.words, &tc.words)
                && same(&t1.pos, &tc.pos)
                && same(&t1.indicator, &tc.indicator)
        );
        assert!(t1.features.allclose(&tn.features, 1e-6, 1e-6, false));
        assert_eq!(
            (s1.vocabulary, s1.pos_vocabulary, s1.max_tokens),
            (sn.vocabulary, sn.pos_vocabulary, sn.max_tokens)
        );
        // max-vocab 12: the 10 most frequent words and pad/unknown; some word is unknown.
        assert_eq!(s1.vocabulary, 12);
        assert!(t1.words.eq(1).any().int64_value(&[]) == 1);
        // The noun phrase is marked, the ending is not; standardised features have mean 0.
        let ind = Vec::<i64>::try_from(
            t1.indicator
                .narrow(0, 0, i64::from(t1.lengths[0]))
                .to_kind(tch::Kind::Int64),
        )
        .unwrap();
        assert_eq!(&ind[..4], &[1, 1, 2, 2]);
        assert!(t1.features.mean(tch::Kind::Float).double_value(&[]).abs() < 1e-5);
        // The fetched candidates are those of the rows.
        let fetched = pn
            .fetch([pn.row(4, 0), pn.row(9, 6), pn.row(4, 0)])
            .unwrap();
        assert_eq!(fetched.len(), 2);
        assert_eq!(fetched[&pn.row(9, 6)].item_id, "item-9");
        assert_eq!(fetched[&pn.row(9, 6)].candidate, 6);
        assert_eq!(fetched[&pn.row(4, 0)].ending, p1.items[4].ending);
    }
}
