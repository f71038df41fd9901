//! The signature file written beside every module, `<name>.signature.json`: each public function's arguments and
//! results in order, with the names, dtypes and shapes the graph gave them, so a caller matches positions to
//! tensors without parsing MLIR. The format (`tapeout-signature/1`) is described in `docs/signature-format.md`:
//!
//! ```json
//! {"format":"tapeout-signature/1","module":"tiny_llm","functions":[
//!   {"name":"main","arguments":[{"name":"x","dtype":"f32","shape":["?",64]}],
//!    "results":[{"name":"y","dtype":"f32","shape":["?",16]}]}]}
//! ```

use std::io::Write;
use std::path::Path;

use tapeout_graph::{ComputeGraph, Dim, TensorId};

use crate::error::Result;

/// The `format` of a signature file.
pub const SIGNATURE_FORMAT: &str = "tapeout-signature/1";

/// The signature file's name for a module file stem: `<stem>.signature.json`.
#[must_use]
pub fn signature_file_name(stem: &str) -> String {
    format!("{stem}.signature.json")
}

/// One argument or result: its name, dtype and shape (`"?"` for a dimension known only at run time).
fn value(graph: &ComputeGraph<'_>, id: TensorId) -> serde_json::Value {
    let spec = graph.spec(id);
    let shape: Vec<serde_json::Value> = spec
        .shape
        .0
        .iter()
        .map(|d| match d {
            Dim::Static(n) => (*n).into(),
            Dim::Dynamic => "?".into(),
        })
        .collect();
    serde_json::json!({ "name": spec.name, "dtype": spec.dtype.name(), "shape": shape })
}

/// The signature of `functions` (`(name, graph)` each, in module order) as its JSON text.
#[must_use]
pub fn signature_json(module: &str, functions: &[(&str, &ComputeGraph<'_>)]) -> String {
    let functions: Vec<serde_json::Value> = functions
        .iter()
        .map(|(name, g)| {
            serde_json::json!({
                "name": name,
                "arguments": g.inputs().iter().map(|&id| value(g, id)).collect::<Vec<_>>(),
                "results": g.outputs().iter().map(|&id| value(g, id)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut text =
        serde_json::json!({ "format": SIGNATURE_FORMAT, "module": module, "functions": functions }).to_string();
    text.push('\n');
    text
}

/// Writes the signature of `functions` to `path` atomically (a temporary file renamed over it, as the index of a
/// sharded set is written).
///
/// # Errors
/// [`crate::error::Error::Archive`] naming `path` when it cannot be written.
pub(crate) fn write(path: &Path, module: &str, functions: &[(&str, &ComputeGraph<'_>)]) -> Result<()> {
    let text = signature_json(module, functions);
    Ok(tapeout_irpa::write_atomically(path, |f| f.write_all(text.as_bytes()))?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report
    use super::*;
    use tapeout_graph::{Attrs, DType, ExtractOptions, OpKind, Shape, TensorSpec, Trace};

    #[test]
    fn every_function_lists_its_arguments_in_declared_order_and_its_results() {
        let mut t = Trace::new();
        let dynamic = |name: &str, dtype| TensorSpec::new(name, Shape(vec![Dim::Dynamic, Dim::Static(8)]), dtype);
        let ids = t.add_placeholder(dynamic("ids", DType::I32));
        let x = t.add_placeholder(dynamic("x", DType::F32));
        let f = t.add_placeholder(dynamic("f", DType::F32));
        let y = t.add_placeholder(dynamic("y \"quoted\"", DType::F32));
        t.record(OpKind::Neg, Attrs::new(), &[x], &[y]);
        t.record(OpKind::Convert, Attrs::new(), &[ids], &[f]);
        t.set_outputs(&[y, f]);
        let g = tapeout_graph::finalize(&t, &ExtractOptions::default()).unwrap();
        let text = signature_json("m", &[("prefill", &g), ("decode", &g)]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let args = serde_json::json!([
            {"name": "ids", "dtype": "i32", "shape": ["?", 8]},
            {"name": "x", "dtype": "f32", "shape": ["?", 8]}]);
        let results = serde_json::json!([
            {"name": "y \"quoted\"", "dtype": "f32", "shape": ["?", 8]},
            {"name": "f", "dtype": "f32", "shape": ["?", 8]}]);
        assert_eq!(
            v,
            serde_json::json!({"format": SIGNATURE_FORMAT, "module": "m", "functions": [
                {"name": "prefill", "arguments": args, "results": results},
                {"name": "decode", "arguments": args, "results": results}]})
        );
        assert_eq!(signature_file_name("m"), "m.signature.json");
    }
}
