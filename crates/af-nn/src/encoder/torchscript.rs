//! The TorchScript backend of [`super::Encoder`]: any module whose `forward(input_ids [N, T] i64,
//! attention_mask [N, T] i64)` returns one vector per text, `[N, D]`, loaded with
//! `tch::CModule`. It owns loading the module, checking that interface once at load (so a module
//! that does not fit fails there, naming the file, not in the middle of a run) and calling it;
//! tokenising, batching and normalising are the encoder's, shared with the BERT backend.
//!
//! TorchScript is deprecated upstream: this is a bridge for models af does not implement
//! (docs/decisions/146-a-bridge-not-a-second-implementation.md). `scripts/export-torchscript` writes such a module from a Hugging Face
//! encoder.

use std::path::{Path, PathBuf};

use tch::{CModule, Device, Kind, Tensor};

use super::EncoderError;

/// The longest input in tokens when the options give none: a module does not say its own, and
/// 256 is sentence-transformers' usual `max_seq_length` (all-MiniLM-L6-v2's).
pub const DEFAULT_MAX_LENGTH: usize = 256;

pub(crate) struct ScriptModule {
    module: CModule,
    path: PathBuf,
}

impl ScriptModule {
    /// Loads `path` onto `device` in eval mode (dropout off), as it was saved: af does not change
    /// a module's precision.
    pub(crate) fn load(path: &Path, device: Device) -> Result<Self, EncoderError> {
        if !path.is_file() {
            return Err(EncoderError::File {
                path: path.to_path_buf(),
                message: "no such file".into(),
            });
        }
        let mut module = CModule::load_on_device(path, device).map_err(|e| EncoderError::File {
            path: path.to_path_buf(),
            message: format!(
                "not a TorchScript module libtorch can load: {}",
                first_line(&e.to_string())
            ),
        })?;
        module.f_set_eval()?;
        Ok(Self {
            module,
            path: path.to_path_buf(),
        })
    }

    /// Sentence vectors, `[N, D]` f32, of a batch of token ids and their attention mask (both
    /// `[N, T]` i64 on the module's device).
    pub(crate) fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor, EncoderError> {
        let bad = |message: String| EncoderError::File {
            path: self.path.clone(),
            message,
        };
        let out = self.module.forward_ts(&[ids, mask]).map_err(|e| {
            bad(format!(
                "forward(input_ids [N, T] int64, attention_mask [N, T] int64) failed: {}",
                first_line(&e.to_string())
            ))
        })?;
        let n = ids.size()[0];
        match out.size().as_slice() {
            [rows, d] if *rows == n && *d > 0 && out.is_floating_point() => Ok(out.to_kind(Kind::Float)),
            shape => Err(bad(format!("forward returned a {:?} tensor of shape {shape:?} for a batch of {n}: expected [{n}, D] floats, one vector per text", out.kind()))),
        }
    }

    /// The length of the module's vectors: one forward pass over `ids` and `mask` (a probe batch).
    pub(crate) fn probe_dim(&self, ids: &Tensor, mask: &Tensor) -> Result<usize, EncoderError> {
        Ok(self.forward(ids, mask)?.size()[1] as usize)
    }
}

/// libtorch's messages carry a C++ backtrace after the first line.
fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or(message)
}
