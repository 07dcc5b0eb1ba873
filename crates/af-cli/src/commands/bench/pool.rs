//! `af bench pool`: indexing a synthetic Parquet pool and building the committee's table from it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::machine;

#[derive(clap::Args)]
pub struct PoolArgs {
    #[arg(long, default_value_t = 2_000)]
    items: usize,
    /// Generated endings per item (the gold makes one more).
    #[arg(long, default_value_t = 1023)]
    per_item: usize,
    /// Items per Parquet part (as `[generate] block-items`).
    #[arg(long, default_value_t = 64)]
    block_items: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Where to write the synthetic pool (default: a temporary directory, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub fn run(args: PoolArgs) -> anyhow::Result<ExitCode> {
    let PoolArgs {
        items,
        per_item,
        block_items,
        device,
        dir,
    } = args;
    use af_io::pool_index::{write_synthetic_pool, Pool};
    use af_pipeline::table::candidate_table;
    let device = crate::commands::device_named(&device)?;
    let temp = tempfile::tempdir()?;
    let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
    let start = Instant::now();
    write_synthetic_pool(&dir, items, per_item, block_items)?;
    let write_seconds = start.elapsed().as_secs_f64();
    let tagger = crate::commands::load_tagger(None)?;
    af_pipeline::resources::reset_host_peak();
    let base = af_pipeline::resources::host_peak_bytes();
    let start = Instant::now();
    let pool = Pool::load(&dir)?;
    let index_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let (table, summary) =
        candidate_table(&pool, &af_core::CommitteeConfig::default(), &tagger, device)?;
    let table_seconds = start.elapsed().as_secs_f64();
    let out = json!({
        "benchmark": "pool",
        "machine": machine(),
        "device": format!("{device:?}"),
        "items": items,
        "rows": pool.rows,
        "block_items": block_items,
        "mean_tokens": summary.mean_tokens,
        "max_tokens": summary.max_tokens,
        "write_seconds": write_seconds,
        "index_seconds": index_seconds,
        "table_seconds": table_seconds,
        "rows_per_second": pool.rows as f64 / table_seconds,
        "table_device_bytes": table.bytes(),
        "host_bytes_before": base,
        "peak_host_bytes": af_pipeline::resources::host_peak_bytes(),
        "device_bytes_in_use": af_nn::runtime::device_bytes_in_use(device),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
