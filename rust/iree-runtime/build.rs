//! Builds IREE's runtime (with the io_parameters module and the parameter-file parsers) and tapeout's C shim
//! into one static archive, `libtapeout_iree.a`, with IREE's own CMake.
//!
//! Drivers: `local-sync` and `local-task` (the CPU), and `vulkan` unless `TAPEOUT_IREE_VULKAN=OFF` (off by default
//! on Apple targets, which have Metal). IREE's Vulkan driver opens the Vulkan loader (`libvulkan.so.1`) with
//! `dlopen` when a `vulkan` device is asked for, so the library links and loads where no loader is installed; the
//! headers it compiles against are IREE's vendored `third_party/vulkan_headers`.
//!
//! IREE's runtime sources come from the `eerie-sys` crate (a pinned dependency of this one, never built with its
//! own features: its static library lacks io_parameters and the IRPA parser). Override with
//! `TAPEOUT_IREE_SOURCE=<IREE checkout>`. CMake >= 3.26 is `$CMAKE`, the project's `.venv/bin/cmake` (PyPI's
//! `cmake`, which `scripts/setup` installs) or the one on PATH. The CMake build lives in
//! `<workspace>/target/iree-runtime/<release|debug>`, shared by every cargo profile and kept between builds:
//! a fresh build costs about a CPU-minute (55 CPU-seconds on a 2-core x86-64 VM, 47 without Vulkan), a no-op
//! rebuild a second.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const EERIE_SYS: &str = "eerie-sys-0.5.0";

fn main() {
    if let Err(message) = run() {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let workspace = manifest
        .parent()
        .and_then(Path::parent)
        .ok_or("rust/iree-runtime is not two levels below the workspace")?
        .to_path_buf();
    for file in ["build.rs", "native/CMakeLists.txt", "native/tapeout_iree.c", "native/tapeout_iree.h"] {
        println!("cargo:rerun-if-changed={}", manifest.join(file).display());
    }
    for var in ["TAPEOUT_IREE_SOURCE", "CMAKE", "TAPEOUT_IREE_BUILD_DIR", "TAPEOUT_IREE_VULKAN"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let source = iree_source()?;
    let cmake = cmake_binary(&workspace)?;
    // IREE's debug runtime is much slower and no more useful to tapeout's users: always build it optimised.
    let build = match env::var_os("TAPEOUT_IREE_BUILD_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => workspace.join("target/iree-runtime/release"),
    };
    std::fs::create_dir_all(&build).map_err(|e| format!("creating {}: {e}", build.display()))?;

    let ninja = Command::new("ninja").arg("--version").output().is_ok_and(|o| o.status.success());
    let definitions = [
        "-DCMAKE_BUILD_TYPE=Release".to_owned(),
        format!("-DTAPEOUT_IREE_SOURCE_DIR={}", source.display()),
        "-DTAPEOUT_IREE_CUDA=OFF".to_owned(),
        format!("-DTAPEOUT_IREE_VULKAN={}", if vulkan_wanted()? { "ON" } else { "OFF" }),
    ];
    // Configured once; again when a definition changed (a build dir configured before Vulkan was built, say): the
    // cache keeps what it was first given.
    if !configured_with(&build.join("CMakeCache.txt"), &definitions) {
        let mut configure = Command::new(&cmake);
        configure.arg("-S").arg(manifest.join("native")).arg("-B").arg(&build).args(&definitions);
        if ninja && !build.join("CMakeCache.txt").is_file() {
            configure.arg("-GNinja");
        }
        run_command(&mut configure, "configuring IREE's runtime")?;
    }
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "2".into());
    run_command(
        Command::new(&cmake).arg("--build").arg(&build).arg("--target").arg("tapeout_iree").arg("--parallel").arg(jobs),
        "building IREE's runtime",
    )?;

    // A deleted or rebuilt archive reruns this script (cargo watches the file's mtime).
    println!("cargo:rerun-if-changed={}", build.join("libtapeout_iree.a").display());
    println!("cargo:rustc-link-search=native={}", build.display());
    println!("cargo:rustc-link-search=native={}", build.join("iree/build_tools/third_party/flatcc").display());
    println!("cargo:rustc-link-lib=static=tapeout_iree");
    println!("cargo:rustc-link-lib=static=flatcc_parsing");
    for lib in ["pthread", "dl", "m"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    Ok(())
}

/// The IREE source tree: `$TAPEOUT_IREE_SOURCE`, else eerie-sys's, unpacked by cargo in its registry cache.
fn iree_source() -> Result<PathBuf, String> {
    if let Some(dir) = env::var_os("TAPEOUT_IREE_SOURCE") {
        let dir = PathBuf::from(dir);
        return if dir.join("runtime/src/iree/io/formats/irpa").is_dir() {
            Ok(dir)
        } else {
            Err(format!("TAPEOUT_IREE_SOURCE={} is not an IREE source tree (no runtime/src/iree)", dir.display()))
        };
    }
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let registry = cargo_home.join("registry/src");
    let entries = std::fs::read_dir(&registry).map_err(|e| format!("reading {}: {e}", registry.display()))?;
    for entry in entries.flatten() {
        let candidate = entry.path().join(EERIE_SYS).join("iree");
        if candidate.join("runtime/src/iree/io/formats/irpa").is_dir() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "IREE's runtime sources ({EERIE_SYS}) are not in {}: run `cargo fetch` (scripts/setup does), or set \
         TAPEOUT_IREE_SOURCE to an IREE checkout",
        registry.display()
    ))
}

/// Whether to build IREE's Vulkan driver: `$TAPEOUT_IREE_VULKAN` (`ON`/`OFF`, `1`/`0`, `true`/`false`), else yes
/// except on Apple targets.
fn vulkan_wanted() -> Result<bool, String> {
    match env::var("TAPEOUT_IREE_VULKAN") {
        Ok(v) => match v.to_ascii_lowercase().as_str() {
            "on" | "1" | "true" | "yes" => Ok(true),
            "off" | "0" | "false" | "no" => Ok(false),
            _ => Err(format!("TAPEOUT_IREE_VULKAN={v} is neither ON nor OFF")),
        },
        Err(_) => Ok(env::var("CARGO_CFG_TARGET_VENDOR").as_deref() != Ok("apple")),
    }
}

/// Whether the CMake cache holds every `-DNAME=VALUE` of `definitions` (as `NAME:TYPE=VALUE`).
fn configured_with(cache: &Path, definitions: &[String]) -> bool {
    let Ok(text) = std::fs::read_to_string(cache) else { return false };
    definitions.iter().all(|d| {
        let Some((name, value)) = d.trim_start_matches("-D").split_once('=') else { return false };
        text.lines().any(|line| {
            line.split_once('=')
                .is_some_and(|(key, v)| v == value && key.split_once(':').map_or(key, |(k, _)| k) == name)
        })
    })
}

/// A CMake of at least 3.26 (IREE's minimum).
fn cmake_binary(workspace: &Path) -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(cmake) = env::var_os("CMAKE") {
        candidates.push(PathBuf::from(cmake));
    }
    candidates.push(workspace.join(".venv/bin/cmake"));
    candidates.push(PathBuf::from("cmake"));
    let mut seen = Vec::new();
    for candidate in candidates {
        let Ok(output) = Command::new(&candidate).arg("--version").output() else { continue };
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let version = text.split_whitespace().nth(2).unwrap_or("").to_owned();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if (major, minor) >= (3, 26) {
            return Ok(candidate);
        }
        seen.push(format!("{} is {version}", candidate.display()));
    }
    Err(format!(
        "IREE's runtime needs CMake >= 3.26 and none was found ({}): run scripts/setup (it installs PyPI's cmake \
         into .venv) or set CMAKE",
        if seen.is_empty() { "no cmake at all".to_owned() } else { seen.join(", ") }
    ))
}

fn run_command(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command.status().map_err(|e| format!("{what}: cannot start {command:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{what} failed ({status}): {command:?}")) }
}
