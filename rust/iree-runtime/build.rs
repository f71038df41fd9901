//! Builds IREE's runtime (with the io_parameters module and the parameter-file parsers) and tapeout's C shim
//! into one static archive, `libtapeout_iree.a`, with IREE's own CMake.
//!
//! Drivers: `local-sync` and `local-task` (the CPU), and `vulkan` unless `TAPEOUT_IREE_VULKAN=OFF` (off by default
//! on Apple targets, which have Metal). IREE's Vulkan driver opens the Vulkan loader (`libvulkan.so.1`) with
//! `dlopen` when a `vulkan` device is asked for, so the library links and loads where no loader is installed; the
//! headers it compiles against are IREE's vendored `third_party/vulkan_headers`.
//!
//! IREE's runtime sources come from the `eerie-sys` crate (a pinned dependency of this one, never built with its
//! own features: its static library lacks io_parameters and the IRPA parser). Cargo says where it unpacked them:
//! `$CARGO metadata` names eerie-sys's manifest (eerie-sys has no `links` key, so no `DEP_` variable
//! can). Override with `TAPEOUT_IREE_SOURCE=<IREE checkout>`. CMake >= 3.26 is `$CMAKE` when set, else the
//! project's `.venv/bin/cmake` (PyPI's `cmake`, which `scripts/setup` installs), else the one on PATH: no
//! environment variable is needed, so a Gradle daemon started before one was exported builds the same.
//!
//! The CMake build lives in cargo's build directory, beside this package's `OUT_DIR`s
//! (`target/<profile>/build/tapeout-iree-runtime`; `TAPEOUT_IREE_BUILD_DIR` overrides): each profile and target dir
//! has its own, every command of one profile (build, check, clippy, test, doc) shares it, and `cargo clean` removes
//! it. A fresh build costs about two CPU-minutes, once per profile; a no-op rebuild about a second. It is
//! reconfigured when a CMake definition changed or it never finished configuring; CMake itself reconfigures when a
//! CMakeLists.txt changed.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

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

    let source = iree_source(&manifest)?;
    let cmake = cmake_binary(&workspace)?;
    let build = cmake_build_dir()?;
    std::fs::create_dir_all(&build).map_err(|e| format!("creating {}: {e}", build.display()))?;

    let ninja = Command::new("ninja").arg("--version").output().is_ok_and(|o| o.status.success());
    // IREE's debug runtime is much slower and no more useful to tapeout's users: always build it optimised.
    let definitions = [
        "-DCMAKE_BUILD_TYPE=Release".to_owned(),
        format!("-DTAPEOUT_IREE_SOURCE_DIR={}", source.display()),
        "-DTAPEOUT_IREE_CUDA=OFF".to_owned(),
        format!("-DTAPEOUT_IREE_VULKAN={}", if vulkan_wanted()? { "ON" } else { "OFF" }),
    ];
    // Configured once; again when a definition changed (a build dir configured before Vulkan was built, say): the
    // cache keeps what it was first given. A configure that failed half way leaves a cache without a build system.
    let generated = build.join("build.ninja").is_file() || build.join("Makefile").is_file();
    if !generated || !configured_with(&build.join("CMakeCache.txt"), &definitions) {
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

/// The IREE source tree: `$TAPEOUT_IREE_SOURCE`, else eerie-sys's.
fn iree_source(manifest: &Path) -> Result<PathBuf, String> {
    let (dir, origin) = match env::var_os("TAPEOUT_IREE_SOURCE") {
        Some(dir) => (PathBuf::from(dir), "TAPEOUT_IREE_SOURCE"),
        None => (eerie_sys_dir(manifest)?.join("iree"), "eerie-sys"),
    };
    if dir.join("runtime/src/iree/io/formats/irpa").is_dir() {
        Ok(dir)
    } else {
        Err(format!("{origin}: {} is not an IREE source tree (no runtime/src/iree/io/formats/irpa)", dir.display()))
    }
}

/// Where cargo unpacked the eerie-sys this package depends on: its resolved dependency in `cargo metadata`.
fn eerie_sys_dir(manifest: &Path) -> Result<PathBuf, String> {
    let metadata = cargo_metadata(manifest)?;
    if let Some(root) = metadata["workspace_root"].as_str() {
        // A new Cargo.lock may pin another eerie-sys: look again.
        println!("cargo:rerun-if-changed={}", Path::new(root).join("Cargo.lock").display());
    }
    let packages = metadata["packages"].as_array().ok_or("cargo metadata lists no packages")?;
    let manifest_path =
        |id: &str| packages.iter().find(|p| p["id"].as_str() == Some(id)).and_then(|p| p["manifest_path"].as_str());
    let own = manifest.join("Cargo.toml");
    let nodes = metadata["resolve"]["nodes"].as_array().ok_or("cargo metadata has no resolve graph")?;
    let node = nodes
        .iter()
        .find(|n| n["id"].as_str().and_then(manifest_path).is_some_and(|p| Path::new(p) == own))
        .ok_or_else(|| format!("cargo metadata does not resolve {}", own.display()))?;
    let eerie = node["deps"]
        .as_array()
        .and_then(|deps| deps.iter().find(|d| d["name"].as_str() == Some("eerie_sys")))
        .and_then(|d| d["pkg"].as_str())
        .and_then(manifest_path)
        .ok_or("cargo metadata resolves no eerie-sys for this package")?;
    Path::new(eerie).parent().map(Path::to_path_buf).ok_or_else(|| format!("{eerie} has no parent directory"))
}

/// `cargo metadata` of this workspace for the target, offline first: a build has every package it compiles, eerie-sys
/// among them, and usually (after `cargo fetch`, which scripts/setup runs) the rest. The workspace's other packages
/// (dev-dependencies, say) may not be downloaded yet after a bare `cargo build`: cargo metadata needs them, so it
/// then runs again, allowed to fetch them.
fn cargo_metadata(manifest: &Path) -> Result<Value, String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut failure = String::new();
    for offline in [true, false] {
        let mut command = Command::new(&cargo);
        command.args(["metadata", "--format-version", "1", "--locked", "--manifest-path"]);
        command.arg(manifest.join("Cargo.toml"));
        if let Ok(target) = env::var("TARGET") {
            command.args(["--filter-platform", &target]);
        }
        if offline {
            command.arg("--offline");
        }
        let output = command.output().map_err(|e| format!("cannot start {command:?}: {e}"))?;
        if output.status.success() {
            return serde_json::from_slice(&output.stdout)
                .map_err(|e| format!("cargo metadata's output is not JSON: {e}"));
        }
        failure = format!("{command:?} failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr).trim());
    }
    Err(format!(
        "{failure}\nrun `cargo fetch --locked` (scripts/setup does), or set TAPEOUT_IREE_SOURCE to an IREE checkout"
    ))
}

/// Where the CMake tree lives: `$TAPEOUT_IREE_BUILD_DIR`, else `tapeout-iree-runtime` beside this package's
/// `OUT_DIR`s in cargo's build directory of the profile (`target/<profile>/build`), else in `OUT_DIR` itself.
/// Not in `OUT_DIR` when the layout allows: `cargo check`, `cargo test` and `cargo clippy` run this script with three
/// hashes, so three `OUT_DIR`s, in one profile, and each would build IREE again. Cargo's lock on the profile's
/// directory keeps two builds of the tree apart.
fn cmake_build_dir() -> Result<PathBuf, String> {
    if let Some(dir) = env::var_os("TAPEOUT_IREE_BUILD_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("cargo did not set OUT_DIR")?);
    let pkg = env::var("CARGO_PKG_NAME").map_err(|e| format!("CARGO_PKG_NAME: {e}"))?;
    // OUT_DIR is <profile>/build/<package>-<hash>/out.
    let build_dir = out
        .parent()
        .filter(|dir| dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{pkg}-"))))
        .and_then(Path::parent)
        .filter(|dir| dir.file_name().is_some_and(|n| n == "build"));
    Ok(match build_dir {
        Some(dir) => dir.join(format!("{pkg}-runtime")),
        None => out.join("iree-runtime"),
    })
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
