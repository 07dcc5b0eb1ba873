pub mod aflite;
pub mod assemble;
pub mod audit;
pub mod bench;
pub mod committee;
pub mod doctor;
pub mod export;
pub mod features;
pub mod filter;
pub mod generate;
pub mod lm;
pub mod pairs;
pub mod pool;
pub mod report;
pub mod table;
pub mod tagger;

use std::path::{Path, PathBuf};

use af_core::Config;
use anyhow::Context;

/// Where and how a standalone command (not a stage) computes: the options `af aflite` and
/// `af features` share.
#[derive(clap::Args)]
pub struct ComputeArgs {
    #[arg(long, default_value_t = 13)]
    pub seed: u64,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// CPU threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Replace what is in --out.
    #[arg(long)]
    pub force: bool,
}

/// Loads the named config, or `configs/default.toml` when none is named.
pub fn load_config(file: Option<&Path>) -> anyhow::Result<Config> {
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
    Ok(Config::load(&path)?)
}

/// The tagger a config names, or the built-in one.
pub fn load_tagger(model: Option<&Path>) -> anyhow::Result<af_text::Tagger> {
    match model {
        None => Ok(af_text::Tagger::builtin()),
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("cannot read tagger model {}", p.display()))?;
            af_text::Tagger::from_bytes(&bytes).with_context(|| format!("tagger model {}", p.display()))
        }
    }
}

/// The device the config's `[run] device` asks for, checked against what libtorch can use.
pub fn device(config: &Config) -> anyhow::Result<tch::Device> {
    device_named(&config.run.device)
}

/// A device named as in configs and `--device` (`auto`, `cpu`, `cuda`, `cuda:N`), checked.
pub fn device_named(name: &str) -> anyhow::Result<tch::Device> {
    let request = af_core::config::parse_device(name).map_err(anyhow::Error::msg)?;
    Ok(af_nn::select_device(request)?)
}

/// Makes `out` an empty directory for a command's outputs; one that holds files is replaced only
/// with `force`.
pub fn empty_out_dir(out: &Path, force: bool) -> anyhow::Result<()> {
    if out.exists() && std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))?.next().is_some() {
        anyhow::ensure!(force, "{} is not empty: pass --force to replace what is there", out.display());
        std::fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))
}
