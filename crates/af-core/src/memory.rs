//! Device memory: the budget a run may take on its device (`[run] device-memory`) and the plan
//! that sizes a stage's device batches to fit in it. Pure arithmetic on the shapes a config and
//! its models give, so the CPU tests it as it is (only the budget of `auto` comes from the
//! device); the stages apply the plan, print it and record it in `stage.json`.
//!
//! A batch's size is the configured one unless that would not fit: then the largest that fits
//! within [`USABLE_SHARE`] of the budget, after what the stage holds for the whole time
//! (models' weights, the candidate table). A stage whose resident memory and smallest batch do
//! not fit stops before its work, saying which batch, how much it needs and how much there is.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The share of the budget batches are sized to: the rest is left to the caching allocator's
/// fragmentation, cuBLAS and cuDNN workspaces, and the estimates' own error.
pub const USABLE_SHARE: f64 = 0.85;

/// `[run] device-memory`: `"auto"` (what the device reports free when the run first selects it;
/// on the CPU, no bound), or a number of bytes, written as an integer or with a unit (`"40GB"`,
/// `"24 GiB"`, `"512MB"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceMemory {
    #[default]
    Auto,
    Bytes(u64),
}

impl DeviceMemory {
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t == "auto" {
            return Ok(Self::Auto);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = (t[..split].trim(), t[split..].trim());
        let scale: f64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            "kib" => 1024.0,
            "mib" => 1024f64.powi(2),
            "gib" => 1024f64.powi(3),
            "tib" => 1024f64.powi(4),
            _ => return Err(format!("`{text}`: expected \"auto\" or a size such as 40GB, 24GiB or 512MB (unit {unit:?} is not one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
        };
        let value: f64 = number.parse().map_err(|_| {
            format!("`{text}`: expected \"auto\" or a size such as 40GB, 24GiB or 512MB")
        })?;
        let bytes = (value * scale).round();
        if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
            return Err(format!("`{text}`: must be at least one byte"));
        }
        Ok(Self::Bytes(bytes as u64))
    }
}

impl Serialize for DeviceMemory {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Bytes(b) => s.serialize_u64(*b),
        }
    }
}

impl<'de> Deserialize<'de> for DeviceMemory {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bytes(u64),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Bytes(0) => Err(serde::de::Error::custom(
                "device-memory must be at least one byte",
            )),
            Written::Bytes(b) => Ok(Self::Bytes(b)),
            Written::Text(t) => Self::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// A stage cannot fit in the budget even with its smallest batch.
#[derive(Debug, Error, PartialEq)]
#[error("{what} ({key}) cannot fit in the device memory budget: it needs {} ({} held for the stage and {} for the smallest batch of {minimum} {unit}) of the {} usable ({:.0}% of {}, {budget_from}); it fits with a smaller {key} (a training step's `[committee] batch-items` is never cut by the plan: it changes what AF trains), a larger [run] device-memory where the device has more free, a larger device, or smaller models", human_bytes(*needs), human_bytes(*resident), human_bytes(needs - resident), human_bytes(*usable), USABLE_SHARE * 100.0, human_bytes(*budget))]
pub struct CannotFit {
    pub what: String,
    pub key: String,
    pub unit: String,
    pub minimum: u64,
    pub needs: u64,
    pub resident: u64,
    pub usable: u64,
    pub budget: u64,
    pub budget_from: String,
}

/// Bytes as a person reads them: GB, MB or kB, whichever keeps the number short.
pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.2} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b => format!("{:.1} kB", b as f64 / 1e3),
    }
}

/// One batch the plan sized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedBatch {
    /// What it batches, in words.
    pub what: String,
    /// The config key that sets its size, or the built-in limit it replaces.
    pub key: String,
    /// What it counts: rows, candidates, logit elements.
    pub unit: String,
    pub configured: u64,
    pub planned: u64,
    /// Estimated device bytes per unit at the batch's peak.
    pub bytes_per_unit: u64,
    /// Estimated device bytes the stage holds while the batch runs (models' weights, the
    /// candidate table).
    pub resident_bytes: u64,
    /// `resident_bytes + planned * bytes_per_unit`.
    pub peak_bytes: u64,
}

/// A stage's device batches and the budget they were sized to (`stage.json`'s `memory_plan`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// `None`: no bound (the CPU with `device-memory = "auto"`): every batch is as configured.
    pub budget_bytes: Option<u64>,
    /// Where the budget came from.
    pub budget_from: String,
    pub batches: Vec<PlannedBatch>,
}

impl MemoryPlan {
    pub fn new(budget_bytes: Option<u64>, budget_from: impl Into<String>) -> Self {
        Self {
            budget_bytes,
            budget_from: budget_from.into(),
            batches: Vec::new(),
        }
    }

    /// Sizes one batch: `configured` when it fits (or there is no budget), else the most units
    /// that fit beside `resident`; an error when not even `minimum` units do (boxed: it is the
    /// rare path, and carries the whole account).
    #[allow(clippy::too_many_arguments)]
    pub fn size(
        &mut self,
        what: &str,
        key: &str,
        unit: &str,
        configured: u64,
        minimum: u64,
        bytes_per_unit: u64,
        resident_bytes: u64,
    ) -> Result<u64, Box<CannotFit>> {
        let planned = match self.budget_bytes {
            None => configured,
            Some(budget) => {
                let usable = (budget as f64 * USABLE_SHARE) as u64;
                let fits = usable.saturating_sub(resident_bytes) / bytes_per_unit.max(1);
                if fits < minimum.min(configured) {
                    return Err(Box::new(CannotFit {
                        what: what.into(),
                        key: key.into(),
                        unit: unit.into(),
                        minimum: minimum.min(configured),
                        needs: resident_bytes + minimum.min(configured) * bytes_per_unit,
                        resident: resident_bytes,
                        usable,
                        budget,
                        budget_from: self.budget_from.clone(),
                    }));
                }
                configured.min(fits)
            }
        };
        self.batches.push(PlannedBatch {
            what: what.into(),
            key: key.into(),
            unit: unit.into(),
            configured,
            planned,
            bytes_per_unit,
            resident_bytes,
            peak_bytes: resident_bytes + planned * bytes_per_unit,
        });
        Ok(planned)
    }

    /// The estimated peak over the stage's batches.
    pub fn peak_bytes(&self) -> u64 {
        self.batches.iter().map(|b| b.peak_bytes).max().unwrap_or(0)
    }

    /// One line for the log: the budget, and each batch that the budget made smaller.
    pub fn line(&self) -> String {
        let budget = match self.budget_bytes {
            Some(b) => format!("{} ({})", human_bytes(b), self.budget_from),
            None => format!("no bound ({})", self.budget_from),
        };
        let cut: Vec<String> = self
            .batches
            .iter()
            .filter(|b| b.planned < b.configured)
            .map(|b| format!("{} {} -> {} {}", b.key, b.configured, b.planned, b.unit))
            .collect();
        format!(
            "device memory {budget}: estimated peak {}{}",
            human_bytes(self.peak_bytes()),
            if cut.is_empty() {
                ", every batch as configured".to_string()
            } else {
                format!("; smaller to fit: {}", cut.join(", "))
            }
        )
    }
}

/// Estimated device bytes of one row of af's LSTM LM sampler at its peak step: the live
/// `[rows, vocab]` f32 copies of one step (logits, their log-softmax for the features, tempered
/// logits, the nucleus's mask and scatter, softmax, cumulative sum), the recurrent state of every
/// layer (h, c and the gates), and the row's drawn ids, log-probabilities and uniforms.
pub fn lstm_sampling_row_bytes(vocab: u64, hidden: u64, layers: u64, max_tokens: u64) -> u64 {
    const STEP_COPIES: u64 = 7;
    4 * (STEP_COPIES * vocab + (6 * layers + 4) * hidden) + 16 * max_tokens
}

/// Estimated device bytes per logit element of af's LM feature pass: the logits, their log-softmax
/// and a copy in the other precision under autocast.
pub const LM_FEATURE_BYTES_PER_LOGIT: u64 = 4 * 3;

/// Bytes of one af LSTM LM (both directions) in f32: embeddings, LSTM layers and output layers.
pub fn lstm_lm_bytes(vocab: u64, embedding: u64, hidden: u64, layers: u64) -> u64 {
    let lstm = |input: u64| 4 * hidden * (input + hidden + 2);
    let one_direction = vocab * embedding
        + lstm(embedding)
        + (layers.saturating_sub(1)) * lstm(hidden)
        + hidden * vocab
        + vocab;
    4 * 2 * one_direction
}

/// The shape of a Llama-architecture generator, as [`llama_sampling_row_bytes`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct LlamaShape {
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub vocab: u64,
}

/// Estimated device bytes of one row of the pretrained generator's sampling: its key-value cache
/// for the prompt and the ending (twice: a step's row selection copies it), the prompt pass's
/// attention scores, bias and probabilities and its hidden activations (a feed-forward layer is
/// about three times the width), and a step's `[rows, vocabulary]` f32 copies.
pub fn llama_sampling_row_bytes(shape: LlamaShape, prompt_tokens: u64, max_tokens: u64) -> u64 {
    let head_dim = shape.hidden / shape.heads.max(1);
    let capacity = prompt_tokens + max_tokens;
    let cache = 2 * 2 * shape.layers * shape.kv_heads * capacity * head_dim;
    let attention = 3 * shape.heads * prompt_tokens * capacity;
    let hidden = 12 * prompt_tokens * shape.hidden;
    4 * (cache + attention + hidden + 6 * shape.vocab)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_reads_auto_integers_and_units() {
        assert_eq!(DeviceMemory::parse("auto"), Ok(DeviceMemory::Auto));
        assert_eq!(
            DeviceMemory::parse("40GB"),
            Ok(DeviceMemory::Bytes(40_000_000_000))
        );
        assert_eq!(
            DeviceMemory::parse("24 GiB"),
            Ok(DeviceMemory::Bytes(24 * (1 << 30)))
        );
        assert_eq!(
            DeviceMemory::parse("1.5gb"),
            Ok(DeviceMemory::Bytes(1_500_000_000))
        );
        assert_eq!(DeviceMemory::parse("512"), Ok(DeviceMemory::Bytes(512)));
        for bad in ["", "lots", "40 GBs", "0GB", "-3GB"] {
            let e = DeviceMemory::parse(bad).unwrap_err();
            assert!(e.contains("auto") || e.contains("byte"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_batch_keeps_its_size_when_it_fits_and_shrinks_when_it_does_not() {
        // No bound: as configured, whatever it costs.
        let mut free = MemoryPlan::new(None, "the CPU");
        assert_eq!(
            free.size("rows", "[k] rows", "rows", 1000, 1, 1 << 40, 0),
            Ok(1000)
        );
        assert!(free.line().contains("every batch as configured"));

        // 1 GB, 85% usable, 100 MB resident: 750 MB for rows of 1 MB.
        let mut plan = MemoryPlan::new(Some(1_000_000_000), "[run] device-memory");
        assert_eq!(
            plan.size("rows", "[k] rows", "rows", 500, 1, 1_000_000, 100_000_000),
            Ok(500)
        );
        assert_eq!(
            plan.size("rows", "[k] rows", "rows", 5000, 1, 1_000_000, 100_000_000),
            Ok(750)
        );
        let b = &plan.batches[1];
        assert_eq!((b.configured, b.planned), (5000, 750));
        assert_eq!(b.peak_bytes, 850_000_000);
        assert!(b.peak_bytes as f64 <= 1e9 * USABLE_SHARE);
        assert_eq!(plan.peak_bytes(), 850_000_000);
        assert!(
            plan.line().contains("[k] rows 5000 -> 750 rows"),
            "{}",
            plan.line()
        );
    }

    #[test]
    fn a_stage_that_cannot_fit_says_what_it_needs() {
        let mut plan = MemoryPlan::new(Some(1_000_000_000), "[run] device-memory");
        let e = plan
            .size(
                "sampling",
                "[generate] batch-sequences",
                "rows",
                64,
                8,
                20_000_000,
                700_000_000,
            )
            .unwrap_err();
        assert_eq!(e.needs, 700_000_000 + 8 * 20_000_000);
        assert_eq!(e.usable, 850_000_000);
        let m = e.to_string();
        for part in [
            "sampling",
            "[generate] batch-sequences",
            "860.0 MB",
            "850.0 MB",
            "8 rows",
            "device-memory",
        ] {
            assert!(m.contains(part), "{part} in {m}");
        }
        assert!(
            plan.batches.is_empty(),
            "a batch that does not fit is not planned"
        );
    }

    #[test]
    fn estimates_grow_with_the_shapes_they_read() {
        let row = lstm_sampling_row_bytes(30_000, 512, 2, 25);
        assert!(row > 6 * 4 * 30_000 && row < 8 * 4 * 30_000, "{row}");
        assert!(lstm_sampling_row_bytes(60_000, 512, 2, 25) > row);
        // A 512-d, 2-layer LM over 30k words: about 2 x (15M + 15M + 4M) floats.
        let lm = lstm_lm_bytes(30_000, 512, 512, 2);
        assert!(lm > 250_000_000 && lm < 300_000_000, "{lm}");
        // SmolLM2-135M, a 150-token prompt with example captions, 25-token endings: the cache
        // alone is 2 x 2 x 30 x 3 x 175 x 64 floats, 16 MB; with the rest about 20 MB a row.
        let smol = LlamaShape {
            layers: 30,
            hidden: 576,
            heads: 9,
            kv_heads: 3,
            vocab: 49_152,
        };
        let row = llama_sampling_row_bytes(smol, 150, 25);
        assert!(row > 16_000_000 && row < 30_000_000, "{row}");
        assert!(llama_sampling_row_bytes(smol, 300, 25) > row);
    }
}
