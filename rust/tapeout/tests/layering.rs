//! The crates' layering, checked against `cargo metadata`: each crate depends only on the crates below it.
//!
//! ```text
//! irpa     archive format            (nothing of ours)
//! graph    tensors, trace, extraction (nothing of ours)
//! hlo      StableHLO text             (graph)
//! tapeout  the pipeline               (graph, hlo, irpa)
//! cli, jni front ends                 (tapeout)
//! iree     IREE's runtime, serving    (irpa, to check archives before IREE maps them; never the exporter)
//! iree-jni serving's JNI library      (iree)
//! ```
//!
//! Every workspace member is read from `cargo metadata`; one missing from the table below fails the test until
//! its place in the layering is written down.
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
    // `--no-deps` lists the workspace's members and nothing else: every crate of ours.
    let ours: Vec<String> =
        meta["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect();
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_owned();
        let normal: Vec<String> = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null()) // normal dependencies; dev and build ones may reach anywhere
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .filter(|d| ours.contains(d))
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
        ("tapeout-iree", &["tapeout-irpa"][..]),
        ("tapeout-iree-jni", &["tapeout-iree"][..]),
    ]);
    assert!(ours.len() >= allowed.len(), "cargo metadata lists fewer members than the layering: {ours:?}");
    for (name, have) in &deps {
        let Some(ok) = allowed.get(name.as_str()) else {
            panic!("workspace member {name} has no place in the layering: add it to this test's table");
        };
        for d in have {
            assert!(ok.contains(&d.as_str()), "{name} depends on {d}; it may depend only on {ok:?}");
        }
    }
}
