//! `pos-lstm`: a BiLSTM over the POS view (frequent words as themselves, every other token as its
//! POS tag) and indicator embeddings, max-pooled.
//!
//! `[committee.member.pos-lstm]`: `hidden` (units per direction, default `[committee]
//! lstm-hidden`), `words` (words kept as themselves, default `[committee] pos-words`; the table
//! builder reads it).

use serde::{Deserialize, Serialize};
use tch::nn;

use super::lstm::{token_lstm_row_bytes, TokenLstmNet, TokenLstmShape};
use super::{
    embedding_size, indicator_size, member_table, overlay, positive, text_dropout, to_json,
};
use crate::committee::member::{default_row_bytes, BuildContext, Column, Member, MemberNet};
use crate::committee::CommitteeConfig;
use crate::NnError;

const NAME: &str = "pos-lstm";

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PosLstmSettings {
    pub embedding: i64,
    pub indicator_embedding: i64,
    pub hidden: i64,
    /// Words the POS view keeps as themselves (the table is built with them).
    pub words: usize,
    pub dropout: f64,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    hidden: Option<i64>,
    words: Option<usize>,
}

impl PosLstmSettings {
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
            words: t.words.unwrap_or(c.pos_words),
            dropout: text_dropout(c)?,
        })
    }
}

pub struct PosLstm;

impl Member for PosLstm {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "BiLSTM over frequent words and the POS tags of the rest, max-pooled"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Pos, Column::Indicator]
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        PosLstmSettings::resolve(committee).map(|s| to_json(&s))
    }

    /// The BiLSTM's ([`token_lstm_row_bytes`]).
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        PosLstmSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let x = s.embedding + s.indicator_embedding;
                token_lstm_row_bytes(s.embedding, x, s.hidden, tokens, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = PosLstmSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        let shape = TokenLstmShape {
            vocab: ctx.pos_vocab,
            embedding: s.embedding,
            indicator_embedding: s.indicator_embedding,
            hidden: s.hidden,
            dropout: s.dropout,
        };
        Ok(Box::new(TokenLstmNet::new(p, "pos", Column::Pos, shape)))
    }
}
