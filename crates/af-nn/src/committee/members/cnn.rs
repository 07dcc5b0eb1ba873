//! `cnn`: convolutions over word + indicator embeddings, each max-pooled over the windows that
//! start inside the sentence.
//!
//! `[committee.member.cnn]`: `view` (`second-sentence`, the default, or `full`: the context too), `widths` (window widths, default `[committee] cnn-widths`),
//! `filters` (per width, default `[committee] cnn-filters`).

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::{
    committee_view, embedding, embedding_size, indicator_size, is_second_sentence, member_table,
    overlay, positive, text_dropout, to_json,
};
use crate::committee::member::{
    default_row_bytes, estimate, BuildContext, Column, Member, MemberNet,
};
use crate::committee::{Batch, CommitteeConfig};
use crate::NnError;

const NAME: &str = "cnn";

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CnnSettings {
    pub embedding: i64,
    pub indicator_embedding: i64,
    pub widths: Vec<i64>,
    pub filters: i64,
    pub dropout: f64,
    /// The rows it reads in a pool's committee.
    #[serde(skip_serializing_if = "is_second_sentence")]
    pub view: af_core::View,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    widths: Option<Vec<i64>>,
    filters: Option<i64>,
    view: Option<af_core::View>,
}

impl CnnSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        let (widths, key) = overlay(NAME, t.widths, "widths", c.cnn_widths.clone(), "cnn-widths");
        if widths.is_empty() || widths.iter().any(|&w| w < 1) {
            return Err(format!(
                "{key} = {widths:?}: needs at least one positive width"
            ));
        }
        Ok(Self {
            embedding: embedding_size(c)?,
            indicator_embedding: indicator_size(c)?,
            widths,
            filters: positive(overlay(
                NAME,
                t.filters,
                "filters",
                c.cnn_filters,
                "cnn-filters",
            ))?,
            dropout: text_dropout(c)?,
            view: committee_view(NAME, t.view)?,
        })
    }

    /// The widest window: the least width a batch must have (the table's `min_len`).
    pub fn widest(&self) -> i64 {
        self.widths.iter().copied().max().unwrap_or(1)
    }
}

pub struct Cnn;

impl Member for Cnn {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "convolutions over word and indicator embeddings, max-pooled"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Words, Column::Indicator]
    }

    fn view(&self, committee: &CommitteeConfig) -> af_core::View {
        CnnSettings::resolve(committee).map_or(af_core::View::SecondSentence, |s| s.view)
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        CnnSettings::resolve(committee).map(|s| to_json(&s))
    }

    /// Over T' = max(T, widest) columns, X = E + I: embeddings, their concatenation and its
    /// contiguous copy [3 T'X], one width's conv output and its masked copy [2 F T'], the pooled
    /// [F x widths] and its copy; kept: the input [2 T'X] and every width's ReLU and masked
    /// outputs [2 F (T'-w+1)].
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        CnnSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let t = tokens.max(s.widest() as u64);
                let x = (s.embedding + s.indicator_embedding) as u64;
                let f = s.filters as u64;
                let pooled = 2 * f * s.widths.len() as u64;
                let windows: u64 = s.widths.iter().map(|&w| t + 1 - w as u64).sum();
                estimate(
                    3 * t * x + 2 * f * t + pooled,
                    2 * t * x + 2 * f * windows + pooled,
                    training,
                )
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = CnnSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        let input = s.embedding + s.indicator_embedding;
        // The convolutions first, then the embeddings: the order the committee always drew its
        // initial weights in.
        let convs = s
            .widths
            .iter()
            .map(|&w| {
                nn::conv1d(
                    p / format!("conv{w}"),
                    input,
                    s.filters,
                    w,
                    Default::default(),
                )
            })
            .collect();
        Ok(Box::new(CnnNet {
            words: embedding(p / "words", ctx.vocab, s.embedding),
            indicator: embedding(p / "indicator", 3, s.indicator_embedding),
            convs,
            settings: s,
        }))
    }
}

#[derive(Debug)]
struct CnnNet {
    words: nn::Embedding,
    indicator: nn::Embedding,
    convs: Vec<nn::Conv1D>,
    settings: CnnSettings,
}

impl MemberNet for CnnNet {
    fn width(&self) -> i64 {
        self.settings.filters * self.settings.widths.len() as i64
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        b.by_length(|b| self.pooled(b))
            .dropout(self.settings.dropout, train)
    }
}

impl CnnNet {
    /// Every width's filters, max-pooled over the windows inside each row.
    /// # Shapes
    /// -> [N, filters x widths]
    fn pooled(&self, b: &Batch) -> Tensor {
        let (mut words, mut indicator) = (b.words.shallow_clone(), b.indicator.shallow_clone());
        // A table cut to narrower batches than the widest window (its min_len set from other
        // widths): pad as the table would, with id 0.
        let short = self.settings.widest() - words.size()[1];
        if short > 0 {
            words = words.constant_pad_nd([0, short]);
            indicator = indicator.constant_pad_nd([0, short]);
        }
        // [N, T, E] -> [N, E, T] for conv1d.
        let x = Tensor::cat(
            &[
                self.words.forward(&words),
                self.indicator.forward(&indicator),
            ],
            2,
        )
        .transpose(1, 2);
        let pooled: Vec<Tensor> = self
            .convs
            .iter()
            .map(|c| {
                let out = c.forward(&x).relu();
                // Only windows that start inside the sentence, and always the first: the score
                // must not depend on how much padding follows. After ReLU, zeroing the others
                // cannot change the max.
                let width = c.ws.size()[2];
                let starts =
                    Tensor::arange(out.size()[2], (Kind::Int64, out.device())).unsqueeze(0);
                let last_start = (&b.lengths - width).clamp_min(0).unsqueeze(1);
                out.masked_fill(&starts.gt_tensor(&last_start).unsqueeze(1), 0.0)
                    .amax([2].as_slice(), false)
            })
            .collect();
        Tensor::cat(&pooled, 1)
    }
}
