//! The stylistic committee of Adversarial Filtering (docs/design.md §1.3): members that each score one
//! candidate (the second sentence, noun phrase + ending) and a joint head over their
//! concatenated representations, trained together on the sum of every head's softmax
//! cross-entropy over an item's options.
//!
//! The members are open: [`Member`] is a kind of member (one file each under `members/`), the
//! [`Registry`] names them, and [`CommitteeModel`] builds the ones a stage asks for by name.
//!
//! Candidates live in a [`CandidateTable`] on the device, built once per run; training and scoring
//! address rows of it by index, so an AF iteration moves no text and almost no data.
//!
//! A candidate's score does not depend on how much padding it is read with: the CNN pools only
//! windows that start inside the sentence, and the BiLSTM's backward direction reads each sentence
//! reversed within its own length (pads after it, never before). So every batch is cut to its
//! longest row, scoring sorts rows by length first, and on the CPU those members compute a
//! training batch in groups of similar length ([`Batch::by_length`]): most of a BiLSTM's and a
//! CNN's time saved, on pools of short endings and on long full-view rows alike.

mod batch;
pub mod member;
pub mod members;
mod model;
mod score;
mod train;

#[cfg(test)]
mod tests;

pub use af_core::{CommitteeConfig, MemberName, JOINT_HEAD as JOINT};
pub use batch::Batch;
pub use member::{
    committee_row_bytes, default_row_bytes, reads_full_view_rows, BuildContext, Column,
    FineTunedMember, Member, MemberKind, MemberNet,
};
pub use members::Registry;
pub use model::{CommitteeModel, HeadOutput};
pub use score::{gold_probabilities, score, softmax};
pub use train::{train, train_observed, EpochHook, TrainReport};
