//! The op table's tests: names, type rules and shapes.

use super::rules::check_rule;
use super::*;
use crate::trace::Attr;

#[test]
fn the_table_is_sorted_and_names_round_trip() {
    let names: Vec<&str> = OpKind::ALL.iter().map(|o| o.name()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names, sorted, "OpKind::ALL is sorted by name, each name once");
    for &op in OpKind::ALL {
        assert_eq!(OpKind::from_name(op.name()), Some(op));
    }
    assert_eq!(OpKind::from_name("frobnicate"), None);
    assert!(known_op_names().starts_with("abs, add, and, argmax, avg_pool2d"), "after is no op a graph records");
    let pass_only: Vec<&str> = OpKind::ALL.iter().filter(|o| o.inserted_by_passes()).map(|o| o.name()).collect();
    assert_eq!(pass_only, ["after", "decode_words", "gate_rows", "pad_rows", "place_rows", "round_as"]);
    assert!(pass_only.iter().all(|n| !known_op_names().split(", ").any(|k| k == *n)));
    let mut attrs = Attrs::new();
    assert_eq!(OpKind::Matmul.pass_attribute(&attrs), None);
    attrs.insert("banded".into(), Attr::Bool(false));
    assert_eq!(OpKind::Matmul.pass_attribute(&attrs), Some("banded"), "set at all, whatever its value");
    assert_eq!(OpKind::Add.pass_attribute(&attrs), None);
}

#[test]
fn numpy_broadcasting() {
    let s = |d: &[u64]| Shape::of(d);
    assert_eq!(broadcast(&s(&[2, 3]), &s(&[3])), Some(s(&[2, 3])));
    assert_eq!(broadcast(&s(&[4, 1, 5]), &s(&[3, 1])), Some(s(&[4, 3, 5])));
    assert_eq!(broadcast(&s(&[2, 3]), &s(&[4])), None);
    let dynamic = Shape(vec![Dim::Dynamic, Dim::Static(3)]);
    assert_eq!(broadcast(&dynamic, &s(&[3])), Some(dynamic.clone()));
}

#[test]
fn a_banded_matmul_reads_the_right_side_as_n_over_t_bands() {
    let s = |d: &[u64]| Shape::of(d);
    assert_eq!(banded_matmul(&s(&[8, 4]), &s(&[3, 4, 2])), Ok(s(&[8, 6])));
    assert_eq!(banded_matmul(&s(&[1, 8, 4]), &s(&[3, 4, 2])), Ok(s(&[1, 8, 6])));
    assert_eq!(banded_matmul(&s(&[4]), &s(&[3, 4, 2])), Ok(s(&[6])));
    // A `K` gated to no work is `?` on both sides; a `?` on one side only is refused, as are other ranks.
    let gated_x = Shape(vec![Dim::Dynamic, Dim::Dynamic]);
    let gated_w = Shape(vec![Dim::Static(3), Dim::Dynamic, Dim::Static(2)]);
    assert_eq!(banded_matmul(&gated_x, &gated_w), Ok(Shape(vec![Dim::Dynamic, Dim::Static(6)])));
    assert!(banded_matmul(&s(&[8, 4]), &gated_w).unwrap_err().contains("differ"));
    assert!(banded_matmul(&s(&[8, 4]), &s(&[4, 6])).unwrap_err().contains("[N / T, K, T]"));
    assert!(banded_matmul(&s(&[]), &s(&[3, 4, 2])).unwrap_err().contains("[N / T, K, T]"));
    // Bands of a `?` count, and rows the product cannot read as one and back.
    let open_bands = Shape(vec![Dim::Dynamic, Dim::Static(4), Dim::Static(2)]);
    assert!(banded_matmul(&s(&[8, 4]), &open_bands).unwrap_err().contains("static"));
    let split = Shape(vec![Dim::Dynamic, Dim::Static(2), Dim::Static(4)]);
    assert!(banded_matmul(&split, &s(&[3, 4, 2])).unwrap_err().contains("no dim after it but 1s"));
    // A run-time batch and length: merged and split back by the emitter, each `?` read from the rows.
    let two = Shape(vec![Dim::Dynamic, Dim::Dynamic, Dim::Static(4)]);
    let two_out = Shape(vec![Dim::Dynamic, Dim::Dynamic, Dim::Static(6)]);
    assert_eq!(banded_matmul(&two, &s(&[3, 4, 2])), Ok(two_out));
    let hf = Shape(vec![Dim::Static(2), Dim::Dynamic, Dim::Static(1), Dim::Static(4)]);
    let want = Shape(vec![Dim::Static(2), Dim::Dynamic, Dim::Static(1), Dim::Static(6)]);
    assert_eq!(banded_matmul(&hf, &s(&[3, 4, 2])), Ok(want));
    let f = DType::F32;
    let banded = [("banded", Attr::Bool(true))];
    assert!(check(OpKind::Matmul, &banded, &[(&[8, 4], f), (&[3, 4, 2], f)], (&[8, 6], f)).is_ok());
    let err = check(OpKind::Matmul, &banded, &[(&[8, 4], f), (&[3, 4, 2], f)], (&[8, 3, 2], f)).unwrap_err();
    assert!(err.contains("gives [8x6]"), "{err}");
    let both = [("banded", Attr::Bool(true)), ("grouped", Attr::Bool(true))];
    let err = check(OpKind::Matmul, &both, &[(&[8, 4], f), (&[3, 4, 2], f)], (&[8, 6], f)).unwrap_err();
    assert!(err.contains("not both"), "{err}");
}

#[test]
fn matmul_takes_the_right_sides_columns_in_two_dimensions() {
    let s = |d: &[u64]| Shape::of(d);
    assert_eq!(matmul(&s(&[8, 4]), &s(&[4, 2, 3])), Ok(s(&[8, 2, 3])));
    assert_eq!(matmul(&s(&[5, 8, 4]), &s(&[5, 4, 2, 3])), Ok(s(&[5, 8, 2, 3])));
    let gated = Shape(vec![Dim::Static(5), Dim::Static(4), Dim::Dynamic, Dim::Static(64)]);
    let want = Shape(vec![Dim::Static(5), Dim::Static(8), Dim::Dynamic, Dim::Static(64)]);
    assert_eq!(matmul(&s(&[5, 8, 4]), &gated), Ok(want));
    // The contracted or batch dims differ; a vector times [K, N, T] is not a form.
    assert!(matmul(&s(&[8, 4]), &s(&[3, 2, 3])).unwrap_err().contains("differ"));
    assert!(matmul(&s(&[5, 8, 4]), &s(&[6, 4, 2, 3])).unwrap_err().contains("differ"));
    assert!(matmul(&s(&[4]), &s(&[4, 2])).is_ok());
    assert!(matmul(&s(&[4]), &s(&[4, 2, 3])).unwrap_err().contains("[B.., M, K] x [B.., K, N, T]"));
    // A node reads those ranks so only with `grouped` (NumPy would broadcast [4, 4] x [4, 4, 6] instead), and
    // `grouped` with any other ranks is refused; a vector times a matrix needs no attribute.
    let grouped = [("grouped", Attr::Bool(true))];
    let f = DType::F32;
    let err = check(OpKind::Matmul, &[], &[(&[4, 4], f), (&[4, 4, 6], f)], (&[4, 4, 6], f)).unwrap_err();
    assert!(err.contains("grouped = true") && err.contains("broadcast"), "{err}");
    assert!(check(OpKind::Matmul, &grouped, &[(&[4, 4], f), (&[4, 4, 6], f)], (&[4, 4, 6], f)).is_ok());
    let err = check(OpKind::Matmul, &grouped, &[(&[2, 4], f), (&[4, 6], f)], (&[2, 6], f)).unwrap_err();
    assert!(err.contains("needs [B.., M, K] x [B.., K, N, T]"), "{err}");
    assert!(check(OpKind::Matmul, &[], &[(&[4], f), (&[4, 6], f)], (&[6], f)).is_ok());
}

#[test]
fn binary_rule_reports_the_problem() {
    let (a, b) = (Shape::of(&[2, 3]), Shape::of(&[4]));
    let err = check_rule(Rule::ElementwiseBinary, &[(&a, DType::F32), (&b, DType::F32)], &[(&a, DType::F32)]);
    assert!(err.unwrap_err().contains("do not broadcast"));
    let err = check_rule(Rule::ElementwiseBinary, &[(&a, DType::F32), (&a, DType::I32)], &[(&a, DType::F32)]);
    assert!(err.unwrap_err().contains("insert a convert"));
}

fn check(op: OpKind, attrs: &[(&str, Attr)], ins: &[(&[u64], DType)], out: (&[u64], DType)) -> Result<(), String> {
    let attrs: Attrs = attrs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    let shapes: Vec<Shape> = ins.iter().map(|(d, _)| Shape::of(d)).collect();
    let ins: Vec<Spec<'_>> = shapes.iter().zip(ins).map(|(s, (_, d))| (s, *d)).collect();
    let out_shape = Shape::of(out.0);
    check_types(op, &attrs, &ins, &[(&out_shape, out.1)])
}

#[test]
fn own_rules_infer_result_shapes_and_name_the_attribute() {
    use DType::{Bool, F32, I32};
    let lt = [("direction", Attr::Str("LT".into()))];
    assert_eq!(check(OpKind::Compare, &lt, &[(&[2, 3], F32), (&[3], F32)], (&[2, 3], Bool)), Ok(()));
    let e = check(OpKind::Compare, &lt, &[(&[2, 3], F32), (&[3], F32)], (&[2, 3], F32)).unwrap_err();
    assert_eq!(e, "the result must be bool, not f32");
    let e = check(OpKind::Select, &[], &[(&[2], F32), (&[2], F32), (&[2], F32)], (&[2], F32)).unwrap_err();
    assert_eq!(e, "the predicate must be bool (i1), got f32");
    let e = check(OpKind::Argmax, &[], &[(&[2, 3], F32)], (&[2], F32)).unwrap_err();
    assert_eq!(e, "the result must be i32 or i64, not f32");
    let e = check(OpKind::Argmax, &[], &[(&[2, 3], F32)], (&[3], I32)).unwrap_err();
    assert_eq!(e, "the node declares the result shape [3], but taking axis 1 out of [2x3] gives [2]");
    let keep = [("axes", Attr::Ints(vec![-1])), ("keepdims", Attr::Bool(true))];
    assert_eq!(check(OpKind::ReduceSum, &keep, &[(&[2, 3], F32)], (&[2, 1], F32)), Ok(()));
    let perm = [("perm", Attr::Ints(vec![1, 2, 0]))];
    assert_eq!(check(OpKind::Transpose, &perm, &[(&[2, 3, 4], F32)], (&[3, 4, 2], F32)), Ok(()));
    let bounds = [("start", Attr::Ints(vec![1])), ("limit", Attr::Ints(vec![-1])), ("stride", Attr::Ints(vec![3]))];
    assert_eq!(check(OpKind::Slice, &bounds, &[(&[8], F32)], (&[3], F32)), Ok(()));
    let e = check(OpKind::Slice, &bounds, &[(&[8], F32)], (&[2], F32)).unwrap_err();
    assert_eq!(e, "the node declares the result shape [2], but the slice bounds give [3]");
    let sizes = [("sizes", Attr::Ints(vec![5]))];
    let e = check(OpKind::DynamicSlice, &sizes, &[(&[4], F32), (&[], I32)], (&[5], F32)).unwrap_err();
    assert_eq!(e, "attribute 'sizes' dimension 0: 5 does not fit [4]");
    let e = check(OpKind::Iota, &[("dim", Attr::Int(2))], &[], (&[2, 3], I32)).unwrap_err();
    assert_eq!(e, "attribute 'dim' 2 is out of range for rank 2");
    assert_eq!(check(OpKind::Matmul, &[], &[(&[5, 2, 3], F32), (&[3, 4], F32)], (&[5, 2, 4], F32)), Ok(()));
    let e = check(OpKind::Matmul, &[], &[(&[2, 3], F32), (&[4, 5], F32)], (&[2, 5], F32)).unwrap_err();
    assert_eq!(e, "[2x3] x [4x5]: the contracted (or batch) dimensions differ");
}

/// A check with `?` dimensions: `None` in a shape is `?`.
fn check_dyn(
    op: OpKind,
    attrs: &[(&str, Attr)],
    ins: &[(&[Option<u64>], DType)],
    out: (&[Option<u64>], DType),
) -> Result<(), String> {
    let dyn_shape = |d: &[Option<u64>]| Shape(d.iter().map(|x| x.map_or(Dim::Dynamic, Dim::Static)).collect());
    let attrs: Attrs = attrs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    let shapes: Vec<Shape> = ins.iter().map(|(d, _)| dyn_shape(d)).collect();
    let ins: Vec<Spec<'_>> = shapes.iter().zip(ins).map(|(s, (_, d))| (s, *d)).collect();
    let out_shape = dyn_shape(out.0);
    check_types(op, &attrs, &ins, &[(&out_shape, out.1)])
}

#[test]
fn dynamic_dims_broadcast_by_numpy_rules() {
    let q = None;
    let s = |d: &[Option<u64>]| Shape(d.iter().map(|x| x.map_or(Dim::Dynamic, Dim::Static)).collect());
    // `?` against 1 stays `?`; against a static n it is n; against `?` it stays `?`.
    assert_eq!(broadcast(&s(&[q, Some(1)]), &s(&[Some(16)])), Some(s(&[q, Some(16)])));
    assert_eq!(broadcast(&s(&[q, Some(1)]), &s(&[Some(1), q])), Some(s(&[q, q])));
    assert_eq!(broadcast(&s(&[q]), &s(&[Some(5)])), Some(s(&[Some(5)])));
    assert_eq!(broadcast(&s(&[Some(2), q]), &s(&[Some(3), Some(1)])), None);
    use DType::{Bool, F32, I32};
    let (d1, d16) = ([q, Some(1)], [q, Some(16)]);
    assert_eq!(check_dyn(OpKind::Mul, &[], &[(&d1, F32), (&[Some(16)], F32)], (&d16, F32)), Ok(()));
    let lt = [("direction", Attr::Str("LT".into()))];
    assert_eq!(check_dyn(OpKind::Compare, &lt, &[(&d1, I32), (&[Some(1), q], I32)], (&[q, q], Bool)), Ok(()));
    let three = [(&[Some(4), Some(1)][..], F32), (&[Some(3)][..], F32), (&[][..], F32)];
    assert_eq!(check_dyn(OpKind::Clamp, &[], &three, (&[Some(4), Some(3)], F32)), Ok(()));
    let e = check_dyn(OpKind::Clamp, &[], &three, (&[Some(4), Some(1)], F32)).unwrap_err();
    assert_eq!(e, "the node declares the result shape [4x1], but the operand and its bounds broadcast to [4x3]");
}

#[test]
fn broadcast_and_iota_take_dynamic_shapes_from_a_reference_only() {
    use DType::{F32, I32};
    let q = None;
    let like = [Some(2), q, Some(16)];
    assert_eq!(check_dyn(OpKind::Broadcast, &[], &[(&[Some(16)], F32), (&like, F32)], (&like, F32)), Ok(()));
    let e = check_dyn(OpKind::Broadcast, &[], &[(&[Some(16)], F32)], (&like, F32)).unwrap_err();
    assert!(e.contains("only take from a reference tensor") && e.contains("expand(x, like)"), "{e}");
    let e = check_dyn(OpKind::Broadcast, &[], &[(&[Some(16)], F32), (&like, F32)], (&[Some(2), q, Some(8)], F32))
        .unwrap_err();
    assert!(e.contains("cannot broadcast"), "{e}");
    let e = check_dyn(OpKind::Broadcast, &[], &[(&[Some(3)], F32)], (&[Some(2), Some(4)], F32)).unwrap_err();
    assert_eq!(e, "dimension 0 of [3] (3) cannot broadcast to dimension 1 of [2x4] (4)");
    let axis = [("axis", Attr::Int(1))];
    assert_eq!(check_dyn(OpKind::Iota, &axis, &[(&like, F32)], (&[q], I32)), Ok(()));
    let last = [("axis", Attr::Int(-1))];
    let e = check_dyn(OpKind::Iota, &last, &[(&like, F32)], (&[Some(8)], I32)).unwrap_err();
    assert!(e.contains("dimension 2 of the reference [2x?x16] gives [16]"), "{e}");
    let e = check_dyn(OpKind::Iota, &[], &[], (&[q], I32)).unwrap_err();
    assert!(e.contains("`?` length") && e.contains("arange(like, axis)"), "{e}");
}

#[test]
fn sdpa_groups_query_heads_and_checks_heads_dims_and_mask() {
    use DType::F32;
    let ok = |q: &[u64], k: &[u64], v: &[u64], out: &[u64]| {
        check(OpKind::Sdpa, &[], &[(q, F32), (k, F32), (v, F32)], (out, F32))
    };
    assert_eq!(ok(&[1, 8, 4, 16], &[1, 2, 6, 16], &[1, 2, 6, 16], &[1, 8, 4, 16]), Ok(()));
    assert_eq!(ok(&[2, 4, 6], &[2, 5, 6], &[2, 5, 3], &[2, 4, 3]), Ok(()), "rank 3: dimension 0 is the head");
    assert_eq!(
        ok(&[1, 6, 4, 8], &[1, 4, 4, 8], &[1, 4, 4, 8], &[1, 6, 4, 8]).unwrap_err(),
        "q has 6 heads and k/v 4: grouped-query attention needs the query heads to be a multiple of the key/value \
         heads (the dimension before the sequence)"
    );
    assert!(ok(&[1, 2, 4, 8], &[1, 2, 4, 6], &[1, 2, 4, 8], &[1, 2, 4, 8]).unwrap_err().contains("head dimensions"));
    assert!(ok(&[1, 2, 4, 8], &[1, 2, 4, 8], &[1, 2, 5, 8], &[1, 2, 4, 8]).unwrap_err().contains("key lengths"));
    assert!(ok(&[1, 4, 4, 8], &[1, 2, 4, 8], &[1, 1, 4, 8], &[1, 4, 4, 8]).unwrap_err().contains("head counts"));
    assert!(ok(&[2, 4, 4, 8], &[3, 2, 4, 8], &[3, 2, 4, 8], &[2, 4, 4, 8]).unwrap_err().contains("dimension 0"));
    assert!(ok(&[1, 4, 4, 8], &[1, 2, 4, 8], &[1, 2, 4, 3], &[1, 4, 4, 8]).unwrap_err().contains("[1x4x4x3]"));
    let masked = |m: &[u64]| {
        check(
            OpKind::Sdpa,
            &[],
            &[(&[1, 4, 3, 8], F32), (&[1, 2, 7, 8], F32), (&[1, 2, 7, 8], F32), (m, F32)],
            (&[1, 4, 3, 8], F32),
        )
    };
    assert_eq!(masked(&[3, 7]), Ok(()));
    assert_eq!(masked(&[1, 1, 3, 7]), Ok(()));
    assert_eq!(masked(&[1, 4, 3, 7]), Ok(()));
    assert_eq!(
        masked(&[3, 3]).unwrap_err(),
        "the mask [3x3] does not broadcast to the attention scores [1x4x3x7] ([.., H, S, T])"
    );
    assert!(masked(&[1, 2, 3, 7]).is_err(), "a mask over the KV heads is not one over the query heads");
    assert!(masked(&[1, 1, 1, 3, 7]).is_err(), "a mask of higher rank");
    let dynamic = Shape(vec![Dim::Static(1), Dim::Dynamic, Dim::Static(4), Dim::Static(8)]);
    let kv = Shape::of(&[1, 2, 4, 8]);
    let e = check_types(OpKind::Sdpa, &Attrs::new(), &[(&dynamic, F32), (&kv, F32), (&kv, F32)], &[(&dynamic, F32)]);
    assert!(e.unwrap_err().contains("give both a static head count"));
    assert_eq!(query_groups(Dim::Dynamic, Dim::Dynamic), Ok(1));
    assert_eq!(query_groups(Dim::Static(8), Dim::Static(2)), Ok(4));
    assert!(query_groups(Dim::Static(8), Dim::Static(0)).is_err());
    let e = check(
        OpKind::Sdpa,
        &[("causal", Attr::Int(1))],
        &[(&[2, 4, 8], F32), (&[2, 4, 8], F32), (&[2, 4, 8], F32)],
        (&[2, 4, 8], F32),
    );
    assert!(e.unwrap_err().contains("attribute 'causal'"));
    let causal = |s: u64, t: u64| {
        check(
            OpKind::Sdpa,
            &[("causal", Attr::Bool(true))],
            &[(&[2, s, 8], F32), (&[2, t, 8], F32), (&[2, t, 8], F32)],
            (&[2, s, 8], F32),
        )
    };
    assert_eq!(causal(3, 3), Ok(()));
    assert_eq!(causal(1, 7), Ok(()), "a decode step: one query sees every key");
    assert!(causal(5, 3).unwrap_err().contains("the first 2 queries would see no key"));
    let any_head = Shape(vec![Dim::Static(2), Dim::Static(3), Dim::Dynamic]);
    let e = check_types(
        OpKind::Sdpa,
        &Attrs::new(),
        &[(&any_head, F32), (&any_head, F32), (&any_head, F32)],
        &[(&any_head, F32)],
    );
    assert!(e.unwrap_err().contains("`?` head dimension"));
}

#[test]
fn rope_takes_full_or_half_tables_and_refuses_other_widths() {
    use DType::F32;
    let rope = |x: &[u64], c: &[u64], attrs: &[(&str, Attr)]| {
        check(OpKind::Rope, attrs, &[(x, F32), (c, F32), (c, F32)], (x, F32))
    };
    let interleaved = [("interleaved", Attr::Bool(true))];
    assert_eq!(rope(&[2, 4, 5, 8], &[5, 8], &[]), Ok(()));
    assert_eq!(rope(&[2, 4, 5, 8], &[2, 1, 5, 4], &[]), Ok(()));
    assert_eq!(rope(&[2, 4, 5, 8], &[5, 4], &interleaved), Ok(()));
    assert_eq!(rope(&[2, 4, 5, 8], &[5, 1], &[]), Ok(()), "one angle for every pair");
    assert_eq!(
        rope(&[2, 5, 8], &[5, 3], &[]).unwrap_err(),
        "a cos/sin table of width 3 for a head dimension of 8: the width must be 8 (full tables) or 4 (half tables, \
         one angle per pair)"
    );
    assert!(rope(&[2, 5, 8], &[5, 16], &[]).is_err());
    assert_eq!(rope(&[2, 5, 7], &[5, 7], &[]).unwrap_err(), "rope needs an even last dimension, got 7");
    assert_eq!(
        rope(&[2, 5, 8], &[4, 4], &[]).unwrap_err(),
        "the cos/sin tables [4x4] do not broadcast to [2x5x4] (x is [2x5x8])"
    );
    assert!(rope(&[5, 8], &[2, 5, 8], &[]).unwrap_err().contains("do not broadcast"));
    let e = check(OpKind::Rope, &[], &[(&[2, 5, 8], F32), (&[5, 8], F32), (&[5, 4], F32)], (&[2, 5, 8], F32));
    assert_eq!(e.unwrap_err(), "cos [5x8] and sin [5x4] must have one shape");
    assert!(
        rope(&[2, 5, 8], &[5, 8], &[("interleaved", Attr::Int(1))]).unwrap_err().contains("attribute 'interleaved'")
    );
    let e = check(OpKind::Rope, &[], &[(&[2, 5, 8], F32), (&[5, 8], F32), (&[5, 8], F32)], (&[2, 5, 4], F32));
    assert!(e.unwrap_err().contains("the node declares the result shape [2x5x4]"));
    let x = Shape(vec![Dim::Static(1), Dim::Dynamic, Dim::Static(8)]);
    let half = Shape(vec![Dim::Dynamic, Dim::Static(4)]);
    let wide = Shape(vec![Dim::Dynamic, Dim::Dynamic]);
    assert_eq!(
        check_types(OpKind::Rope, &Attrs::new(), &[(&x, F32), (&half, F32), (&half, F32)], &[(&x, F32)]),
        Ok(())
    );
    let e = check_types(OpKind::Rope, &Attrs::new(), &[(&x, F32), (&wide, F32), (&wide, F32)], &[(&x, F32)]);
    assert!(e.unwrap_err().contains("width ?"));
}

#[test]
fn clamp_takes_one_or_three_inputs() {
    let arity = OpKind::Clamp.signature().inputs;
    assert!(arity.accepts(1) && arity.accepts(3) && !arity.accepts(2) && !arity.accepts(0));
    assert_eq!(arity.to_string(), "1 or 3");
    assert!(!OpKind::RmsNorm.signature().inputs.accepts(3));
}
