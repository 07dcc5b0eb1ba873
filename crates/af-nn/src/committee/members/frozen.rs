//! What the frozen-embedding members (`encoder`, `torchscript`) share: the member itself
//! ([`FrozenMember`]: the head it trains over the table's embeddings, [s, c*s, |c-s|] with the
//! context's, s alone without), the keys of that head (`hidden`, `dropout`, `batch-size`), and
//! [`FrozenEncoder`], which encoder fills the embeddings. They differ only in their settings
//! ([`FrozenSettings`]), which say where the encoder comes from.

use std::marker::PhantomData;
use std::path::Path;

use serde::Serialize;
use tch::nn::{self, Module};
use tch::Tensor;

use super::{positive, probability, text_dropout, to_json};
use crate::committee::member::{
    default_row_bytes, estimate, BuildContext, Column, Member, MemberNet,
};
use crate::committee::{Batch, CommitteeConfig};
use crate::encoder::{Encoder, EncoderOptions, EncoderSource};
use crate::NnError;

/// The encoder a frozen-embedding member reads, as its settings name it: what the caller loads
/// to fill the table's embeddings, and what a run's cache of them is keyed by.
#[derive(Clone, Debug, PartialEq)]
pub struct FrozenEncoder {
    /// The member whose settings name it.
    pub member: &'static str,
    /// Its key in `[committee.member.MEMBER]` that names the model, for errors.
    pub key: &'static str,
    pub source: EncoderSource,
    pub options: EncoderOptions,
}

impl FrozenEncoder {
    /// The model's path: a BERT directory or a TorchScript module.
    pub fn model(&self) -> &Path {
        self.source.path()
    }

    /// The encoder, loaded on `device`; an error names the member's key.
    pub fn load(&self, device: tch::Device) -> Result<Encoder, NnError> {
        Encoder::open(&self.source, device, &self.options).map_err(|error| NnError::FrozenEncoder {
            member: self.member,
            key: self.key,
            error,
        })
    }
}

/// The embedding size [`Member::row_bytes`] assumes for a frozen encoder, whose model the
/// settings name but do not load: a large BERT's (MiniLM-L6's is 384, a base BERT's 768).
pub const ASSUMED_ENCODER_DIM: u64 = 1024;

/// The keys both members have: the head's `hidden` and `dropout`, and `batch-size` (texts per
/// encoder call).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SharedKeys {
    pub hidden: i64,
    pub dropout: f64,
    pub batch_size: i64,
}

impl SharedKeys {
    /// `hidden` (256), `dropout` (default `[committee] dropout`), `batch-size` (64) of `member`'s
    /// table, checked.
    pub(crate) fn resolve(
        c: &CommitteeConfig,
        member: &str,
        hidden: Option<i64>,
        dropout: Option<f64>,
        batch_size: Option<i64>,
    ) -> Result<Self, String> {
        let dropout = match dropout {
            Some(d) => probability((d, format!("[committee.member.{member}] dropout")))?,
            None => text_dropout(c)?,
        };
        Ok(Self {
            hidden: positive((
                hidden.unwrap_or(256),
                format!("[committee.member.{member}] hidden"),
            ))?,
            dropout,
            batch_size: positive((
                batch_size.unwrap_or(64),
                format!("[committee.member.{member}] batch-size"),
            ))?,
        })
    }
}

/// What one frozen-embedding member has of its own: its name, its settings (the head's keys
/// among them) and the encoder they name.
pub trait FrozenSettings: Serialize + Sized + 'static {
    const NAME: &'static str;
    /// One line for --help, errors and docs.
    const DESCRIPTION: &'static str;
    /// Its `[committee.member.NAME]` table (and the flat `[committee] dropout`), checked; Err: a
    /// message naming the key.
    fn resolve(c: &CommitteeConfig) -> Result<Self, String>;
    /// The head's hidden size and dropout.
    fn head(&self) -> (i64, f64);
    /// The encoder these settings name.
    fn encoder(&self) -> Result<FrozenEncoder, NnError>;
}

/// A member that trains a head over frozen sentence embeddings; `S` names their encoder. In a
/// pool's committee it reads each candidate's second sentence and its item's context (their
/// embeddings come with the table, so its view is the full one).
pub struct FrozenMember<S>(PhantomData<fn() -> S>);

impl<S> FrozenMember<S> {
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<S> Default for FrozenMember<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: FrozenSettings> Member for FrozenMember<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn describe(&self) -> &'static str {
        S::DESCRIPTION
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Encoded]
    }

    fn view(&self, _committee: &CommitteeConfig) -> af_core::View {
        af_core::View::Full
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        S::resolve(committee).map(|s| to_json(&s))
    }

    fn frozen_encoder(
        &self,
        committee: &CommitteeConfig,
    ) -> Result<Option<FrozenEncoder>, NnError> {
        S::resolve(committee)
            .map_err(NnError::InvalidSettings)?
            .encoder()
            .map(Some)
    }

    /// Per row, whatever its tokens (the embeddings are computed before, once per run), with D
    /// taken as [`ASSUMED_ENCODER_DIM`]: the gathered embeddings [2D], c*s, c-s and |c-s| [3D],
    /// their concatenation [3D], the hidden layer and its ReLU [2h], the output and its copy
    /// [2h]; kept also with the input's dropout (mask and output, [6D]) and the output's.
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        S::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let (d, h) = (ASSUMED_ENCODER_DIM, s.head().0 as u64);
                estimate(8 * d + 4 * h, 14 * d + 5 * h, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let (hidden, dropout) = S::resolve(ctx.committee)
            .map_err(NnError::InvalidSettings)?
            .head();
        build_head(S::NAME, p, ctx, hidden, dropout)
    }
}

/// The head over the table's embeddings; an error when the table has none.
fn build_head(
    member: &str,
    p: &nn::Path,
    ctx: &BuildContext,
    hidden: i64,
    dropout: f64,
) -> Result<Box<dyn MemberNet>, NnError> {
    let Some((dim, with_context)) = ctx.encoded else {
        return Err(NnError::InvalidSettings(format!(
            "the `{member}` member reads frozen sentence embeddings, and this table has none (the caller encodes the rows first)"
        )));
    };
    let input = if with_context { 3 * dim } else { dim };
    Ok(Box::new(FrozenHead {
        hidden: nn::linear(p / "hidden", input, hidden, Default::default()),
        width: hidden,
        dropout,
        with_context,
    }))
}

#[derive(Debug)]
struct FrozenHead {
    hidden: nn::Linear,
    width: i64,
    dropout: f64,
    with_context: bool,
}

impl MemberNet for FrozenHead {
    fn width(&self) -> i64 {
        self.width
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        let s = b
            .encoded
            .as_ref()
            .expect("built over a table with embeddings");
        let input = if self.with_context {
            let c = b
                .encoded_context
                .as_ref()
                .expect("built over a table with context embeddings");
            Tensor::cat(&[s.shallow_clone(), c * s, (c - s).abs()], 1)
        } else {
            s.shallow_clone()
        };
        self.hidden
            .forward(&input.dropout(self.dropout, train))
            .relu()
            .dropout(self.dropout, train)
    }
}
