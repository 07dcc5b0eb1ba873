//! Stages of a run: each writes into `<run dir>/<stage>/`, its artifacts first (atomically), then
//! `config.toml` (the resolved config it ran with) and last `stage.json`, the record that it
//! finished and with what inputs. A stage whose `stage.json` matches the current fingerprint is
//! skipped; a crash leaves no `stage.json`, so the stage runs again.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use af_core::Config;
use anyhow::Context;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageName {
    Pairs,
}

/// The stages `af run` runs, in order. Later issues add lm-train, generate, filter, export, report.
pub const ALL_STAGES: &[StageName] = &[StageName::Pairs];

impl StageName {
    pub fn dir_name(self) -> &'static str {
        match self {
            StageName::Pairs => "pairs",
        }
    }
}

#[derive(Serialize, Deserialize, PartialEq)]
struct StageRecord {
    stage: StageName,
    fingerprint: serde_json::Value,
    seconds: f64,
    af_version: String,
}

pub fn run_stages(config: &Config, stages: &[StageName], force: &[StageName]) -> anyhow::Result<()> {
    rayon::ThreadPoolBuilder::new().num_threads(config.run.threads).build_global().ok();
    af_nn::runtime::set_threads(config.run.threads);
    for &stage in stages {
        let dir = config.run.dir.join(stage.dir_name());
        let fingerprint = fingerprint(config, stage)?;
        let record_path = dir.join("stage.json");
        if !force.contains(&stage) && is_up_to_date(&record_path, &fingerprint) {
            tracing::info!("{}: up to date in {} (--force {} reruns it)", stage.dir_name(), dir.display(), stage.dir_name());
            continue;
        }
        // Whatever happens next, the old record no longer describes what is on disk.
        match std::fs::remove_file(&record_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", record_path.display()))
            }
            _ => {}
        }
        let start = Instant::now();
        match stage {
            StageName::Pairs => crate::commands::pairs::run(config, &dir)?,
        }
        af_core::atomic::write(dir.join("config.toml"), config.to_toml().as_bytes())?;
        let record = StageRecord {
            stage,
            fingerprint,
            seconds: start.elapsed().as_secs_f64(),
            af_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        af_core::atomic::write(&record_path, serde_json::to_string_pretty(&record)?.as_bytes())?;
        tracing::info!("{}: done in {:.1} s, outputs in {}", stage.dir_name(), record.seconds, dir.display());
    }
    Ok(())
}

fn is_up_to_date(record_path: &Path, fingerprint: &serde_json::Value) -> bool {
    let Ok(text) = std::fs::read_to_string(record_path) else { return false };
    serde_json::from_str::<StageRecord>(&text).is_ok_and(|r| &r.fingerprint == fingerprint)
}

/// What a stage's outputs depend on: its config sections and its input files (size, mtime).
fn fingerprint(config: &Config, stage: StageName) -> anyhow::Result<serde_json::Value> {
    Ok(match stage {
        StageName::Pairs => {
            let mut inputs = Vec::new();
            for input in &config.pairs.inputs {
                inputs.push(file_stamp(&input.path)?);
            }
            json!({
                "seed": config.run.seed,
                "pairs": config.pairs,
                "tagger": config.tagger,
                "tagger_file": config.tagger.model.as_deref().map(file_stamp).transpose()?,
                "inputs": inputs,
            })
        }
    })
}

fn file_stamp(path: &Path) -> anyhow::Result<serde_json::Value> {
    let paths: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut stamps = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(&p).with_context(|| format!("cannot read input {}", p.display()))?;
        let mtime = meta.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|d| d.as_nanos());
        stamps.push(json!({"path": p, "bytes": meta.len(), "mtime_ns": mtime.map(|m| m.to_string())}));
    }
    Ok(json!(stamps))
}
