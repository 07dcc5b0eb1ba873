//! `af ablate [CONFIG]`: the arguments, then af-pipeline's ablation, whose summary is printed as
//! each composition is settled and at the end.

use std::path::PathBuf;
use std::process::ExitCode;

use af_nn::committee::Registry;
use af_pipeline::ablate::{AblateRequest, Outcome};
use clap::Args;

#[derive(Args)]
pub struct AblateArgs {
    /// The run config (default: configs/default.toml in the current directory). Its [ablate]
    /// section names the design (leave-one-out, singletons, all-subsets or list) and the members;
    /// the pool is the one its `af run` generated.
    config: Option<PathBuf>,
    /// Discard every composition's AF run and evaluation under RUN_DIR/ablate and start over
    /// (needed when the config changed since they were started).
    #[arg(long)]
    force: bool,
    /// Print the compositions and their schedules, and do nothing else.
    #[arg(long)]
    plan: bool,
}

pub fn run(a: AblateArgs) -> anyhow::Result<ExitCode> {
    let registry = Registry::builtin();
    let config = af_pipeline::load_config(a.config.as_deref())?;
    if a.plan {
        for c in af_pipeline::ablate::plan(&config, &registry)? {
            let phases: Vec<String> = c
                .stages
                .iter()
                .map(|p| {
                    format!(
                        "{} [{}] x{}",
                        p.name,
                        p.members
                            .iter()
                            .map(|m| m.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        p.iterations
                    )
                })
                .collect();
            println!("{:<24} {}", c.name, phases.join(" -> "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let request = AblateRequest {
        config: &config,
        registry: &registry,
        force: a.force,
    };
    let run = af_pipeline::ablate::run(&request, &crate::progress::Bars, |c| {
        let how = match c.outcome {
            Outcome::UpToDate => "up to date",
            Outcome::Ran => "done",
        };
        println!("{}: {how}; {}", c.name, c.report);
    })?;
    println!("{run}");
    Ok(ExitCode::SUCCESS)
}
