//! The candidate pool as the filter and export stages read it: an index over the Parquet parts
//! of `generate/pool`, checked against `pairs/items.jsonl`, and streaming reads of the parts.
//! The candidates themselves are never all in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use af_core::{Candidate, Item};
use rayon::prelude::*;
use thiserror::Error;

use crate::ReadError;

#[derive(Debug, Error)]
pub enum PoolError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{dir} has no pool parts: run the generate stage first")]
    NoParts { dir: PathBuf },
    #[error(
        "the pool part {part} does not match {items}: {what} (rerun `af run --force generate`)"
    )]
    Mismatch {
        part: PathBuf,
        items: PathBuf,
        what: String,
    },
    #[error("the pool changed while it was read ({before} rows, then {after})")]
    Changed { before: usize, after: usize },
}

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
    pub fn load(run_dir: &Path) -> Result<Self, PoolError> {
        let items_path = run_dir.join("pairs/items.jsonl");
        let all_items = crate::items::read_items(&items_path)?;
        let pool_dir = run_dir.join("generate/pool");
        let parts = crate::pool::parts(&pool_dir)?;
        if parts.is_empty() {
            return Err(PoolError::NoParts { dir: pool_dir });
        }
        let mismatch = |part: &Path, what: String| PoolError::Mismatch {
            part: part.to_path_buf(),
            items: items_path.clone(),
            what,
        };
        // Parts are read and checked in parallel (a few in memory at once, four columns each),
        // each kept only as its runs of rows per item; the runs are then joined in order.
        let runs: Vec<Vec<ItemRun>> = parts
            .par_iter()
            .map(|part| {
                let mut runs: Vec<ItemRun> = Vec::new();
                for c in crate::pool::read_index(part)? {
                    let item = all_items.get(c.item_index as usize).ok_or_else(|| {
                        mismatch(
                            part,
                            format!(
                                "row for item {} but there are {} items",
                                c.item_index,
                                all_items.len()
                            ),
                        )
                    })?;
                    if item.id != c.item_id {
                        return Err(mismatch(
                            part,
                            format!(
                                "item {} is `{}` in the items, `{}` in the pool",
                                c.item_index, item.id, c.item_id
                            ),
                        ));
                    }
                    if c.gold_ending
                        .as_ref()
                        .is_some_and(|gold| *gold != item.ending)
                    {
                        return Err(mismatch(
                            part,
                            format!("the gold ending of `{}` differs", item.id),
                        ));
                    }
                    match runs.last_mut() {
                        Some(run) if run.item_index == c.item_index && c.candidate != 0 => {
                            if c.candidate != run.first + run.rows as u32 {
                                return Err(mismatch(
                                    part,
                                    format!(
                                        "item `{}`: candidate {} follows candidate {}",
                                        c.item_id,
                                        c.candidate,
                                        run.first + run.rows as u32 - 1
                                    ),
                                ));
                            }
                            run.rows += 1;
                        }
                        _ => runs.push(ItemRun {
                            item_index: c.item_index,
                            first: c.candidate,
                            rows: 1,
                        }),
                    }
                }
                Ok(runs)
            })
            .collect::<Result<_, PoolError>>()?;
        let (mut items, mut offsets, mut sizes) = (Vec::new(), Vec::new(), Vec::<usize>::new());
        let (mut row, mut last_index) = (0, None);
        for (part, runs) in parts.iter().zip(runs) {
            for run in runs {
                let item = &all_items[run.item_index as usize];
                if run.first == 0 {
                    if last_index.is_some_and(|l| l >= run.item_index) {
                        return Err(mismatch(
                            part,
                            format!("item `{}` comes after an item that follows it", item.id),
                        ));
                    }
                    last_index = Some(run.item_index);
                    items.push(item.clone());
                    offsets.push(row);
                    sizes.push(run.rows - 1);
                } else {
                    // A run that continues an item from the part before.
                    let last = items
                        .len()
                        .checked_sub(1)
                        .filter(|&l| items[l].id == item.id);
                    let Some(last) = last else {
                        return Err(mismatch(
                            part,
                            format!("item `{}` has no gold row before its candidates", item.id),
                        ));
                    };
                    if run.first as usize != sizes[last] + 1 {
                        return Err(mismatch(
                            part,
                            format!(
                                "item `{}`: candidate {} follows candidate {}",
                                item.id, run.first, sizes[last]
                            ),
                        ));
                    }
                    sizes[last] += run.rows;
                }
                row += run.rows;
            }
        }
        Ok(Self {
            items,
            offsets,
            sizes,
            rows: row,
            parts,
        })
    }

    /// The row of candidate `c` of pool item `i`.
    pub fn row(&self, i: usize, c: u32) -> i64 {
        (self.offsets[i] + c as usize) as i64
    }

    /// Calls `f` with each part's candidates in row order, with the row of the first. A reader
    /// thread decodes the next part while `f` works on this one, so at most three parts are in
    /// memory (the one in `f`, the one decoded, the one being decoded).
    pub fn for_each_part<E: From<PoolError>>(
        &self,
        mut f: impl FnMut(usize, &[Candidate]) -> Result<(), E>,
    ) -> Result<(), E> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for part in &self.parts {
                    let rows = crate::pool::read_part(part);
                    let failed = rows.is_err();
                    if sender.send(rows).is_err() || failed {
                        break;
                    }
                }
            });
            let mut row = 0;
            for rows in receiver {
                let rows = rows.map_err(PoolError::from)?;
                f(row, &rows)?;
                row += rows.len();
            }
            if row != self.rows {
                return Err(PoolError::Changed {
                    before: self.rows,
                    after: row,
                }
                .into());
            }
            Ok(())
        })
    }

    /// The candidates at `rows` (any order, repeats allowed), read by streaming the parts.
    pub fn fetch(
        &self,
        rows: impl IntoIterator<Item = i64>,
    ) -> Result<HashMap<i64, Candidate>, PoolError> {
        let mut wanted: Vec<i64> = rows.into_iter().collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut out = HashMap::with_capacity(wanted.len());
        let mut next = 0;
        self.for_each_part(|first, part| -> Result<(), PoolError> {
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
}

/// Consecutive rows of one item in a part: candidates `first..first + rows`.
struct ItemRun {
    item_index: u32,
    first: u32,
    rows: usize,
}

/// Writes a synthetic run directory (`pairs/items.jsonl` and `generate/pool`): `items` items of
/// `per_item` generated endings (3 to 20 tokens), `part_items` items per part. For tests and
/// `af bench pool`, which need a pool of any size without an LM.
pub fn write_synthetic_pool(
    dir: &Path,
    items: usize,
    per_item: usize,
    part_items: usize,
) -> std::io::Result<()> {
    const WORDS: [&str; 24] = [
        "the", "man", "walks", "a", "dog", "slowly", "runs", "away", "to", "park", "quickly",
        "sits", "woman", "then", "ball", "water", "jumps", "over", "fence", "and", "smiles", "at",
        "camera", "again",
    ];
    let all: Vec<Item> = (0..items)
        .map(|i| Item {
            id: format!("item-{i}"),
            group: format!("g{}", i / 2),
            fold: (i % 2) as u32,
            context: "someone is outside .".into(),
            noun_phrase: if i % 3 == 0 {
                "the man".into()
            } else {
                "a dog".into()
            },
            ending: format!("{} {} .", WORDS[i % 24], WORDS[(i * 5) % 24]),
            context_tokens: 4,
            noun_phrase_tokens: 2,
            ending_tokens: 3,
            distractors: Vec::new(),
        })
        .collect();
    std::fs::create_dir_all(dir.join("pairs"))?;
    crate::items::write_items(&dir.join("pairs/items.jsonl"), &all)?;
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
                    (0..2 + (i * 7 + c * 3) % 18)
                        .map(|j| WORDS[(i * 3 + c * 7 + j * 5) % 24])
                        .collect::<Vec<_>>()
                        .join(" ")
                        + " ."
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
                    origin: Some(
                        if c == 0 {
                            af_core::GOLD_ORIGIN
                        } else {
                            "sampled"
                        }
                        .into(),
                    ),
                });
            }
        }
        crate::pool::write_part(&crate::pool::part_path(&pool, block), &rows)?;
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

    #[test]
    fn a_pool_out_of_order_is_refused() {
        let dir = run_dir(6, 2, 3);
        let pool = dir.path().join("generate/pool");
        // Swap the two parts' names: items 3..6 now come first.
        std::fs::rename(pool.join("part-000000.parquet"), pool.join("tmp")).unwrap();
        std::fs::rename(
            pool.join("part-000001.parquet"),
            pool.join("part-000000.parquet"),
        )
        .unwrap();
        std::fs::rename(pool.join("tmp"), pool.join("part-000001.parquet")).unwrap();
        let e = Pool::load(dir.path()).err().unwrap().to_string();
        assert!(
            e.contains("part-000001.parquet") && e.contains("comes after an item that follows it"),
            "{e}"
        );
    }
}
