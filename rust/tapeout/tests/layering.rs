//! The crates' layering, checked against `cargo metadata`: each crate depends only on the crates below it.
//!
//! ```text
//! irpa     archive format            (nothing of ours)
//! graph    tensors, trace, extraction (nothing of ours)
//! hlo      StableHLO text             (graph)
//! tapeout  the pipeline               (graph, hlo, irpa)
//! cli, jni front ends                 (tapeout)
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::BTreeMap;
use std::process::Command;

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = ["tapeout-irpa", "tapeout-graph", "tapeout-hlo", "tapeout", "tapeout-cli", "tapeout-jni"];
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_owned();
        if !ours.contains(&name.as_str()) {
            continue;
        }
        let normal: Vec<String> = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null()) // normal dependencies; dev and build ones may reach anywhere
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .filter(|d| ours.contains(&d.as_str()))
            .collect();
        deps.insert(name, normal);
    }
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("tapeout-irpa", &[][..]),
        ("tapeout-graph", &[][..]),
        ("tapeout-hlo", &["tapeout-graph"][..]),
        ("tapeout", &["tapeout-graph", "tapeout-hlo", "tapeout-irpa"][..]),
        ("tapeout-cli", &["tapeout"][..]),
        ("tapeout-jni", &["tapeout"][..]),
    ]);
    assert_eq!(deps.len(), allowed.len(), "every crate of ours is in the workspace: {deps:?}");
    for (name, have) in &deps {
        let ok = allowed[name.as_str()];
        for d in have {
            assert!(ok.contains(&d.as_str()), "{name} depends on {d}; it may depend only on {ok:?}");
        }
    }
}
