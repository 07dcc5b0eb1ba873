//! Feature matrices written by any encoder (`.npy`, `.safetensors`, `.csv`) and the instance
//! lists beside them (JSONL with an id, a label and optionally a group), for `af aflite`.

use std::path::Path;

use crate::text::{
    column_of, expect_key, kind_and_value, parse_json, strip_bom, unique_columns, unique_keys,
    Step, UniqueIds,
};
use crate::ReadError;

/// A dense [rows, dim] matrix, row-major, as f32.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureMatrix {
    pub rows: usize,
    pub dim: usize,
    pub data: Vec<f32>,
}

/// Reads a feature matrix, the format chosen by the file's extension.
pub fn read_features(path: &Path) -> Result<FeatureMatrix, ReadError> {
    let invalid = |message: String| ReadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let formats = "af reads .npy, .safetensors or .csv";
    match path.extension().map(|e| e.to_string_lossy()).as_deref() {
        Some("npy") => read_npy(path),
        Some("safetensors") => read_safetensors(path),
        Some("csv") => read_csv(path),
        Some(other) => Err(invalid(format!(
            "unknown feature file type `.{other}`: {formats}"
        ))),
        None => Err(invalid(format!("no file extension: {formats}"))),
    }
}

fn bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Decodes little-endian f32 or f64 values of a matrix `dim` wide. A value that is not finite
/// (NaN, an infinity) or that float32 cannot hold (a float64 beyond its range) is an error naming
/// its place: the classifiers would turn it into confident, wrong predictions without a word.
fn decode(raw: &[u8], width: usize, dim: usize) -> Result<Vec<f32>, String> {
    let mut out = Vec::with_capacity(raw.len() / width);
    for (i, c) in raw.chunks_exact(width).enumerate() {
        let wide = match width {
            4 => f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            _ => f64::from_le_bytes(c.try_into().expect("8 bytes")),
        };
        if let Some(problem) = float32_problem(wide, &format_float(wide)) {
            return Err(format!(
                "row {}, column {} (counting from 0): {problem}",
                i / dim,
                i % dim
            ));
        }
        out.push(wide as f32);
    }
    Ok(out)
}

/// A float64 in the shortest form that reads back the same (`1e300`, `NaN`, `-inf`).
fn format_float(v: f64) -> String {
    if v.is_finite() && v != 0.0 && (v.abs() >= 1e16 || v.abs() < 1e-4) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Why `v` (written `raw` in the file) cannot be a float32 feature, if it cannot: NaN and the
/// infinities are not finite; a finite number beyond float32's range would become one.
fn float32_problem(v: f64, raw: &str) -> Option<String> {
    // `1e400` is a finite number too large for float64 to hold, not an infinity the file names.
    let named = raw
        .trim()
        .trim_start_matches(['+', '-'])
        .to_ascii_lowercase();
    if v.is_nan() || (v.is_infinite() && named.starts_with("inf")) {
        Some(format!("{raw} is not finite"))
    } else if !(v as f32).is_finite() {
        Some(format!(
            "{raw} is out of float32 range (at most {:e})",
            f32::MAX
        ))
    } else {
        None
    }
}

/// A NumPy dtype string in words: `<f2` is float16, `>f4` big-endian float32; None if unknown.
fn dtype_in_words(descr: &str) -> Option<String> {
    let (order, code) = match descr.chars().next()? {
        o @ ('<' | '>' | '|' | '=') => (o, &descr[1..]),
        _ => ('=', descr),
    };
    let mut chars = code.chars();
    let kind = chars.next()?;
    let bytes: Option<usize> = chars.as_str().parse().ok();
    let sized = |name: &str| bytes.map_or_else(|| name.to_string(), |b| format!("{name}{}", b * 8));
    let words = match kind {
        'f' => sized("float"),
        'i' => sized("int"),
        'u' => sized("uint"),
        'c' => sized("complex"),
        'b' => "bool".into(),
        'U' => "text".into(),
        'S' | 'a' => "bytes".into(),
        'O' => "Python objects".into(),
        'M' => "datetime".into(),
        'm' => "timedelta".into(),
        'V' => "raw bytes".into(),
        _ => return None,
    };
    let multibyte = matches!(kind, 'f' | 'i' | 'u' | 'c') && bytes.is_some_and(|b| b > 1);
    Some(if order == '>' && multibyte {
        format!("big-endian {words}")
    } else {
        words
    })
}

/// NumPy's format: magic, version, a header dict (`descr`, `fortran_order`, `shape`), then data.
fn read_npy(path: &Path) -> Result<FeatureMatrix, ReadError> {
    let invalid = |message: String| ReadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let b = bytes(path)?;
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(invalid("not a .npy file (no \\x93NUMPY magic)".into()));
    }
    let (header_len, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        2 | 3 => return Err(invalid("truncated header".into())),
        v => {
            return Err(invalid(format!(
                "format version {v}: af reads versions 1, 2 and 3"
            )))
        }
    };
    let header = b
        .get(start..start + header_len)
        .ok_or_else(|| invalid("truncated header".into()))?;
    let header = String::from_utf8_lossy(header);
    let field = |key: &str| -> Option<String> {
        let at = header.find(&format!("'{key}'"))?;
        let rest = header[at + key.len() + 2..]
            .trim_start()
            .strip_prefix(':')?
            .trim_start();
        let end = match rest.chars().next()? {
            '(' => rest.find(')')? + 1,
            '[' => rest.find(']')? + 1,
            _ => rest.find([',', '}']).unwrap_or(rest.len()),
        };
        Some(rest[..end].trim().to_string())
    };
    let descr = field("descr").ok_or_else(|| invalid("no dtype (`descr`) in the header".into()))?;
    let reads = "af reads float32 (`<f4`) or float64 (`<f8`)";
    if descr.starts_with('[') {
        return Err(invalid(format!(
            "a structured dtype (named fields): {reads}"
        )));
    }
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let width = match descr {
        "<f4" => 4,
        "<f8" => 8,
        other => {
            let words = dtype_in_words(other)
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            return Err(invalid(format!("dtype `{other}`{words}: {reads}")));
        }
    };
    match field("fortran_order").as_deref() {
        Some("False") => {}
        Some("True") => {
            return Err(invalid(
                "Fortran-ordered array: save it with np.ascontiguousarray first".into(),
            ))
        }
        Some(other) => {
            return Err(invalid(format!(
                "fortran_order is `{other}`, expected True or False"
            )))
        }
        None => return Err(invalid("no fortran_order in the header".into())),
    }
    let shape = field("shape").ok_or_else(|| invalid("no shape in the header".into()))?;
    let dims: Vec<usize> = shape
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| invalid(format!("shape {shape} is not numbers")))
        })
        .collect::<Result<_, _>>()?;
    let [rows, dim] = dims[..] else {
        let n = dims.len();
        return Err(invalid(format!(
            "shape {shape} has {n} dimension{}: af reads a 2-D matrix (instances, features)",
            if n == 1 { "" } else { "s" }
        )));
    };
    let need = rows
        .checked_mul(dim)
        .and_then(|n| n.checked_mul(width))
        .ok_or_else(|| invalid(format!("shape ({rows}, {dim}) is too large")))?;
    let data = &b[start + header_len..];
    if data.len() != need {
        let dtype = if width == 4 { "float32" } else { "float64" };
        return Err(invalid(format!(
            "{} bytes of data: shape ({rows}, {dim}) of {dtype} needs {need}",
            data.len()
        )));
    }
    Ok(FeatureMatrix {
        rows,
        dim,
        data: decode(data, width, dim).map_err(invalid)?,
    })
}

/// safetensors: an 8-byte header length, a JSON header naming each tensor's dtype, shape and byte
/// range, then the data. The file must hold one 2-D F32 or F64 tensor.
fn read_safetensors(path: &Path) -> Result<FeatureMatrix, ReadError> {
    let invalid = |message: String| ReadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let b = bytes(path)?;
    let n = u64::from_le_bytes(
        b.get(..8)
            .ok_or_else(|| invalid("shorter than a safetensors header".into()))?
            .try_into()
            .expect("8 bytes"),
    ) as usize;
    let start = 8usize
        .checked_add(n)
        .filter(|&s| s <= b.len())
        .ok_or_else(|| invalid("truncated header".into()))?;
    let text =
        std::str::from_utf8(&b[8..start]).map_err(|_| invalid("header is not UTF-8".into()))?;
    let header: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("header is not JSON: {e}")))?;
    // Parsed, so any error now is a repeated key: two tensors of one name would read as one.
    unique_keys(text, "key")
        .map_err(|e| invalid(format!("header: {}", crate::text::json_message(&e))))?;
    let tensors: Vec<(&String, &serde_json::Value)> = header
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    let [(name, t)] = tensors[..] else {
        return Err(invalid(format!(
            "{} tensors in the file; af needs exactly one (the feature matrix)",
            tensors.len()
        )));
    };
    let width = match t["dtype"].as_str() {
        Some("F32") => 4,
        Some("F64") => 8,
        Some(other) => {
            return Err(invalid(format!(
                "tensor `{name}` has dtype {other}: af reads F32 or F64"
            )))
        }
        None => {
            return Err(invalid(format!(
                "tensor `{name}` has no dtype: af reads F32 or F64"
            )))
        }
    };
    let shape: Vec<usize> = t["shape"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_u64().map(|v| v as usize))
        .collect();
    let [rows, dim] = shape[..] else {
        return Err(invalid(format!(
            "tensor `{name}` has shape {}: expected 2-D",
            t["shape"]
        )));
    };
    let offsets: Vec<usize> = t["data_offsets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_u64().map(|v| v as usize))
        .collect();
    let [a, z] = offsets[..] else {
        return Err(invalid(format!("tensor `{name}` has no data_offsets")));
    };
    let data = start
        .checked_add(a)
        .zip(start.checked_add(z))
        .and_then(|(a, z)| b.get(a..z))
        .ok_or_else(|| invalid(format!("tensor `{name}`'s data lies outside the file")))?;
    let need = rows
        .checked_mul(dim)
        .and_then(|n| n.checked_mul(width))
        .ok_or_else(|| {
            invalid(format!(
                "tensor `{name}` has shape [{rows}, {dim}], too large"
            ))
        })?;
    if data.len() != need {
        return Err(invalid(format!(
            "tensor `{name}`: {} bytes of data: shape [{rows}, {dim}] of {} needs {need}",
            data.len(),
            t["dtype"].as_str().unwrap_or_default()
        )));
    }
    let data = decode(data, width, dim).map_err(|e| invalid(format!("tensor `{name}`: {e}")))?;
    Ok(FeatureMatrix { rows, dim, data })
}

/// Numbers separated by commas, one instance per line; a first line that is not numbers is a header.
fn read_csv(path: &Path) -> Result<FeatureMatrix, ReadError> {
    let text = crate::read_utf8(path)?;
    // The csv crate is not used here, so the mark is skipped by hand: else the first row of
    // numbers would not parse and be taken for a header.
    let text = strip_bom(&text);
    let mut data = Vec::new();
    let mut dim = None;
    let mut rows = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        // Each value with the byte where it starts.
        let mut cells = Vec::new();
        let mut at = 0;
        for cell in line.split(',') {
            cells.push((at, cell));
            at += cell.len() + 1;
        }
        let record = |(at, _): (usize, &str), message: String| {
            ReadError::record(path, i + 1, Some(at + 1), message)
        };
        // Parsed as float64, so that a number beyond float32's range is told from a non-number.
        let parsed: Result<Vec<f64>, usize> = cells
            .iter()
            .enumerate()
            .map(|(c, (_, v))| v.trim().parse::<f64>().map_err(|_| c))
            .collect();
        let values = match parsed {
            Ok(v) => v,
            Err(_) if i == 0 => {
                unique_columns(path, 1, line.split(',').map(str::trim))?;
                continue;
            }
            Err(c) => {
                return Err(record(
                    cells[c],
                    format!(
                        "column {}: {} is not a number",
                        c + 1,
                        crate::text::shown_cell(cells[c].1)
                    ),
                ));
            }
        };
        if let Some((c, problem)) = values
            .iter()
            .enumerate()
            .find_map(|(c, &v)| float32_problem(v, cells[c].1.trim()).map(|p| (c, p)))
        {
            return Err(record(cells[c], format!("column {}: {problem}", c + 1)));
        }
        match dim {
            None => dim = Some(values.len()),
            Some(d) if d != values.len() => {
                return Err(ReadError::record(
                    path,
                    i + 1,
                    None,
                    format!("{} values, earlier rows have {d}", values.len()),
                ))
            }
            _ => {}
        }
        data.extend(values.into_iter().map(|v| v as f32));
        rows += 1;
    }
    let dim = dim.ok_or_else(|| ReadError::Invalid {
        path: path.to_path_buf(),
        message: "no rows of numbers".into(),
    })?;
    Ok(FeatureMatrix { rows, dim, data })
}

/// Writes a [rows, dim] float32 matrix as `.npy` (version 1.0, C order), atomically.
pub fn write_npy(path: &Path, m: &FeatureMatrix) -> std::io::Result<()> {
    let data: Vec<u8> = m.data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        m.rows, m.dim
    );
    af_core::atomic::write(path, &npy_bytes(&header, &data))
}

/// A version-1.0 `.npy` file: the magic, the header dictionary `header` (NumPy's Python-literal
/// syntax, e.g. `{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }`) padded so the
/// data starts on a 64-byte boundary, then `data` as it is.
pub fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut header = header.to_string();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// One instance of a JSONL file: its id, label and group (its id when no group is given), and the
/// line itself, so a filtered file keeps the original layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub id: String,
    pub label: String,
    pub group: String,
    pub line: String,
}

/// How to find an instance's id, label and group in a JSONL line.
#[derive(Clone, Debug)]
pub struct InstanceFields {
    pub id: String,
    pub label: String,
    pub group: Option<String>,
    /// Group twins by id: the id without a final `-1`/`-2` (WinoGrande's qIDs).
    pub twins_from_id: bool,
}

/// Reads the instances of `af aflite`. Ids and groups are text or integers and never empty,
/// labels text or integers and never empty (`""` would be a class of its own), and an id is
/// not repeated: the rules of every reader of af-io.
pub fn read_instances(path: &Path, fields: &InstanceFields) -> Result<Vec<Instance>, ReadError> {
    let text = crate::read_utf8(path)?;
    let text = strip_bom(&text);
    let mut out = Vec::new();
    let mut ids = UniqueIds::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = parse_json(path, line, i)?;
        let record = |key: Option<&str>, message: String| {
            let column = key.and_then(|k| column_of(line, &[Step::Key(k)]));
            ReadError::record(path, i + 1, column, message)
        };
        let get = |key: &str| -> Result<&serde_json::Value, ReadError> {
            v.get(key)
                .filter(|v| !v.is_null())
                .ok_or_else(|| record(None, format!("no field `{key}`")))
        };
        let key_of = |key: &str| -> Result<String, ReadError> {
            expect_key(line, &[Step::Key(key)], get(key)?, key).map_err(|m| record(Some(key), m))
        };
        let id = key_of(&fields.id)?;
        // Anything else would become a class of its own (`1.5`, `true`, `""`) or merge with one
        // (`1.0`).
        let label_steps = [Step::Key(fields.label.as_str())];
        let label = match v
            .get(&fields.label)
            .ok_or_else(|| record(None, format!("no field `{}`", fields.label)))?
        {
            serde_json::Value::String(s) if s.trim().is_empty() => {
                return Err(record(
                    Some(&fields.label),
                    format!("field `{}` is empty", fields.label),
                ))
            }
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            other => {
                return Err(record(
                    Some(&fields.label),
                    format!(
                        "field `{}` is {}, expected an integer or a string",
                        fields.label,
                        kind_and_value(line, &label_steps, other)
                    ),
                ));
            }
        };
        let group = match &fields.group {
            Some(g) => key_of(g)?,
            None if fields.twins_from_id => crate::questions::twin_group(&id).to_string(),
            None => id.clone(),
        };
        ids.check(&id, i + 1)
            .map_err(|m| record(Some(&fields.id), m))?;
        out.push(Instance {
            id,
            label,
            group,
            line: line.to_string(),
        });
    }
    if out.is_empty() {
        return Err(ReadError::Invalid {
            path: path.to_path_buf(),
            message: "no instances".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(shape: &str, descr: &str, data: &[u8]) -> Vec<u8> {
        npy_bytes(
            &format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"),
            data,
        )
    }

    #[test]
    fn reads_npy_safetensors_and_csv_alike() {
        let d = tempfile::tempdir().unwrap();
        let values = [1.0f32, 2.0, 3.0, 4.5, -1.0, 0.25];
        let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let want = FeatureMatrix {
            rows: 3,
            dim: 2,
            data: values.to_vec(),
        };

        let p = d.path().join("f.npy");
        std::fs::write(&p, npy("(3, 2)", "<f4", &le)).unwrap();
        assert_eq!(read_features(&p).unwrap(), want);
        let le64: Vec<u8> = values
            .iter()
            .flat_map(|v| f64::from(*v).to_le_bytes())
            .collect();
        std::fs::write(&p, npy("(3, 2)", "<f8", &le64)).unwrap();
        assert_eq!(read_features(&p).unwrap(), want);
        std::fs::write(&p, npy("(3, 2)", "<i8", &le64)).unwrap();
        assert!(read_features(&p)
            .unwrap_err()
            .to_string()
            .contains("float32"));

        write_npy(&p, &want).unwrap();
        assert_eq!(read_features(&p).unwrap(), want, "what af writes, af reads");

        let p = d.path().join("f.safetensors");
        let header = br#"{"features":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},"__metadata__":{"by":"test"}}"#;
        let mut st = (header.len() as u64).to_le_bytes().to_vec();
        st.extend(header);
        st.extend(&le);
        std::fs::write(&p, st).unwrap();
        assert_eq!(read_features(&p).unwrap(), want);

        let p = d.path().join("f.csv");
        std::fs::write(&p, "a,b\n1,2\n3,4.5\n-1,0.25\n").unwrap();
        assert_eq!(read_features(&p).unwrap(), want);
        std::fs::write(&p, "1,2\n3,x\n").unwrap();
        assert_eq!(
            read_features(&p).unwrap_err().to_string(),
            format!("{}:2:3: column 2: \"x\" is not a number", p.display())
        );
    }

    #[test]
    fn instances_take_twins_from_winogrande_ids() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.jsonl");
        std::fs::write(&p, "{\"qID\": \"AB-1\", \"answer\": \"1\"}\n{\"qID\": \"AB-2\", \"answer\": 2}\n{\"qID\": \"C\"}\n").unwrap();
        let fields = InstanceFields {
            id: "qID".into(),
            label: "answer".into(),
            group: None,
            twins_from_id: true,
        };
        let e = read_instances(&p, &fields).unwrap_err().to_string();
        assert!(e.ends_with("w.jsonl:3: no field `answer`"), "{e}");
        std::fs::write(
            &p,
            "{\"qID\": \"AB-1\", \"answer\": \"1\"}\n{\"qID\": \"AB-2\", \"answer\": 2}\n",
        )
        .unwrap();
        let v = read_instances(&p, &fields).unwrap();
        assert_eq!(
            (
                v[0].group.as_str(),
                v[1].group.as_str(),
                v[1].label.as_str()
            ),
            ("AB", "AB", "2")
        );
    }
}
