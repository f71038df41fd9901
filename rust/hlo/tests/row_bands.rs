//! Codes kept packed in row bands (`--packed-codes row-bands`): a prefill's few-rows forms contract the stored bands,
//! gated (and, past 16 MiB of partials, sliced) along their band axis, and the `[Kb, 32, Np]` view the dequantization
//! reads sits behind a barrier, so that IREE 3.13 computes no copy of the codes at load
//! (docs/performance.md#weights-in-iree). The values are checked by IREE in tests/iree/test_tuning.py and
//! test_shape_sweep.py.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use tapeout_graph::{
    Attrs, BlockOrder, DType, Dim, Encoding, ExtractOptions, Lent, OpKind, PackedCodesLayout, PackedConstantHandling,
    Shape, Storage, Tensor, TensorSpec, Trace, finalize,
};
use tapeout_hlo::{EmitOptions, MaterializationPolicy, emit};

/// The module of `y [?, rows] = x [?, cols] @ Wᵀ` for a Q8_0 weight `W [rows, cols]` (zero blocks) kept packed in
/// row bands.
fn banded_linear(rows: u64, cols: u64) -> String {
    let blocks = vec![0u8; usize::try_from(rows * cols / 32 * 34).unwrap()];
    let mut t = Trace::new();
    let x = t.add_placeholder(TensorSpec::new("x", Shape(vec![Dim::Dynamic, Dim::Static(cols)]), DType::F32));
    let w = t.add_tensor(Tensor {
        spec: TensorSpec::new("w", Shape::of(&[rows, cols]), DType::F32).with_path("w"),
        storage: Storage::Packed { encoding: Encoding::Q8_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    });
    let wt = t.add_placeholder(TensorSpec::new("wt", Shape::of(&[cols, rows]), DType::F32));
    let y = t.add_placeholder(TensorSpec::new("y", Shape(vec![Dim::Dynamic, Dim::Static(rows)]), DType::F32));
    t.record(OpKind::Transpose, Attrs::new(), &[w], &[wt]);
    t.record(OpKind::Matmul, Attrs::new(), &[x, wt], &[y]);
    t.set_outputs(&[y]);
    let opts = ExtractOptions {
        packed: PackedConstantHandling::Keep,
        packed_codes: PackedCodesLayout::RowBands,
        ..ExtractOptions::default()
    };
    let g = finalize(&t, &opts).unwrap();
    let policy = MaterializationPolicy::ExternalAlways { scope: "model".into() };
    emit(&g, &EmitOptions { policy, ..EmitOptions::default() }).unwrap().text
}

/// The SSA name `%vN` the line holding `needle` assigns.
fn defined_by<'t>(text: &'t str, needle: &str) -> Vec<&'t str> {
    text.lines().filter(|l| l.contains(needle)).filter_map(|l| l.trim().split(" = ").next()).collect()
}

#[test]
fn a_few_rows_form_contracts_the_stored_bands_gated_along_their_band_axis() {
    // 64 rows of 64 values: two bands of 32 rows, each `[Kb = 2, 32, 32]`.
    let text = banded_linear(64, 64);
    let [load] = defined_by(&text, "util.global.load @w.qs ")[..] else { panic!("one load of the codes:\n{text}") };
    assert!(text.contains("util.global.load @w.qs : tensor<2x2x32x32xi8>"), "{text}");
    // The three few-rows forms (8, 16, 32 rows) each read a gate of the stored codes: `?` bands of them.
    let band_products = text.matches("affine_map<(b, m, p, t, k) -> (p, b, k, t)>").count();
    assert_eq!(band_products, 3, "{text}");
    let gated = defined_by(&text, &format!("tensor.extract_slice {load}[0, 0, 0, 0]"));
    assert!(gated.len() >= 3, "{} gates of the stored codes:\n{text}", gated.len());
    assert!(text.contains(": tensor<2x2x32x32xi8> to tensor<?x2x32x32xi8>"), "{text}");
    // The view (for the dequantization past 32 rows) is taken behind a barrier, never of the parameter itself.
    let [hidden] = defined_by(&text, &format!("stablehlo.optimization_barrier {load} :"))[..] else {
        panic!("no barrier on the codes:\n{text}")
    };
    assert!(text.contains(&format!("stablehlo.transpose {hidden},")), "{text}");
    assert!(!text.contains(&format!("stablehlo.transpose {load},")), "a view of the parameter itself:\n{text}");
}

#[test]
fn column_parts_of_a_wide_weight_are_slices_of_whole_bands() {
    // 2112 x 2048: the 32-row form's partials (4 x 64 blocks x 32 rows x 2112 columns) pass 16 MiB, so it is
    // computed in parts of 1024, 1024 and 64 columns: bands 0..32, 32..64 and 64..66 of the stored codes.
    let text = banded_linear(2112, 2048);
    let [load] = defined_by(&text, "util.global.load @w.qs ")[..] else { panic!("one load of the codes") };
    assert!(text.contains("util.global.load @w.qs : tensor<66x64x32x32xi8>"));
    for (first, len) in [(0, 32), (32, 32), (64, 2)] {
        let slice = format!("{load}[{first}, 0, 0, 0] [{len}, 64, 32, 32] [1, 1, 1, 1]");
        let by_slice = format!("stablehlo.slice {load} [{first}:{}, 0:64, 0:32, 0:32]", first + len);
        assert!(text.contains(&slice) || text.contains(&by_slice), "bands {first}..{} not sliced", first + len);
    }
    // Every form reads bands, the parted one part by part (3 + 1 + 1 band products), and no transpose of the
    // parameter itself is left for IREE to compute at load.
    assert_eq!(text.matches("affine_map<(b, m, p, t, k) -> (p, b, k, t)>").count(), 5);
    assert!(!text.contains(&format!("stablehlo.transpose {load},")));
}
