//! Snapshot-locks the whole emitted module of every test graph (`tests/graphs/*.json`, written by
//! `tests/graphs/make_graphs.py`). Snapshots live in `tests/snapshots/<graph>.snap`; review a
//! change with `cargo insta review`. The IREE gate (`tests/iree/test_graphs.py`) compiles and runs
//! the same graphs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};

use tapeout_graph::io::{GraphFile, WeightSet};
use tapeout_graph::{ExtractOptions, OpKind, PackedConstantHandling, PassOps, finalize};
use tapeout_hlo::{EmitOptions, MaterializationPolicy, emit};

fn graphs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/graphs")
}

/// The module text for one graph, with the policy from its `.test.json`.
fn emit_graph(name: &str) -> String {
    let dir = graphs_dir();
    let test: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.test.json"))).unwrap()).unwrap();
    let scope = test["scope"].as_str().unwrap().to_owned();
    let policy = match &test["policy"] {
        serde_json::Value::String(s) if s == "inline_all" => MaterializationPolicy::InlineAlways,
        serde_json::Value::String(s) if s == "external_all" => MaterializationPolicy::ExternalAlways { scope },
        p => MaterializationPolicy::SizeThreshold { bytes: p["inline_below"].as_u64().unwrap(), scope },
    };
    let packed = match test["packed"].as_str() {
        Some("dequantize") => PackedConstantHandling::Dequantize,
        _ => PackedConstantHandling::Fail,
    };
    let file = GraphFile::load(dir.join(format!("{name}.json"))).unwrap();
    let weights = WeightSet::open(&file, Some(&dir.join(format!("{name}.safetensors")))).unwrap();
    let trace = file.to_trace(&weights).unwrap();
    // The graphs that test how the emitter lowers what only passes write name it themselves.
    let pass_ops = if test["pass_ops"] == true { PassOps::AcceptForEmitterTests } else { PassOps::Refuse };
    let opts = ExtractOptions { forced_inputs: file.forced_inputs(), packed, pass_ops, ..ExtractOptions::default() };
    let graph = finalize(&trace, &opts).unwrap();
    let emit_opts = EmitOptions { module_name: file.name.clone(), function: "main".into(), policy };
    emit(&graph, &emit_opts).unwrap().text
}

#[test]
fn every_graph_matches_its_snapshot() {
    let mut names: Vec<String> = std::fs::read_dir(graphs_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".test.json").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.len() >= 20, "expected at least 20 test graphs, found {}", names.len());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../../tests/snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for name in &names {
            insta::assert_snapshot!(name.as_str(), emit_graph(name));
        }
    });
}

#[test]
fn emission_is_deterministic() {
    assert_eq!(emit_graph("transformer"), emit_graph("transformer"));
}

#[test]
fn every_op_of_the_table_appears_in_a_snapshot_graph() {
    let mut used = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(graphs_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap();
        if !name.ends_with(".json") || name.ends_with(".test.json") {
            continue;
        }
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        used.extend(doc["nodes"].as_array().unwrap().iter().map(|n| n["op"].as_str().unwrap().to_owned()));
    }
    let missing: Vec<&str> = OpKind::ALL.iter().map(|o| o.name()).filter(|n| !used.contains(*n)).collect();
    assert!(missing.is_empty(), "no test graph uses {missing:?}: add them in tests/graphs/make_graphs.py");
}
