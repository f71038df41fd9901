//! The op table and the lowering cannot disagree: for every op of `OpKind::ALL`, a minimal valid node at each
//! input count the table accepts (its bounds, and one more for an open bound) passes `finalize` and lowers, and
//! a node with one input count the table refuses is refused by `finalize` as `GraphError::Arity`, never later
//! by the emitter. A lowering must use every input it is given (one that ignores an extra input would hide a
//! table that accepts too many).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use tapeout_graph::ops::Arity;
use tapeout_graph::{
    Attr, Attrs, DType, ExtractOptions, GraphError, OpKind, PassOps, Shape, TensorSpec, Trace, finalize,
};
use tapeout_hlo::{EmitOptions, emit};

/// Operand specs, attributes and the result spec of one node.
struct Case {
    ins: Vec<(Vec<u64>, DType)>,
    attrs: Attrs,
    out: (Vec<u64>, DType),
    /// Result dimensions that are `?` (the extent a `gate_rows` picks at run time).
    out_dynamic: Vec<usize>,
    /// Operand dimensions that are `?` (input, dimension): a row count read at run time.
    in_dynamic: Vec<(usize, usize)>,
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// A valid node of `op` with `n` inputs (`n` accepted by the table). Exhaustive over `OpKind`: a new op does
/// not compile until it has a case here.
fn case(op: OpKind, n: usize) -> Case {
    use DType::{Bool, F32, I32};
    let f = |d: &[u64]| (d.to_vec(), F32);
    let attrs = |kv: &[(&str, Attr)]| -> Attrs { kv.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect() };
    let c = |ins: Vec<(Vec<u64>, DType)>, attrs: Attrs, out: (Vec<u64>, DType)| Case {
        ins,
        attrs,
        out,
        out_dynamic: vec![],
        in_dynamic: vec![],
    };
    match op {
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Pow | OpKind::Max | OpKind::Min => {
            c(vec![f(&[2, 3]), f(&[3])], Attrs::new(), f(&[2, 3]))
        }
        OpKind::Abs
        | OpKind::Cos
        | OpKind::Exp
        | OpKind::Gelu
        | OpKind::Log
        | OpKind::Neg
        | OpKind::Relu
        | OpKind::Rsqrt
        | OpKind::Sigmoid
        | OpKind::Silu
        | OpKind::Sin
        | OpKind::Softmax
        | OpKind::Sqrt
        | OpKind::Tanh => c(vec![f(&[2, 3])], Attrs::new(), f(&[2, 3])),
        OpKind::And | OpKind::Or => c(vec![(vec![2, 3], Bool), (vec![3], Bool)], Attrs::new(), (vec![2, 3], Bool)),
        OpKind::Not => c(vec![(vec![2, 3], Bool)], Attrs::new(), (vec![2, 3], Bool)),
        OpKind::After => c(vec![(vec![2, 3], I32), f(&[4])], Attrs::new(), (vec![2, 3], I32)),
        OpKind::CausalMask => c(vec![f(&[2, 4, 4])], Attrs::new(), f(&[2, 4, 4])),
        OpKind::Argmax => c(vec![f(&[2, 3])], Attrs::new(), (vec![2], I32)),
        OpKind::AvgPool2d | OpKind::MaxPool2d => {
            c(vec![f(&[1, 1, 4, 4])], attrs(&[("kernel", ints(&[2, 2]))]), f(&[1, 1, 2, 2]))
        }
        OpKind::Broadcast => {
            let like = if n == 2 { vec![f(&[2, 3])] } else { vec![] };
            c([vec![f(&[3])], like].concat(), Attrs::new(), f(&[2, 3]))
        }
        OpKind::Clamp => {
            let bounds = if n == 3 { vec![f(&[]), f(&[])] } else { vec![] };
            c([vec![f(&[2, 3])], bounds].concat(), Attrs::new(), f(&[2, 3]))
        }
        OpKind::Compare => {
            c(vec![f(&[2, 3]), f(&[2, 3])], attrs(&[("direction", Attr::Str("LT".into()))]), (vec![2, 3], Bool))
        }
        OpKind::Concat => {
            let parts = u64::try_from(n).unwrap();
            c(vec![f(&[2, 3]); n], attrs(&[("axis", Attr::Int(0))]), f(&[2 * parts, 3]))
        }
        OpKind::Conv2d => {
            c([vec![f(&[1, 1, 4, 4]), f(&[2, 1, 3, 3])], vec![f(&[2]); n - 2]].concat(), Attrs::new(), f(&[1, 2, 2, 2]))
        }
        OpKind::Convert => c(vec![f(&[2, 3])], Attrs::new(), (vec![2, 3], I32)),
        OpKind::DynamicSlice => {
            let rank = n - 1;
            let x = vec![4; rank];
            let ins = [vec![f(&x)], vec![(vec![], I32); rank]].concat();
            c(ins, attrs(&[("sizes", ints(&vec![2; rank]))]), f(&vec![2; rank]))
        }
        OpKind::DynamicUpdateSlice => {
            let rank = n - 2;
            let ins = [vec![f(&vec![4; rank]), f(&vec![2; rank])], vec![(vec![], I32); rank]].concat();
            c(ins, Attrs::new(), f(&vec![4; rank]))
        }
        OpKind::GateRows => Case {
            out_dynamic: vec![1],
            in_dynamic: vec![(1, 0)],
            ..c(
                vec![f(&[5, 4]), f(&[3, 2])],
                attrs(&[("rows", Attr::Int(2)), ("few", Attr::Bool(true)), ("axis", Attr::Int(1))]),
                f(&[5, 4]),
            )
        },
        OpKind::PadRows => c(vec![f(&[3, 4])], attrs(&[("rows", Attr::Int(2))]), f(&[2, 4])),
        OpKind::RoundAs => c(vec![f(&[2, 3])], attrs(&[("dtype", Attr::Str("bf16".into()))]), f(&[2, 3])),
        OpKind::DecodeWords => c(vec![(vec![3], I32)], attrs(&[("from", Attr::Str("f16".into()))]), f(&[6])),
        OpKind::PlaceRows => c(vec![f(&[2, 4]), f(&[3, 4])], attrs(&[("rows", Attr::Int(2))]), f(&[3, 4])),
        OpKind::Gather => c(vec![f(&[5, 3]), (vec![2], I32)], Attrs::new(), f(&[2, 3])),
        OpKind::Iota if n == 1 => c(vec![f(&[4, 5])], attrs(&[("axis", Attr::Int(1))]), (vec![5], I32)),
        OpKind::Iota => c(vec![], attrs(&[("dim", Attr::Int(1))]), (vec![2, 3], I32)),
        OpKind::LayerNorm | OpKind::RmsNorm => {
            c([vec![f(&[3, 4])], vec![f(&[4]); n - 1]].concat(), Attrs::new(), f(&[3, 4]))
        }
        OpKind::Matmul => c(vec![f(&[2, 3]), f(&[3, 4])], Attrs::new(), f(&[2, 4])),
        OpKind::ReduceMax | OpKind::ReduceMean | OpKind::ReduceSum => {
            c(vec![f(&[2, 3])], attrs(&[("axes", ints(&[1]))]), f(&[2]))
        }
        OpKind::Reshape => c(vec![f(&[2, 3])], Attrs::new(), f(&[6])),
        OpKind::Rope => c(vec![f(&[2, 5, 8]), f(&[5, 8]), f(&[5, 8])], Attrs::new(), f(&[2, 5, 8])),
        OpKind::Sdpa => {
            let mask = if n == 4 { vec![f(&[4, 6])] } else { vec![] };
            c([vec![f(&[2, 4, 8]), f(&[2, 6, 8]), f(&[2, 6, 3])], mask].concat(), Attrs::new(), f(&[2, 4, 3]))
        }
        OpKind::Select => c(vec![(vec![2, 3], Bool), f(&[2, 3]), f(&[2, 3])], Attrs::new(), f(&[2, 3])),
        OpKind::Slice => c(
            vec![f(&[4, 6])],
            attrs(&[("start", ints(&[0, 1])), ("limit", ints(&[2, 5])), ("stride", ints(&[1, 2]))]),
            f(&[2, 2]),
        ),
        OpKind::Transpose => c(vec![f(&[2, 3])], Attrs::new(), f(&[3, 2])),
    }
}

/// The input counts to try: every bound of the table, and one past an open bound.
fn accepted(arity: Arity) -> Vec<usize> {
    match arity {
        Arity::Exactly(k) => vec![k],
        Arity::AtLeast(k) => vec![k, k + 1],
        Arity::Between(lo, hi) => (lo..=hi).collect(),
        Arity::Either(a, b) => vec![a, b],
    }
}

/// One input count the table refuses.
fn refused(arity: Arity) -> usize {
    match arity {
        Arity::Exactly(k) | Arity::Between(_, k) => k + 1,
        Arity::AtLeast(k) => k.checked_sub(1).expect("no op takes any number of inputs from 0"),
        Arity::Either(a, b) if a + 1 < b => a + 1,
        Arity::Either(_, b) => b + 1,
    }
}

fn lower(op: OpKind, c: &Case) -> Result<String, String> {
    let mut t = Trace::new();
    let spec = |name: String, (dims, dtype): &(Vec<u64>, DType)| TensorSpec::new(name, Shape::of(dims), *dtype);
    let ins: Vec<_> = c
        .ins
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut x = spec(format!("x{i}"), s);
            for &(_, d) in c.in_dynamic.iter().filter(|(j, _)| *j == i) {
                x.shape.0[d] = tapeout_graph::Dim::Dynamic;
            }
            t.add_placeholder(x)
        })
        .collect();
    let mut out = spec("y".into(), &c.out);
    for &d in &c.out_dynamic {
        out.shape.0[d] = tapeout_graph::Dim::Dynamic;
    }
    let y = t.add_placeholder(out);
    t.record(op, c.attrs.clone(), &ins, &[y]);
    t.set_outputs(&[y]);
    // Every op of the table, the ones only passes write included: this tests their lowering.
    let opts = ExtractOptions { pass_ops: PassOps::AcceptForEmitterTests, ..ExtractOptions::default() };
    let g = finalize(&t, &opts).map_err(|e| format!("finalize: {e}"))?;
    emit(&g, &EmitOptions::default()).map(|m| m.text).map_err(|e| format!("emit: {e}"))
}

#[test]
fn every_op_lowers_at_every_input_count_the_table_accepts() {
    for &op in OpKind::ALL {
        for n in accepted(op.signature().inputs) {
            let c = case(op, n);
            assert_eq!(c.ins.len(), n, "{op}: the case for {n} inputs has {}", c.ins.len());
            let text = lower(op, &c).unwrap_or_else(|e| panic!("{op} with {n} inputs: {e}"));
            for i in 0..n {
                // Declared once in the signature; a lowering that ignores an input never uses it.
                let arg = format!("%arg{i}");
                let uses = text
                    .match_indices(&arg)
                    .filter(|(at, m)| !text[at + m.len()..].starts_with(|ch: char| ch.is_ascii_digit()));
                assert!(uses.count() >= 2, "{op} with {n} inputs does not use input {i}:\n{text}");
            }
        }
    }
}

#[test]
fn finalize_refuses_an_input_count_outside_the_table_as_an_arity_error() {
    for &op in OpKind::ALL {
        let n = refused(op.signature().inputs);
        let mut t = Trace::new();
        let ins: Vec<_> =
            (0..n).map(|i| t.add_placeholder(TensorSpec::new(format!("x{i}"), Shape::of(&[2]), DType::F32))).collect();
        let y = t.add_placeholder(TensorSpec::new("y", Shape::of(&[2]), DType::F32));
        t.record(op, Attrs::new(), &ins, &[y]);
        t.set_outputs(&[y]);
        match finalize(&t, &ExtractOptions { pass_ops: PassOps::AcceptForEmitterTests, ..ExtractOptions::default() }) {
            Err(GraphError::Arity { port: "input", found, .. }) => assert_eq!(found, n, "{op}"),
            other => panic!("{op} with {n} inputs: expected an arity error from finalize, got {other:?}"),
        }
    }
}
