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

use tapeout_graph::{ArgDim, ComputeGraph, Dim, TensorId, argument_dims};

use crate::error::Result;

/// The `format` of a signature file.
pub const SIGNATURE_FORMAT: &str = "tapeout-signature/1";

/// The signature file's name for a module file stem: `<stem>.signature.json`.
#[must_use]
pub fn signature_file_name(stem: &str) -> String {
    format!("{stem}.signature.json")
}

/// One argument or result: its name, dtype and shape (`"?"` for a dimension known only at run time); an argument
/// with `?` dimensions also its `dims`, what the graph requires of each (the module's `tapeout.dims`): a number for
/// an extent it must have, `"d<k>"` for one it must share with every other dimension of class k, `"?"` for any.
fn value(graph: &ComputeGraph<'_>, id: TensorId, dims: Option<&[ArgDim]>) -> serde_json::Value {
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
    let mut v = serde_json::json!({ "name": spec.name, "dtype": spec.dtype.name(), "shape": shape });
    if let (Some(dims), serde_json::Value::Object(map)) = (dims.filter(|_| spec.shape.is_dynamic()), &mut v) {
        let dims: Vec<serde_json::Value> = dims
            .iter()
            .map(|d| match d {
                ArgDim::Static(n) | ArgDim::Extent(n) => (*n).into(),
                ArgDim::Free | ArgDim::Class(_) => d.to_string().into(),
            })
            .collect();
        map.insert("dims".into(), dims.into());
    }
    v
}

/// The signature of `functions` (`(name, graph)` each, in module order) as its JSON text.
#[must_use]
pub fn signature_json(module: &str, functions: &[(&str, &ComputeGraph<'_>)]) -> String {
    let functions: Vec<serde_json::Value> = functions
        .iter()
        .map(|(name, g)| {
            serde_json::json!({
                "name": name,
                "arguments": g.inputs().iter().zip(argument_dims(g)).map(|(&id, d)| value(g, id, Some(&d))).collect::<Vec<_>>(),
                "results": g.outputs().iter().map(|&id| value(g, id, None)).collect::<Vec<_>>(),
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
            {"name": "ids", "dtype": "i32", "shape": ["?", 8], "dims": ["?", 8]},
            {"name": "x", "dtype": "f32", "shape": ["?", 8], "dims": ["?", 8]}]);
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

    #[test]
    fn arguments_say_which_dynamic_dims_the_graph_requires_equal() {
        // c = a + b needs one extent for a and b; d = c * w [7] makes k's `?` 7; s is static and says nothing.
        let mut t = Trace::new();
        let spec = |name: &str, dims: Vec<Dim>| TensorSpec::new(name, Shape(dims), DType::F32);
        let a = t.add_placeholder(spec("a", vec![Dim::Dynamic, Dim::Dynamic]));
        let b = t.add_placeholder(spec("b", vec![Dim::Dynamic, Dim::Dynamic]));
        let w = t.add_placeholder(spec("w", vec![Dim::Static(7)]));
        let c = t.add_placeholder(spec("c", vec![Dim::Dynamic, Dim::Dynamic]));
        let d = t.add_placeholder(spec("d", vec![Dim::Dynamic, Dim::Static(7)]));
        t.record(OpKind::Add, Attrs::new(), &[a, b], &[c]);
        t.record(OpKind::Mul, Attrs::new(), &[c, w], &[d]);
        t.set_outputs(&[d]);
        let g = tapeout_graph::finalize(&t, &ExtractOptions::default()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&signature_json("m", &[("main", &g)])).unwrap();
        let args = &v["functions"][0]["arguments"];
        assert_eq!(args[0]["dims"], serde_json::json!(["d0", 7]));
        assert_eq!(args[1]["dims"], serde_json::json!(["d0", 7]));
        assert_eq!(args[2].get("dims"), None, "a static argument has no dims");
        assert_eq!(v["functions"][0]["results"][0].get("dims"), None, "results have none");
    }
}
