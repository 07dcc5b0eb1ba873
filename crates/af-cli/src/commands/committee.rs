//! What the `filter` and `export` stages share: the pool read back and checked against the items,
//! the candidate table the committee reads (word ids, POS view, standardised LM features), and
//! the libtorch committee behind af-filter's `Committee` trait.

use std::collections::HashMap;
use std::path::Path;

use af_core::{Candidate, CommitteeConfig, Config, Item, Member};
use af_filter::{Assignment, HeadScores, Stage};
use af_nn::committee::{self as nnc, CandidateTable, CommitteeModel};
use af_text::{tokenize, Tagger};
use anyhow::Context;
use rayon::prelude::*;
use tch::{nn, Device};

/// The candidate pool of the items it covers, as an index: the candidates themselves stay in
/// the pool's Parquet parts and are read back one part at a time ([`Pool::for_each_part`],
/// [`Pool::fetch`]), so that a SWAG-sized pool never sits in host memory.
pub struct Pool {
    /// The items that have candidates, in pool order; `Assignment` indexes this list.
    pub items: Vec<Item>,
    /// Row of each item's gold candidate; rows number the candidates of the parts in order.
    pub offsets: Vec<usize>,
    /// Generated candidates per item (its rows are offset..=offset + size).
    pub sizes: Vec<usize>,
    /// Every row.
    pub rows: usize,
    /// The Parquet parts, in block order.
    parts: Vec<std::path::PathBuf>,
}

impl Pool {
    /// Indexes `generate/pool` and checks it against `pairs/items.jsonl`: every row names an item
    /// with the right id, items come in order, and each item's candidates are numbered 0 (its gold
    /// ending, equal to the item's) to n.
    pub fn load(run_dir: &Path) -> anyhow::Result<Self> {
        let items_path = run_dir.join("pairs/items.jsonl");
        let all_items = af_io::items::read_items(&items_path)?;
        let pool_dir = run_dir.join("generate/pool");
        let parts = af_io::pool::parts(&pool_dir)?;
        anyhow::ensure!(!parts.is_empty(), "{} has no pool parts: run the generate stage first", pool_dir.display());
        let mismatch = |part: &Path, what: String| {
            anyhow::anyhow!("the pool part {} does not match {}: {what} (rerun `af run --force generate`)", part.display(), items_path.display())
        };
        // Parts are read and checked in parallel (a few in memory at once, four columns each),
        // each kept only as its runs of rows per item; the runs are then joined in order.
        let runs: Vec<Vec<ItemRun>> = parts
            .par_iter()
            .map(|part| {
                let mut runs: Vec<ItemRun> = Vec::new();
                for c in af_io::pool::read_index(part)? {
                    let item = all_items
                        .get(c.item_index as usize)
                        .ok_or_else(|| mismatch(part, format!("row for item {} but there are {} items", c.item_index, all_items.len())))?;
                    if item.id != c.item_id {
                        return Err(mismatch(part, format!("item {} is `{}` in the items, `{}` in the pool", c.item_index, item.id, c.item_id)));
                    }
                    if c.gold_ending.as_ref().is_some_and(|gold| *gold != item.ending) {
                        return Err(mismatch(part, format!("the gold ending of `{}` differs", item.id)));
                    }
                    match runs.last_mut() {
                        Some(run) if run.item_index == c.item_index && c.candidate != 0 => {
                            if c.candidate != run.first + run.rows as u32 {
                                return Err(mismatch(part, format!("item `{}`: candidate {} follows candidate {}", c.item_id, c.candidate, run.first + run.rows as u32 - 1)));
                            }
                            run.rows += 1;
                        }
                        _ => runs.push(ItemRun { item_index: c.item_index, first: c.candidate, rows: 1 }),
                    }
                }
                Ok(runs)
            })
            .collect::<anyhow::Result<_>>()?;
        let (mut items, mut offsets, mut sizes) = (Vec::new(), Vec::new(), Vec::<usize>::new());
        let (mut row, mut last_index) = (0, None);
        for (part, runs) in parts.iter().zip(runs) {
            for run in runs {
                let item = &all_items[run.item_index as usize];
                if run.first == 0 {
                    if last_index.is_some_and(|l| l >= run.item_index) {
                        return Err(mismatch(part, format!("item `{}` comes after an item that follows it", item.id)));
                    }
                    last_index = Some(run.item_index);
                    items.push(item.clone());
                    offsets.push(row);
                    sizes.push(run.rows - 1);
                } else {
                    // A run that continues an item from the part before.
                    let last = items.len().checked_sub(1).filter(|&l| items[l].id == item.id);
                    let Some(last) = last else { return Err(mismatch(part, format!("item `{}` has no gold row before its candidates", item.id))) };
                    if run.first as usize != sizes[last] + 1 {
                        return Err(mismatch(part, format!("item `{}`: candidate {} follows candidate {}", item.id, run.first, sizes[last])));
                    }
                    sizes[last] += run.rows;
                }
                row += run.rows;
            }
        }
        Ok(Self { items, offsets, sizes, rows: row, parts })
    }

    /// The row of candidate `c` of pool item `i`.
    pub fn row(&self, i: usize, c: u32) -> i64 {
        (self.offsets[i] + c as usize) as i64
    }

    /// Calls `f` with each part's candidates in row order, with the row of the first. A reader
    /// thread decodes the next part while `f` works on this one, so at most three parts are in
    /// memory (the one in `f`, the one decoded, the one being decoded).
    pub fn for_each_part(&self, mut f: impl FnMut(usize, &[Candidate]) -> anyhow::Result<()>) -> anyhow::Result<()> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for part in &self.parts {
                    let rows = af_io::pool::read_part(part);
                    let failed = rows.is_err();
                    if sender.send(rows).is_err() || failed {
                        break;
                    }
                }
            });
            let mut row = 0;
            for rows in receiver {
                let rows = rows?;
                f(row, &rows)?;
                row += rows.len();
            }
            anyhow::ensure!(row == self.rows, "the pool changed while it was read ({} rows, then {row})", self.rows);
            Ok(())
        })
    }

    /// The candidates at `rows` (any order, repeats allowed), read by streaming the parts.
    pub fn fetch(&self, rows: impl IntoIterator<Item = i64>) -> anyhow::Result<HashMap<i64, Candidate>> {
        let mut wanted: Vec<i64> = rows.into_iter().collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut out = HashMap::with_capacity(wanted.len());
        let mut next = 0;
        self.for_each_part(|first, part| {
            let end = (first + part.len()) as i64;
            while next < wanted.len() && wanted[next] < end {
                out.insert(wanted[next], part[(wanted[next] as usize) - first].clone());
                next += 1;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Every item's group, in pool order.
    pub fn groups(&self) -> Vec<String> {
        self.items.iter().map(|i| i.group.clone()).collect()
    }

    pub fn random_assignment(&self, k: usize, seed: u64) -> anyhow::Result<Assignment> {
        Assignment::random(&self.sizes, k, seed).map_err(|e| match e {
            af_filter::AssignmentError::PoolTooSmall { item, pool, k } => anyhow::anyhow!(
                "item `{}` has {pool} generated endings, fewer than [filter] k = {k}: lower k or generate more endings",
                self.items[item].id
            ),
            other => other.into(),
        })
    }
}

/// Consecutive rows of one item in a part: candidates `first..first + rows`.
struct ItemRun {
    item_index: u32,
    first: u32,
    rows: usize,
}

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
    assembler: nnc::TableAssembler,
    sum: [f64; 8],
    sq: [f64; 8],
    tokens: usize,
}

impl<'a> TableBuilder<'a> {
    pub fn new(tagger: &'a Tagger, config: &'a CommitteeConfig, device: Device) -> Self {
        // Interned id 0 is reserved: the assembler's padding looks it up.
        Self {
            tagger,
            config,
            interned: HashMap::new(),
            words: vec![String::new()],
            counts: vec![0],
            assembler: nnc::TableAssembler::new(device),
            sum: [0.0; 8],
            sq: [0.0; 8],
            tokens: 0,
        }
    }

    pub fn push(&mut self, sentences: &[TableSentence]) {
        let tags: Vec<Vec<u8>> = sentences
            .par_iter()
            .map(|s| self.tagger.tag_ids(&s.words).into_iter().map(|t| u8::try_from(t).expect("fewer than 256 tags")).collect())
            .collect();
        let mut ids: Vec<Vec<u32>> = Vec::with_capacity(sentences.len());
        for s in sentences {
            let row: Vec<u32> = s
                .words
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
            for f in 0..8 {
                let x = f64::from(s.features[f]);
                self.sum[f] += x;
                self.sq[f] += x * x;
            }
            self.tokens += row.len();
            ids.push(row);
        }
        let raw: Vec<nnc::RawCandidate> = sentences
            .iter()
            .zip(&ids)
            .zip(&tags)
            .map(|((s, interned), tags)| nnc::RawCandidate { interned, tags, marked: s.marked.clone(), features: s.features })
            .collect();
        self.assembler.push(&raw);
    }

    /// The table; `standardize` scales the features to mean 0 and deviation 1 over all rows.
    pub fn finish(self, standardize: bool) -> (CandidateTable, TableSummary) {
        let c = self.config;
        let mut ranked: Vec<u32> = (1..self.words.len() as u32).filter(|&id| self.counts[id as usize] > 0).collect();
        ranked.sort_unstable_by(|&a, &b| self.counts[b as usize].cmp(&self.counts[a as usize]).then_with(|| self.words[a as usize].cmp(&self.words[b as usize])));
        let mut word_of = vec![1i32; self.words.len()];
        let mut pos_word_of = vec![-1i32; self.words.len()];
        let kept = ranked.len().min(c.max_vocab - 2);
        let pos_kept = ranked.len().min(c.pos_words);
        for (rank, &id) in ranked.iter().enumerate() {
            if rank < kept {
                word_of[id as usize] = rank as i32 + 2;
            }
            if rank < pos_kept {
                pos_word_of[id as usize] = rank as i32 + 2;
            }
        }
        let tag_base = pos_kept as i32 + 2;
        let vocab = nnc::Vocabularies {
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
                std[f] = (self.sq[f] / n - mean[f] * mean[f]).max(0.0).sqrt().max(1e-6);
            }
        }
        let rows = self.assembler.rows();
        let min_len = c.cnn_widths.iter().copied().max().unwrap_or(1) as usize;
        let table = self.assembler.finish(&vocab, mean.map(|m| m as f32), std.map(|s| s as f32), min_len);
        let summary = TableSummary {
            rows,
            vocabulary: vocab.vocab as usize,
            pos_vocabulary: vocab.pos_vocab as usize,
            max_tokens: table.lengths.iter().copied().max().unwrap_or(0) as usize,
            mean_tokens: self.tokens as f64 / n,
            feature_mean: mean,
            feature_std: std,
            device_bytes: table.bytes(),
        };
        (table, summary)
    }
}

/// The committee's table of a pool, built one part at a time: each candidate is its item's
/// noun phrase then its ending, tagged as a whole, with the noun phrase marked.
pub fn candidate_table(pool: &Pool, c: &CommitteeConfig, tagger: &Tagger, device: Device) -> anyhow::Result<(CandidateTable, TableSummary)> {
    let np_tokens: Vec<Vec<String>> = pool.items.par_iter().map(|i| lowercase_tokens(&i.noun_phrase)).collect();
    let mut item_at = 0;
    let mut builder = TableBuilder::new(tagger, c, device);
    pool.for_each_part(|first, part| {
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
                words.extend(lowercase_tokens(&cand.ending));
                TableSentence { words, marked: 0..np_tokens[i].len(), features: cand.features, counted: true }
            })
            .collect();
        builder.push(&sentences);
        Ok(())
    })?;
    Ok(builder.finish(true))
}

fn lowercase_tokens(text: &str) -> Vec<String> {
    tokenize(text).iter().map(|w| w.to_lowercase()).collect()
}

/// The table of sentences without LM features (an audit's options, WinoGrande's filled-in
/// sentences): each sentence's lowercased tokens and its marked range; vocabularies from the
/// first `counted` sentences.
pub fn sentence_table(sentences: &[(&[String], std::ops::Range<usize>)], counted: usize, c: &CommitteeConfig, tagger: &Tagger, device: Device) -> CandidateTable {
    let mut builder = TableBuilder::new(tagger, c, device);
    let rows: Vec<TableSentence> = sentences
        .iter()
        .enumerate()
        .map(|(i, (w, marked))| TableSentence { words: w.to_vec(), marked: marked.clone(), features: [0.0; 8], counted: i < counted })
        .collect();
    builder.push(&rows);
    builder.finish(false).0
}

/// The libtorch committee: a fresh model per iteration, seeded by the iteration, trained on the
/// training items' current questions, scoring every pool candidate of the held-out items.
pub struct TorchCommittee<'a> {
    pub pool: &'a Pool,
    pub table: &'a CandidateTable,
    pub config: &'a CommitteeConfig,
    pub device: Device,
}

impl TorchCommittee<'_> {
    /// One item's question under `assignment`: gold first, then its distractors.
    pub fn question(&self, item: usize, assignment: &Assignment) -> Vec<i64> {
        std::iter::once(self.pool.row(item, 0)).chain(assignment.distractors[item].iter().map(|&c| self.pool.row(item, c))).collect()
    }

    /// Trains a fresh committee of `members` on `questions`.
    pub fn train(&self, members: &[Member], questions: &[Vec<i64>], seed: u64) -> anyhow::Result<(nn::VarStore, CommitteeModel)> {
        tch::manual_seed(seed as i64);
        let vs = nn::VarStore::new(self.device);
        let model = CommitteeModel::new(&vs.root(), self.config, members, self.config.joint, self.table);
        nnc::train(&vs, &model, self.table, questions, self.config, seed)?;
        Ok((vs, model))
    }
}

impl af_filter::Committee for TorchCommittee<'_> {
    type Error = CommitteeError;

    fn train_and_score(
        &mut self,
        stage: &Stage,
        train: &[usize],
        heldout: &[usize],
        assignment: &Assignment,
        seed: u64,
    ) -> Result<Vec<HeadScores>, CommitteeError> {
        let members: Vec<Member> = stage
            .members
            .iter()
            .map(|m| Member::parse(m).ok_or_else(|| CommitteeError(format!("unknown committee member `{m}`"))))
            .collect::<Result<_, _>>()?;
        let questions: Vec<Vec<i64>> = train.iter().map(|&i| self.question(i, assignment)).collect();
        let (_vs, model) = self.train(&members, &questions, seed).map_err(|e| CommitteeError(format!("{e:#}")))?;
        let rows: Vec<i64> = heldout.iter().flat_map(|&i| (0..=self.pool.sizes[i] as u32).map(move |c| (i, c))).map(|(i, c)| self.pool.row(i, c)).collect();
        let scores = nnc::score(&model, self.table, &rows, self.config.score_batch);
        let heads = model.heads();
        Ok(scores
            .into_iter()
            .zip(heads)
            .map(|((head, flat), (_, is_member))| {
                let mut per_item = Vec::with_capacity(heldout.len());
                let mut at = 0;
                for &i in heldout {
                    let n = self.pool.sizes[i] + 1;
                    per_item.push(flat[at..at + n].to_vec());
                    at += n;
                }
                HeadScores { head, is_member, scores: per_item }
            })
            .collect())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommitteeError(String);

/// The filter options of a config, in af-filter's terms.
pub fn filter_options(config: &Config) -> af_filter::FilterOptions {
    let f = &config.filter;
    af_filter::FilterOptions {
        seed: config.run.seed,
        train_share: f.train_share,
        swap_head: if f.swap_head == "best-member" {
            af_filter::SwapHead::BestMember
        } else {
            af_filter::SwapHead::Named(f.swap_head.clone())
        },
        budget: match f.budget {
            af_core::BudgetRule::Fixed => af_filter::SwapBudget::Fixed(f.n_easy),
            af_core::BudgetRule::PairwiseAccuracy => af_filter::SwapBudget::ByPairwiseAccuracy,
        },
        epsilon: f.epsilon,
        patience: f.patience,
        stages: f
            .stages
            .iter()
            .map(|s| Stage { name: s.name.clone(), members: s.members.iter().map(|m| m.name().to_string()).collect(), iterations: s.iterations })
            .collect(),
    }
}

/// Where the filter stage leaves its table for the export stage.
pub fn saved_table_dir(config: &Config) -> std::path::PathBuf {
    config.run.dir.join("filter/table")
}

/// The pool and the table the filter stage saved (the export's way: building the table again
/// would tag the whole pool again); built afresh if it is missing or does not fit the pool.
pub fn load_saved(config: &Config) -> anyhow::Result<(Pool, CandidateTable, Device)> {
    let dir = saved_table_dir(config);
    if dir.join("table.json").exists() {
        let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
        let device = super::device(config)?;
        match CandidateTable::load(&dir, device) {
            Ok(table) if table.rows as usize == pool.rows => return Ok((pool, table, device)),
            Ok(table) => tracing::warn!("{} has {} rows, the pool {}: building the table again", dir.display(), table.rows, pool.rows),
            Err(e) => tracing::warn!("{e}: building the table again"),
        }
    }
    let (pool, table, _, device) = load(config)?;
    Ok((pool, table, device))
}

/// Loads the pool, the tagger and the table for a config's run.
pub fn load(config: &Config) -> anyhow::Result<(Pool, CandidateTable, TableSummary, Device)> {
    let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
    let tagger = super::load_tagger(config.tagger.model.as_deref())?;
    let device = super::device(config)?;
    let (table, summary) = candidate_table(&pool, &config.committee, &tagger, device)?;
    Ok((pool, table, summary, device))
}

/// Writes a synthetic run directory (`pairs/items.jsonl` and `generate/pool`): `items` items of
/// `per_item` generated endings (3 to 20 tokens), `part_items` items per part. For tests and
/// `af bench pool`, which need a pool of any size without an LM.
pub fn write_synthetic_pool(dir: &Path, items: usize, per_item: usize, part_items: usize) -> anyhow::Result<()> {
    const WORDS: [&str; 24] = [
        "the", "man", "walks", "a", "dog", "slowly", "runs", "away", "to", "park", "quickly", "sits",
        "woman", "then", "ball", "water", "jumps", "over", "fence", "and", "smiles", "at", "camera", "again",
    ];
    let all: Vec<Item> = (0..items)
        .map(|i| Item {
            id: format!("item-{i}"),
            group: format!("g{}", i / 2),
            fold: (i % 2) as u32,
            context: "someone is outside .".into(),
            noun_phrase: if i % 3 == 0 { "the man".into() } else { "a dog".into() },
            ending: format!("{} {} .", WORDS[i % 24], WORDS[(i * 5) % 24]),
            context_tokens: 4,
            noun_phrase_tokens: 2,
            ending_tokens: 3,
        })
        .collect();
    std::fs::create_dir_all(dir.join("pairs"))?;
    af_io::items::write_items(&dir.join("pairs/items.jsonl"), &all)?;
    let pool = dir.join("generate/pool");
    std::fs::create_dir_all(&pool)?;
    for (block, chunk) in all.chunks(part_items.max(1)).enumerate() {
        let first = block * part_items.max(1);
        let mut rows = Vec::with_capacity(chunk.len() * (per_item + 1));
        for (i, item) in chunk.iter().enumerate().map(|(j, item)| (first + j, item)) {
            for c in 0..=per_item {
                let ending = if c == 0 {
                    item.ending.clone()
                } else {
                    (0..2 + (i * 7 + c * 3) % 18).map(|j| WORDS[(i * 3 + c * 7 + j * 5) % 24]).collect::<Vec<_>>().join(" ") + " ."
                };
                rows.push(Candidate {
                    item_index: i as u32,
                    item_id: item.id.clone(),
                    fold: item.fold,
                    candidate: c as u32,
                    tokens: ending.split(' ').count() as u32,
                    ending,
                    truncated: false,
                    features: std::array::from_fn(|f| (i * 31 + c * 7 + f) as f32 % 11.0),
                });
            }
        }
        af_io::pool::write_part(&af_io::pool::part_path(&pool, block), &rows)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir(items: usize, per_item: usize, part_items: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write_synthetic_pool(dir.path(), items, per_item, part_items).unwrap();
        dir
    }

    fn same(a: &tch::Tensor, b: &tch::Tensor) -> bool {
        a.size() == b.size() && a.kind() == b.kind() && a.equal(b)
    }

    #[test]
    fn the_table_does_not_depend_on_how_the_pool_is_cut_into_parts() {
        let tagger = super::super::load_tagger(None).unwrap();
        let config = CommitteeConfig { pos_words: 5, max_vocab: 12, ..Default::default() };
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
        let (p1, pn, pc) = (Pool::load(one.path()).unwrap(), Pool::load(many.path()).unwrap(), Pool::load(cut.path()).unwrap());
        assert_eq!((p1.offsets.clone(), p1.sizes.clone(), p1.rows), (pn.offsets.clone(), pn.sizes.clone(), pn.rows));
        assert_eq!((p1.offsets.clone(), p1.sizes.clone(), p1.rows), (pc.offsets.clone(), pc.sizes.clone(), pc.rows));
        let (tc, _) = candidate_table(&pc, &config, &tagger, Device::Cpu).unwrap();
        assert_eq!(pn.rows, 70);
        let (t1, s1) = candidate_table(&p1, &config, &tagger, Device::Cpu).unwrap();
        let (tn, sn) = candidate_table(&pn, &config, &tagger, Device::Cpu).unwrap();
        assert!(same(&t1.words, &tn.words) && same(&t1.pos, &tn.pos) && same(&t1.indicator, &tn.indicator));
        assert!(same(&t1.words, &tc.words) && same(&t1.pos, &tc.pos) && same(&t1.indicator, &tc.indicator));
        assert!(t1.features.allclose(&tn.features, 1e-6, 1e-6, false));
        assert_eq!((s1.vocabulary, s1.pos_vocabulary, s1.max_tokens), (sn.vocabulary, sn.pos_vocabulary, sn.max_tokens));
        // max-vocab 12: the 10 most frequent words and pad/unknown; some word is unknown.
        assert_eq!(s1.vocabulary, 12);
        assert!(t1.words.eq(1).any().int64_value(&[]) == 1);
        // The noun phrase is marked, the ending is not; standardised features have mean 0.
        let ind = Vec::<i64>::try_from(t1.indicator.narrow(0, 0, i64::from(t1.lengths[0])).to_kind(tch::Kind::Int64)).unwrap();
        assert_eq!(&ind[..4], &[1, 1, 2, 2]);
        assert!(t1.features.mean(tch::Kind::Float).double_value(&[]).abs() < 1e-5);
        // The fetched candidates are those of the rows.
        let fetched = pn.fetch([pn.row(4, 0), pn.row(9, 6), pn.row(4, 0)]).unwrap();
        assert_eq!(fetched.len(), 2);
        assert_eq!(fetched[&pn.row(9, 6)].item_id, "item-9");
        assert_eq!(fetched[&pn.row(9, 6)].candidate, 6);
        assert_eq!(fetched[&pn.row(4, 0)].ending, p1.items[4].ending);
    }

    #[test]
    fn a_pool_out_of_order_is_refused() {
        let dir = run_dir(6, 2, 3);
        let pool = dir.path().join("generate/pool");
        // Swap the two parts' names: items 3..6 now come first.
        std::fs::rename(pool.join("part-000000.parquet"), pool.join("tmp")).unwrap();
        std::fs::rename(pool.join("part-000001.parquet"), pool.join("part-000000.parquet")).unwrap();
        std::fs::rename(pool.join("tmp"), pool.join("part-000001.parquet")).unwrap();
        let e = Pool::load(dir.path()).err().unwrap().to_string();
        assert!(e.contains("part-000001.parquet") && e.contains("comes after an item that follows it"), "{e}");
    }
}
