//! The candidate pool: a directory of Parquet files, one per block of items
//! (`part-000000.parquet`, ...), each written whole and renamed into place. pandas
//! (`pd.read_parquet(dir)`), polars (`pl.read_parquet(dir + "/*.parquet")`) and DuckDB
//! (`SELECT * FROM 'dir/*.parquet'`) read the directory as one table.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use af_core::{Candidate, LM_FEATURES};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float32Array, RecordBatch, StringArray, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::ReadError;

pub fn schema() -> Schema {
    let mut fields = vec![
        Field::new("item_index", DataType::UInt32, false),
        Field::new("item_id", DataType::Utf8, false),
        Field::new("fold", DataType::UInt32, false),
        Field::new("candidate", DataType::UInt32, false),
        Field::new("is_gold", DataType::Boolean, false),
        Field::new("ending", DataType::Utf8, false),
        Field::new("tokens", DataType::UInt32, false),
        Field::new("truncated", DataType::Boolean, false),
    ];
    fields.extend(
        LM_FEATURES
            .iter()
            .map(|n| Field::new(*n, DataType::Float32, false)),
    );
    // Last, and nullable: pools written before it read on without it.
    fields.push(Field::new("origin", DataType::Utf8, true));
    Schema::new(fields)
}

pub fn part_path(dir: &Path, block: usize) -> PathBuf {
    dir.join(format!("part-{block:06}.parquet"))
}

/// Writes one block's candidates as a Parquet file, atomically.
pub fn write_part(path: &Path, rows: &[Candidate]) -> std::io::Result<()> {
    let schema = Arc::new(schema());
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.item_index),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.item_id.as_str()),
        )),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.fold))),
        Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.candidate),
        )),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.is_gold())),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.ending.as_str()),
        )),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.tokens))),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.truncated)),
        )),
    ];
    for f in 0..LM_FEATURES.len() {
        columns.push(Arc::new(Float32Array::from_iter_values(
            rows.iter().map(|r| r.features[f]),
        )));
    }
    columns.push(Arc::new(StringArray::from_iter(
        rows.iter().map(|r| r.origin.as_deref()),
    )));
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("parquet.tmp");
    let file = File::create(&tmp)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer =
        ArrowWriter::try_new(file, schema, Some(props)).map_err(std::io::Error::other)?;
    writer.write(&batch).map_err(std::io::Error::other)?;
    writer.close().map_err(std::io::Error::other)?;
    std::fs::rename(&tmp, path)
}

/// Reads one part back.
pub fn read_part(path: &Path) -> Result<Vec<Candidate>, ReadError> {
    let bad = |message: String| ReadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad(format!("not a Parquet file: {e}")))?
        .build()
        .map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(e.to_string()))?;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| bad(format!("no column `{name}`: not an af pool part")))
        };
        fn typed<'a, T: 'static>(
            a: &'a ArrayRef,
            name: &str,
            path: &Path,
        ) -> Result<&'a T, ReadError> {
            a.as_any()
                .downcast_ref::<T>()
                .ok_or_else(|| ReadError::Invalid {
                    path: path.to_path_buf(),
                    message: format!("column `{name}` has type {}", a.data_type()),
                })
        }
        let (ii, id, fold, cand, ending, tokens, trunc) = (
            col("item_index")?,
            col("item_id")?,
            col("fold")?,
            col("candidate")?,
            col("ending")?,
            col("tokens")?,
            col("truncated")?,
        );
        let ii = typed::<UInt32Array>(&ii, "item_index", path)?;
        let id = typed::<StringArray>(&id, "item_id", path)?;
        let fold = typed::<UInt32Array>(&fold, "fold", path)?;
        let cand = typed::<UInt32Array>(&cand, "candidate", path)?;
        let ending = typed::<StringArray>(&ending, "ending", path)?;
        let tokens = typed::<UInt32Array>(&tokens, "tokens", path)?;
        let trunc = typed::<BooleanArray>(&trunc, "truncated", path)?;
        let feats: Vec<ArrayRef> = LM_FEATURES
            .iter()
            .map(|n| col(n))
            .collect::<Result<_, _>>()?;
        let feats: Vec<&Float32Array> = feats
            .iter()
            .zip(LM_FEATURES)
            .map(|(a, n)| typed::<Float32Array>(a, n, path))
            .collect::<Result<_, _>>()?;
        // A part written before the column existed has none: its origins are unknown here.
        let origin = batch.column_by_name("origin").cloned();
        let origin = origin
            .as_ref()
            .map(|a| typed::<StringArray>(a, "origin", path))
            .transpose()?;
        for r in 0..batch.num_rows() {
            let mut features = [0f32; 8];
            for (f, a) in features.iter_mut().zip(&feats) {
                *f = a.value(r);
            }
            out.push(Candidate {
                item_index: ii.value(r),
                item_id: id.value(r).to_string(),
                fold: fold.value(r),
                candidate: cand.value(r),
                ending: ending.value(r).to_string(),
                tokens: tokens.value(r),
                truncated: trunc.value(r),
                features,
                origin: origin
                    .filter(|o| o.is_valid(r))
                    .map(|o| o.value(r).to_string()),
            });
        }
        debug_assert!(ii.len() == batch.num_rows());
    }
    Ok(out)
}

/// One row of a part as an index needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexRow {
    pub item_index: u32,
    pub item_id: String,
    pub candidate: u32,
    /// The ending, for gold rows only (candidate 0): what the items file must agree with.
    pub gold_ending: Option<String>,
}

/// Reads only what an index needs of one part (four of its sixteen columns, and the ending text
/// of gold rows only).
pub fn read_index(path: &Path) -> Result<Vec<IndexRow>, ReadError> {
    let bad = |message: String| ReadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad(format!("not a Parquet file: {e}")))?;
    let mask = parquet::arrow::ProjectionMask::columns(
        builder.parquet_schema(),
        ["item_index", "item_id", "candidate", "ending"],
    );
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(e.to_string()))?;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| bad(format!("no column `{name}`: not an af pool part")))
        };
        let (ii, id, cand, ending) = (
            col("item_index")?,
            col("item_id")?,
            col("candidate")?,
            col("ending")?,
        );
        let typed =
            |a: &ArrayRef, name: &str| bad(format!("column `{name}` has type {}", a.data_type()));
        let ii_t = ii
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or_else(|| typed(&ii, "item_index"))?;
        let id_t = id
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| typed(&id, "item_id"))?;
        let cand_t = cand
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or_else(|| typed(&cand, "candidate"))?;
        let ending_t = ending
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| typed(&ending, "ending"))?;
        for r in 0..batch.num_rows() {
            let candidate = cand_t.value(r);
            out.push(IndexRow {
                item_index: ii_t.value(r),
                item_id: id_t.value(r).to_string(),
                candidate,
                gold_ending: (candidate == 0).then(|| ending_t.value(r).to_string()),
            });
        }
    }
    Ok(out)
}

/// The part files of a pool directory, in block order.
pub fn parts(dir: &Path) -> Result<Vec<PathBuf>, ReadError> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ReadError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("part-") && n.ends_with(".parquet"))
        })
        .collect();
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let rows: Vec<Candidate> = (0..5)
            .map(|i| Candidate {
                item_index: 7,
                item_id: "v-1".into(),
                fold: 2,
                candidate: i,
                ending: format!("does thing {i}."),
                tokens: 4,
                truncated: i == 3,
                features: [i as f32, 1.5, 2.5, 3.5, -0.25, 4.0, 1.0, 9.0],
                origin: match i {
                    0 => Some(af_core::GOLD_ORIGIN.to_string()),
                    4 => None,
                    _ => Some("sampled".to_string()),
                },
            })
            .collect();
        let p = part_path(d.path(), 3);
        write_part(&p, &rows).unwrap();
        assert_eq!(read_part(&p).unwrap(), rows);
        let index = read_index(&p).unwrap();
        assert_eq!(index.len(), 5);
        assert_eq!(
            index[3],
            IndexRow {
                item_index: 7,
                item_id: "v-1".into(),
                candidate: 3,
                gold_ending: None
            }
        );
        assert_eq!(index[0].gold_ending.as_deref(), Some("does thing 0."));
        assert_eq!(parts(d.path()).unwrap(), vec![p]);
        let junk = d.path().join("part-000009.parquet");
        std::fs::write(&junk, b"junk").unwrap();
        assert!(read_part(&junk)
            .unwrap_err()
            .to_string()
            .contains("not a Parquet file"));
    }

    #[test]
    fn a_part_written_before_the_origin_column_reads_without_origins() {
        let d = tempfile::tempdir().unwrap();
        let row = Candidate {
            item_index: 0,
            item_id: "v-0".into(),
            fold: 0,
            candidate: 1,
            ending: "runs.".into(),
            tokens: 2,
            truncated: false,
            features: [0.5; 8],
            origin: Some("own".into()),
        };
        let p = part_path(d.path(), 0);
        write_part(&p, std::slice::from_ref(&row)).unwrap();
        // The same part as an older af wrote it: every column but `origin`.
        let file = File::open(&p).unwrap();
        let batch = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let old = batch
            .project(&(0..batch.num_columns() - 1).collect::<Vec<_>>())
            .unwrap();
        assert!(old.column_by_name("origin").is_none());
        let old_path = part_path(d.path(), 1);
        let mut writer =
            ArrowWriter::try_new(File::create(&old_path).unwrap(), old.schema(), None).unwrap();
        writer.write(&old).unwrap();
        writer.close().unwrap();
        assert_eq!(
            read_part(&old_path).unwrap(),
            [Candidate {
                origin: None,
                ..row.clone()
            }]
        );
        assert_eq!(read_part(&p).unwrap(), [row]);
    }
}
