//! What every command sets up first: the config (checked against the member registry), the
//! tagger, the device and the thread pools.

use std::path::{Path, PathBuf};

use af_core::Config;
use af_nn::committee::{Column, MemberKind, Registry};
use anyhow::Context;

/// Loads the named config, or `configs/default.toml` when none is named, and checks it against
/// the built-in members.
pub fn load_config(file: Option<&Path>) -> anyhow::Result<Config> {
    load_config_with(file, &Registry::builtin())
}

/// [`load_config`] against a given registry (a test's, with members of its own).
pub fn load_config_with(file: Option<&Path>, registry: &Registry) -> anyhow::Result<Config> {
    let path = match file {
        Some(p) => p.to_path_buf(),
        None => {
            let p = PathBuf::from("configs/default.toml");
            if !p.exists() {
                anyhow::bail!("no config given and configs/default.toml is not in the current directory: pass a config file");
            }
            p
        }
    };
    let config = Config::load(&path)?;
    if let Err(e) = check_members(&config, registry) {
        // The line where the offending name first appears, when it is quoted in the file.
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let quoted = |l: &str| {
            l.contains(&format!("\"{}\"", e.name)) || l.contains(&format!(".{}]", e.name))
        };
        let line = if e.name.is_empty() {
            None
        } else {
            text.lines().position(quoted)
        };
        return Err(match line {
            Some(l) => af_core::ConfigError::Parse {
                path,
                line: l + 1,
                column: 1,
                message: e.message,
            },
            None => af_core::ConfigError::Invalid {
                path,
                message: e.message,
            },
        }
        .into());
    }
    Ok(config)
}

/// A member setting the registry refuses: the name at fault and the whole message.
#[derive(Debug)]
pub struct MemberCheckError {
    pub name: String,
    pub message: String,
}

impl std::fmt::Display for MemberCheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What af-core cannot check because the members are af-nn's: every member a config names
/// exists, each member table belongs to a member, every member's settings are valid, the pool's
/// members and the audit's detectors each hold at most one frozen-embedding member (`encoder` or
/// `torchscript`), the model of `lm-likelihood` is there when a phase names it, and the audit's
/// detectors read text (a dataset to audit has no LM features).
pub fn check_members(config: &Config, registry: &Registry) -> Result<(), MemberCheckError> {
    let fail = |name: &str, message: String| MemberCheckError {
        name: name.to_string(),
        message,
    };
    let known = || registry.names().join(", ");
    for phase in &config.filter.stages {
        for m in &phase.members {
            registry.lookup(m).map_err(|e| {
                fail(
                    m.as_str(),
                    format!("[[filter.stages]] `{}`: {e}", phase.name),
                )
            })?;
        }
    }
    for m in config
        .ablate
        .members
        .iter()
        .chain(config.ablate.compositions.iter().flat_map(|c| &c.members))
    {
        registry
            .lookup(m)
            .map_err(|e| fail(m.as_str(), format!("[ablate]: {e}")))?;
    }
    // The design's own rules, once its names are known to be members; a config that leaves
    // [ablate] alone is not held to them (its leave-one-out may not fit a single-member schedule).
    if !config.ablate.is_default() {
        config
            .ablate
            .compositions(&config.filter)
            .map_err(|message| fail("", message))?;
    }
    // The filter's phases and the ablations share the pool's table, which holds one set of
    // frozen embeddings.
    let pool_members = crate::committee::named_members(config);
    let last_encoded = |members: &[af_core::MemberName]| {
        members
            .iter()
            .rev()
            .find(|m| {
                registry
                    .encoded_member(std::slice::from_ref(m))
                    .is_ok_and(|e| e.is_some())
            })
            .map_or(String::new(), |m| m.to_string())
    };
    // The pool's LM scores are computed when the filter starts, after generation: a model that
    // is not there is better found now.
    if let Err(e) = registry.lm_likelihood(&pool_members, &config.committee) {
        return Err(fail(
            af_nn::committee::members::lm_likelihood::NAME,
            format!("[[filter.stages]] and [ablate]: {e}"),
        ));
    }
    if let Err(e) = registry.encoded_member(&pool_members) {
        return Err(fail(
            &last_encoded(&pool_members),
            format!("[[filter.stages]] and [ablate]: {e}"),
        ));
    }
    if let af_core::SwapHead::Member(m) = &config.filter.swap_head {
        registry
            .lookup(m)
            .map_err(|e| fail(m.as_str(), format!("[filter] swap-head: {e}")))?;
    }
    // A fine-tuned member (`encoder-ft`) re-scores what the rest of its phase shortlists.
    let compositions = if config.ablate.is_default() {
        Vec::new()
    } else {
        config
            .ablate
            .compositions(&config.filter)
            .unwrap_or_default()
    };
    let phases = config
        .filter
        .stages
        .iter()
        .map(|p| ("[[filter.stages]]".to_string(), p));
    let phases = phases.chain(compositions.iter().flat_map(|c| {
        c.stages
            .iter()
            .map(move |p| (format!("[ablate] composition `{}`,", c.name), p))
    }));
    for (within, phase) in phases {
        if let Some(af_core::SwapHead::Member(m)) = &phase.swap_head {
            registry.lookup(m).map_err(|e| {
                fail(
                    m.as_str(),
                    format!("{within} `{}` swap-head: {e}", phase.name),
                )
            })?;
        }
        phase
            .check_driving(&config.filter.swap_head, config.committee.joint, &within)
            .map_err(|message| fail("", message))?;
        let fine_tuned = registry
            .fine_tuned(&phase.members, &config.committee)
            .map_err(|e| fail("", format!("{within} `{}`: {e}", phase.name)))?;
        if let Some((name, _)) = fine_tuned {
            if phase.members.iter().all(|m| {
                registry
                    .get(m.as_str())
                    .is_some_and(MemberKind::is_fine_tuned)
            }) {
                return Err(fail(
                    name,
                    format!("{within} `{}`: `{name}` re-scores a shortlist that the stage's other members choose, and the stage has none (add one, e.g. \"mlp\" or \"cnn\")", phase.name),
                ));
            }
        }
    }
    if let Some(name) = config
        .committee
        .member
        .keys()
        .find(|name| registry.get(name).is_none())
    {
        return Err(fail(
            name,
            format!(
                "[committee.member.{name}]: no member is called `{name}` (the members are {})",
                known()
            ),
        ));
    }
    // Every member's settings, used or not: the flat keys are shared, and a bad one is a bad
    // config whichever phase would have met it first.
    for name in registry.names() {
        let member = registry.get(name).expect("a registered name");
        member
            .settings(&config.committee)
            .map_err(|message| fail(name, message))?;
    }
    if let Err(e) = registry.encoded_member(&config.audit.models) {
        return Err(fail(
            &last_encoded(&config.audit.models),
            format!("[audit] models: {e}"),
        ));
    }
    for m in &config.audit.models {
        let member = registry
            .lookup(m)
            .map_err(|e| fail(m.as_str(), format!("[audit] models: {e}")))?;
        let Some(member) = member.joint() else {
            return Err(fail(m.as_str(), format!("[audit] models: `{m}` is fine-tuned inside the AF loop and is not an audit detector (text members: {})", registry.text_members().join(", "))));
        };
        if member.columns().contains(&Column::Features) {
            return Err(fail(
                m.as_str(),
                format!("[audit] models: `{m}` reads LM features, which a dataset to audit does not have (text members: {})", registry.text_members().join(", ")),
            ));
        }
        if member.columns().contains(&Column::LmLikelihood) {
            return Err(fail(
                m.as_str(),
                format!("[audit] models: `{m}` reads a pretrained LM's scores of a pool, which a dataset to audit does not have (`af eval` scores a dataset with the LM; text members: {})", registry.text_members().join(", ")),
            ));
        }
    }
    Ok(())
}

/// The tagger a config names, or the built-in one.
pub fn load_tagger(model: Option<&Path>) -> anyhow::Result<af_text::Tagger> {
    match model {
        None => Ok(af_text::Tagger::builtin()),
        Some(p) => {
            let bytes = std::fs::read(p)
                .with_context(|| format!("cannot read tagger model {}", p.display()))?;
            af_text::Tagger::from_bytes(&bytes)
                .with_context(|| format!("tagger model {}", p.display()))
        }
    }
}

/// The device the config's `[run] device` asks for, checked against what libtorch can use.
pub fn device(config: &Config) -> anyhow::Result<tch::Device> {
    let device = device_named(&config.run.device)?;
    // The `auto` budget is what was free before the run's first stage used the device.
    first_free(device);
    Ok(device)
}

/// What a CUDA device reported free the first time this process asked (per device): later
/// readings would count the blocks earlier stages left in libtorch's cache as taken.
fn first_free(device: tch::Device) -> Option<u64> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static FIRST: OnceLock<Mutex<HashMap<usize, Option<u64>>>> = OnceLock::new();
    let tch::Device::Cuda(index) = device else {
        return None;
    };
    let mut first = FIRST
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *first
        .entry(index)
        .or_insert_with(|| af_nn::runtime::device_memory_info(device).map(|(free, _)| free))
}

/// An empty memory plan with the run's device memory budget (`[run] device-memory`): the size it
/// names; with `auto`, what a CUDA device reported free when the run first selected it (before
/// any stage put tensors there), and no bound on the CPU.
pub fn memory_plan(config: &Config, device: tch::Device) -> af_core::memory::MemoryPlan {
    use af_core::memory::{DeviceMemory, MemoryPlan};
    match (config.run.device_memory, device) {
        (DeviceMemory::Bytes(b), _) => MemoryPlan::new(Some(b), "[run] device-memory"),
        (DeviceMemory::Auto, tch::Device::Cuda(i)) => match first_free(device) {
            Some(f) => MemoryPlan::new(
                Some(f),
                format!("free on cuda:{i} when the run first used it"),
            ),
            None => MemoryPlan::new(None, format!("cuda:{i} did not say what is free")),
        },
        (DeviceMemory::Auto, _) => MemoryPlan::new(None, "the CPU with device-memory = \"auto\""),
    }
}

/// A device named as in configs and `--device` (`auto`, `cpu`, `cuda`, `cuda:N`), checked.
pub fn device_named(name: &str) -> anyhow::Result<tch::Device> {
    let request = af_core::config::parse_device(name).map_err(anyhow::Error::msg)?;
    Ok(af_nn::select_device(request)?)
}

/// Sets rayon's and libtorch's thread counts from the config (once per process for rayon).
pub fn init_threads(config: &Config) {
    rayon::ThreadPoolBuilder::new()
        .num_threads(config.run.threads)
        .build_global()
        .ok();
    af_nn::runtime::set_threads(config.run.threads);
}

/// Makes `out` an empty directory for a command's outputs; one that holds files is replaced only
/// with `force`.
pub fn empty_out_dir(out: &Path, force: bool) -> anyhow::Result<()> {
    if out.exists()
        && std::fs::read_dir(out)
            .with_context(|| format!("cannot read {}", out.display()))?
            .next()
            .is_some()
    {
        anyhow::ensure!(
            force,
            "{} is not empty: pass --force to replace what is there",
            out.display()
        );
        std::fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))
}
