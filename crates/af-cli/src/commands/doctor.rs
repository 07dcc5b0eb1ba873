//! `af doctor`: is libtorch usable here, and can it see the GPU? Which pretrained encoder
//! models are installed? With `--config`, does the TorchScript module it names load?

use std::path::Path;
use std::process::ExitCode;

use af_nn::runtime::CudaBackend;

/// The TorchScript module a config names, and what loading it on the CPU gave: its vectors'
/// length and the token limit, or why it did not load.
struct TorchScriptCheck {
    module: String,
    loaded: Result<(usize, usize), String>,
}

/// Loads the module of the config's `[committee.member.torchscript]`; None when it names none.
fn check_torchscript(config: &Path) -> anyhow::Result<Option<TorchScriptCheck>> {
    use af_nn::committee::members::{FrozenSettings, TorchScriptSettings};
    let config = af_pipeline::load_config(Some(config))?;
    let settings = TorchScriptSettings::resolve(&config.committee).map_err(anyhow::Error::msg)?;
    let Some(module) = &settings.module else {
        return Ok(None);
    };
    let loaded = settings
        .encoder()
        .and_then(|e| e.load(tch::Device::Cpu))
        .map(|e| (e.dim(), e.max_length()))
        .map_err(|e| e.to_string());
    Ok(Some(TorchScriptCheck {
        module: module.display().to_string(),
        loaded,
    }))
}

pub fn run(json: bool, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let info = af_nn::libtorch_info();
    // A GPU machine is one with an NVIDIA driver; there, no CUDA is a failure, not a fact.
    let gpu_machine = std::path::Path::new("/proc/driver/nvidia/version").exists();
    let mut problems = Vec::new();
    if info.lib_dir.is_none() {
        problems.push(
            "libtorch_cpu.so is not mapped into this process: is this a static build?".to_string(),
        );
    }
    if let CudaBackend::Failed { path, error } = &info.cuda_backend {
        problems.push(format!(
            "{} did not load: {error}. Its CUDA libraries (the nvidia-* wheels installed with torch) may be missing: rerun scripts/setup, or set LD_LIBRARY_PATH to the torch/lib of a working install",
            path.display()
        ));
    }
    if gpu_machine && !info.cuda_available {
        problems.push("an NVIDIA driver is installed but libtorch sees no CUDA device: check that libtorch is a CUDA build (torch from PyPI is) and that the driver supports its CUDA version".to_string());
    }
    // The encoder models af would find: AF_ENCODER_DIR, then those extracted under the cache.
    let encoders: Vec<_> = af_nn::encoder::known_model_dirs()
        .into_iter()
        .map(|d| (d.clone(), af_nn::encoder::inspect(&d)))
        .collect();
    for (_, found) in &encoders {
        if let Err(e) = found {
            problems.push(format!("encoder model: {e}"));
        }
    }
    // The pretrained generator ([generate] pretrained-endings): AF_CAUSAL_LM, as scripts/setup sets it.
    let generator = std::env::var_os(af_nn::causal_lm::CAUSAL_LM_ENV)
        .map(std::path::PathBuf::from)
        .map(|p| (p.clone(), af_nn::causal_lm::inspect(&p)));
    if let Some((_, Err(e))) = &generator {
        problems.push(format!("generator: {e}"));
    }
    let torchscript = match config {
        Some(c) => check_torchscript(c)?,
        None => None,
    };
    if let Some(TorchScriptCheck { loaded: Err(e), .. }) = &torchscript {
        problems.push(format!("torchscript module: {e}"));
    }
    if json {
        let mut value = serde_json::to_value(&info)?;
        if let Some(TorchScriptCheck { module, loaded }) = &torchscript {
            value["torchscript"] = match loaded {
                Ok((dim, max_length)) => {
                    serde_json::json!({ "module": module, "loads": true, "dim": dim, "max_length": max_length })
                }
                Err(e) => serde_json::json!({ "module": module, "loads": false, "error": e }),
            };
        }
        value["encoders"] = encoders
            .iter()
            .map(|(dir, found)| match found {
                Ok(m) => serde_json::to_value(m),
                Err(e) => Ok(serde_json::json!({ "dir": dir, "error": e.to_string() })),
            })
            .collect::<Result<Vec<_>, _>>()?
            .into();
        value["generator"] = match &generator {
            None => serde_json::Value::Null,
            Some((_, Ok(g))) => serde_json::to_value(g)?,
            Some((path, Err(e))) => serde_json::json!({ "path": path, "error": e.to_string() }),
        };
        value["problems"] = serde_json::json!(problems);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("af {}", env!("CARGO_PKG_VERSION"));
        println!(
            "libtorch version   {}",
            info.version.as_deref().unwrap_or("unknown")
        );
        println!(
            "loaded from        {}",
            info.lib_dir
                .as_ref()
                .map_or("?".into(), |p| p.display().to_string())
        );
        println!("built against      {}", info.build_lib_dir);
        let backend = match &info.cuda_backend {
            CudaBackend::Loaded { path } => format!("loaded ({})", path.display()),
            CudaBackend::Absent => "absent (CPU-only libtorch)".to_string(),
            CudaBackend::Failed { error, .. } => format!("failed: {error}"),
        };
        println!("CUDA backend       {backend}");
        println!("CUDA available     {}", info.cuda_available);
        println!("cuDNN available    {}", info.cudnn_available);
        println!("devices            {}", info.devices.join(", "));
        println!(
            "torch threads      {} intra-op, {} inter-op ({} cores)",
            info.torch_threads, info.torch_interop_threads, info.cpu_cores
        );
        match &generator {
            None => println!(
                "generator          none (scripts/setup installs SmolLM2-135M and sets {})",
                af_nn::causal_lm::CAUSAL_LM_ENV
            ),
            Some((_, Ok(g))) => println!(
                "generator          {} ({}, llama, {} layers, {}-d, {} tokens, {:.0} MB)",
                g.path.display(),
                g.name,
                g.layers,
                g.hidden,
                g.vocab,
                g.megabytes
            ),
            Some((path, Err(_))) => println!(
                "generator          {} (does not load: see below)",
                path.display()
            ),
        }
        if encoders.is_empty() {
            println!("encoder models     none (scripts/setup installs all-MiniLM-L6-v2 and sets AF_ENCODER_DIR)");
        }
        for (i, (dir, found)) in encoders.iter().enumerate() {
            let label = if i == 0 { "encoder models" } else { "" };
            match found {
                Ok(m) => println!(
                    "{label:<18} {} ({}, {} layers, {}-d, max {} tokens, {} pooling, {:.0} MB)",
                    dir.display(),
                    m.model_type.as_deref().unwrap_or("bert"),
                    m.layers,
                    m.hidden_size,
                    m.max_length,
                    m.pooling,
                    m.weights_bytes as f64 / 1e6
                ),
                Err(_) => println!("{label:<18} {} (unusable: see below)", dir.display()),
            }
        }
        match &torchscript {
            Some(TorchScriptCheck {
                module,
                loaded: Ok((dim, max_length)),
            }) => println!("torchscript module {module} (loads: {dim}-d, max {max_length} tokens)"),
            Some(TorchScriptCheck {
                module,
                loaded: Err(_),
            }) => println!("torchscript module {module} (does not load: see below)"),
            None => {}
        }
        for p in &problems {
            eprintln!("problem: {p}");
        }
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
