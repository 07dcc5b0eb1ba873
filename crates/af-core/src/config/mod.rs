//! The run configuration: one TOML file, one serde struct per section, every field defaulted.
//!
//! Keys are kebab-case (`min-context-tokens`), unknown keys are errors that name the key, the file
//! and the line, and relative paths are resolved against the directory of the file that names
//! them, so a config means the same thing from any working directory. The resolved config (paths
//! made absolute) is what each stage writes next to its artifacts.
//!
//! Each section lives in its own file with its enums, its defaults, its `validate()` (what serde
//! cannot check) and its `fingerprint()` (what a stage that reads it records, see [`fingerprint`]).
//! This file holds the root: loading, resolving paths, printing, and validating section by section.
//!
//! A new key goes in its section's file: the field with its doc and serde attributes, its value in
//! `Default`, its checks in `validate()`, and its line in `fingerprint()` (`later` when existing
//! runs ran with its default, so they stay up to date). A new section: its own file here, a field
//! of `Config` printed only when set (as `[ablate]` is, so that printed configs stay as they are),
//! its `validate()` called from `Config::validate`, and its `fingerprint()` in the `inputs` of each
//! stage that reads it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub mod ablate;
pub mod audit;
pub mod committee;
pub mod export;
pub mod filter;
pub mod fingerprint;
pub mod generate;
pub mod lm;
pub mod pairs;
pub mod precision;
pub mod run;
pub mod tagger;

pub use ablate::AblateConfig;
pub use audit::{AuditConfig, View};
pub use committee::{
    member_names, CommitteeConfig, MemberName, ScoreBatch, JOINT_HEAD, SWAG_COMMITTEE,
};
pub use export::ExportConfig;
pub use filter::{BudgetRule, FilterConfig, Phase, SwapChoice, SwapHead};
pub use generate::{CouldBeRight, GenerateConfig, LengthTarget, SharedTopic, ValidityRule};
pub use lm::LmConfig;
pub use pairs::{AdverbSide, InputFormat, InputSpec, PairsConfig, RecordLayout, TextEncoding};
pub use precision::Precision;
pub use run::{parse_device, DeviceRequest, RunConfig};
pub use tagger::TaggerConfig;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    pub run: RunConfig,
    pub tagger: TaggerConfig,
    pub pairs: PairsConfig,
    pub lm: LmConfig,
    pub generate: GenerateConfig,
    pub committee: CommitteeConfig,
    pub filter: FilterConfig,
    pub export: ExportConfig,
    pub audit: AuditConfig,
    /// `af ablate` only; absent from the resolved config of a run that does not set it.
    #[serde(skip_serializing_if = "is_default")]
    pub ablate: AblateConfig,
}

impl Config {
    /// Reads a config file, resolves its relative paths against the file's directory and checks
    /// what serde cannot.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Self::parse(&text, path)?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        };
        config.resolve_paths(&base);
        config.validate(path)?;
        Ok(config)
    }

    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| line_column(text, s.start))
                .unwrap_or((0, 0));
            ConfigError::Parse {
                path: origin.to_path_buf(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        let absolute = |p: &Path| -> PathBuf {
            let joined = if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            };
            normalize(&std::path::absolute(&joined).unwrap_or(joined))
        };
        self.run.dir = absolute(&self.run.dir);
        if let Some(m) = &self.tagger.model {
            self.tagger.model = Some(absolute(m));
        }
        for input in self
            .pairs
            .inputs
            .iter_mut()
            .chain(self.lm.pretrain.iter_mut())
        {
            input.path = absolute(&input.path);
        }
        if let Some(run) = &self.lm.from {
            self.lm.from = Some(absolute(run));
        }
        if let Some(m) = &self.generate.pretrained_model {
            self.generate.pretrained_model = Some(absolute(m));
        }
        if let Some(d) = &self.generate.pretrained_adapters_from {
            self.generate.pretrained_adapters_from = Some(absolute(d));
        }
        if let Some(m) = &self.export.eval_model {
            self.export.eval_model = Some(absolute(m));
        }
    }

    /// Each section's own checks, then those that span sections; the first error found, naming
    /// `path`. `[ablate]` is checked against the member registry when the config is loaded for a
    /// run (af-pipeline), since its designs need the members' names.
    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let checks = [
            self.pairs.validate(),
            self.lm.validate(),
            self.generate.validate(&self.pairs),
            self.run.validate(),
            self.export.validate(),
            self.audit.validate(),
            self.committee.validate(),
            self.filter.validate(self.committee.joint),
        ];
        checks
            .into_iter()
            .collect::<Result<(), String>>()
            .map_err(|message| ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            })
    }

    /// The config as `af config show` prints it and each stage writes it beside its outputs.
    /// Keys added after the first runs are printed only when set, so that a printed config of a
    /// run that does not use them reads in the af that made those runs.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a Config always serialises")
    }

    /// Every member the config names, in the order they first appear: its filter phases', then
    /// those `[ablate]` names. af-pipeline builds the candidate table of a run (and of its
    /// ablation) for all of them, so the filter's fingerprint records them where they are more
    /// than the schedule's.
    pub fn named_members(&self) -> Vec<MemberName> {
        let mut out = self.filter.members();
        let ablate = self
            .ablate
            .members
            .iter()
            .chain(self.ablate.compositions.iter().flat_map(|c| &c.members));
        for m in ablate {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }
}

// What `to_toml` leaves out: keys that came after the first runs, at the value those runs had.
// (Fingerprints do not read this: each section's `fingerprint()` says what it records.)

/// Whether `value` is its type's default (`None`, empty, `false`, 0, an enum's default variant).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Whether `value` is `N`.
pub(crate) fn equals<const N: usize>(value: &usize) -> bool {
    *value == N
}

pub(crate) fn is_one(value: &f64) -> bool {
    *value == 1.0
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `p` made absolute (against the working directory) with `.` and `..` removed, as a loaded
/// config holds its paths: a config written with such a path reloads equal to itself.
pub fn absolute_path(p: &Path) -> std::io::Result<PathBuf> {
    Ok(normalize(&std::path::absolute(p)?))
}

/// Removes `.` and `..` components without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `text` parsed and checked as `Config::load` checks a file (its paths left as written).
#[cfg(test)]
pub(crate) fn checked(text: &str) -> Result<Config, ConfigError> {
    let origin = Path::new("c.toml");
    let config = Config::parse(text, origin)?;
    config.validate(origin)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.pairs.folds, 5);
        assert_eq!(
            (c.pairs.min_context_tokens, c.pairs.max_context_tokens),
            (6, 100)
        );
        assert_eq!(
            (c.pairs.min_ending_tokens, c.pairs.max_ending_tokens),
            (5, 25)
        );
        assert_eq!(c.run.device, "auto");
        assert!(checked("").is_ok(), "the defaults are a valid config");
    }

    #[test]
    fn unknown_key_names_key_file_and_line() {
        let text = "[run]\nseed = 1\n\n[pairs]\nfolds = 3\nmin-context-token = 4\n";
        let err = Config::parse(text, Path::new("configs/bad.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("configs/bad.toml:6:"), "{err}");
        assert!(err.contains("min-context-token"), "{err}");
    }

    #[test]
    fn mistyped_value_names_its_line() {
        let err = Config::parse("[run]\nseed = \"x\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.toml:2:"), "{err}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("configs")).unwrap();
        let file = dir.path().join("configs/c.toml");
        std::fs::write(
            &file,
            "[run]\ndir = \"../runs/x\"\n[[pairs.inputs]]\npath = \"../data/a.json\"\nformat = \"activitynet\"\n",
        )
        .unwrap();
        let c = Config::load(&file).unwrap();
        let root = std::path::absolute(dir.path()).unwrap();
        assert_eq!(c.run.dir, root.join("runs/x"));
        assert_eq!(c.pairs.inputs[0].path, root.join("data/a.json"));
    }

    #[test]
    fn a_bad_value_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[filter]\nk = 0\n").unwrap();
        let err = Config::load(&file).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{}: [filter] k must be at least 1", file.display())
        );
    }

    #[test]
    fn a_truncation_outside_its_range_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        for (key, value) in [("typical-p", "0.0"), ("typical-p", "1.5"), ("top-p", "0.0")] {
            std::fs::write(&file, format!("[generate]\n{key} = {value}\n")).unwrap();
            let err = Config::load(&file).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "{}: [generate] {key} = {}: must be in (0, 1]",
                    file.display(),
                    value.parse::<f64>().unwrap()
                )
            );
        }
        std::fs::write(&file, "[generate]\ntypical-p = 0.95\n").unwrap();
        assert_eq!(Config::load(&file).unwrap().generate.typical_p, 0.95);
    }

    #[test]
    fn resolved_config_round_trips_through_toml() {
        let mut c = Config::default();
        c.pairs.inputs.push(InputSpec {
            path: "/a.csv".into(),
            format: InputFormat::Csv,
            group_field: Some("g".into()),
            text_field: Some("t".into()),
            context_field: None,
            sentence2_field: None,
            id_field: None,
            delimiter: Some(';'),
            layout: None,
            skip_bad: false,
            encoding: TextEncoding::Utf8,
            source: Some("a survey".into()),
            license: None,
        });
        let back = Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap();
        assert_eq!(back, c);
    }

    /// The configs the project ships, and that docs/results.md's commands name, stay loadable
    /// as keys are added and renamed (the member names are af-nn's to check, at run time).
    #[test]
    fn every_shipped_config_loads() {
        let dir = crate_dir().join("../../configs");
        let mut files = Vec::new();
        collect_toml(&dir, &dir, &mut files);
        for (path, _) in &files {
            Config::load(path).unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(
            files.len() >= 10 && files.iter().any(|(p, _)| p.ends_with("default.toml")),
            "{files:?}"
        );
    }

    #[test]
    fn the_table_members_are_the_schedule_and_what_ablate_names() {
        let mut c = Config::default();
        assert_eq!(c.named_members(), c.filter.members());
        c.ablate.members = member_names(&["cnn", "lstm"]);
        c.ablate.compositions.push(ablate::CompositionSpec {
            name: "x".into(),
            members: member_names(&["mlp", "encoder"]),
            stages: Vec::new(),
        });
        assert_eq!(
            c.named_members(),
            member_names(&["mlp", "bow", "cnn", "pos-lstm", "lstm", "encoder"])
        );
    }

    /// Every key a section prints is one its fingerprint records, or one it leaves out on
    /// purpose; shown on the every-key fixture, where each key is away from its default.
    #[test]
    fn fingerprints_record_every_key_a_section_prints() {
        let dir = crate_dir().join("testdata/configs");
        for name in ["every-key.toml", "every-key-pretrain.toml"] {
            let c = Config::load(&dir.join(name)).unwrap();
            let printed: toml::Table = toml::from_str(&c.to_toml()).unwrap();
            let recorded = section_fingerprints(&c);
            for (section, keys) in &printed {
                if section == "run" || section == "ablate" {
                    continue; // no stage fingerprints them as sections (see run.rs, filter's inputs)
                }
                let keys = keys.as_table().unwrap();
                for key in keys.keys() {
                    assert!(
                        recorded[section.as_str()].get(key).is_some(),
                        "{name}: [{section}] {key} is printed but not fingerprinted"
                    );
                }
            }
        }
    }

    /// Every config the project ships (configs/, any depth) and the every-key fixtures
    /// (testdata/configs/), each as `af config show` prints it and as the stages' fingerprints
    /// record its sections, against testdata/config-golden/ (written before config.rs became
    /// config/, issue 40): a change that moves how a config prints or fingerprints shows here.
    /// Paths resolve against a fixed root (/af), so the files do not depend on the checkout.
    /// `AF_BLESS=1` writes the files anew, after a change meant to move them.
    #[test]
    fn every_config_prints_and_fingerprints_as_recorded() {
        let crate_dir = crate_dir();
        let golden = crate_dir.join("testdata/config-golden");
        let bless = std::env::var_os("AF_BLESS").is_some();
        let mut files = Vec::new();
        collect_toml(
            &crate_dir.join("../../configs"),
            Path::new("/af/configs"),
            &mut files,
        );
        collect_toml(
            &crate_dir.join("testdata/configs"),
            Path::new("/af/testdata"),
            &mut files,
        );
        assert!(files.len() >= 12, "{files:?}");
        let mut seen = std::collections::BTreeSet::new();
        let mut failures = Vec::new();
        for (path, base) in &files {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(seen.insert(stem.clone()), "two configs are called {stem}");
            let text = std::fs::read_to_string(path).unwrap();
            let mut c = Config::parse(&text, path).unwrap_or_else(|e| panic!("{e}"));
            c.resolve_paths(base);
            c.validate(path).unwrap_or_else(|e| panic!("{e}"));
            let printed = c.to_toml();
            let fingerprints = section_fingerprints(&c);
            let (toml_path, json_path) = (
                golden.join(format!("{stem}.toml")),
                golden.join(format!("{stem}.json")),
            );
            if bless {
                std::fs::create_dir_all(&golden).unwrap();
                std::fs::write(&toml_path, &printed).unwrap();
                let json = serde_json::to_string_pretty(&fingerprints).unwrap() + "\n";
                std::fs::write(&json_path, json).unwrap();
                continue;
            }
            let read = |p: &Path| {
                std::fs::read_to_string(p).unwrap_or_else(|_| {
                    panic!(
                        "{} has no {} (AF_BLESS=1 writes it)",
                        path.display(),
                        p.display()
                    )
                })
            };
            if read(&toml_path) != printed {
                failures.push(format!(
                    "{stem}: prints otherwise than {}:\n{printed}",
                    toml_path.display()
                ));
            }
            let recorded: serde_json::Value = serde_json::from_str(&read(&json_path)).unwrap();
            if recorded != fingerprints {
                failures.push(format!(
                    "{stem}: fingerprints otherwise than {}:\n{}",
                    json_path.display(),
                    serde_json::to_string_pretty(&fingerprints).unwrap()
                ));
            }
        }
        for entry in std::fs::read_dir(&golden).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if !seen.contains(&stem) {
                if bless {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    failures.push(format!(
                        "{}: no config of that name (AF_BLESS=1 removes it)",
                        path.display()
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    /// This crate's directory as cargo says when it runs the tests: read at run time, since a
    /// test binary another checkout built into a shared target directory may be reused here.
    fn crate_dir() -> PathBuf {
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
    }

    /// `*.toml` under `dir`, each with the directory its paths resolve against: `base` and the
    /// file's subdirectory of `dir`.
    fn collect_toml(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, PathBuf)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                collect_toml(&path, &base.join(path.file_name().unwrap()), out);
            } else if path.extension().is_some_and(|e| e == "toml") {
                out.push((path, base.to_path_buf()));
            }
        }
    }

    /// The config's sections as the stages' fingerprints record them.
    fn section_fingerprints(c: &Config) -> serde_json::Value {
        serde_json::json!({
            "tagger": c.tagger.fingerprint(),
            "pairs": c.pairs.fingerprint(),
            "lm": c.lm.fingerprint(),
            "generate": c.generate.fingerprint(),
            "committee": c.committee.fingerprint(),
            "filter": c.filter.fingerprint(),
            "export": c.export.fingerprint(),
            "audit": c.audit.fingerprint(),
        })
    }
}
