//! libtorch at run time: which library was loaded, whether its CUDA backend is, which devices
//! are usable.
//!
//! The linker drops `libtorch_cuda.so` from the binary (it is linked "as needed" and nothing
//! calls it by name), and then libtorch silently reports no CUDA on a GPU machine. So we load it
//! ourselves, from the directory the CPU library was loaded from, before the first device query.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use af_core::config::DeviceRequest;
use serde::Serialize;
use tch::Device;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NnError {
    #[error("CUDA was requested ({requested}) but is not available: {why}")]
    CudaUnavailable { requested: String, why: String },
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    #[error("unknown committee member `{name}`: the members are {known}")]
    UnknownMember { name: String, known: String },
    #[error("committee member `{0}` is registered twice")]
    DuplicateMember(String),
    /// A member's settings: the message names the key.
    #[error("{0}")]
    InvalidSettings(String),
    #[error(transparent)]
    Encoder(#[from] crate::encoder::EncoderError),
    /// The encoder a frozen-embedding member's settings name did not load.
    #[error("[committee.member.{member}] {key}: {error}")]
    FrozenEncoder {
        member: &'static str,
        key: &'static str,
        error: crate::encoder::EncoderError,
    },
    /// A NaN or infinite number where training needs finite ones: stopping beats training on.
    #[error("{what} is not finite ({value}); {kept}")]
    NonFinite {
        what: String,
        value: f64,
        kept: String,
    },
}

/// What happened to `libtorch_cuda.so`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum CudaBackend {
    Loaded {
        path: PathBuf,
    },
    /// This libtorch has no CUDA backend (a CPU-only build).
    Absent,
    Failed {
        path: PathBuf,
        error: String,
    },
}

static CUDA_BACKEND: OnceLock<CudaBackend> = OnceLock::new();

/// Loads the CUDA backend once per process; every device query goes through here first.
pub fn cuda_backend() -> &'static CudaBackend {
    CUDA_BACKEND.get_or_init(|| {
        let Some(dir) = loaded_libtorch_dir() else {
            return CudaBackend::Absent;
        };
        let path = dir.join("libtorch_cuda.so");
        if !path.exists() {
            return CudaBackend::Absent;
        }
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: loading libtorch's own CUDA library runs its static initialisers, which only
        // register CUDA hooks with the already-loaded libtorch; we never call into it directly.
        match unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) } {
            Ok(lib) => {
                // Never unloaded: libtorch keeps pointers into it for the life of the process.
                std::mem::forget(lib);
                CudaBackend::Loaded { path }
            }
            Err(e) => CudaBackend::Failed {
                path,
                error: e.to_string(),
            },
        }
    })
}

/// The directory of the `libtorch_cpu.so` this process actually loaded.
pub fn loaded_libtorch_dir() -> Option<PathBuf> {
    // Touch libtorch so that it is mapped (it always is, being linked; this keeps it honest).
    let _ = tch::get_num_threads();
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
}

/// libtorch's version, read beside the loaded library (`../version.py` of a PyPI torch,
/// `../build-version` of a libtorch archive).
fn libtorch_version(lib_dir: &Path) -> Option<String> {
    let root = lib_dir.parent()?;
    if let Ok(v) = std::fs::read_to_string(root.join("build-version")) {
        return Some(v.trim().to_string());
    }
    let py = std::fs::read_to_string(root.join("version.py")).ok()?;
    py.lines()
        .find_map(|l| l.strip_prefix("__version__"))
        .map(|v| {
            v.trim_start_matches([' ', '='])
                .trim()
                .trim_matches(['\'', '"'])
                .to_string()
        })
}

#[derive(Clone, Debug, Serialize)]
pub struct LibtorchInfo {
    pub version: Option<String>,
    pub lib_dir: Option<PathBuf>,
    /// The directory the binary was linked against (its rpath).
    pub build_lib_dir: String,
    pub cuda_backend: CudaBackend,
    pub cuda_available: bool,
    pub cudnn_available: bool,
    pub cuda_devices: i64,
    pub devices: Vec<String>,
    pub torch_threads: i32,
    pub torch_interop_threads: i32,
    pub cpu_cores: usize,
}

pub fn libtorch_info() -> LibtorchInfo {
    let cuda_backend = cuda_backend().clone();
    let lib_dir = loaded_libtorch_dir();
    let cuda_available = tch::Cuda::is_available();
    let cuda_devices = if cuda_available {
        tch::Cuda::device_count()
    } else {
        0
    };
    let mut devices = vec!["cpu".to_string()];
    devices.extend((0..cuda_devices).map(|i| format!("cuda:{i}")));
    LibtorchInfo {
        version: lib_dir.as_deref().and_then(libtorch_version),
        lib_dir,
        build_lib_dir: env!("AF_LIBTORCH_BUILD_LIB_DIR").to_string(),
        cuda_backend,
        cuda_available,
        cudnn_available: cuda_available && tch::Cuda::cudnn_is_available(),
        cuda_devices,
        devices,
        torch_threads: tch::get_num_threads(),
        torch_interop_threads: tch::get_num_interop_threads(),
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// The device a config asks for; "auto" is the first GPU when there is one.
pub fn select_device(request: DeviceRequest) -> Result<Device, NnError> {
    cuda_backend();
    let available = tch::Cuda::is_available();
    match request {
        DeviceRequest::Cpu => Ok(Device::Cpu),
        DeviceRequest::Auto => Ok(if available {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }),
        DeviceRequest::Cuda(i) => {
            let requested = format!("cuda:{i}");
            if !available {
                let why = match cuda_backend() {
                    CudaBackend::Absent => "this libtorch is a CPU-only build".to_string(),
                    CudaBackend::Failed { path, error } => {
                        format!("loading {} failed: {error}", path.display())
                    }
                    CudaBackend::Loaded { .. } => {
                        "libtorch sees no GPU (driver missing or no device visible)".to_string()
                    }
                };
                return Err(NnError::CudaUnavailable { requested, why });
            }
            let count = tch::Cuda::device_count();
            if i as i64 >= count {
                return Err(NnError::CudaUnavailable {
                    requested,
                    why: format!("only {count} CUDA device(s)"),
                });
            }
            Ok(Device::Cuda(i))
        }
    }
}

/// Bytes in use on a CUDA device (total minus free, as `nvidia-smi` counts them), through the
/// CUDA runtime that libtorch loaded; `None` on the CPU or when it cannot be asked. libtorch's
/// caching allocator keeps what it once took, so after a stage this is close to the stage's peak
/// (plus the CUDA context, a few hundred MB).
pub fn device_bytes_in_use(device: Device) -> Option<u64> {
    device_memory_info(device).map(|(free, total)| total - free)
}

/// Free and total bytes of a CUDA device, as `cudaMemGetInfo` reports them; `None` on the CPU or
/// when it cannot be asked.
pub fn device_memory_info(device: Device) -> Option<(u64, u64)> {
    let Device::Cuda(index) = device else {
        return None;
    };
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libcudart.so"))?
        .to_string();
    use libloading::os::unix::{Library, Symbol, RTLD_NOW};
    // SAFETY: the library is already mapped (libtorch loaded it); opening it again only takes a
    // reference. The two functions have these C signatures in every CUDA release.
    unsafe {
        let lib = Library::open(Some(&path), RTLD_NOW).ok()?;
        let set: Symbol<unsafe extern "C" fn(i32) -> i32> = lib.get(b"cudaSetDevice\0").ok()?;
        let info: Symbol<unsafe extern "C" fn(*mut usize, *mut usize) -> i32> =
            lib.get(b"cudaMemGetInfo\0").ok()?;
        if set(index as i32) != 0 {
            return None;
        }
        let (mut free, mut total) = (0usize, 0usize);
        if info(&mut free, &mut total) != 0 {
            return None;
        }
        Some((free as u64, total as u64))
    }
}

/// Runs `f` under libtorch's CUDA autocast (fp16 matrix products and LSTMs, fp32 reductions)
/// when `mixed` and `device` is a GPU; otherwise as it is.
pub fn in_precision<T>(mixed: bool, device: Device, f: impl FnOnce() -> T) -> T {
    if !(mixed && device.is_cuda()) {
        return f();
    }
    match autocast_api() {
        Some(api) => api.run(f),
        // A libtorch without the device-typed entry points: tch's own, warnings and all.
        None => tch::autocast(true, f),
    }
}

/// libtorch's device-typed autocast switches, looked up once in the loaded `libtorch_cpu.so`.
///
/// tch 0.24's `autocast` calls `at::autocast::is_enabled()` and `set_enabled()`, deprecated
/// inline wrappers that print a deprecation warning on every call (3,505 lines in one GPU
/// benchmark's log). The functions they forward to, `is_autocast_enabled(DeviceType)` and
/// `set_autocast_enabled(DeviceType, bool)`, are exported and say nothing; tch declares no
/// binding for them, so they are called through their C++ names. Their arguments are a
/// one-byte enum (`c10::DeviceType`, CUDA = 1) and a `bool`, which the C calling convention
/// passes as C++ does.
struct AutocastApi {
    is_enabled: unsafe extern "C" fn(i8) -> bool,
    set_enabled: unsafe extern "C" fn(i8, bool),
    increment_nesting: unsafe extern "C" fn() -> i32,
    decrement_nesting: unsafe extern "C" fn() -> i32,
    clear_cache: unsafe extern "C" fn(),
}

/// `c10::DeviceType::CUDA`.
const CUDA_DEVICE_TYPE: i8 = 1;

impl AutocastApi {
    /// What `tch::autocast(true, f)` does, through the device-typed switches.
    fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        // SAFETY: the functions were resolved from the libtorch this process runs, with the
        // signatures of ATen/autocast_mode.h (see the type's comment); they only touch
        // thread-local autocast state.
        let prev = unsafe { (self.is_enabled)(CUDA_DEVICE_TYPE) };
        unsafe {
            (self.set_enabled)(CUDA_DEVICE_TYPE, true);
            (self.increment_nesting)();
        }
        let result = f();
        unsafe {
            if (self.decrement_nesting)() == 0 {
                (self.clear_cache)();
            }
            (self.set_enabled)(CUDA_DEVICE_TYPE, prev);
        }
        result
    }
}

static AUTOCAST: OnceLock<Option<AutocastApi>> = OnceLock::new();

fn autocast_api() -> Option<&'static AutocastApi> {
    AUTOCAST
        .get_or_init(|| {
            // libtorch_cpu.so is linked into the binary, so the process's own global scope
            // finds its symbols; the handle is never closed while the process runs.
            loaded_libtorch_dir()?;
            let lib = libloading::os::unix::Library::this();
            // SAFETY: each symbol is looked up by its mangled C++ name and given the signature
            // the header declares.
            let api = unsafe {
                AutocastApi {
                    is_enabled: *lib
                        .get(b"_ZN2at8autocast19is_autocast_enabledEN3c1010DeviceTypeE\0")
                        .ok()?,
                    set_enabled: *lib
                        .get(b"_ZN2at8autocast20set_autocast_enabledEN3c1010DeviceTypeEb\0")
                        .ok()?,
                    increment_nesting: *lib.get(b"_ZN2at8autocast17increment_nestingEv\0").ok()?,
                    decrement_nesting: *lib.get(b"_ZN2at8autocast17decrement_nestingEv\0").ok()?,
                    clear_cache: *lib.get(b"_ZN2at8autocast11clear_cacheEv\0").ok()?,
                }
            };
            std::mem::forget(lib);
            Some(api)
        })
        .as_ref()
}

/// Sets libtorch's intra-op thread count (0 keeps libtorch's default of one per core).
pub fn set_threads(threads: usize) {
    if threads > 0 {
        tch::set_num_threads(threads as i32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The switches are thread-local flags, so the CPU can check that they are found and that
    /// they switch CUDA autocast on and back off around the closure, as tch's wrapper does.
    #[test]
    fn autocast_switches_are_found_and_restore_the_state_they_found() {
        let api = autocast_api().expect("libtorch exports the device-typed autocast switches");
        let before = unsafe { (api.is_enabled)(CUDA_DEVICE_TYPE) };
        assert!(!before, "autocast starts off");
        let inside = api.run(|| unsafe { (api.is_enabled)(CUDA_DEVICE_TYPE) });
        assert!(inside, "autocast is on inside the closure");
        let nested = api.run(|| api.run(|| unsafe { (api.is_enabled)(CUDA_DEVICE_TYPE) }));
        assert!(nested);
        assert!(
            !unsafe { (api.is_enabled)(CUDA_DEVICE_TYPE) },
            "and off again after it"
        );
    }

    #[test]
    fn libtorch_is_loaded_from_the_rpath_and_reports_itself() {
        let info = libtorch_info();
        let dir = info.lib_dir.expect("libtorch_cpu.so is mapped");
        assert!(dir.join("libtorch_cpu.so").exists());
        assert!(
            info.version
                .as_deref()
                .is_some_and(|v| v.starts_with("2.11.0")),
            "{:?}",
            info.version
        );
        assert!(info.torch_threads >= 1);
        assert_eq!(info.devices[0], "cpu");
    }

    #[test]
    fn cpu_tensors_compute() {
        let t = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        assert_eq!(t.sum(tch::Kind::Float).double_value(&[]), 6.0);
        assert_eq!(select_device(DeviceRequest::Cpu).unwrap(), Device::Cpu);
    }

    #[test]
    fn device_memory_is_only_asked_of_cuda() {
        assert_eq!(device_bytes_in_use(Device::Cpu), None);
    }

    #[test]
    fn cuda_request_without_gpu_explains() {
        if tch::Cuda::is_available() {
            return; // on a GPU machine this is a different test: scripts/gpu-check covers it.
        }
        let e = select_device(DeviceRequest::Cuda(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("CUDA was requested (cuda:0) but is not available"),
            "{e}"
        );
    }
}
