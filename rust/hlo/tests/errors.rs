//! Strict errors: every failure names the node (or tensor), the op and the problem, and no mode
//! turns an error into a comment or a partial module.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use tapeout_graph::{
    Attr, Attrs, DType, Dim, ExtractOptions, GraphError, OpKind, Shape, Tensor, TensorSpec, Trace, finalize,
};
use tapeout_hlo::{EmitOptions, HloError, MaterializationPolicy, emit};

fn spec(name: &str, dims: &[u64]) -> TensorSpec {
    TensorSpec::new(name, Shape::of(dims), DType::F32)
}

/// Which step refused a node: the type rules of the op table (`finalize`), or the emitter (what it can lower).
#[derive(Debug)]
enum Refused {
    Finalize(GraphError),
    Emit(HloError),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Finalize(e) => e.fmt(f),
            Refused::Emit(e) => e.fmt(f),
        }
    }
}

fn one_op(op: OpKind, attrs: Attrs, in_dims: &[&[u64]], out_dims: &[u64]) -> Result<String, Refused> {
    let mut t = Trace::new();
    let ins: Vec<_> = in_dims.iter().enumerate().map(|(i, d)| t.add_placeholder(spec(&format!("x{i}"), d))).collect();
    let y = t.add_placeholder(spec("y", out_dims));
    t.record(op, attrs, &ins, &[y]);
    t.set_outputs(&[y]);
    let g = finalize(&t, &ExtractOptions::default()).map_err(Refused::Finalize)?;
    emit(&g, &EmitOptions::default()).map(|m| m.text).map_err(Refused::Emit)
}

/// The message of a node the op table's type rules refuse in `finalize`.
fn type_mismatch(r: Result<String, Refused>) -> String {
    match r {
        Err(e @ Refused::Finalize(GraphError::TypeMismatch { .. })) => e.to_string(),
        other => panic!("expected a type mismatch from finalize, got {other:?}"),
    }
}

#[test]
fn bad_attributes_name_the_node_and_attribute() {
    let attrs: Attrs = [("perm".to_owned(), Attr::Ints(vec![0, 0]))].into();
    let e = type_mismatch(one_op(OpKind::Transpose, attrs, &[&[2, 3]], &[3, 2]));
    assert!(e.contains("node 0 (transpose -> 'y')") && e.contains("'perm'") && e.contains("not a permutation"), "{e}");

    let attrs: Attrs = [("axis".to_owned(), Attr::Str("last".into()))].into();
    let e = type_mismatch(one_op(OpKind::Softmax, attrs, &[&[2, 3]], &[2, 3]));
    assert!(e.contains("'axis' must be an integer"), "{e}");

    let e = type_mismatch(one_op(OpKind::Compare, Attrs::new(), &[&[2], &[2]], &[2]));
    assert!(e.contains("'direction'"), "{e}");
}

#[test]
fn declared_shapes_that_the_op_cannot_produce_are_refused() {
    let e = type_mismatch(one_op(OpKind::Matmul, Attrs::new(), &[&[2, 3], &[3, 4]], &[2, 5]));
    assert!(
        e.contains("node 0 (matmul -> 'y')") && e.contains("[2x3] x [3x4] gives [2x4], but the node declares [2x5]"),
        "{e}"
    );
    let attrs: Attrs = [("kernel".to_owned(), Attr::Ints(vec![2, 2]))].into();
    let e = type_mismatch(one_op(OpKind::MaxPool2d, attrs, &[&[1, 1, 4, 4]], &[1, 1, 3, 3]));
    assert!(e.contains("result shape is [1x1x2x2]"), "{e}");
    let e = type_mismatch(one_op(OpKind::ReduceSum, Attrs::new(), &[&[2, 3]], &[2]));
    assert!(e.contains("node 0 (reduce_sum -> 'y')"), "{e}");
    assert!(e.contains("declares the result shape [2], but reducing [2x3] over axes [0, 1] gives []"), "{e}");
}

#[test]
fn an_inline_constant_above_2_gib_is_an_error_not_a_fallback() {
    let map = memmap2::MmapMut::map_anon(1 << 31).unwrap();
    let values: &[f32] = bytemuck::cast_slice(&map[..]);
    let mut t = Trace::new();
    let x = t.add_placeholder(spec("ids", &[4]));
    let w = t.add_tensor(Tensor::f32(spec("embed", &[262_144, 2048]), values));
    let y = t.add_placeholder(spec("y", &[262_144, 2048]));
    let _ = x;
    t.record(OpKind::Neg, Attrs::new(), &[w], &[y]);
    t.set_outputs(&[y]);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    let opts = EmitOptions { policy: MaterializationPolicy::InlineAlways, ..EmitOptions::default() };
    let e = emit(&g, &opts).unwrap_err();
    assert!(matches!(e, HloError::ConstantTooLarge { bytes: 2_147_483_648, .. }));
    let msg = e.to_string();
    for needle in
        ["'embed'", "2147483648 bytes", "2147483647-byte ceiling", "external parameter", "at or below 2147483648"]
    {
        assert!(msg.contains(needle), "{needle:?} missing: {msg}");
    }
    // The same constant external: the module refers to it, and its text stays small.
    let opts = EmitOptions {
        policy: MaterializationPolicy::ExternalAlways { scope: "model".into() },
        ..EmitOptions::default()
    };
    let m = emit(&g, &opts).unwrap();
    assert_eq!(m.externals.len(), 1);
    assert!(m.text.len() < 1024, "{}", m.text.len());
}

#[test]
fn a_static_dimension_above_i32_in_a_dynamic_shape_is_an_error_not_zero() {
    let mut t = Trace::new();
    let x = t.add_placeholder(TensorSpec::new("x", Shape(vec![Dim::Dynamic, Dim::Static(3_000_000_000)]), DType::F32));
    let b = t.add_placeholder(spec("b", &[3_000_000_000]));
    let y = t.add_placeholder(TensorSpec::new("y", Shape(vec![Dim::Dynamic, Dim::Static(3_000_000_000)]), DType::F32));
    t.record(OpKind::Add, Attrs::new(), &[x, b], &[y]);
    t.set_outputs(&[y]);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    let e = emit(&g, &EmitOptions::default()).unwrap_err().to_string();
    assert!(e.contains("node 0 (add -> 'y')") && e.contains("dimension 1 of [?x3000000000] is 3000000000"), "{e}");
}
