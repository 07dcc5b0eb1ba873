//! `af bench aflite`: one AFLite iteration's batched linear probes on random features.

use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::machine;

#[derive(clap::Args)]
pub struct AfliteArgs {
    #[arg(long, default_value_t = 40_000)]
    instances: usize,
    #[arg(long, default_value_t = 1024)]
    dim: usize,
    #[arg(long, default_value_t = 64)]
    m: usize,
    #[arg(long, default_value_t = 10_000)]
    t: usize,
    #[arg(long, default_value_t = 100)]
    steps: usize,
    #[arg(long, default_value = "auto")]
    device: String,
}

pub fn run(args: AfliteArgs) -> anyhow::Result<ExitCode> {
    let AfliteArgs {
        instances,
        dim,
        m,
        t,
        steps,
        device,
    } = args;
    use rand::{Rng, SeedableRng};
    let device = crate::commands::device_named(&device)?;
    anyhow::ensure!(
        t < instances,
        "t must be smaller than the number of instances"
    );
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let features: Vec<f32> = (0..instances * dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let labels: Vec<u32> = (0..instances).map(|i| (i % 2) as u32).collect();
    let settings = af_nn::linear_probes::ProbeSettings {
        steps,
        ..Default::default()
    };
    let probes = af_nn::linear_probes::BatchedProbes::new(
        &features, instances, dim, &labels, 2, settings, device,
    )?;
    let active: Vec<usize> = (0..instances).collect();
    let train: Vec<Vec<bool>> = (0..m)
        .map(|_| {
            let mut side = vec![false; instances];
            for i in rand::seq::index::sample(&mut rng, instances, t) {
                side[i] = true;
            }
            side
        })
        .collect();
    let _ = probes.fit_predict(&active, &train[..1])?; // warm-up
    let start = Instant::now();
    let predicted = probes.fit_predict(&active, &train)?;
    let seconds = start.elapsed().as_secs_f64();
    let out = json!({
        "benchmark": "aflite",
        "machine": machine(),
        "device": format!("{device:?}"),
        "torch_threads": tch::get_num_threads(),
        "instances": instances, "dim": dim, "m": m, "t": t, "steps": steps,
        "predictions": predicted.len() * instances,
        "seconds_per_iteration": seconds,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
