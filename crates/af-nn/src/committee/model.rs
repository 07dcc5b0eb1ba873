//! The committee of one AF iteration: its members' networks, their score layers and the joint head.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::batch::{Batch, Batches};
use super::member::{self, BuildContext, Member, MemberKind, MemberNet};
use super::{CommitteeConfig, MemberName, Registry, JOINT};
use crate::table::CandidateTable;
use crate::NnError;

/// One head's scores for a batch of candidates.
pub struct HeadOutput {
    pub head: String,
    pub is_member: bool,
    /// [N]
    pub scores: Tensor,
}

/// The committee of one AF iteration: the stage's members, their score layers, and the joint head.
#[derive(Debug)]
pub struct CommitteeModel {
    /// Name, network, score layer.
    members: Vec<(String, Box<dyn MemberNet>, nn::Linear)>,
    /// Per member: whether it reads the table's full-view rows.
    full_view: Vec<bool>,
    joint: Option<(nn::Linear, nn::Linear)>,
    /// The joint head's dropout (members keep their own).
    dropout: f64,
    /// Score under CUDA autocast ([`af_core::config::Precision`]).
    pub(super) mixed: bool,
}

impl CommitteeModel {
    /// `members` (looked up in `registry`) under `root / name`, each followed by its score layer
    /// at `root / name / score`, then the joint head at `root / joint`: variables are created, and
    /// so drawn from libtorch's generator, in that order.
    pub fn new(
        root: &nn::Path,
        config: &CommitteeConfig,
        registry: &Registry,
        members: &[MemberName],
        joint: bool,
        table: &CandidateTable,
    ) -> Result<Self, NnError> {
        // Every name and every member's settings checked before any variable is made.
        let kinds = members
            .iter()
            .map(|name| registry.lookup(name))
            .collect::<Result<Vec<_>, _>>()?;
        for member in &kinds {
            member.settings(config).map_err(NnError::InvalidSettings)?;
        }
        // A fine-tuned member (`encoder-ft`) is the caller's to run, beside this committee.
        let kinds: Vec<&dyn Member> = kinds.into_iter().filter_map(MemberKind::joint).collect();
        if kinds.is_empty() {
            return Err(NnError::InvalidSettings(format!(
                "the committee {} has no member that reads the candidate table (a fine-tuned member needs others to shortlist with)",
                members.iter().map(MemberName::as_str).collect::<Vec<_>>().join("+")
            )));
        }
        let ctx = BuildContext::of(config, table);
        let mut total = 0;
        let mut built = Vec::with_capacity(members.len());
        let mut full_view = Vec::with_capacity(members.len());
        for member in kinds {
            let full = member::reads_full_view_rows(member, config);
            if full && table.full_view.is_none() {
                return Err(NnError::InvalidSettings(format!(
                    "member `{}` reads the full view ([committee.member.{}] view = \"full\") and this table has no full-view rows",
                    member.name(),
                    member.name()
                )));
            }
            full_view.push(full);
            let p = root / member.name();
            let net = member.build(&p, &ctx)?;
            let width = net.width();
            total += width;
            let score = nn::linear(&p / "score", width, 1, Default::default());
            built.push((member.name().to_string(), net, score));
        }
        let joint = joint.then(|| {
            let p = root / JOINT;
            (
                nn::linear(
                    &p / "hidden",
                    total,
                    config.joint_hidden,
                    Default::default(),
                ),
                nn::linear(&p / "score", config.joint_hidden, 1, Default::default()),
            )
        });
        Ok(Self {
            members: built,
            full_view,
            joint,
            dropout: config.dropout,
            mixed: config.precision.mixed_on(table.device.is_cuda()),
        })
    }

    /// Head names in output order: the joint head (if any), then the members.
    pub fn heads(&self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = self
            .joint
            .iter()
            .map(|_| (JOINT.to_string(), false))
            .collect();
        v.extend(self.members.iter().map(|(name, _, _)| (name.clone(), true)));
        v
    }

    /// The members' representations of the candidates at `rows`, concatenated (eval mode).
    /// # Shapes
    /// -> [N, sum of member widths]
    pub fn represent(&self, table: &CandidateTable, rows: &[i64]) -> Tensor {
        let batches = self.gather(table, rows, &table.upload(rows));
        // fp32 whatever autocast made of each member (the bag of words has no matrix product).
        let reps: Vec<Tensor> = self
            .members
            .iter()
            .zip(&self.full_view)
            .map(|((_, net, _), &full)| net.represent(batches.of(full), false).to_kind(Kind::Float))
            .collect();
        Tensor::cat(&reps, 1)
    }

    /// The rows as each view's members read them: the table's rows, and its full-view rows when
    /// a member reads those. `index`: the same rows on the table's device.
    fn gather(&self, table: &CandidateTable, rows: &[i64], index: &Tensor) -> Batches {
        let full = self.full_view.iter().any(|&f| f).then(|| {
            let view = table
                .full_view
                .as_deref()
                .expect("checked when the committee was built");
            Batch::gather(view, index, view.width_of(rows))
        });
        Batches {
            given: Batch::gather(table, index, table.width_of(rows)),
            full,
        }
    }

    /// Every head's score for the candidates at `rows` (table rows).
    pub fn forward(&self, table: &CandidateTable, rows: &[i64], train: bool) -> Vec<HeadOutput> {
        self.forward_uploaded(table, rows, &table.upload(rows), train)
    }

    /// [`Self::forward`] with the rows already on the table's device (`index`, the same rows as
    /// `rows`): a loop over many batches uploads them all at once ([`CandidateTable::upload_all`]),
    /// since on a GPU each upload from the host waits for the device to finish what it was given.
    pub fn forward_uploaded(
        &self,
        table: &CandidateTable,
        rows: &[i64],
        index: &Tensor,
        train: bool,
    ) -> Vec<HeadOutput> {
        debug_assert_eq!(
            index.size()[0],
            rows.len() as i64,
            "the same rows, uploaded"
        );
        let batches = self.gather(table, rows, index);
        let mut reps = Vec::with_capacity(self.members.len());
        let mut out = Vec::with_capacity(self.members.len() + 1);
        for ((name, net, score), &full) in self.members.iter().zip(&self.full_view) {
            let r = net.represent(batches.of(full), train);
            out.push(HeadOutput {
                head: name.clone(),
                is_member: true,
                scores: score.forward(&r).squeeze_dim(1),
            });
            // Under autocast members come out in fp16 or fp32: the joint head reads them as fp32.
            reps.push(r.to_kind(Kind::Float));
        }
        if let Some((hidden, score)) = &self.joint {
            let h = hidden
                .forward(&Tensor::cat(&reps, 1))
                .relu()
                .dropout(self.dropout, train);
            out.insert(
                0,
                HeadOutput {
                    head: JOINT.to_string(),
                    is_member: false,
                    scores: score.forward(&h).squeeze_dim(1),
                },
            );
        }
        out
    }
}
