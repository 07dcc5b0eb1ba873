//! `lstm`: a BiLSTM over word + indicator embeddings, max-pooled (the audit's BiLSTM). Also the
//! BiLSTM that `pos-lstm` shares.
//!
//! `[committee.member.lstm]`: `view` (`second-sentence`, the default, or `full`: the context too), `hidden` (units per direction, default `[committee] lstm-hidden`).

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module, RNN};
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

const NAME: &str = "lstm";

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LstmSettings {
    pub embedding: i64,
    pub indicator_embedding: i64,
    pub hidden: i64,
    pub dropout: f64,
    /// The rows it reads in a pool's committee.
    #[serde(skip_serializing_if = "is_second_sentence")]
    pub view: af_core::View,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    hidden: Option<i64>,
    view: Option<af_core::View>,
}

impl LstmSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        Ok(Self {
            embedding: embedding_size(c)?,
            indicator_embedding: indicator_size(c)?,
            hidden: positive(overlay(
                NAME,
                t.hidden,
                "hidden",
                c.lstm_hidden,
                "lstm-hidden",
            ))?,
            dropout: text_dropout(c)?,
            view: committee_view(NAME, t.view)?,
        })
    }
}

pub struct Lstm;

impl Member for Lstm {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "BiLSTM over word and indicator embeddings, max-pooled"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Words, Column::Indicator]
    }

    fn view(&self, committee: &CommitteeConfig) -> af_core::View {
        LstmSettings::resolve(committee).map_or(af_core::View::SecondSentence, |s| s.view)
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        LstmSettings::resolve(committee).map(|s| to_json(&s))
    }

    /// The BiLSTM's ([`token_lstm_row_bytes`]).
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        LstmSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let x = s.embedding + s.indicator_embedding;
                token_lstm_row_bytes(s.embedding, x, s.hidden, tokens, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = LstmSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        let shape = TokenLstmShape {
            vocab: ctx.vocab,
            embedding: s.embedding,
            indicator_embedding: s.indicator_embedding,
            hidden: s.hidden,
            dropout: s.dropout,
        };
        Ok(Box::new(TokenLstmNet::new(
            p,
            "words",
            Column::Words,
            shape,
        )))
    }
}

/// [`crate::committee::Member::row_bytes`] of a [`TokenLstmNet`] with token embeddings of `e`,
/// input `x` (tokens + indicator) and `h` units per direction. Alive at once: the token
/// embeddings [T,E], the input, its reversal and a transposed copy [3 T X], one direction's input
/// projection (gates, 4H per token) and its outputs and their stacked copy while the other's
/// outputs wait [7 T H], the pooled [2H] and its copy. Kept: the inputs [4 T X], per direction
/// and token the gates' activations, the cell, its tanh and the output (~9H), and the
/// concatenation max-pooling reads [2 T H].
pub(crate) fn token_lstm_row_bytes(e: i64, x: i64, h: i64, tokens: u64, training: bool) -> u64 {
    let (t, e, x, h) = (tokens, e as u64, x as u64, h as u64);
    estimate(
        t * e + 3 * t * x + 7 * t * h + 4 * h,
        4 * t * x + 20 * t * h + 4 * h,
        training,
    )
}

/// The sizes of a [`TokenLstmNet`].
pub(crate) struct TokenLstmShape {
    pub vocab: i64,
    pub embedding: i64,
    pub indicator_embedding: i64,
    pub hidden: i64,
    pub dropout: f64,
}

/// A BiLSTM over one token column (words for `lstm`, the POS view for `pos-lstm`) and the
/// indicator, max-pooled: the two members differ only in what they read.
#[derive(Debug)]
pub(crate) struct TokenLstmNet {
    tokens: nn::Embedding,
    column: Column,
    indicator: nn::Embedding,
    lstm: BiLstm,
    hidden: i64,
    dropout: f64,
}

impl TokenLstmNet {
    /// The token embedding (at `p / tokens_name`), the indicator's, then the BiLSTM: the order
    /// of their initial weights.
    pub(crate) fn new(p: &nn::Path, tokens_name: &str, column: Column, s: TokenLstmShape) -> Self {
        Self {
            tokens: embedding(p / tokens_name, s.vocab, s.embedding),
            column,
            indicator: embedding(p / "indicator", 3, s.indicator_embedding),
            lstm: BiLstm::new(p / "lstm", s.embedding + s.indicator_embedding, s.hidden),
            hidden: s.hidden,
            dropout: s.dropout,
        }
    }
}

impl MemberNet for TokenLstmNet {
    fn width(&self) -> i64 {
        2 * self.hidden
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        let column = self.column;
        b.by_length(|b| {
            let tokens = if column == Column::Pos {
                &b.pos
            } else {
                &b.words
            };
            self.lstm
                .max_pooled(&self.tokens.forward(tokens), &self.indicator, b)
        })
        .dropout(self.dropout, train)
    }
}

/// A bidirectional LSTM as two one-way LSTMs, so that the backward one can read each row reversed
/// within its own length (libtorch's bidirectional LSTM would read the padding first).
#[derive(Debug)]
pub(crate) struct BiLstm {
    forward: nn::LSTM,
    backward: nn::LSTM,
}

impl BiLstm {
    /// Forward, then backward (the order of their initial weights).
    pub(crate) fn new(p: nn::Path, input: i64, hidden: i64) -> Self {
        let rnn = nn::RNNConfig {
            batch_first: true,
            ..Default::default()
        };
        Self {
            forward: nn::lstm(&p / "forward", input, hidden, rnn),
            backward: nn::lstm(&p / "backward", input, hidden, rnn),
        }
    }

    /// Over token + indicator embeddings, max-pooled over the real tokens.
    /// # Shapes
    /// tokens: [N, T, E] -> [N, 2H]
    pub(crate) fn max_pooled(
        &self,
        tokens: &Tensor,
        indicator: &nn::Embedding,
        b: &Batch,
    ) -> Tensor {
        let x = Tensor::cat(&[tokens, &indicator.forward(&b.indicator)], 2);
        let (forward, _) = self.forward.seq(&x);
        // Max-pooling does not care about order, so the backward outputs stay reversed.
        let (backward, _) = self.backward.seq(&reverse_within_length(&x, &b.lengths));
        // Padding (after the tokens in both directions) must never win the max: push it far
        // below any output (LSTM outputs lie in (-1, 1)).
        let pad = b.mask.logical_not().unsqueeze(-1);
        Tensor::cat(
            &[
                forward.masked_fill(&pad, -1e4),
                backward.masked_fill(&pad, -1e4),
            ],
            2,
        )
        .amax([1].as_slice(), false)
    }
}

/// Each row's first `lengths[n]` positions in reverse order, its padding left where it is.
/// # Shapes
/// x: [N, T, E], lengths: [N] -> [N, T, E]
pub(crate) fn reverse_within_length(x: &Tensor, lengths: &Tensor) -> Tensor {
    let (n, t, e) = x.size3().expect("[N, T, E]");
    let positions = Tensor::arange(t, (Kind::Int64, x.device()))
        .unsqueeze(0)
        .expand([n, t], false);
    let lengths = lengths.unsqueeze(1);
    let reversed =
        (&lengths - 1 - &positions).where_self(&positions.lt_tensor(&lengths), &positions);
    x.gather(1, &reversed.unsqueeze(2).expand([n, t, e], false), false)
}
