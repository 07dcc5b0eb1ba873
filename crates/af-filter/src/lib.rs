//! af-filter owns the Adversarial Filtering loop of SWAG (docs/design.md §1.3): the assignment of k
//! distractors per item, the group-aware split of each iteration, the swap of easy assigned
//! distractors for adversarial unassigned candidates, the schedule of committee phases, the stop
//! rule, and the state that makes a killed run resume exactly. The committee itself is behind the
//! [`Committee`] trait, so the loop is tested with deterministic fake committees and no libtorch.
//!
//! It also owns AFLite's loop ([`aflite_loop`]), the lighter descendant of AF that built
//! WinoGrande, against a [`aflite_loop::LinearProbes`] trait.
//!
//! Every random choice of iteration t comes from a stream seeded by (seed, t): a run resumed at
//! iteration t makes the same choices as one that never stopped.

pub mod aflite_loop;
mod assignment;
mod filter;

pub use assignment::{Assignment, AssignmentError};
pub use filter::{
    chance, split_by_group, swap_budget, Committee, EpochRecord, FilterError, FilterState,
    HeadMetrics, HeadScores, ItemDynamics, ItemScores, IterationPlan, IterationRecord, Swap,
};
