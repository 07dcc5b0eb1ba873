//! The rows one batch reads, gathered from the candidate table, and the length groups a CPU batch
//! is computed in.

use tch::{Device, Kind, Tensor};

use crate::table::CandidateTable;

/// The rows of one batch, gathered from the table: what a [`MemberNet`] reads. Token columns
/// are i64, zero at padding.
pub struct Batch {
    /// [N, T] word ids.
    pub words: Tensor,
    /// [N, T] POS-view ids.
    pub pos: Tensor,
    /// [N, T] 1 noun phrase, 2 ending.
    pub indicator: Tensor,
    /// [N, 8] standardised LM features.
    pub features: Tensor,
    /// [N, T] true where there is a token.
    pub mask: Tensor,
    /// [N] tokens per row.
    pub lengths: Tensor,
    /// [N, D] f32 frozen embeddings of the rows' text, when the table has them.
    pub encoded: Option<Tensor>,
    /// [N, D] f32 frozen embeddings of the rows' contexts, when the table has them.
    pub encoded_context: Option<Tensor>,
    /// [N, F] the rows' LM-likelihood features, when the table has them.
    pub lm_likelihood: Option<Tensor>,
}

impl Batch {
    /// The rows at `rows`, padded (or cut) to `width` columns.
    pub(crate) fn gather(table: &CandidateTable, rows: &Tensor, width: i64) -> Self {
        let starts = table.starts.index_select(0, rows).unsqueeze(1);
        let lengths = table.lengths_on_device.index_select(0, rows);
        let positions = Tensor::arange(width, (Kind::Int64, table.device)).unsqueeze(0);
        let mask = positions.lt_tensor(&lengths.unsqueeze(1));
        // Padding reads token 0 of the table and is zeroed after.
        let index = (starts + &positions)
            .where_self(&mask, &Tensor::zeros([], (Kind::Int64, table.device)));
        let n = index.size()[0];
        let flat = index.flatten(0, -1);
        let pick = |t: &Tensor| {
            t.index_select(0, &flat)
                .view([n, width])
                .to_kind(Kind::Int64)
                .masked_fill(&mask.logical_not(), 0)
        };
        Self {
            words: pick(&table.words),
            pos: pick(&table.pos),
            indicator: pick(&table.indicator),
            lengths,
            mask,
            features: table.features.index_select(0, rows),
            encoded: table
                .encoded
                .as_ref()
                .map(|e| e.text.index_select(0, rows).to_kind(Kind::Float)),
            encoded_context: table
                .encoded
                .as_ref()
                .and_then(|e| e.contexts.as_ref())
                .map(|(contexts, of)| {
                    contexts
                        .index_select(0, &of.index_select(0, rows))
                        .to_kind(Kind::Float)
                }),
            lm_likelihood: table
                .lm_likelihood
                .as_ref()
                .map(|f| f.index_select(0, rows)),
        }
    }

    /// The batch's rows at `rows` (positions in this batch), cut to their first `width` columns.
    fn select(&self, rows: &Tensor, width: i64) -> Self {
        let cut = |t: &Tensor| t.index_select(0, rows).narrow(1, 0, width);
        Self {
            words: cut(&self.words),
            pos: cut(&self.pos),
            indicator: cut(&self.indicator),
            mask: cut(&self.mask),
            lengths: self.lengths.index_select(0, rows),
            features: self.features.index_select(0, rows),
            encoded: self.encoded.as_ref().map(|e| e.index_select(0, rows)),
            encoded_context: self
                .encoded_context
                .as_ref()
                .map(|e| e.index_select(0, rows)),
            lm_likelihood: self.lm_likelihood.as_ref().map(|f| f.index_select(0, rows)),
        }
    }

    /// `per_row` over the batch's rows, computed on the CPU in groups of similar length, each cut
    /// to its own longest row; the outputs in the batch's order. For members whose output does
    /// not depend on padding (module doc): the same function of the batch, with less padding
    /// computed. A training batch is drawn at random, so its longest row is often three times
    /// its mean (HellaSwag's full view) and most of a padded BiLSTM's or CNN's work would be on
    /// padding; grouping by length inside the batch keeps the batch what it was (the same
    /// questions, the same loss, the same dropout draws) where sorting the data into batches of
    /// one length would not (docs/decisions/181-length-groups-inside-a-batch-instead.md). On a GPU, where padding is cheap next to many
    /// small kernels and a host sync per batch, the batch is computed as it is.
    /// # Shapes
    /// per_row: Batch of n rows -> [n, D]; -> [N, D]
    pub(crate) fn by_length(&self, per_row: impl Fn(&Batch) -> Tensor) -> Tensor {
        if self.words.device() != Device::Cpu {
            return per_row(self);
        }
        let lengths = Vec::<i64>::try_from(&self.lengths).expect("i64 lengths");
        let mut order: Vec<i64> = (0..lengths.len() as i64).collect();
        order.sort_by_key(|&i| lengths[i as usize]);
        let sorted: Vec<i64> = order.iter().map(|&i| lengths[i as usize]).collect();
        let groups = length_groups(&sorted, LENGTH_GROUP_OVERHEAD_ROWS);
        if groups.len() <= 1 {
            return per_row(self);
        }
        let order = Tensor::from_slice(&order);
        let parts: Vec<Tensor> = groups
            .iter()
            .map(|g| {
                per_row(&self.select(
                    &order.narrow(0, g.start as i64, g.len() as i64),
                    sorted[g.end - 1].max(1),
                ))
            })
            .collect();
        // Row order[j] of the batch is row j of the parts: put each back in its place.
        let out = Tensor::cat(&parts, 0);
        out.index_select(0, &order.argsort(0, false))
    }
}

/// What one more group costs in [`Batch::by_length`], in rows of padding: a group is a call of
/// its own, which a group of one or two rows does not repay. 4 to 100 were within noise of each
/// other for the CNN on HellaSwag-sized batches on CPU-2, and the BiLSTM was fastest at the
/// low end (docs/benchmarks.md).
pub(super) const LENGTH_GROUP_OVERHEAD_ROWS: usize = 8;

/// Lengths sorted ascending, cut into consecutive groups that minimise the padded cells
/// (rows x longest) plus `overhead` rows per column of each group: exact, by dynamic programming
/// over the cut points (quadratic in the rows; a batch has hundreds).
pub(super) fn length_groups(sorted: &[i64], overhead: usize) -> Vec<std::ops::Range<usize>> {
    let n = sorted.len();
    // best[j]: the cost of the first j rows; cut[j]: where the last group of that best starts.
    let mut best = vec![0u64; n + 1];
    let mut cut = vec![0usize; n + 1];
    for j in 1..=n {
        let longest = sorted[j - 1].max(1) as u64;
        let (mut b, mut c) = (u64::MAX, 0);
        for i in 0..j {
            let cost = best[i] + (j - i + overhead) as u64 * longest;
            if cost < b {
                (b, c) = (cost, i);
            }
        }
        (best[j], cut[j]) = (b, c);
    }
    let mut groups = Vec::new();
    let mut j = n;
    while j > 0 {
        groups.push(cut[j]..j);
        j = cut[j];
    }
    groups.reverse();
    groups
}

/// A batch's rows in each view a committee's members read.
pub(super) struct Batches {
    pub(super) given: Batch,
    pub(super) full: Option<Batch>,
}

impl Batches {
    pub(super) fn of(&self, full: bool) -> &Batch {
        if full {
            self.full
                .as_ref()
                .expect("gathered for a member that reads the full view")
        } else {
            &self.given
        }
    }
}
