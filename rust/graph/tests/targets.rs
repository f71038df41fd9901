//! The export's target: the portable lowering every device gets, the CPU pass's forms beside it, and the ops and
//! attributes only passes write, which no recorded graph may name.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use tapeout_graph::{
    Attr, Attrs, BlockOrder, ComputeGraph, ConstantData, DType, Dim, Encoding, ExtractOptions, Forms, GraphError, Lent,
    OpKind, PackedCodesLayout, PackedConstantHandling, PassOps, Shape, Storage, Target, Tensor, TensorId, TensorSpec,
    Trace, Tuning, WeightLayout, finalize,
};

/// `y = x @ wᵀ` for `x` of `rows` (`[rows.., cols]`) and `w` `[n, cols]`; returns the trace, `w` and `y`.
fn linear<'a>(w: Tensor<'a>, rows: &[Dim]) -> (Trace<'a>, TensorId, Vec<TensorId>) {
    let [n, cols] = w.spec.shape.static_dims().unwrap()[..] else { panic!("a rank-2 weight") };
    let mut t = Trace::new();
    let shape = |last: u64| Shape(rows.iter().copied().chain([Dim::Static(last)]).collect());
    let x = t.add_placeholder(TensorSpec::new("x", shape(cols), DType::F32));
    let w = t.add_tensor(w);
    let wt = t.add_placeholder(TensorSpec::new("wt", Shape::of(&[cols, n]), DType::F32));
    let y = t.add_placeholder(TensorSpec::new("y", shape(n), DType::F32));
    t.record(OpKind::Transpose, Attrs::new(), &[w], &[wt]);
    t.record(OpKind::Matmul, Attrs::new(), &[x, wt], &[y]);
    t.set_outputs(&[y]);
    (t, w, vec![y])
}

fn packed(encoding: Encoding, rows: u64, cols: u64, blocks: &[u8]) -> Tensor<'_> {
    Tensor {
        spec: TensorSpec::new("w", Shape::of(&[rows, cols]), DType::F32).with_path("w"),
        storage: Storage::Packed { encoding, order: BlockOrder::RowMajor, bytes: Lent::Slice(blocks) },
    }
}

fn keep() -> ExtractOptions {
    ExtractOptions { packed: PackedConstantHandling::Keep, ..ExtractOptions::default() }
}

/// The ops and attributes in `g` that only passes write.
fn pass_only(g: &ComputeGraph<'_>) -> Vec<String> {
    g.nodes()
        .iter()
        .filter_map(|n| {
            let attr = n.op.pass_attribute(&n.attrs).map(|a| format!("{} {a}", n.op));
            if n.op.inserted_by_passes() { Some(n.op.name().to_owned()) } else { attr }
        })
        .collect()
}

/// The codes plane of `w` kept packed: its `band` and stored dims, under `layout`, used by a linear and, when
/// `gathered`, also by a gather of its rows.
fn codes_layout(
    encoding: Encoding,
    rows: u64,
    cols: u64,
    gathered: bool,
    layout: WeightLayout,
    packed_codes: PackedCodesLayout,
) -> (Option<u64>, Vec<u64>) {
    let block = encoding.block_geometry().unwrap();
    let blocks = vec![0u8; usize::try_from(rows * cols / block.0 * block.1).unwrap()];
    let w = packed(encoding, rows, cols, &blocks);
    let (mut trace, wid, mut outs) = linear(w, &[Dim::Static(2)]);
    if gathered {
        let ids = trace.add_placeholder(TensorSpec::new("ids", Shape::of(&[3]), DType::I32));
        let e = trace.add_placeholder(TensorSpec::new("e", Shape::of(&[3, cols]), DType::F32));
        trace.record(OpKind::Gather, Attrs::new(), &[wid, ids], &[e]);
        outs.push(e);
        trace.set_outputs(&outs);
    }
    let opts = ExtractOptions { layout, packed_codes, ..keep() };
    let g = finalize(&trace, &opts).unwrap();
    let qs = g.constants().iter().find(|c| c.key == "w.qs").expect("a codes plane");
    let ConstantData::Plane { band, .. } = qs.data else { panic!("{:?}", qs.data) };
    (band, g.spec(qs.tensor).shape.static_dims().unwrap())
}

#[test]
fn q8_0_and_q4_0_codes_are_kept_in_row_bands_when_asked_and_only_products_read_them() {
    let (chosen, bands) = (WeightLayout::ChosenForUse, PackedCodesLayout::RowBands);
    let layout = |e, rows, cols, gathered| codes_layout(e, rows, cols, gathered, chosen, bands);
    // Q8_0 [64, 96]: two bands of 32 rows, each `[Kb = 3, 32, 32]`.
    assert_eq!(layout(Encoding::Q8_0, 64, 96, false), (Some(32), vec![2, 3, 32, 32]));
    // Q4_0 [5, 64]: rows padded to 64, two bands.
    assert_eq!(layout(Encoding::Q4_0, 5, 64, false), (Some(32), vec![2, 2, 32, 32]));
    // Q8_0 rows 32 does not divide keep `[Kb, 32, N]`, as does a weight an embedding gathers rows of, and a format
    // the band product is not measured for.
    assert_eq!(layout(Encoding::Q8_0, 33, 64, false), (None, vec![2, 32, 33]));
    assert_eq!(layout(Encoding::Q8_0, 64, 64, true), (None, vec![2, 32, 64]));
    assert_eq!(layout(Encoding::Q4_1, 64, 64, false), (None, vec![2, 32, 64]));
    // Block rows by default, and always when the export keeps weights as held.
    let default = PackedCodesLayout::default();
    assert_eq!(codes_layout(Encoding::Q4_0, 64, 64, false, chosen, default), (None, vec![2, 32, 64]));
    assert_eq!(codes_layout(Encoding::Q4_0, 64, 64, false, WeightLayout::AsHeld, bands), (None, vec![2, 32, 64]));
}

#[test]
fn the_cpu_pass_writes_its_forms_and_every_other_target_the_portable_lowering() {
    // Q4_0 W [64, 64] used by `?` rows: the CPU pass's few-rows forms (padded, gated, placed) for llvm-cpu; for every
    // other target, and with tuning off, one product over the weight dequantized for it, nothing only passes write.
    let blocks = vec![0x11u8; 64 * 2 * 18];
    let (trace, _, _) = linear(packed(Encoding::Q4_0, 64, 64, &blocks), &[Dim::Dynamic]);
    let cpu = finalize(&trace, &keep()).unwrap();
    assert_eq!(cpu.forms(), Forms::Cpu);
    let ops = pass_only(&cpu);
    for op in ["pad_rows", "gate_rows", "place_rows"] {
        assert!(ops.iter().any(|o| o == op), "the CPU pass writes {op}: {ops:?}");
    }
    for (target, tuning) in [
        (Target::Portable, Tuning::On),
        (Target::Vulkan, Tuning::On),
        (Target::Cuda, Tuning::On),
        (Target::Rocm, Tuning::On),
        (Target::LlvmCpu, Tuning::Off),
    ] {
        let g = finalize(&trace, &ExtractOptions { target, tuning, ..keep() }).unwrap();
        let (forms, words) = match (target, tuning) {
            // Vulkan's pass adds only the decoding of its narrow planes (i4 codes, f16 scales) held in 32-bit
            // words; CUDA's and ROCm's that of the sub-byte codes alone.
            (Target::Vulkan, Tuning::On) => (Forms::Vulkan, vec!["w.qs", "w.d"]),
            (Target::Cuda | Target::Rocm, Tuning::On) => (Forms::Gpu, vec!["w.qs"]),
            _ => (Forms::Portable, vec![]),
        };
        assert_eq!(g.forms(), forms, "{target} {tuning:?}");
        assert_eq!(pass_only(&g), vec!["decode_words".to_owned(); words.len()], "{target} {tuning:?}");
        for c in g.constants() {
            let in_words = matches!(c.data, ConstantData::Words { .. });
            assert_eq!(in_words, words.contains(&c.key.as_str()), "{target}: {}: {:?}", c.key, c.data);
            assert_eq!(in_words, c.data.dtype() == DType::I32, "{}", c.key);
        }
        let matmuls = g.nodes().iter().filter(|n| n.op == OpKind::Matmul).count();
        assert_eq!(matmuls, 1, "{target}: one product");
        // Codes in row bands are a CPU form: asked for with another target, the options contradict each other.
        let bands = ExtractOptions { target, tuning, packed_codes: PackedCodesLayout::RowBands, ..keep() };
        let err = finalize(&trace, &bands).unwrap_err();
        assert!(matches!(&err, GraphError::Options { detail } if detail.contains("llvm-cpu")), "{err}");
    }
}

#[test]
fn a_recorded_graph_cannot_name_what_only_passes_write() {
    let x_spec = |name: &str| TensorSpec::new(name, Shape(vec![Dim::Dynamic, Dim::Static(4)]), DType::F32);
    // A gate on a row count, recorded.
    let mut t = Trace::new();
    let x = t.add_placeholder(x_spec("x"));
    let g = t.add_placeholder(x_spec("g"));
    let mut attrs = Attrs::new();
    attrs.insert("rows".into(), Attr::Int(8));
    t.record(OpKind::GateRows, attrs, &[x, x], &[g]);
    t.set_outputs(&[g]);
    let err = finalize(&t, &ExtractOptions::default()).unwrap_err();
    assert!(
        matches!(&err, GraphError::PassOnly { node, what } if node.contains("gate_rows") && what == "op 'gate_rows'")
    );
    let accepted = ExtractOptions { pass_ops: PassOps::AcceptForEmitterTests, ..ExtractOptions::default() };
    assert!(finalize(&t, &accepted).is_ok(), "the emitter's own tests may record it");
    // A matmul with a layout attribute, recorded (even set to false: it is not the user's to set).
    let mut t = Trace::new();
    let x = t.add_placeholder(TensorSpec::new("x", Shape::of(&[2, 4]), DType::F32));
    let w = t.add_placeholder(TensorSpec::new("w", Shape::of(&[4, 3]), DType::F32));
    let y = t.add_placeholder(TensorSpec::new("y", Shape::of(&[2, 3]), DType::F32));
    let mut attrs = Attrs::new();
    attrs.insert("grouped".into(), Attr::Bool(false));
    t.record(OpKind::Matmul, attrs, &[x, w], &[y]);
    t.set_outputs(&[y]);
    let err = finalize(&t, &ExtractOptions::default()).unwrap_err();
    assert!(err.to_string().contains("attribute 'grouped' of op 'matmul'") && err.to_string().contains("--target"));
}

#[test]
fn vulkan_refuses_narrow_arguments_and_results_with_the_remedy() {
    // A u8 input or an f16 result is a buffer IREE 3.13's default Vulkan profile misreads: refused, typed, naming
    // the value; a bool result is written right and passes; every other target takes them.
    let vulkan = ExtractOptions { target: Target::Vulkan, ..ExtractOptions::default() };
    for (dtype, out, refused) in
        [(DType::U8, DType::F32, Some("argument 'x'")), (DType::F32, DType::F16, Some("result 'y'"))]
    {
        let mut t = Trace::new();
        let x = t.add_placeholder(TensorSpec::new("x", Shape::of(&[3]), dtype));
        let y = t.add_placeholder(TensorSpec::new("y", Shape::of(&[3]), out));
        t.record(OpKind::Convert, Attrs::new(), &[x], &[y]);
        t.set_outputs(&[y]);
        let err = finalize(&t, &vulkan).unwrap_err();
        assert!(matches!(&err, GraphError::Target { what, .. } if Some(what.as_str()) == refused), "{err}");
        assert!(err.to_string().contains("IREE 3.13") && err.to_string().contains("--target"), "{err}");
        finalize(&t, &ExtractOptions::default()).unwrap();
    }
}
