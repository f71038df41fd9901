//! The pipeline end to end on small traces: each step's error arrives typed, with its remedy as data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use tapeout::graph::{Attrs, DType, ExtractOptions, GraphError, OpKind, Shape, TensorSpec, Trace};
use tapeout::{Error, Remedy};

fn spec(name: &str, dims: &[u64]) -> TensorSpec {
    TensorSpec::new(name, Shape::of(dims), DType::F32)
}

#[test]
fn graph_errors_pass_through_typed() {
    let mut t = Trace::new();
    let a = t.add_placeholder(spec("a", &[2, 3]));
    let b = t.add_placeholder(spec("b", &[4]));
    let y = t.add_placeholder(spec("y", &[2, 3]));
    t.record(OpKind::Add, Attrs::new(), &[a, b], &[y]);
    t.set_outputs(&[y]);
    let e = tapeout::finalize(&t, &ExtractOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Graph(GraphError::TypeMismatch { .. })), "{e}");
    assert_eq!(e.remedy(), None);
}

#[test]
fn no_outputs_has_a_remedy() {
    let mut t = Trace::new();
    t.add_placeholder(spec("a", &[2]));
    let e = tapeout::finalize(&t, &ExtractOptions::default()).unwrap_err();
    assert_eq!(e.remedy(), Some(Remedy::DeclareOutputs), "{e}");
}
