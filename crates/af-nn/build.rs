//! Gives every binary and test of the crate that uses this script an rpath to libtorch, so that
//! `af` runs without LD_LIBRARY_PATH. torch-sys sets none, and only a crate that depends on
//! torch-sys directly sees DEP_TCH_LIBTORCH_LIB. af-cli and af-pipeline reuse this file (`build = ...`).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(lib_dir) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") {
        let lib_dir = lib_dir.to_string_lossy();
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
        // Where `af doctor` says the binary was built against.
        println!("cargo:rustc-env=AF_LIBTORCH_BUILD_LIB_DIR={lib_dir}");
    } else {
        println!("cargo:rustc-env=AF_LIBTORCH_BUILD_LIB_DIR=");
    }
}
