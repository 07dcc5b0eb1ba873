//! The built-in committee members, one per file with its settings beside its code, and the
//! [`Registry`] that names them, each of its kind ([`MemberKind`]: joint or fine-tuned). A new
//! member is a new file here and one line in [`Registry::builtin`]; a member defined elsewhere
//! (a test, another crate) is added with [`Registry::register`] (joint) or
//! [`Registry::register_fine_tuned`].
//!
//! Settings: each member starts from the flat `[committee]` keys (`cnn-filters`, ...: the older
//! spelling and the committee-wide default) and overlays its own `[committee.member.NAME]` table,
//! whose keys drop the member's prefix (`[committee.member.cnn] filters = 64`). The keys every
//! text member shares (`embedding`, `indicator-embedding`, `dropout`) stay in `[committee]`.

pub mod bow;
pub mod cnn;
pub mod encoder;
pub mod encoder_ft;
pub mod frozen;
pub mod lm_likelihood;
pub mod lstm;
pub mod mlp;
pub mod ngram;
pub mod pos_lstm;
pub mod torchscript;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use tch::nn;

pub use bow::{Bow, BowSettings};
pub use cnn::{Cnn, CnnSettings};
pub use encoder::{EncoderMember, EncoderSettings};
pub use encoder_ft::{EncoderFt, EncoderFtSettings};
pub use frozen::{FrozenEncoder, FrozenMember, FrozenSettings};
pub use lm_likelihood::{LmLikelihood, LmLikelihoodSettings, LmLikelihoodSource};
pub use lstm::{Lstm, LstmSettings};
pub use mlp::{Mlp, MlpSettings};
pub use ngram::{Ngram, NgramSettings};
pub use pos_lstm::{PosLstm, PosLstmSettings};
pub use torchscript::{TorchScriptMember, TorchScriptSettings};

use super::member::{Column, FineTunedMember, Member, MemberKind};
use super::{CommitteeConfig, MemberName};
use crate::NnError;

/// The committee members a run may name, each of its kind: joint (trained and scored inside the
/// committee) or fine-tuned apart from it.
#[derive(Clone)]
pub struct Registry {
    members: Vec<MemberKind>,
}

impl Registry {
    /// The built-in members: mlp, bow, cnn, pos-lstm, ngram, lstm, encoder, torchscript,
    /// lm-likelihood (joint), encoder-ft (fine-tuned), in that order.
    pub fn builtin() -> Self {
        Self {
            members: vec![
                MemberKind::Joint(Arc::new(Mlp)),
                MemberKind::Joint(Arc::new(Bow)),
                MemberKind::Joint(Arc::new(Cnn)),
                MemberKind::Joint(Arc::new(PosLstm)),
                MemberKind::Joint(Arc::new(Ngram)),
                MemberKind::Joint(Arc::new(Lstm)),
                MemberKind::Joint(Arc::new(EncoderMember::new())),
                MemberKind::Joint(Arc::new(TorchScriptMember::new())),
                MemberKind::Joint(Arc::new(LmLikelihood)),
                MemberKind::FineTuned(Arc::new(EncoderFt)),
            ],
        }
    }

    /// Adds a joint member; a name already taken is an error.
    pub fn register(&mut self, member: impl Member) -> Result<(), NnError> {
        self.add(MemberKind::Joint(Arc::new(member)))
    }

    /// Adds a member fine-tuned apart from the committee; a name already taken is an error.
    pub fn register_fine_tuned(&mut self, member: impl FineTunedMember) -> Result<(), NnError> {
        self.add(MemberKind::FineTuned(Arc::new(member)))
    }

    fn add(&mut self, member: MemberKind) -> Result<(), NnError> {
        if self.get(member.name()).is_some() {
            return Err(NnError::DuplicateMember(member.name().to_string()));
        }
        self.members.push(member);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&MemberKind> {
        self.members.iter().find(|m| m.name() == name)
    }

    /// The member called `name`, or an error listing the members there are.
    pub fn lookup(&self, name: &MemberName) -> Result<&MemberKind, NnError> {
        self.get(name.as_str())
            .ok_or_else(|| NnError::UnknownMember {
                name: name.to_string(),
                known: self.names().join(", "),
            })
    }

    /// Every member's name, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.members.iter().map(|m| m.name()).collect()
    }

    /// The one member of `members` that reads frozen sentence embeddings, if any. A table holds
    /// one set of them, so two different such members (`encoder` and `torchscript`) are an
    /// error naming both. Unknown names read nothing.
    pub fn encoded_member(&self, members: &[MemberName]) -> Result<Option<&dyn Member>, NnError> {
        let mut found: Option<&dyn Member> = None;
        for m in members
            .iter()
            .filter_map(|m| self.get(m.as_str())?.joint())
            .filter(|m| m.columns().contains(&Column::Encoded))
        {
            match found {
                Some(first) if first.name() != m.name() => {
                    return Err(NnError::InvalidSettings(format!(
                        "members `{}` and `{}` both read frozen sentence embeddings, and a committee's table holds one set: keep one of them",
                        first.name(),
                        m.name()
                    )))
                }
                _ => found = Some(m),
            }
        }
        Ok(found)
    }

    /// The frozen encoder whose embeddings `members` read (see [`Registry::encoded_member`]), as
    /// `committee`'s settings name it; None when no member reads them.
    pub fn frozen_encoder(
        &self,
        members: &[MemberName],
        committee: &CommitteeConfig,
    ) -> Result<Option<FrozenEncoder>, NnError> {
        let Some(member) = self.encoded_member(members)? else {
            return Ok(None);
        };
        match member.frozen_encoder(committee)? {
            Some(encoder) => Ok(Some(encoder)),
            None => Err(NnError::InvalidSettings(format!(
                "member `{}` reads frozen sentence embeddings but names no encoder to compute them",
                member.name()
            ))),
        }
    }

    /// The pretrained LM whose scores of the pool the first of `members` that reads them
    /// ([`Column::LmLikelihood`]) names; None when no member reads them. Unknown names read
    /// nothing.
    pub fn lm_likelihood(
        &self,
        members: &[MemberName],
        committee: &CommitteeConfig,
    ) -> Result<Option<LmLikelihoodSource>, NnError> {
        match members
            .iter()
            .filter_map(|m| self.get(m.as_str())?.joint())
            .find(|m| m.columns().contains(&Column::LmLikelihood))
        {
            Some(member) => member.lm_likelihood(committee),
            None => Ok(None),
        }
    }

    /// Joint members that read text only (no LM features or LM scores of a pool) from the
    /// table: the audit's learned detectors.
    pub fn text_members(&self) -> Vec<&'static str> {
        self.members
            .iter()
            .filter_map(MemberKind::joint)
            .filter(|m| {
                !m.columns()
                    .iter()
                    .any(|c| matches!(c, Column::Features | Column::LmLikelihood))
            })
            .map(|m| m.name())
            .collect()
    }

    /// The member of `members` fine-tuned apart from the joint committee, with its recipe; at
    /// most one per phase (an error naming both otherwise). Unknown names are not one.
    pub fn fine_tuned(
        &self,
        members: &[MemberName],
        committee: &CommitteeConfig,
    ) -> Result<Option<(&'static str, EncoderFtSettings)>, NnError> {
        let mut found: Option<(&'static str, EncoderFtSettings)> = None;
        for m in members
            .iter()
            .filter_map(|m| self.get(m.as_str())?.fine_tuned())
        {
            if let Some((first, _)) = &found {
                if *first != m.name() {
                    return Err(NnError::InvalidSettings(format!("members `{first}` and `{}` are both fine-tuned apart from the committee: keep one", m.name())));
                }
            }
            found = Some((m.name(), m.recipe(committee)?));
        }
        Ok(found)
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Registry").field(&self.names()).finish()
    }
}

/// The member's `[committee.member.NAME]` table read into `T` (a struct of `Option`s, one per
/// key); no table reads as `T::default()`, every key absent.
pub(crate) fn member_table<T: DeserializeOwned + Default>(
    committee: &CommitteeConfig,
    name: &str,
) -> Result<T, String> {
    match committee.member.get(name) {
        None => Ok(T::default()),
        Some(table) => T::deserialize(table.clone())
            .map_err(|e| format!("[committee.member.{name}]: {}", e.to_string().trim_end())),
    }
}

/// The member table's value if it gives one, else the flat key's; with how the key is spelt
/// where the value came from, for errors.
pub(crate) fn overlay<T>(
    member: &str,
    own: Option<T>,
    key: &str,
    flat: T,
    flat_key: &str,
) -> (T, String) {
    match own {
        Some(v) => (v, format!("[committee.member.{member}] {key}")),
        None => (flat, format!("[committee] {flat_key}")),
    }
}

pub(crate) fn positive((value, key): (i64, String)) -> Result<i64, String> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(format!("{key} = {value}: must be positive"))
    }
}

pub(crate) fn probability((value, key): (f64, String)) -> Result<f64, String> {
    if (0.0..1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{key} = {value}: must be in [0, 1)"))
    }
}

/// `[committee] embedding`: word (and POS) embedding size of the text members.
pub(crate) fn embedding_size(c: &CommitteeConfig) -> Result<i64, String> {
    positive((c.embedding, "[committee] embedding".into()))
}

/// `[committee] indicator-embedding`.
pub(crate) fn indicator_size(c: &CommitteeConfig) -> Result<i64, String> {
    positive((
        c.indicator_embedding,
        "[committee] indicator-embedding".into(),
    ))
}

/// `[committee] dropout`: on the text members' representations (and the joint head).
pub(crate) fn text_dropout(c: &CommitteeConfig) -> Result<f64, String> {
    probability((c.dropout, "[committee] dropout".into()))
}

/// `[committee.member.NAME] view` of a text member: the rows it reads in a pool's committee,
/// `second-sentence` (noun phrase + ending, the default and SWAG's) or `full` (context too).
pub(crate) fn committee_view(
    member: &str,
    view: Option<af_core::View>,
) -> Result<af_core::View, String> {
    match view.unwrap_or(af_core::View::SecondSentence) {
        af_core::View::Ending => Err(format!(
            "[committee.member.{member}] view = \"ending\": a committee member reads \"second-sentence\" (the default) or \"full\""
        )),
        v => Ok(v),
    }
}

/// The default view is left out of the settings' JSON, so runs fingerprinted before the key
/// existed stay up to date.
pub(crate) fn is_second_sentence(view: &af_core::View) -> bool {
    *view == af_core::View::SecondSentence
}

/// A copy of `c` whose members all read the rows they are given (no `view` key): the audit and
/// data maps build each table from the view they train on.
pub fn reading_given_rows(c: &CommitteeConfig) -> CommitteeConfig {
    let mut c = c.clone();
    for table in c.member.values_mut() {
        table.remove("view");
    }
    c
}

/// Settings as the JSON a fingerprint records.
pub(crate) fn to_json(settings: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(settings).expect("settings are plain structs")
}

/// An embedding whose id 0 is padding.
pub(crate) fn embedding(p: nn::Path, n: i64, d: i64) -> nn::Embedding {
    nn::embedding(
        p,
        n,
        d,
        nn::EmbeddingConfig {
            padding_idx: 0,
            ..Default::default()
        },
    )
}

/// Mean over the real tokens of each row.
/// # Shapes
/// tokens: [N, T, E], mask: [N, T] -> [N, E]
pub(crate) fn masked_mean(tokens: &tch::Tensor, mask: &tch::Tensor) -> tch::Tensor {
    let mask = mask.to_kind(tch::Kind::Float).unsqueeze(-1);
    let sum = (tokens * &mask).sum_dim_intlist(1, false, tch::Kind::Float);
    sum / mask
        .sum_dim_intlist(1, false, tch::Kind::Float)
        .clamp_min(1.0)
}

#[cfg(test)]
mod tests {
    use tch::{nn, Device};

    use super::*;
    use crate::committee::member::BuildContext;

    /// A committee config from JSON in the config's spelling (TOML tables read the same way).
    fn config(json: serde_json::Value) -> CommitteeConfig {
        serde_json::from_value(json).unwrap()
    }

    fn build(
        member: &MemberKind,
        c: &CommitteeConfig,
    ) -> Result<(nn::VarStore, Box<dyn crate::committee::MemberNet>), NnError> {
        let member = member.joint().expect("a joint member");
        let _torch_rng = crate::torch_rng_lock();
        let vs = nn::VarStore::new(Device::Cpu);
        let net = member.build(
            &vs.root(),
            &BuildContext {
                committee: c,
                vocab: 50,
                pos_vocab: 20,
                encoded: None,
                lm_likelihood: false,
            },
        )?;
        Ok((vs, net))
    }

    #[test]
    fn builtin_members_in_order_and_the_text_ones() {
        let r = Registry::builtin();
        assert_eq!(
            r.names(),
            [
                "mlp",
                "bow",
                "cnn",
                "pos-lstm",
                "ngram",
                "lstm",
                "encoder",
                "torchscript",
                "lm-likelihood",
                "encoder-ft"
            ]
        );
        assert_eq!(
            r.text_members(),
            [
                "bow",
                "cnn",
                "pos-lstm",
                "ngram",
                "lstm",
                "encoder",
                "torchscript"
            ]
        );
        for name in r.names() {
            let m = r.get(name).unwrap();
            assert_eq!(m.name(), name);
            let view = if ["encoder", "torchscript", "lm-likelihood", "encoder-ft"].contains(&name)
            {
                af_core::View::Full
            } else {
                af_core::View::SecondSentence
            };
            assert_eq!(m.view(&CommitteeConfig::default()), view);
            assert!(!m.describe().is_empty());
            m.settings(&CommitteeConfig::default()).unwrap();
            // Only encoder-ft is fine-tuned apart, and it builds no network for the committee.
            assert_eq!(m.is_fine_tuned(), name == "encoder-ft");
        }
    }

    #[test]
    fn a_member_table_overlays_the_flat_key() {
        let registry = Registry::builtin();
        let cnn = registry.lookup(&MemberName::new("cnn")).unwrap();
        let flat = config(serde_json::json!({ "cnn-widths": [2, 3], "cnn-filters": 6 }));
        let (vs, net) = build(cnn, &flat).unwrap();
        assert_eq!(net.width(), 6 * 2);
        assert_eq!(vs.variables()["conv3.weight"].size(), [6, 100 + 16, 3]);

        let own = config(
            serde_json::json!({ "cnn-widths": [2, 3], "cnn-filters": 6, "member": { "cnn": { "filters": 4 } } }),
        );
        let (vs, net) = build(cnn, &own).unwrap();
        assert_eq!(net.width(), 4 * 2);
        assert_eq!(vs.variables()["conv2.weight"].size(), [4, 100 + 16, 2]);
        assert_eq!(
            cnn.settings(&own).unwrap(),
            serde_json::json!({ "embedding": 100, "indicator-embedding": 16, "widths": [2, 3], "filters": 4, "dropout": 0.2 })
        );

        let pos = config(
            serde_json::json!({ "pos-words": 7, "lstm-hidden": 5, "member": { "pos-lstm": { "words": 3 } } }),
        );
        let s = PosLstmSettings::resolve(&pos).unwrap();
        assert_eq!((s.words, s.hidden), (3, 5));
        // Another member's table leaves this one alone.
        assert_eq!(
            LstmSettings::resolve(&config(
                serde_json::json!({ "member": { "pos-lstm": { "hidden": 9 } } })
            ))
            .unwrap()
            .hidden,
            200
        );
    }

    #[test]
    fn bad_member_settings_name_the_table_and_key() {
        let registry = Registry::builtin();
        let cnn = registry.get("cnn").unwrap();
        let unknown = config(serde_json::json!({ "member": { "cnn": { "filter": 4 } } }));
        let e = cnn.settings(&unknown).unwrap_err();
        assert!(
            e.starts_with("[committee.member.cnn]: ") && e.contains("`filter`"),
            "{e}"
        );
        let e = build(cnn, &unknown).err().unwrap().to_string();
        assert!(
            e.starts_with("[committee.member.cnn]: ") && e.contains("`filter`"),
            "{e}"
        );
        // A member with no keys of its own still refuses a table with keys.
        let e = registry
            .get("bow")
            .unwrap()
            .settings(&config(
                serde_json::json!({ "member": { "bow": { "embedding": 4 } } }),
            ))
            .unwrap_err();
        assert!(
            e.starts_with("[committee.member.bow]: ") && e.contains("`embedding`"),
            "{e}"
        );

        let e = cnn
            .settings(&config(
                serde_json::json!({ "member": { "cnn": { "filters": 0 } } }),
            ))
            .unwrap_err();
        assert_eq!(e, "[committee.member.cnn] filters = 0: must be positive");
        let e = cnn
            .settings(&config(serde_json::json!({ "cnn-filters": 0 })))
            .unwrap_err();
        assert_eq!(e, "[committee] cnn-filters = 0: must be positive");
        let e = cnn
            .settings(&config(
                serde_json::json!({ "member": { "cnn": { "widths": [] } } }),
            ))
            .unwrap_err();
        assert_eq!(
            e,
            "[committee.member.cnn] widths = []: needs at least one positive width"
        );
        let e = registry
            .get("mlp")
            .unwrap()
            .settings(&config(
                serde_json::json!({ "member": { "mlp": { "dropout": 1.5 } } }),
            ))
            .unwrap_err();
        assert_eq!(e, "[committee.member.mlp] dropout = 1.5: must be in [0, 1)");
        let e = registry
            .get("ngram")
            .unwrap()
            .settings(&config(serde_json::json!({ "embedding": 0 })))
            .unwrap_err();
        assert_eq!(e, "[committee] embedding = 0: must be positive");
    }

    #[test]
    fn text_members_read_the_second_sentence_or_the_full_view() {
        let registry = Registry::builtin();
        for name in ["cnn", "lstm", "ngram"] {
            let m = registry.get(name).unwrap();
            let default = CommitteeConfig::default();
            assert_eq!(m.view(&default), af_core::View::SecondSentence);
            assert!(
                m.settings(&default).unwrap().get("view").is_none(),
                "the default stays out of fingerprints"
            );
            let full = config(serde_json::json!({ "member": { name: { "view": "full" } } }));
            assert_eq!(m.view(&full), af_core::View::Full);
            assert_eq!(m.settings(&full).unwrap()["view"], "full");
            assert_eq!(reading_given_rows(&full).member[name].get("view"), None);
            let e = m
                .settings(&config(
                    serde_json::json!({ "member": { name: { "view": "ending" } } }),
                ))
                .unwrap_err();
            assert!(
                e.contains(&format!("[committee.member.{name}] view = \"ending\"")),
                "{e}"
            );
        }
        // pos-lstm and bow have no view key.
        let e = registry
            .get("bow")
            .unwrap()
            .settings(&config(
                serde_json::json!({ "member": { "bow": { "view": "full" } } }),
            ))
            .unwrap_err();
        assert!(e.contains("`view`"), "{e}");
    }

    #[test]
    fn unknown_and_duplicate_members_are_errors() {
        let mut registry = Registry::builtin();
        let e = registry
            .lookup(&MemberName::new("rnn"))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, "unknown committee member `rnn`: the members are mlp, bow, cnn, pos-lstm, ngram, lstm, encoder, torchscript, lm-likelihood, encoder-ft");
        let e = registry.register(Cnn).unwrap_err();
        assert!(
            matches!(&e, NnError::DuplicateMember(name) if name == "cnn"),
            "{e}"
        );
        assert_eq!(registry.names().len(), 10);
    }
}
