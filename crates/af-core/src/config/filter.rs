//! `[filter]` and its `[[filter.stages]]`: the AF loop, its schedule of committee phases, and how
//! an item's easy distractors are swapped.

use serde::{Deserialize, Serialize};

use super::committee::{member_names, MemberName, JOINT_HEAD, SWAG_COMMITTEE};
use super::fingerprint::Fingerprint;
use super::{is_default, is_one};

/// `af filter`: the AF loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct FilterConfig {
    /// Distractors per question (k + 1 options).
    pub k: usize,
    /// Share of groups trained on in each iteration; the rest is held out, scored and filtered.
    pub train_share: f64,
    /// The head whose scores decide the swaps: "joint", "best-member", or a member's name.
    pub swap_head: SwapHead,
    pub budget: BudgetRule,
    /// Easy distractors swapped per item and iteration at most (the fixed budget).
    pub n_easy: usize,
    /// A stage ends early once the driving head's held-out accuracy stays within epsilon of
    /// chance (1/(k+1)) ...
    pub epsilon: f64,
    /// ... for this many iterations in a row.
    pub patience: usize,
    /// The schedule's phases, in order.
    pub stages: Vec<Phase>,
    /// Which of an item's easy distractors go: drawn uniformly (SWAG), or by a softmax over the
    /// driving head's negated scores (HellaSwag: the more confidently wrong, the likelier).
    #[serde(skip_serializing_if = "is_default")]
    pub swap_choice: SwapChoice,
    /// Temperature of that softmax, in units of the head's scores.
    #[serde(skip_serializing_if = "is_one")]
    pub swap_temperature: f64,
    /// HellaSwag's random hyperparameters: each iteration's committee trains with a learning rate
    /// drawn log-uniformly from [low, high] (instead of `[committee] learning-rate`), so the
    /// adversary does not overfit one setting.
    #[serde(skip_serializing_if = "is_default")]
    pub learning_rate_range: Option<[f64; 2]>,
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            k: 9,
            train_share: 0.8,
            swap_head: SwapHead::Joint,
            budget: BudgetRule::Fixed,
            n_easy: 2,
            epsilon: 0.02,
            patience: 3,
            stages: vec![
                Phase {
                    name: "mlp".into(),
                    members: member_names(&["mlp"]),
                    iterations: 100,
                    swap_head: None,
                },
                Phase {
                    name: "full".into(),
                    members: member_names(&SWAG_COMMITTEE),
                    iterations: 40,
                    swap_head: None,
                },
            ],
            swap_choice: SwapChoice::Uniform,
            swap_temperature: 1.0,
            learning_rate_range: None,
        }
    }
}

impl FilterConfig {
    /// Checks what serde cannot; the message names the key. `joint`: whether `[committee]` has
    /// a joint head, which a phase may be driven by. Whether a name is a member at all is the
    /// registry's to say (af-nn).
    pub fn validate(&self, joint: bool) -> Result<(), String> {
        if self.k == 0 {
            return Err("[filter] k must be at least 1".into());
        }
        if !(self.train_share > 0.0 && self.train_share < 1.0) {
            return Err(format!(
                "[filter] train-share = {}: must be strictly between 0 and 1",
                self.train_share
            ));
        }
        if !(self.swap_temperature > 0.0 && self.swap_temperature.is_finite()) {
            return Err(format!(
                "[filter] swap-temperature = {}: must be positive",
                self.swap_temperature
            ));
        }
        if let Some([low, high]) = self.learning_rate_range {
            if !(low > 0.0 && low <= high && high.is_finite()) {
                return Err(format!(
                    "[filter] learning-rate-range = [{low}, {high}]: needs 0 < low <= high"
                ));
            }
        }
        if self.stages.is_empty() {
            return Err("[filter] needs at least one [[filter.stages]]".into());
        }
        for s in &self.stages {
            if s.members.is_empty() {
                return Err(format!("[filter] stage `{}` has no members", s.name));
            }
            if s.iterations == 0 {
                return Err(format!("[filter] stage `{}` has 0 iterations", s.name));
            }
        }
        self.stages
            .iter()
            .try_for_each(|s| s.check_driving(&self.swap_head, joint, "[filter]"))
    }

    /// The members of the schedule, in the order they first appear.
    pub fn members(&self) -> Vec<MemberName> {
        let mut out: Vec<MemberName> = Vec::new();
        for m in self.stages.iter().flat_map(|s| &s.members) {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }

    /// The section as the filter stage's fingerprint records it: every key changes the
    /// assignment.
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            k,
            train_share,
            swap_head,
            budget,
            n_easy,
            epsilon,
            patience,
            stages,
            swap_choice,
            swap_temperature,
            learning_rate_range,
        } = self;
        let stages: Vec<serde_json::Value> = stages.iter().map(Phase::fingerprint).collect();
        let d = Self::default();
        Fingerprint::default()
            .key("k", k)
            .key("train-share", train_share)
            .key("swap-head", swap_head)
            .key("budget", budget)
            .key("n-easy", n_easy)
            .key("epsilon", epsilon)
            .key("patience", patience)
            .key("stages", &stages)
            .later("swap-choice", swap_choice, &d.swap_choice)
            .later("swap-temperature", swap_temperature, &d.swap_temperature)
            .later(
                "learning-rate-range",
                learning_rate_range,
                &d.learning_rate_range,
            )
            .finish()
    }
}

/// How many easy distractors an item may swap per iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetRule {
    /// SWAG: min(n-easy, #easy, #adversarial).
    Fixed,
    /// HellaSwag: 0 swaps at pairwise accuracy <= 0.525, 1 at <= 0.575, else 2.
    PairwiseAccuracy,
}

/// Which head's scores decide the swaps. Spelled in configs as "joint", "best-member" or a
/// member's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum SwapHead {
    /// The joint head over every member's representation.
    Joint,
    /// The member with the best held-out (k+1)-way accuracy in this iteration.
    BestMember,
    /// One member, by name (it must be in every phase).
    Member(MemberName),
}

impl From<String> for SwapHead {
    fn from(s: String) -> Self {
        match s.as_str() {
            JOINT_HEAD => SwapHead::Joint,
            "best-member" => SwapHead::BestMember,
            _ => SwapHead::Member(MemberName::new(s)),
        }
    }
}

impl From<SwapHead> for String {
    fn from(h: SwapHead) -> String {
        match h {
            SwapHead::Joint => JOINT_HEAD.into(),
            SwapHead::BestMember => "best-member".into(),
            SwapHead::Member(m) => m.as_str().to_owned(),
        }
    }
}

/// One phase of the AF schedule: a committee composition run for some iterations (SWAG: the MLP
/// alone, then the whole committee). `[[filter.stages]]` in configs, the key it always had;
/// "stage" in af's code means a pipeline stage only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Phase {
    pub name: String,
    pub members: Vec<MemberName>,
    pub iterations: usize,
    /// The head whose scores decide this phase's swaps, when not `[filter] swap-head` (for
    /// example a phase driven by its fine-tuned `encoder-ft`, HellaSwag's adversary).
    #[serde(default, skip_serializing_if = "is_default")]
    pub swap_head: Option<SwapHead>,
}

impl Phase {
    /// The head that drives this phase: its own `swap-head`, else `default` (`[filter] swap-head`).
    pub fn driving<'a>(&'a self, default: &'a SwapHead) -> &'a SwapHead {
        self.swap_head.as_ref().unwrap_or(default)
    }

    /// Err when the head driving this phase cannot be there: a member it does not have, or the
    /// joint head without one. `within` names where the phase is, for the message.
    pub fn check_driving(
        &self,
        default: &SwapHead,
        joint: bool,
        within: &str,
    ) -> Result<(), String> {
        let (head, key) = match &self.swap_head {
            Some(h) => (
                h,
                format!("its swap-head = \"{}\"", String::from(h.clone())),
            ),
            None => (
                default,
                format!("[filter] swap-head = \"{}\"", String::from(default.clone())),
            ),
        };
        match head {
            SwapHead::Joint if !joint => Err(format!("{within} stage `{}`: {key} but [committee] joint = false", self.name)),
            SwapHead::Member(m) if !self.members.contains(m) => {
                Err(format!("{within} stage `{}`: {key}, but the stage does not have that member (use \"joint\" or \"best-member\", or give the stage its own swap-head)", self.name))
            }
            _ => Ok(()),
        }
    }

    /// The phase as the filter stage's fingerprint records it.
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            name,
            members,
            iterations,
            swap_head,
        } = self;
        Fingerprint::default()
            .key("name", name)
            .key("members", members)
            .key("iterations", iterations)
            .later("swap-head", swap_head, &None)
            .finish()
    }
}

/// How the easy distractors an item swaps out are chosen among its easy ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapChoice {
    #[default]
    Uniform,
    Softmax,
}

impl SwapChoice {
    pub fn is_uniform(&self) -> bool {
        *self == SwapChoice::Uniform
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{checked, Config};
    use std::path::Path;

    #[test]
    fn swap_head_and_member_tables_keep_their_spelling() {
        let text = "[committee]\ncnn-filters = 32\n[committee.member.cnn]\nfilters = 64\n[filter]\nswap-head = \"cnn\"\n\
                    [[filter.stages]]\nname = \"all\"\nmembers = [\"mlp\", \"cnn\"]\niterations = 2\n";
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.filter.swap_head, SwapHead::Member(MemberName::new("cnn")));
        assert_eq!(c.committee.cnn_filters, 32);
        assert_eq!(c.committee.member["cnn"]["filters"].as_integer(), Some(64));
        assert_eq!(c.filter.stages[0].members, member_names(&["mlp", "cnn"]));
        assert_eq!(Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap(), c);
        for (text, head) in [
            ("joint", SwapHead::Joint),
            ("best-member", SwapHead::BestMember),
        ] {
            let c = Config::parse(
                &format!("[filter]\nswap-head = \"{text}\"\n"),
                Path::new("c.toml"),
            )
            .unwrap();
            assert_eq!(c.filter.swap_head, head);
        }
        // A member the schedule lacks cannot drive the swaps.
        let err = checked("[filter]\nswap-head = \"lstm\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("swap-head = \"lstm\"") && err.contains("stage `mlp`"),
            "{err}"
        );
        // Nor can the joint head where there is none.
        let err = checked("[committee]\njoint = false\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("but [committee] joint = false"), "{err}");
    }

    #[test]
    fn a_stage_may_name_its_own_swap_head() {
        let stages = |head: &str| {
            format!(
                "[[filter.stages]]\nname = \"mlp\"\nmembers = [\"mlp\"]\niterations = 2\n\
                 [[filter.stages]]\nname = \"ft\"\nmembers = [\"mlp\", \"encoder-ft\"]\niterations = 2\nswap-head = \"{head}\"\n"
            )
        };
        let c = checked(&stages("encoder-ft")).unwrap();
        assert_eq!(c.filter.stages[0].swap_head, None);
        assert_eq!(
            c.filter.stages[1].driving(&c.filter.swap_head),
            &SwapHead::Member(MemberName::new("encoder-ft"))
        );
        assert_eq!(
            c.filter.stages[0].driving(&c.filter.swap_head),
            &SwapHead::Joint
        );
        assert!(
            !toml::to_string(&c.filter.stages[0])
                .unwrap()
                .contains("swap-head"),
            "a stage without its own head writes none"
        );
        assert!(c.filter.stages[0].fingerprint().get("swap-head").is_none());
        assert_eq!(c.filter.stages[1].fingerprint()["swap-head"], "encoder-ft");
        assert_eq!(Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap(), c);
        // Its own head must be one of its members.
        let err = checked(&stages("cnn")).unwrap_err().to_string();
        assert!(
            err.contains(
                "stage `ft`: its swap-head = \"cnn\", but the stage does not have that member"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_learning_rate_range_is_positive_and_ordered_and_absent_by_default() {
        let c = checked("[filter]\nlearning-rate-range = [1e-4, 3e-3]\n").unwrap();
        assert_eq!(c.filter.learning_rate_range, Some([1e-4, 3e-3]));
        assert!(c.to_toml().contains("learning-rate-range"));
        assert!(
            !Config::default().to_toml().contains("learning-rate-range"),
            "absent from configs that do not set it"
        );
        for bad in ["[3e-3, 1e-4]", "[0.0, 1e-3]", "[-1.0, 1.0]"] {
            let e = checked(&format!("[filter]\nlearning-rate-range = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("learning-rate-range") && e.contains("0 < low <= high"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_schedule_members_are_listed_once_in_order() {
        let f = FilterConfig::default();
        assert_eq!(f.members(), member_names(&SWAG_COMMITTEE));
    }
}
