//! What a stage cost: wall time, the host memory high-water mark and the device memory it held,
//! recorded in each stage's `stage.json` and shown in the report; and the host heap's policy
//! (keep freed blocks within a stage, give them back between stages).
//!
//! The host figure is the process's peak resident set (`VmHWM`), reset at each stage's start
//! (`/proc/self/clear_refs`), so under `af run` each stage gets its own peak.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// Resident host memory when the stage started (after [`release_freed_memory`]): under
    /// `af run` the process holds what earlier stages still own, and the peak cannot be lower
    /// than this.
    #[serde(default)]
    pub host_bytes_at_start: Option<u64>,
    /// Peak resident host memory during the stage, in bytes.
    #[serde(default)]
    pub peak_host_bytes: Option<u64>,
    /// Bytes in use on the CUDA device at the stage's end (the caching allocator's high-water
    /// mark plus the CUDA context); absent on the CPU.
    #[serde(default)]
    pub device_bytes: Option<u64>,
}

/// libtorch allocates and frees tensors of tens of megabytes at every step (a batch's logits);
/// glibc serves those with mmap and returns them with munmap, and the page faults that follow cost
/// more than the arithmetic on a CPU (measured: 27 of 29 s in the kernel for a sampling
/// benchmark). Keeping freed memory in the heap removes that; the heap then stays at its peak
/// until [`release_freed_memory`]. Call it first in `main`, before any other thread exists.
pub fn keep_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Gives the heap's free pages back to the system. Within a stage af keeps freed blocks
/// ([`keep_large_allocations`]), so without this every stage under `af run` started at the peak
/// of the largest stage before it (the ActivityNet CPU run's export started at the LM stage's
/// 4 GB).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the kernel; no live block moves.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Between the independent models of one stage (the export's fresh committees and each audit
/// detector): the freed blocks of one model's differently sized tensors, kept by
/// [`keep_large_allocations`], would otherwise pile up in the heap across a few dozen models
/// (the ActivityNet CPU export peaked at 5.6 GB this way, its largest model needing far less).
/// Gives them back, and logs the peak so far at debug level.
pub fn after_a_model(what: &str) {
    release_freed_memory();
    tracing::debug!(
        "{what} done; peak host memory so far {:.2} GB",
        host_peak_bytes().unwrap_or(0) as f64 / 1e9
    );
}

/// Starts a stage's host peak afresh (Linux 4.0 and later; elsewhere the peak is the process's).
pub fn reset_host_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The resident-set high-water mark since the last reset, in bytes.
pub fn host_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kib(&status, "VmHWM:")
}

/// The resident set now, in bytes.
pub fn host_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kib(&status, "VmRSS:")
}

fn parse_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The stage's figures, given the resident set at its start.
pub fn measure(host_bytes_at_start: Option<u64>, device: Option<tch::Device>) -> Resources {
    Resources {
        host_bytes_at_start,
        peak_host_bytes: host_peak_bytes(),
        device_bytes: device.and_then(af_nn::runtime::device_bytes_in_use),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_peak_and_it_follows_an_allocation() {
        assert_eq!(
            parse_kib("Name:\taf\nVmHWM:\t   2048 kB\nVmRSS:\t 1 kB\n", "VmHWM:"),
            Some(2 * 1024 * 1024)
        );
        reset_host_peak();
        let before = host_peak_bytes().expect("Linux reports VmHWM");
        let big = vec![1u8; 256 << 20];
        std::hint::black_box(&big);
        let after = host_peak_bytes().unwrap();
        assert!(after >= before + (200 << 20), "{before} -> {after}");
    }
}
