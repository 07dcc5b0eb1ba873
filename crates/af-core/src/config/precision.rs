//! The arithmetic of inference on the device, which `[generate]` and `[committee]` each name.

use serde::{Deserialize, Serialize};

/// The arithmetic of inference on the device.
///
/// `mixed` runs libtorch's CUDA autocast: matrix products and LSTMs in fp16 on tensor cores,
/// softmaxes and sums in fp32. `auto` is `mixed` on a GPU and `fp32` on the CPU (where autocast
/// does nothing). Neither printed nor fingerprinted when `auto`, so that run directories made
/// before the key existed stay up to date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    #[default]
    Auto,
    Fp32,
    Mixed,
}

impl Precision {
    pub fn is_auto(&self) -> bool {
        *self == Precision::Auto
    }

    /// Whether to run in mixed precision on a device that is (or is not) a GPU.
    pub fn mixed_on(self, gpu: bool) -> bool {
        gpu && self != Precision::Fp32
    }
}
