//! What the `filter` and `export` stages share: the pool read back and checked against the items,
//! the candidate table the committee reads (word ids, POS view, standardised LM features), and
//! the libtorch committee behind af-filter's `Committee` trait.

use std::collections::HashMap;
use std::path::Path;

use af_core::{Candidate, CommitteeConfig, Config, Item, Member};
use af_filter::{Assignment, HeadScores, Stage};
use af_nn::committee::{self as nnc, CandidateInput, CandidateTable, CommitteeModel};
use af_text::{tokenize, Tagger};
use anyhow::Context;
use rayon::prelude::*;
use tch::{nn, Device};

/// The candidate pool of the items it covers: rows sorted by (item, candidate), gold first.
pub struct Pool {
    /// The items that have candidates, in pool order; `Assignment` indexes this list.
    pub items: Vec<Item>,
    pub candidates: Vec<Candidate>,
    /// Row of each item's gold candidate in `candidates`.
    pub offsets: Vec<usize>,
    /// Generated candidates per item (its rows are offset..=offset + size).
    pub sizes: Vec<usize>,
}

impl Pool {
    /// Reads `generate/pool` and checks it against `pairs/items.jsonl`: every row names an item
    /// with the right id, and each item's candidates are numbered 0 (its gold ending) to n.
    pub fn load(run_dir: &Path) -> anyhow::Result<Self> {
        let items_path = run_dir.join("pairs/items.jsonl");
        let all_items = af_io::items::read_items(&items_path)?;
        let pool_dir = run_dir.join("generate/pool");
        let parts = af_io::pool::parts(&pool_dir)?;
        anyhow::ensure!(!parts.is_empty(), "{} has no pool parts: run the generate stage first", pool_dir.display());
        let mut candidates = Vec::new();
        for part in &parts {
            candidates.extend(af_io::pool::read_part(part)?);
        }
        candidates.sort_by_key(|c| (c.item_index, c.candidate));
        let mismatch = |what: String| {
            anyhow::anyhow!("the pool in {} does not match {}: {what} (rerun `af run --force generate`)", pool_dir.display(), items_path.display())
        };
        let (mut items, mut offsets, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        for (row, c) in candidates.iter().enumerate() {
            let item = all_items
                .get(c.item_index as usize)
                .ok_or_else(|| mismatch(format!("row for item {} but there are {} items", c.item_index, all_items.len())))?;
            if item.id != c.item_id {
                return Err(mismatch(format!("item {} is `{}` in the items, `{}` in the pool", c.item_index, item.id, c.item_id)));
            }
            if c.candidate == 0 {
                if c.ending != item.ending {
                    return Err(mismatch(format!("the gold ending of `{}` differs", item.id)));
                }
                items.push(item.clone());
                offsets.push(row);
                sizes.push(0);
            } else {
                let last = items.len().checked_sub(1).filter(|&l| items[l].id == c.item_id);
                let Some(last) = last else { return Err(mismatch(format!("item `{}` has no gold row", c.item_id))) };
                if c.candidate as usize != sizes[last] + 1 {
                    return Err(mismatch(format!("item `{}`: candidate {} follows candidate {}", c.item_id, c.candidate, sizes[last])));
                }
                sizes[last] += 1;
            }
        }
        Ok(Self { items, candidates, offsets, sizes })
    }

    /// The row of candidate `c` of pool item `i`.
    pub fn row(&self, i: usize, c: u32) -> i64 {
        (self.offsets[i] + c as usize) as i64
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

/// Sizes of the table's vocabularies, for the stage report.
#[derive(Debug, serde::Serialize)]
pub struct TableSummary {
    pub rows: usize,
    pub vocabulary: usize,
    pub pos_vocabulary: usize,
    pub max_tokens: usize,
    pub feature_mean: [f64; 8],
    pub feature_std: [f64; 8],
}

/// Turns the pool into the committee's tensors: words by frequency (ids 2..; 0 pad, 1 unknown),
/// the POS view (the `pos-words` most frequent words as themselves, every other token as its
/// tag), and LM features standardised over the pool.
pub fn candidate_table(pool: &Pool, c: &CommitteeConfig, tagger: &Tagger, device: Device) -> (CandidateTable, TableSummary) {
    let np_tokens: Vec<Vec<String>> = pool.items.par_iter().map(|i| tokenize(&i.noun_phrase).iter().map(str::to_lowercase).collect()).collect();
    let item_of: Vec<usize> = pool.offsets.iter().zip(&pool.sizes).enumerate().flat_map(|(i, (_, &s))| std::iter::repeat_n(i, s + 1)).collect();
    // Each candidate's sentence: the item's noun phrase, then its ending; tagged as a whole.
    let tagged: Vec<(Vec<String>, Vec<usize>)> = pool
        .candidates
        .par_iter()
        .zip(&item_of)
        .map(|(cand, &i)| {
            let mut words = np_tokens[i].clone();
            words.extend(tokenize(&cand.ending).iter().map(str::to_lowercase));
            let tags = tagger.tag_ids(&words);
            (words, tags)
        })
        .collect();
    let view = text_view(&tagged, tagged.len(), c, tagger.tags().len());
    let mut mean = [0f64; 8];
    let mut sq = [0f64; 8];
    for cand in &pool.candidates {
        for f in 0..8 {
            let x = f64::from(cand.features[f]);
            mean[f] += x;
            sq[f] += x * x;
        }
    }
    let n = pool.candidates.len().max(1) as f64;
    let mut std = [1f64; 8];
    for f in 0..8 {
        mean[f] /= n;
        std[f] = (sq[f] / n - mean[f] * mean[f]).max(0.0).sqrt().max(1e-6);
    }
    let inputs: Vec<CandidateInput> = view
        .words
        .into_par_iter()
        .zip(view.pos)
        .zip(&pool.candidates)
        .zip(&item_of)
        .map(|(((words, pos), cand), &i)| CandidateInput {
            words,
            pos,
            marked: 0..np_tokens[i].len(),
            features: std::array::from_fn(|f| ((f64::from(cand.features[f]) - mean[f]) / std[f]) as f32),
        })
        .collect();
    let max_tokens = inputs.iter().map(|i| i.words.len()).max().unwrap_or(0);
    let min_len = c.cnn_widths.iter().copied().max().unwrap_or(1) as usize;
    let table = CandidateTable::new(&inputs, view.vocab as i64, view.pos_vocab as i64, min_len, device);
    let summary = TableSummary {
        rows: inputs.len(),
        vocabulary: view.vocab,
        pos_vocabulary: view.pos_vocab,
        max_tokens,
        feature_mean: mean,
        feature_std: std,
    };
    (table, summary)
}

/// The table of sentences without LM features (an audit's options, WinoGrande's filled-in
/// sentences): each sentence's lowercased tokens and its marked range; vocabularies from the
/// first `counted` sentences.
pub fn sentence_table(sentences: &[(&[String], std::ops::Range<usize>)], counted: usize, c: &CommitteeConfig, tagger: &Tagger, device: Device) -> CandidateTable {
    let tagged: Vec<(Vec<String>, Vec<usize>)> = sentences.par_iter().map(|(w, _)| (w.to_vec(), tagger.tag_ids(w))).collect();
    let view = text_view(&tagged, counted, c, tagger.tags().len());
    let inputs: Vec<CandidateInput> = view
        .words
        .into_iter()
        .zip(view.pos)
        .zip(sentences)
        .map(|((words, pos), (_, marked))| CandidateInput { words, pos, marked: marked.clone(), features: [0.0; 8] })
        .collect();
    let min_len = c.cnn_widths.iter().copied().max().unwrap_or(1) as usize;
    CandidateTable::new(&inputs, view.vocab as i64, view.pos_vocab as i64, min_len, device)
}

/// Token ids of tagged sentences in the committee's two views.
pub struct TextView {
    /// Word ids by frequency (2..; 0 pad, 1 unknown), at most `max-vocab` in all.
    pub words: Vec<Vec<i32>>,
    /// The `pos-words` most frequent words as themselves, every other token as its tag.
    pub pos: Vec<Vec<i32>>,
    pub vocab: usize,
    pub pos_vocab: usize,
}

/// Builds both views from lowercased tokens and their tag ids (`tags` tags in the tagger). The
/// vocabularies come from the first `counted` sentences (the training side, where the rest is
/// held out): a word seen only after them is unknown, as it would be to a deployed detector.
pub fn text_view(tagged: &[(Vec<String>, Vec<usize>)], counted: usize, c: &CommitteeConfig, tags: usize) -> TextView {
    let counts = tagged[..counted]
        .par_iter()
        .fold(HashMap::<&str, u64>::new, |mut m, (words, _)| {
            for w in words {
                *m.entry(w.as_str()).or_default() += 1;
            }
            m
        })
        .reduce(HashMap::new, |mut a, b| {
            for (k, v) in b {
                *a.entry(k).or_default() += v;
            }
            a
        });
    let mut by_count: Vec<(&str, u64)> = counts.into_iter().collect();
    by_count.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let words: HashMap<&str, i32> = by_count.iter().take(c.max_vocab - 2).enumerate().map(|(i, (w, _))| (*w, i as i32 + 2)).collect();
    let pos_words: HashMap<&str, i32> = by_count.iter().take(c.pos_words).enumerate().map(|(i, (w, _))| (*w, i as i32 + 2)).collect();
    let tag_base = pos_words.len() as i32 + 2;
    let (ids, pos) = tagged
        .par_iter()
        .map(|(ws, ts)| {
            (
                ws.iter().map(|w| words.get(w.as_str()).copied().unwrap_or(1)).collect::<Vec<i32>>(),
                ws.iter().zip(ts).map(|(w, &t)| pos_words.get(w.as_str()).copied().unwrap_or(tag_base + t as i32)).collect::<Vec<i32>>(),
            )
        })
        .unzip();
    TextView { words: ids, pos, vocab: words.len() + 2, pos_vocab: tag_base as usize + tags }
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

/// Loads the pool, the tagger and the table for a config's run.
pub fn load(config: &Config) -> anyhow::Result<(Pool, CandidateTable, TableSummary, Device)> {
    let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
    let tagger = super::load_tagger(config.tagger.model.as_deref())?;
    let device = super::device(config)?;
    let (table, summary) = candidate_table(&pool, &config.committee, &tagger, device);
    Ok((pool, table, summary, device))
}
