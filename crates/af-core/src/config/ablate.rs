//! `[ablate]`: the committee compositions `af ablate` filters one pool with, and the schedule each
//! one runs. Pure configuration: which members exist is the registry's to say (af-pipeline checks
//! the names against it), what a composition does to a pool is af-pipeline's.

use serde::{Deserialize, Serialize};

use super::committee::MemberName;
use super::filter::{FilterConfig, Phase, SwapHead};

/// How the compositions are drawn from `members`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    /// Each member left out in turn (SWAG's ablation): `without-MEMBER`.
    #[default]
    LeaveOneOut,
    /// Each member alone: `only-MEMBER`.
    Singletons,
    /// Every subset of 1 to `max-size` members: `MEMBER+MEMBER`.
    AllSubsets,
    /// Only the compositions listed under `[[ablate.compositions]]`.
    List,
}

/// `[ablate]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct AblateConfig {
    pub design: Design,
    /// The members the design ranges over; empty: every member of `[[filter.stages]]`, in the
    /// order they first appear.
    pub members: Vec<MemberName>,
    /// `all-subsets`: the largest subset drawn.
    pub max_size: usize,
    /// Add the composition of every member, `full` (the reference the others are compared with).
    pub full: bool,
    /// Compositions named by hand: the whole design with `design = "list"`, added to it otherwise.
    pub compositions: Vec<CompositionSpec>,
}

impl Default for AblateConfig {
    fn default() -> Self {
        Self {
            design: Design::LeaveOneOut,
            members: Vec::new(),
            max_size: 2,
            full: true,
            compositions: Vec::new(),
        }
    }
}

/// `[[ablate.compositions]]`: a composition named by hand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CompositionSpec {
    pub name: String,
    pub members: Vec<MemberName>,
    /// Its own schedule; empty: the config's `[[filter.stages]]` restricted to its members.
    #[serde(default, skip_serializing_if = "super::is_default")]
    pub stages: Vec<Phase>,
}

/// One composition, resolved: its members and the schedule it runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Composition {
    pub name: String,
    pub members: Vec<MemberName>,
    pub stages: Vec<Phase>,
}

/// The name the random assignment goes by beside the compositions: no composition may take it.
pub const RANDOM: &str = "random";

impl AblateConfig {
    pub fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// The members the design ranges over.
    pub fn members(&self, filter: &FilterConfig) -> Vec<MemberName> {
        if self.members.is_empty() {
            filter.members()
        } else {
            self.members.clone()
        }
    }

    /// Every composition of the design, in a fixed order (full first), each with its schedule.
    /// Errors say what is wrong in `[ablate]` terms.
    pub fn compositions(&self, filter: &FilterConfig) -> Result<Vec<Composition>, String> {
        let members = self.members(filter);
        if let Some(m) = members
            .iter()
            .enumerate()
            .find(|(i, m)| members[..*i].contains(m))
            .map(|(_, m)| m)
        {
            return Err(format!("[ablate] members names `{m}` twice"));
        }
        let drawn: Vec<(String, Vec<MemberName>)> = match self.design {
            Design::List => Vec::new(),
            Design::LeaveOneOut => {
                if members.len() < 2 {
                    return Err(format!(
                        "[ablate] design = \"leave-one-out\" needs at least 2 members, it has {}",
                        members.len()
                    ));
                }
                members
                    .iter()
                    .map(|m| {
                        (
                            format!("without-{m}"),
                            members.iter().filter(|x| *x != m).cloned().collect(),
                        )
                    })
                    .collect()
            }
            Design::Singletons => members
                .iter()
                .map(|m| (format!("only-{m}"), vec![m.clone()]))
                .collect(),
            Design::AllSubsets => {
                if self.max_size == 0 {
                    return Err("[ablate] max-size must be at least 1".into());
                }
                if members.len() > 16 {
                    return Err(format!(
                        "[ablate] design = \"all-subsets\" over {} members: at most 16",
                        members.len()
                    ));
                }
                let mut subsets: Vec<Vec<MemberName>> = (1u32..1 << members.len())
                    .filter(|mask| {
                        (mask.count_ones() as usize) <= self.max_size
                            && (mask.count_ones() as usize) < members.len()
                    })
                    .map(|mask| {
                        members
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| mask & (1 << i) != 0)
                            .map(|(_, m)| m.clone())
                            .collect()
                    })
                    .collect();
                subsets.sort_by_key(Vec::len);
                subsets
                    .into_iter()
                    .map(|s| {
                        (
                            s.iter()
                                .map(MemberName::as_str)
                                .collect::<Vec<_>>()
                                .join("+"),
                            s,
                        )
                    })
                    .collect()
            }
        };
        let mut out = Vec::new();
        if self.full && self.design != Design::List {
            out.push(self.resolve("full", &members, &[], filter)?);
        }
        for (name, m) in drawn {
            out.push(self.resolve(&name, &m, &[], filter)?);
        }
        for spec in &self.compositions {
            out.push(self.resolve(&spec.name, &spec.members, &spec.stages, filter)?);
        }
        if out.is_empty() {
            return Err("[ablate] gives no composition: design = \"list\" needs at least one [[ablate.compositions]]".into());
        }
        for (i, c) in out.iter().enumerate() {
            if let Some(earlier) = out[..i].iter().find(|o| o.name == c.name) {
                return Err(format!(
                    "[ablate] two compositions are called `{}` ({} and {})",
                    c.name,
                    join(&earlier.members),
                    join(&c.members)
                ));
            }
        }
        Ok(out)
    }

    fn resolve(
        &self,
        name: &str,
        members: &[MemberName],
        own: &[Phase],
        filter: &FilterConfig,
    ) -> Result<Composition, String> {
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_+.".contains(c))
            && !name.starts_with('.');
        if !valid_name || name == RANDOM {
            return Err(format!(
                "[ablate] composition name {name:?}: letters, digits, `-`, `_`, `+` and `.` only (it names a directory), and not `{RANDOM}` (the random assignment's)"
            ));
        }
        if members.is_empty() {
            return Err(format!("[ablate] composition `{name}` has no members"));
        }
        let stages: Vec<Phase> = if own.is_empty() {
            // The config's schedule, each phase keeping only the composition's members.
            let kept: Vec<Phase> = filter
                .stages
                .iter()
                .map(|p| {
                    let kept: Vec<MemberName> = p
                        .members
                        .iter()
                        .filter(|m| members.contains(m))
                        .cloned()
                        .collect();
                    // A stage's own head that the composition leaves out gives way to [filter] swap-head.
                    let swap_head = p
                        .swap_head
                        .clone()
                        .filter(|h| !matches!(h, SwapHead::Member(m) if !kept.contains(m)));
                    Phase {
                        members: kept,
                        swap_head,
                        ..p.clone()
                    }
                })
                .filter(|p| !p.members.is_empty())
                .collect();
            if let Some(m) = members
                .iter()
                .find(|m| !kept.iter().any(|p| p.members.contains(m)))
            {
                return Err(format!(
                    "[ablate] composition `{name}`: member `{m}` is in no [[filter.stages]], so the shared schedule never runs it; give the composition its own `stages`"
                ));
            }
            kept
        } else {
            for p in own {
                if p.members.is_empty() || p.iterations == 0 {
                    return Err(format!("[ablate] composition `{name}`, stage `{}`: needs members and at least 1 iteration", p.name));
                }
                if let Some(m) = p.members.iter().find(|m| !members.contains(m)) {
                    return Err(format!("[ablate] composition `{name}`, stage `{}`: `{m}` is not one of the composition's members ({})", p.name, join(members)));
                }
            }
            own.to_vec()
        };
        for p in &stages {
            p.check_driving(
                &filter.swap_head,
                true,
                &format!("[ablate] composition `{name}`,"),
            )?;
        }
        Ok(Composition {
            name: name.to_string(),
            members: members.to_vec(),
            stages,
        })
    }
}

fn join(members: &[MemberName]) -> String {
    members
        .iter()
        .map(MemberName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::member_names;

    fn filter() -> FilterConfig {
        FilterConfig::default()
    }

    #[test]
    fn leave_one_out_over_the_schedule_members_keeps_the_mlp_phase_only_where_the_mlp_is() {
        let c = AblateConfig::default().compositions(&filter()).unwrap();
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "full",
                "without-mlp",
                "without-bow",
                "without-cnn",
                "without-pos-lstm"
            ]
        );
        assert_eq!(c[0].stages, filter().stages);
        let no_mlp = &c[1];
        assert_eq!(no_mlp.stages.len(), 1, "the MLP-only phase is dropped");
        assert_eq!(
            no_mlp.stages[0].members,
            member_names(&["bow", "cnn", "pos-lstm"])
        );
        assert_eq!(no_mlp.stages[0].iterations, 40);
        assert_eq!(c[2].stages[0].members, member_names(&["mlp"]));
        assert_eq!(
            c[2].stages[1].members,
            member_names(&["mlp", "cnn", "pos-lstm"])
        );
    }

    /// A stage driven by its own head keeps it where the composition keeps the member, and falls
    /// back to [filter] swap-head where it does not.
    #[test]
    fn a_stage_loses_its_own_head_with_the_member() {
        let mut f = filter();
        f.stages[1].members.push(MemberName::new("encoder-ft"));
        f.stages[1].swap_head = Some(SwapHead::Member(MemberName::new("encoder-ft")));
        let a = AblateConfig {
            members: member_names(&["bow", "encoder-ft"]),
            ..Default::default()
        };
        let c = a.compositions(&f).unwrap();
        let heads: Vec<(&str, Option<SwapHead>)> = c
            .iter()
            .map(|c| (c.name.as_str(), c.stages.last().unwrap().swap_head.clone()))
            .collect();
        let own = Some(SwapHead::Member(MemberName::new("encoder-ft")));
        assert_eq!(
            heads,
            [
                ("full", own.clone()),
                ("without-bow", own),
                ("without-encoder-ft", None)
            ]
        );
    }

    #[test]
    fn singletons_subsets_and_lists() {
        let mut a = AblateConfig {
            design: Design::Singletons,
            full: false,
            members: member_names(&["bow", "cnn"]),
            ..Default::default()
        };
        let c = a.compositions(&filter()).unwrap();
        assert_eq!(
            c.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["only-bow", "only-cnn"]
        );
        a.design = Design::AllSubsets;
        a.members = member_names(&["mlp", "bow", "cnn"]);
        a.full = true;
        let c = a.compositions(&filter()).unwrap();
        assert_eq!(
            c.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["full", "mlp", "bow", "cnn", "mlp+bow", "mlp+cnn", "bow+cnn"]
        );
        a.design = Design::List;
        let e = a.compositions(&filter()).unwrap_err();
        assert!(
            e.contains("needs at least one [[ablate.compositions]]"),
            "{e}"
        );
        a.compositions = vec![CompositionSpec {
            name: "cnn-long".into(),
            members: member_names(&["cnn"]),
            stages: vec![Phase {
                name: "long".into(),
                members: member_names(&["cnn"]),
                iterations: 7,
                swap_head: None,
            }],
        }];
        let c = a.compositions(&filter()).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].stages[0].iterations, 7);
    }

    #[test]
    fn bad_compositions_are_named() {
        let spec = |name: &str, members: &[&str]| CompositionSpec {
            name: name.into(),
            members: member_names(members),
            stages: Vec::new(),
        };
        let a = AblateConfig {
            design: Design::List,
            compositions: vec![spec("random", &["bow"])],
            ..Default::default()
        };
        assert!(a
            .compositions(&filter())
            .unwrap_err()
            .contains("not `random`"));
        let a = AblateConfig {
            design: Design::List,
            compositions: vec![spec("x", &["lstm"])],
            ..Default::default()
        };
        let e = a.compositions(&filter()).unwrap_err();
        assert!(
            e.contains("member `lstm` is in no [[filter.stages]]"),
            "{e}"
        );
        let a = AblateConfig {
            compositions: vec![spec("full", &["bow"])],
            ..Default::default()
        };
        assert!(a
            .compositions(&filter())
            .unwrap_err()
            .contains("two compositions are called `full`"));
        let f = FilterConfig {
            swap_head: SwapHead::Member(MemberName::new("cnn")),
            ..filter()
        };
        let e = AblateConfig::default().compositions(&f).unwrap_err();
        assert!(e.contains("swap-head = \"cnn\""), "{e}");
        let a = AblateConfig {
            members: member_names(&["bow"]),
            ..Default::default()
        };
        assert!(a
            .compositions(&filter())
            .unwrap_err()
            .contains("at least 2 members"));
    }
}
