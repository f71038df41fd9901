//! Helpers shared by the integration tests (tests/serve.rs: `mod support;`) and the crate's own unit tests
//! (src/lib.rs: `#[path]`): compiling MLIR with the project's iree-compile, f32 bytes, a thread's policy.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each includer uses some; test code panics to report

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The project's iree-compile (.venv, from scripts/setup), else the one on PATH.
pub fn iree_compile() -> PathBuf {
    let venv = workspace().join(".venv/bin/iree-compile");
    if venv.is_file() { venv } else { PathBuf::from("iree-compile") }
}

/// A portable CPU target: the generic x86-64 / AArch64 baseline.
pub const CPU: &[&str] = &[
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=generic",
];

/// `a + b` over two `tensor<4xf32>`: the smallest module the load checks' tests compile.
pub const ADD: &str = "func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}";

/// Compiles MLIR text for `target` (flags) and returns the vmfb bytes.
pub fn compile(dir: &Path, name: &str, mlir: &str, target: &[&str]) -> Vec<u8> {
    let src = dir.join(format!("{name}.mlir"));
    let out = dir.join(format!("{name}.vmfb"));
    std::fs::write(&src, mlir).unwrap();
    let status = Command::new(iree_compile())
        .arg("--iree-input-type=stablehlo")
        .args(target)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("iree-compile runs (scripts/setup installs it into .venv)");
    assert!(status.success(), "iree-compile failed on {name}");
    std::fs::read(out).unwrap()
}

/// Little-endian bytes of `values`.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32 values from little-endian bytes.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The calling thread's scheduling policy, field 41 of /proc/thread-self/stat (0 SCHED_OTHER, 3 SCHED_BATCH,
/// 5 SCHED_IDLE).
#[cfg(target_os = "linux")]
pub fn policy() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The command name, field 2, is in parentheses and may hold spaces: count from the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(41 - 3).unwrap().parse().unwrap()
}
