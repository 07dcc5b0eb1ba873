//! What a committee member is: a kind ([`Member`]: name, columns, settings, how to build it) and,
//! once built, a network ([`MemberNet`]) that represents each candidate as a vector.

use tch::{nn, Tensor};

use super::members::{EncoderFtSettings, FrozenEncoder};
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
    /// The candidate's text itself, read by a model the caller fine-tunes apart from the joint
    /// committee (`encoder-ft`): such a member is not built into a [`crate::CommitteeModel`].
    Text,
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
        }
    }
}

/// A kind of committee member: its name, what it reads, its settings and how to build it. One
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

    /// The settings of the cross-encoder the caller fine-tunes for a member that reads the text
    /// itself ([`Column::Text`]); `None` for every other member.
    fn fine_tuned(
        &self,
        _committee: &CommitteeConfig,
    ) -> Result<Option<EncoderFtSettings>, NnError> {
        Ok(None)
    }

    /// A fresh, initialised network under `p`. Each initialisation draws from libtorch's global
    /// generator, so the order in which variables are created is part of the results.
    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError>;
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
