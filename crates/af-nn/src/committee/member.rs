//! What a committee member is. Two kinds, told apart by type ([`MemberKind`]):
//! - a joint member ([`Member`]: name, columns, settings, how to build it) is trained and scored
//!   inside the committee; once built, a network ([`MemberNet`]) that represents each candidate
//!   as a vector. Whether it reads frozen sentence embeddings is its own property
//!   ([`Member::frozen_encoder`]);
//! - a fine-tuned member ([`FineTunedMember`]: name, settings, the recipe of the model it
//!   fine-tunes) is trained apart from the committee, by the caller (af-pipeline's
//!   `fine_tuned`), and re-scores what the joint members shortlist.

use tch::{nn, Tensor};

use super::members::{EncoderFtSettings, FrozenEncoder, LmLikelihoodSource};
use super::{Batch, CommitteeConfig};
use crate::NnError;

/// What a member reads of each candidate row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Words,
    Pos,
    Indicator,
    Features,
    /// Frozen sentence embeddings ([`crate::table::EncodedRows`]), attached by the caller.
    Encoded,
    /// A pretrained causal LM's scores of each candidate after its context
    /// ([`super::members::lm_likelihood::features`]), attached by the caller.
    LmLikelihood,
}

/// What building a member may use.
pub struct BuildContext<'a> {
    pub committee: &'a CommitteeConfig,
    /// Word ids are below this.
    pub vocab: i64,
    /// POS-view ids are below this.
    pub pos_vocab: i64,
    /// The size of the table's frozen embeddings, and whether rows come with a context's; None
    /// when the table has none.
    pub encoded: Option<(i64, bool)>,
    /// Whether the table has LM-likelihood features ([`Column::LmLikelihood`]).
    pub lm_likelihood: bool,
}

impl<'a> BuildContext<'a> {
    /// What a committee built over `table` may use.
    pub fn of(committee: &'a CommitteeConfig, table: &crate::table::CandidateTable) -> Self {
        Self {
            committee,
            vocab: table.vocab,
            pos_vocab: table.pos_vocab,
            encoded: table
                .encoded
                .as_ref()
                .map(|e| (e.dim(), e.contexts.is_some())),
            lm_likelihood: table.lm_likelihood.is_some(),
        }
    }
}

/// A joint committee member: its name, what it reads, its settings and how to build it. One
/// per file under `members/`.
pub trait Member: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// One line for --help, errors and docs.
    fn describe(&self) -> &'static str;

    /// The table columns it reads; a member that reads `Features` (LM features) cannot be an
    /// audit detector.
    fn columns(&self) -> &'static [Column];

    /// What it reads of a question in a pool's committee under these settings: the second
    /// sentence (noun phrase + ending) unless it says otherwise. A member whose view is `Full`
    /// and that reads token columns reads the table's full-view rows (context + second sentence).
    fn view(&self, _committee: &CommitteeConfig) -> af_core::View {
        af_core::View::SecondSentence
    }

    /// Its settings resolved from the config (flat `[committee]` keys overlaid by
    /// `[committee.member.NAME]`) and checked, as JSON: recorded in the filter stage's
    /// fingerprint. Err: a message naming the key.
    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String>;

    /// The frozen encoder that fills the table's embeddings for a member that reads them
    /// ([`Column::Encoded`]), as these settings name it; `None` for every other member.
    fn frozen_encoder(
        &self,
        _committee: &CommitteeConfig,
    ) -> Result<Option<FrozenEncoder>, NnError> {
        Ok(None)
    }

    /// The pretrained LM whose scores of a pool's candidates fill the table's LM-likelihood
    /// features for a member that reads them ([`Column::LmLikelihood`]), as these settings name
    /// it; `None` for every other member.
    fn lm_likelihood(
        &self,
        _committee: &CommitteeConfig,
    ) -> Result<Option<LmLikelihoodSource>, NnError> {
        Ok(None)
    }

    /// Estimated device bytes one row of `tokens` tokens takes in this member's forward pass at
    /// its peak under these settings: the activations alive at once (f32), and with `training`
    /// also those autograd keeps for the backward pass and their gradients. An estimate for
    /// planning batches (af_core::memory), meant to be an upper bound within a factor of about
    /// two. A member's own count includes its representation twice: it and its copy in the joint
    /// head's concatenated input ([`committee_row_bytes`]).
    fn row_bytes(&self, _committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        default_row_bytes(tokens, training)
    }

    /// A fresh, initialised network under `p`. Each initialisation draws from libtorch's global
    /// generator, so the order in which variables are created is part of the results.
    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError>;
}

/// A member fine-tuned apart from the joint committee, as HellaSwag's adversary was: the caller
/// (af-pipeline's `fine_tuned`) fine-tunes a cross-encoder by its recipe each iteration and
/// re-scores a shortlist the phase's joint members choose. It has no table columns and builds
/// no [`MemberNet`].
pub trait FineTunedMember: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// One line for --help, errors and docs.
    fn describe(&self) -> &'static str;

    /// What it reads of a question: the context and the second sentence.
    fn view(&self, _committee: &CommitteeConfig) -> af_core::View {
        af_core::View::Full
    }

    /// Its settings resolved and checked, as JSON for the filter stage's fingerprint.
    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String>;

    /// How the caller fine-tunes and scores it: the cross-encoder, its shortlist and training.
    fn recipe(&self, committee: &CommitteeConfig) -> Result<EncoderFtSettings, NnError>;
}

/// [`Member::row_bytes`] of a member that does not say (or whose settings do not resolve): a
/// conservative 1,024 f32 per token, tripled when training.
pub fn default_row_bytes(tokens: u64, training: bool) -> u64 {
    let floats = 1024 * tokens;
    estimate(floats, floats, training)
}

/// Bytes per row from a member's counts of f32 per row: `scoring`, the most alive at once in a
/// forward pass without gradients; `kept`, what autograd keeps for the backward pass. Training
/// holds what is kept, with on top the forward's transients or the backward's gradients in
/// flight, each counted as much as the scoring peak (on the CPU at 256 tokens, SWAG's members
/// measured 0.45 to 0.65 of this training, 0.75 to 0.95 of the scoring figure).
pub(crate) fn estimate(scoring: u64, kept: u64, training: bool) -> u64 {
    4 * if training {
        kept + 2 * scoring
    } else {
        scoring
    }
}

/// Estimated device bytes per row of `tokens` tokens for the joint committee of `members`
/// (looked up in `registry`; a fine-tuned member runs apart and is left out): each member's
/// [`Member::row_bytes`], the joint head's hidden layer when `committee.joint` (its input, the
/// members' representations, each member counts), and the batch's gathered token columns, once
/// per view the members read. Summed over the members although scoring runs them one after
/// another: an upper bound. What af_core::memory plans the committee's batches with. Err: an
/// unknown member, or settings that do not resolve.
pub fn committee_row_bytes(
    registry: &super::Registry,
    members: &[super::MemberName],
    committee: &CommitteeConfig,
    tokens: u64,
    training: bool,
) -> Result<u64, NnError> {
    let mut joint = Vec::with_capacity(members.len());
    for name in members {
        let kind = registry.lookup(name)?;
        kind.settings(committee).map_err(NnError::InvalidSettings)?;
        joint.extend(kind.joint());
    }
    if joint.is_empty() {
        return Ok(0);
    }
    let members: u64 = joint
        .iter()
        .map(|m| m.row_bytes(committee, tokens, training))
        .sum();
    // The joint head: hidden and ReLU [J]; kept, with its dropout's mask and output.
    let j = committee.joint_hidden.max(0) as u64;
    let head = if committee.joint {
        estimate(2 * j + 1, 4 * j + 1, training)
    } else {
        0
    };
    // Batch::gather: words, POS view, indicator, the index and a copy being picked, i64, per view.
    let views = 1 + u64::from(joint.iter().any(|m| reads_full_view_rows(*m, committee)));
    Ok(members + head + views * 48 * tokens)
}

/// A registered member, of one of the two kinds.
#[derive(Clone)]
pub enum MemberKind {
    /// Trained and scored inside the committee, one of its joint head's inputs.
    Joint(std::sync::Arc<dyn Member>),
    /// Fine-tuned apart from the committee by the caller.
    FineTuned(std::sync::Arc<dyn FineTunedMember>),
}

impl MemberKind {
    pub fn name(&self) -> &'static str {
        match self {
            MemberKind::Joint(m) => m.name(),
            MemberKind::FineTuned(m) => m.name(),
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            MemberKind::Joint(m) => m.describe(),
            MemberKind::FineTuned(m) => m.describe(),
        }
    }

    /// What it reads of a question in a pool's committee under these settings.
    pub fn view(&self, committee: &CommitteeConfig) -> af_core::View {
        match self {
            MemberKind::Joint(m) => m.view(committee),
            MemberKind::FineTuned(m) => m.view(committee),
        }
    }

    /// Its settings as a fingerprint records them; Err: a message naming the key.
    pub fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        match self {
            MemberKind::Joint(m) => m.settings(committee),
            MemberKind::FineTuned(m) => m.settings(committee),
        }
    }

    /// The joint member, or None for a fine-tuned one.
    pub fn joint(&self) -> Option<&dyn Member> {
        match self {
            MemberKind::Joint(m) => Some(m.as_ref()),
            MemberKind::FineTuned(_) => None,
        }
    }

    /// The fine-tuned member, or None for a joint one.
    pub fn fine_tuned(&self) -> Option<&dyn FineTunedMember> {
        match self {
            MemberKind::Joint(_) => None,
            MemberKind::FineTuned(m) => Some(m.as_ref()),
        }
    }

    pub fn is_fine_tuned(&self) -> bool {
        matches!(self, MemberKind::FineTuned(_))
    }
}

/// Whether `member`, under these settings, reads a table's full-view rows: its view is the full
/// one and it reads token columns (the `encoder` member's context comes with its embeddings).
pub fn reads_full_view_rows(member: &dyn Member, committee: &CommitteeConfig) -> bool {
    member.view(committee) == af_core::View::Full
        && member
            .columns()
            .iter()
            .any(|c| matches!(c, Column::Words | Column::Pos | Column::Indicator))
}

/// A built member: its representation of each candidate.
// Send: a committee model moves between threads as freely as the tensors it holds.
pub trait MemberNet: std::fmt::Debug + Send {
    /// Size of the representation.
    fn width(&self) -> i64;

    /// Dropout, where the member has any, belongs here (applied when `train`).
    /// # Shapes
    /// -> [N, width]
    fn represent(&self, batch: &Batch, train: bool) -> Tensor;
}
