pub mod aflite;
pub mod bench;
pub mod committee;
pub mod doctor;
pub mod export;
pub mod features;
pub mod filter;
pub mod generate;
pub mod lm;
pub mod pairs;
pub mod report;
pub mod tagger;

use std::path::{Path, PathBuf};

use af_core::Config;
use anyhow::Context;

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
    let request = af_core::config::parse_device(&config.run.device).map_err(anyhow::Error::msg)?;
    Ok(af_nn::select_device(request)?)
}
