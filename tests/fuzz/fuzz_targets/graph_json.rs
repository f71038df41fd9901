//! The JSON graph format end to end: parse, extract, emit. Any text gives a module or a typed error —
//! the validator and the emitter never panic on a graph they accepted.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tapeout_graph::io::{GraphFile, WeightSet};
use tapeout_graph::{ExtractOptions, PackedConstantHandling, finalize};
use tapeout_hlo::{EmitOptions, MaterializationPolicy, emit};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(graph) = GraphFile::parse(text, Path::new("fuzz.json")) else { return };
    // No weight files: tensors with data would need them, so only shape-level graphs get further.
    let Ok(weights) = WeightSet::open(&graph, None) else { return };
    let Ok(trace) = graph.to_trace(&weights) else { return };
    let opts = ExtractOptions { packed: PackedConstantHandling::Dequantize, ..ExtractOptions::default() };
    let Ok(g) = finalize(&trace, &opts) else { return };
    for policy in [MaterializationPolicy::InlineAlways, MaterializationPolicy::ExternalAlways { scope: "model".into() }] {
        let _ = emit(&g, &EmitOptions { policy, ..EmitOptions::default() });
    }
});
