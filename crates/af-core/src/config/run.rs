//! `[run]`: where artifacts go, the seed, and the machine a run asks for.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::memory::DeviceMemory;

/// Where artifacts go and what every stage shares.
///
/// Stages record the seed in their fingerprints; the directory, threads and device do not change
/// what a stage computes from its inputs (the device does through the arithmetic, which
/// `precision` names where it matters), so no fingerprint records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunConfig {
    /// The run directory; each stage writes into a subdirectory named after it.
    pub dir: PathBuf,
    /// The seed every random choice of the run derives from.
    pub seed: u64,
    /// CPU threads for rayon and libtorch; 0 means one per core.
    pub threads: usize,
    /// "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
    pub device: String,
    /// The device memory the run's batches are sized to ([`DeviceMemory`]): "auto" (what a CUDA
    /// device reports free when the run first selects it; no bound on the CPU) or a size ("40GB").
    #[serde(skip_serializing_if = "super::is_default")]
    pub device_memory: DeviceMemory,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("runs/default"),
            seed: 13,
            threads: 0,
            device: "auto".into(),
            device_memory: DeviceMemory::Auto,
        }
    }
}

impl RunConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        parse_device(&self.device)
            .map(|_| ())
            .map_err(|m| format!("[run] device: {m}"))
    }
}

/// The device a config asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRequest {
    Auto,
    Cpu,
    Cuda(usize),
}

pub fn parse_device(s: &str) -> Result<DeviceRequest, String> {
    match s {
        "auto" => Ok(DeviceRequest::Auto),
        "cpu" => Ok(DeviceRequest::Cpu),
        "cuda" => Ok(DeviceRequest::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(DeviceRequest::Cuda)
            .ok_or_else(|| format!("`{s}` is not one of auto, cpu, cuda, cuda:N")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("cuda:1"), Ok(DeviceRequest::Cuda(1)));
        assert!(parse_device("gpu").is_err());
        let err = crate::config::checked("[run]\ndevice = \"gpu\"\n").unwrap_err();
        assert!(err.to_string().contains("[run] device: `gpu`"), "{err}");
    }
}
