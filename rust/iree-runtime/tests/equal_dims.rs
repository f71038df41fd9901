//! Issue 61: `?` dimensions the graph requires equal, from the graph through tapeout's own pipeline (finalize,
//! emit) and iree-compile to a call. Equal extents give the right numbers; unequal ones, and a `?` given another
//! extent than the static one it meets, are refused with typed errors before IREE reads out of bounds (which at
//! `[2^24]` against `[1]` was a SIGSEGV).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod support;

use support::{CPU, compile, f32_bytes, f32s};

use tapeout::graph::{Attrs, DType as GraphDType, Dim, ExtractOptions, OpKind, Shape, TensorSpec, Trace};
use tapeout::hlo::EmitOptions;
use tapeout_iree::{DType, DimRule, Instance, IreeError, Module};

/// The module tapeout writes for `out = op(a, b)` over f32 tensors of these shapes (`None` a `?`), compiled and
/// loaded on a CPU device.
fn pipeline(dir: &std::path::Path, name: &str, op: OpKind, shapes: [&[Option<u64>]; 3]) -> (String, Module) {
    let shape = |dims: &[Option<u64>]| Shape(dims.iter().map(|d| d.map_or(Dim::Dynamic, Dim::Static)).collect());
    let mut t = Trace::new();
    let [a, b, out] = [("a", shapes[0]), ("b", shapes[1]), ("out", shapes[2])]
        .map(|(n, s)| t.add_placeholder(TensorSpec::new(n, shape(s), GraphDType::F32)));
    t.record(op, Attrs::new(), &[a, b], &[out]);
    t.set_outputs(&[out]);
    let graph = tapeout::finalize(&t, &ExtractOptions::default()).unwrap();
    let mlir = tapeout::module_text(&graph, &EmitOptions::default()).unwrap();
    let vmfb = compile(dir, name, &mlir, CPU);
    let device = Instance::new().unwrap().device("local-task", 2).unwrap();
    (mlir, device.load(&vmfb, &[]).unwrap())
}

fn value(module: &Module, values: &[f32]) -> tapeout_iree::Value {
    module.value(DType::F32, &[values.len() as u64], &f32_bytes(values)).unwrap()
}

#[test]
fn add_of_two_dynamic_vectors_runs_at_equal_extents_and_refuses_unequal_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (mlir, module) = pipeline(dir.path(), "add", OpKind::Add, [&[None], &[None], &[None]]);
    assert!(mlir.contains(r#"{tapeout.name = "a", tapeout.dims = "d0"}"#), "{mlir}");
    let main = module.function("main").unwrap();
    let d0 = vec![DimRule::Class("d0".into())];
    assert_eq!((&main.inputs[0].dim_rules, &main.inputs[1].dim_rules), (&d0, &d0), "{}", main.declaration);

    for n in [1usize, 7, 1000] {
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        let y: Vec<f32> = (0..n).map(|i| 100.0 - i as f32 * 0.25).collect();
        let out = module.call("main", &[&value(&module, &x), &value(&module, &y)]).unwrap();
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        assert_eq!(f32s(&out[0].to_bytes().unwrap()), want, "n = {n}");
    }

    let e = module.call("main", &[&value(&module, &[1.0; 3]), &value(&module, &[2.0; 2])]).unwrap_err();
    assert!(
        matches!(&e, IreeError::UnequalDims { function, first, second }
            if function == "main" && first == &("a".to_owned(), 0, 3) && second == &("b".to_owned(), 0, 2)),
        "{e}"
    );
    assert!(e.to_string().contains("the graph requires them equal"), "{e}");
    // The issue's call: 2^24 floats against one read b far out of bounds and crashed the process.
    let big = value(&module, &vec![1.0; 1 << 24]);
    let e = module.call("main", &[&big, &value(&module, &[2.0])]).unwrap_err();
    assert!(matches!(&e, IreeError::UnequalDims { first, second, .. } if first.2 == 1 << 24 && second.2 == 1), "{e}");
    let e = module.call("main", &[&value(&module, &[2.0]), &big]).unwrap_err();
    assert!(matches!(&e, IreeError::UnequalDims { .. }), "{e}");
}

#[test]
fn a_dynamic_dim_meeting_a_static_one_must_have_its_extent() {
    let dir = tempfile::tempdir().unwrap();
    let (mlir, module) =
        pipeline(dir.path(), "mul", OpKind::Mul, [&[None, Some(3)], &[Some(5), Some(1)], &[Some(5), Some(3)]]);
    assert!(mlir.contains(r#"tapeout.dims = "5x3""#), "{mlir}");
    let a: Vec<f32> = (0..15).map(|i| i as f32).collect();
    let b = [2.0f32, 3.0, 5.0, 7.0, 11.0];
    let call = |rows: u64, a: &[f32]| {
        let a = module.value(DType::F32, &[rows, 3], &f32_bytes(a)).unwrap();
        let b = module.value(DType::F32, &[5, 1], &f32_bytes(&b)).unwrap();
        module.call("main", &[&a, &b])
    };
    let out = call(5, &a).unwrap();
    let want: Vec<f32> = a.iter().enumerate().map(|(i, x)| x * b[i / 3]).collect();
    assert_eq!(f32s(&out[0].to_bytes().unwrap()), want);
    for rows in [1u64, 4, 6] {
        let e = call(rows, &vec![1.0; usize::try_from(rows * 3).unwrap()]).unwrap_err();
        assert!(
            matches!(&e, IreeError::Shape { argument, given, .. } if argument == "a" && given == &format!("[{rows}, 3]")),
            "{e}"
        );
        assert!(e.to_string().contains("[5, 3] (the graph ties dimension 0 to 5)"), "{e}");
    }
}
