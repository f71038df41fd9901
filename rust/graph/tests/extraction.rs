//! The extraction contract: what becomes a constant, what becomes an input, what is refused, and
//! proof that nothing is copied or held beyond one chunk (a counting global allocator measures it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tapeout_graph::{
    Attr, Attrs, BlockOrder, ByteSink, ChunkLender, ConstantData, DType, Dim, Encoding, ExtractOptions, GraphError,
    HalfConstantHandling, HalfLayout, Lent, OpKind, PackedConstantHandling, Shape, Storage, StreamError, Tensor,
    TensorId, TensorSpec, Trace, dequantize, finalize,
};

// --- allocation accounting --------------------------------------------------------------------

// Counted per thread: tests run in parallel, and a process-wide counter would charge one test's
// allocations to another's measurement. The code measured here allocates on the calling thread only.
struct Counting;
thread_local! {
    // Const-initialised `Cell`s: reading them allocates nothing and registers no destructor, so the
    // allocator may use them.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}
/// Tests that map gigabytes run one at a time (memory, not the counters, is what they share).
static MEASURE: Mutex<()> = Mutex::new(());

fn count(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(isize::try_from(layout.size()).unwrap_or(isize::MAX));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-isize::try_from(layout.size()).unwrap_or(isize::MAX));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns the peak of bytes this thread allocated during it above what it had live before.
fn peak_extra_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let r = f();
    (r, usize::try_from(PEAK.with(Cell::get) - before).unwrap_or(0))
}

#[test]
fn the_counter_sees_this_threads_allocations_and_not_another_threads() {
    let ((), mine) = peak_extra_alloc(|| drop(std::hint::black_box(vec![0u8; 1 << 20])));
    assert!(mine >= 1 << 20, "{mine}");
    let ((), theirs) = peak_extra_alloc(|| {
        std::thread::scope(|s| {
            s.spawn(|| drop(std::hint::black_box(vec![0u8; 8 << 20])));
        });
    });
    assert!(theirs < 1 << 20, "another thread's 8 MiB was charged here: {theirs}");
}

/// A sink that counts bytes and keeps the whole f32 values at a few element indices (whose bytes may
/// straddle chunks).
#[derive(Default)]
struct Probe {
    len: u64,
    /// Element indices to keep.
    want: Vec<u64>,
    /// Their bytes, filled as they stream past.
    bytes: Vec<[u8; 4]>,
}

impl Probe {
    fn at(want: &[u64]) -> Self {
        Probe { want: want.to_vec(), bytes: vec![[0; 4]; want.len()], len: 0 }
    }

    /// The value kept for element `index` (which must be one of `want`).
    fn value(&self, index: u64) -> f32 {
        let i = self.want.iter().position(|&w| w == index).unwrap();
        f32::from_le_bytes(self.bytes[i])
    }
}

impl ByteSink for Probe {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        let (start, end) = (self.len, self.len + bytes.len() as u64);
        for (w, slot) in self.want.iter().zip(&mut self.bytes) {
            for b in 0..4 {
                let at = 4 * w + b;
                if (start..end).contains(&at) {
                    slot[usize::try_from(b).unwrap()] = bytes[usize::try_from(at - start).unwrap()];
                }
            }
        }
        self.len = end;
        Ok(())
    }
}

// --- helpers --------------------------------------------------------------------------------

fn spec(name: &str, dims: &[u64], dtype: DType) -> TensorSpec {
    TensorSpec::new(name, Shape::of(dims), dtype)
}

/// `y = x @ w` with `x` a placeholder input and `w` the given weight tensor.
fn matmul_trace<'a>(w: Tensor<'a>) -> (Trace<'a>, TensorId, TensorId) {
    let mut t = Trace::new();
    let rows = w.spec.shape.static_dims().map_or(1, |d| d[0]);
    let cols = w.spec.shape.static_dims().map_or(1, |d| d[1]);
    let x = t.add_placeholder(spec("x", &[2, rows], DType::F32));
    let w = t.add_tensor(w);
    let y = t.add_placeholder(spec("y", &[2, cols], DType::F32));
    t.record(OpKind::Matmul, Attrs::new(), &[x, w], &[y]);
    t.set_outputs(&[y]);
    (t, x, w)
}

fn bytes_of(data: &ConstantData<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    data.stream(&mut v).unwrap();
    v
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

// --- the reference's contract ---------------------------------------------------------------

#[test]
fn fp32_constant_aliases_the_live_buffer_and_copies_nothing() {
    let _serial = MEASURE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let weights: Vec<f32> = (0..(4 << 20)).map(|i| i as f32).collect(); // 16 MiB
    let (trace, x, w) = matmul_trace(Tensor::f32(spec("t1", &[4096, 1024], DType::F32), &weights));
    let (graph, extra) = peak_extra_alloc(|| finalize(&trace, &ExtractOptions::default()).unwrap());
    assert!(extra < 64 << 10, "finalize allocated {extra} bytes");
    assert_eq!(graph.inputs(), [x]);
    let c = graph.constant(w).expect("weight is a constant");
    let ConstantData::F32(Lent::Slice(s)) = c.data else { panic!("not an aliased f32 constant") };
    assert_eq!(s.as_ptr(), weights.as_ptr(), "the constant is the caller's buffer");
    assert_eq!(s.len(), weights.len());

    let last = (4 << 20) - 1;
    let mut probe = Probe::at(&[1, 12345, last]);
    let ((), extra) = peak_extra_alloc(|| c.data.stream(&mut probe).unwrap());
    assert!(extra < 64 << 10, "streaming an f32 constant allocated {extra} bytes");
    assert_eq!(probe.len, 16 << 20);
    // Whole values (12345.0 is 00 e4 40 46: its low byte is 0, so a byte-0 check would pass on zeros).
    assert_eq!(probe.value(1), 1.0);
    assert_eq!(probe.value(12345), 12345.0);
    assert_eq!(probe.value(last), last as f32);
}

#[test]
fn packed_weight_fails_loudly_with_both_remedies() {
    let blocks = vec![0u8; 34 * 4];
    let w = Tensor {
        spec: spec("t1", &[4, 32], DType::F32),
        storage: Storage::Packed { encoding: Encoding::Q8_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let (trace, _, _) = matmul_trace(w);
    let err = finalize(&trace, &ExtractOptions::default()).unwrap_err();
    assert!(matches!(err, GraphError::PackedConstant { .. }));
    let msg = err.to_string();
    for needle in ["'t1'", "Q8_0", "have it dequantized", "load this weight dense", "function-argument placeholder"] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    // The graph layer names the remedy; each front end spells the setting (none is spelled here).
    assert!(!msg.contains("DEQUANTIZE") && !msg.contains("::"), "no front end's or Rust's spelling: {msg}");
}

#[test]
fn keep_turns_a_packed_linear_weight_into_planes_and_a_per_block_contraction() {
    // Q4_K W [3, 256] used as x @ Wᵀ: planes qs (i4), d, scales, mins, dmin; no f32 weight anywhere.
    let blocks = vec![1u8; 144 * 3];
    let w = Tensor {
        spec: spec("w", &[3, 256], DType::F32).with_path("model.fc.weight"),
        storage: Storage::Packed { encoding: Encoding::Q4K, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let (trace, wid, outs) = linear_trace(w, 1);
    let keep = ExtractOptions { packed: PackedConstantHandling::Keep, ..ExtractOptions::default() };
    let g = finalize(&trace, &keep).unwrap();
    assert!(g.constant(wid).is_none(), "the packed weight itself is no longer a value of the program");
    let planes: Vec<(String, DType, Vec<u64>)> = g
        .constants()
        .iter()
        .filter(|c| c.key.starts_with("model.fc.weight."))
        .map(|c| (c.key.clone(), c.data.dtype(), g.spec(c.tensor).shape.static_dims().unwrap()))
        .collect();
    let want = |k: &str, d, s: &[u64]| (format!("model.fc.weight.{k}"), d, s.to_vec());
    assert_eq!(
        planes,
        [
            // 3 rows padded to 64 (IREE misreads i4 rows that are not whole bytes, and cannot compile tiles of
            // them that need a mask).
            want("qs", DType::I4, &[8, 32, 64]),
            want("d", DType::F16, &[1, 64]),
            want("scales", DType::I8, &[8, 64]),
            want("mins", DType::I8, &[8, 64]),
            want("dmin", DType::F16, &[1, 64]),
            want("const8", DType::F32, &[]),
        ]
    );
    let qs = &g.constants()[0];
    assert_eq!(qs.data.byte_len(), 8 * 32 * 64 / 2, "two codes per byte");
    assert!(g.nodes().iter().all(|n| n.op != OpKind::Transpose || n.outputs != [wid]));
    let batched =
        g.nodes().iter().find(|n| n.op == OpKind::Matmul && g.spec(n.outputs[0]).shape == Shape::of(&[8, 2, 64]));
    assert!(batched.is_some(), "one batched matmul over the 8 sub-blocks");
    let last = g.nodes().iter().find(|n| n.outputs == outs).expect("the result's node");
    assert_eq!(
        (last.op, g.spec(last.inputs[0]).shape.clone()),
        (OpKind::Slice, Shape::of(&[2, 64])),
        "padding sliced off"
    );
    assert_eq!(g.outputs(), outs.as_slice());
    // Every op of the program is inserted, with an index of its own past the two recorded ones, and stands for
    // the recorded node it came from: the contraction for the matmul (node 1), the planes' shared values for the
    // weight's first use, its transpose (node 0).
    let mut indices: Vec<usize> = g.nodes().iter().map(|n| n.index).collect();
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(indices.len(), g.nodes().len(), "fresh indices are unique");
    assert!(g.nodes().iter().all(|n| n.is_inserted() && n.index >= trace.ops().len()));
    assert_eq!(last.origin(), Some(1));
    assert!(g.describe(last).starts_with("node 1 (slice -> 'y0', op #"), "{}", g.describe(last));
    let batched = batched.expect("checked above");
    assert_eq!(batched.origin(), Some(1));
    let converts = |t: TensorId| g.nodes().iter().find(|n| n.op == OpKind::Convert && n.inputs == [t]).unwrap();
    let d = &g.constants()[1];
    assert_eq!(converts(d.tensor).origin(), Some(0), "values built before any use stand for the first one");
    assert_eq!(converts(qs.tensor).origin(), Some(1), "values built for a use stand for it");

    // Q5_1 offsets its codes by 16 and weights their high bits by 16: one scalar constant, one key, for both.
    let blocks = vec![0u8; 24 * 3];
    let q5 = Tensor {
        spec: spec("w5", &[3, 32], DType::F32).with_path("model.q5.weight"),
        storage: Storage::Packed { encoding: Encoding::Q5_1, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let (trace, _, _) = linear_trace(q5, 1);
    let g = finalize(&trace, &keep).unwrap();
    let scalars: Vec<&str> = g.constants().iter().map(|c| c.key.as_str()).filter(|k| k.contains(".const")).collect();
    assert_eq!(scalars, ["model.q5.weight.const16", "model.q5.weight.const-8"]);

    // A weight whose rows are not whole blocks, or of another rank, cannot be kept packed: an error that says so.
    let blocks = vec![0u8; 34 * 3];
    let odd = Tensor {
        spec: spec("w", &[96], DType::F32),
        storage: Storage::Packed { encoding: Encoding::Q8_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let mut t = Trace::new();
    let w = t.add_tensor(odd);
    let y = t.add_placeholder(spec("y", &[96], DType::F32));
    t.record(OpKind::Neg, Attrs::new(), &[w], &[y]);
    t.set_outputs(&[y]);
    let err = finalize(&t, &keep).unwrap_err();
    let GraphError::CannotKeepPacked { tensor, encoding, detail } = &err else { panic!("{err}") };
    assert_eq!((tensor.as_str(), encoding.as_str()), ("w", "Q8_0"));
    assert!(detail.contains("rank-2"), "{detail}");
    assert!(err.to_string().contains("dequantize it instead"), "the remedy: {err}");
    // [2, 48]: 96 values are 3 whole blocks, but a row of 48 is not.
    let rows48 = Tensor {
        spec: spec("w48", &[2, 48], DType::F32),
        storage: Storage::Packed { encoding: Encoding::Q8_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let mut t = Trace::new();
    let w = t.add_tensor(rows48);
    let y = t.add_placeholder(spec("y", &[2, 48], DType::F32));
    t.record(OpKind::Neg, Attrs::new(), &[w], &[y]);
    t.set_outputs(&[y]);
    let err = finalize(&t, &keep).unwrap_err();
    let GraphError::CannotKeepPacked { tensor, detail, .. } = &err else { panic!("{err}") };
    assert_eq!(tensor, "w48");
    assert!(detail.contains("rows of 48 values are not whole 32-value blocks"), "{detail}");
}

#[test]
fn dequantize_yields_logical_f32_values_without_an_encoding() {
    // Two Q4_0 rows of 32: d = 0.5, codes 0..15 repeated.
    let mut blocks = Vec::new();
    for _ in 0..2 {
        blocks.extend(half::f16::from_f32(0.5).to_bits().to_le_bytes());
        blocks.extend((0u8..16).map(|i| i | ((15 - i) << 4)));
    }
    let w = Tensor {
        spec: spec("t1", &[2, 32], DType::F32).with_path("model.proj.weight"),
        storage: Storage::Packed { encoding: Encoding::Q4_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let (trace, _, w_id) = matmul_trace(w);
    let opts = ExtractOptions { packed: PackedConstantHandling::Dequantize, ..ExtractOptions::default() };
    let graph = finalize(&trace, &opts).unwrap();
    let c = graph.constant(w_id).unwrap();
    assert_eq!(c.key, "model.proj.weight");
    assert_eq!(c.data.element_count(), 64);
    assert_eq!(c.data.dtype(), DType::F32);
    assert_eq!(graph.spec(w_id).dtype, DType::F32);
    let mut expect = vec![0f32; 64];
    dequantize(&Encoding::Q4_0, &blocks, &mut expect).unwrap();
    assert_eq!(f32s(&bytes_of(&c.data)), expect);
    assert_eq!(expect[0], -4.0);
}

/// Extraction that widens 16-bit weights to f32 (the default keeps them).
fn widen() -> ExtractOptions {
    ExtractOptions { half: HalfConstantHandling::Widen, ..ExtractOptions::default() }
}

#[test]
fn bf16_weights_are_kept_as_stored_by_default_borrowing_the_caller_s_bytes() {
    let bits: Vec<u8> = [1.0f32, -2.5, 3.140625, f32::INFINITY]
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes())
        .chain(0x7fc1u16.to_le_bytes()) // a NaN payload
        .chain([0, 0, 0, 0, 0, 0])
        .collect();
    let w = Tensor {
        spec: spec("w", &[2, 4], DType::BF16),
        storage: Storage::Half { bytes: Lent::Slice(&bits), layout: HalfLayout::RowMajor },
    };
    let (trace, _, id) = matmul_trace(w);
    let (g, extra) = peak_extra_alloc(|| finalize(&trace, &ExtractOptions::default()).unwrap());
    assert!(extra < 64 << 10, "finalize allocated {extra} bytes");
    let c = g.constant(id).unwrap();
    let ConstantData::Raw { dtype: DType::BF16, bytes: Lent::Slice(kept) } = c.data else {
        panic!("not kept as bf16: {:?}", c.data)
    };
    assert_eq!(kept.as_ptr(), bits.as_ptr(), "the constant is the caller's bytes");
    assert_eq!((c.data.dtype(), c.data.byte_len()), (DType::BF16, 16), "stored as 16 bits");
    assert_eq!(g.spec(id).dtype, DType::F32, "the program sees f32: ops on the weight compute in f32");
    assert_eq!(bytes_of(&c.data), bits, "streamed as stored, NaN payload included");

    // Column-major 16-bit data is widened: storing it row-major would take a transpose.
    let w = Tensor {
        spec: spec("w", &[2, 4], DType::BF16),
        storage: Storage::Half { bytes: Lent::Slice(&bits), layout: HalfLayout::ColumnMajor },
    };
    let (trace, _, id) = matmul_trace(w);
    let g = finalize(&trace, &ExtractOptions::default()).unwrap();
    assert!(matches!(g.constant(id).unwrap().data, ConstantData::Widen { .. }));
}

#[test]
fn a_16_bit_weight_used_by_ops_of_its_own_type_is_seen_in_that_type_even_when_widening() {
    let bits: Vec<u8> = (0..8u16).flat_map(|i| half::bf16::from_f32(f32::from(i)).to_bits().to_le_bytes()).collect();
    let program_dtype = |x_dtype: DType, opts: &ExtractOptions| {
        let mut t = Trace::new();
        let x = t.add_placeholder(spec("x", &[2, 2], x_dtype));
        let w = t.add_tensor(Tensor {
            spec: spec("w", &[2, 4], DType::BF16),
            storage: Storage::Half { bytes: Lent::Slice(&bits), layout: HalfLayout::RowMajor },
        });
        let y = t.add_placeholder(spec("y", &[2, 4], x_dtype));
        t.record(OpKind::Matmul, Attrs::new(), &[x, w], &[y]);
        t.set_outputs(&[y]);
        let g = finalize(&t, opts).unwrap();
        (g.spec(w).dtype, g.constant(w).unwrap().data.dtype())
    };
    // bf16 activations: the program computes in bf16 on the stored bytes, widening or not.
    assert_eq!(program_dtype(DType::BF16, &ExtractOptions::default()), (DType::BF16, DType::BF16));
    assert_eq!(program_dtype(DType::BF16, &widen()), (DType::BF16, DType::BF16));
    // f32 activations: the program sees f32 (kept bf16 and converted, or widened).
    assert_eq!(program_dtype(DType::F32, &ExtractOptions::default()), (DType::F32, DType::BF16));
    assert_eq!(program_dtype(DType::F32, &widen()), (DType::F32, DType::F32));
}

#[test]
fn bf16_and_f16_widen_exactly_including_specials() {
    let bf16_vals = [1.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, 3.140625, -2.5e-38, 1.0e38];
    let bf: Vec<u8> = bf16_vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes()).collect();
    let nan_bits: u16 = 0x7fc1; // a NaN with a payload
    let mut bf = bf;
    bf.extend(nan_bits.to_le_bytes());
    let w = Tensor {
        spec: spec("bf", &[1, 8], DType::BF16),
        storage: Storage::Half { bytes: Lent::Slice(&bf), layout: HalfLayout::RowMajor },
    };
    let (trace, _, id) = matmul_trace(w);
    let graph = finalize(&trace, &widen()).unwrap();
    let got = f32s(&bytes_of(&graph.constant(id).unwrap().data));
    for (g, v) in got.iter().zip(bf16_vals) {
        assert_eq!(g.to_bits(), half::bf16::from_f32(v).to_f32().to_bits());
    }
    assert_eq!(got[7].to_bits(), u32::from(nan_bits) << 16, "NaN payload kept");
    assert_eq!(graph.spec(id).dtype, DType::F32);

    let f16_bits: [u16; 6] = [0x0001, 0x8000, 0x7c00, 0x3555, 0xfbff, 0x7e01]; // subnormal, -0, inf, …, NaN
    let fb: Vec<u8> = f16_bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let w = Tensor {
        spec: spec("h", &[2, 3], DType::F16),
        storage: Storage::Half { bytes: Lent::Slice(&fb), layout: HalfLayout::RowMajor },
    };
    let (trace, _, id) = matmul_trace(w);
    let got = f32s(&bytes_of(&finalize(&trace, &widen()).unwrap().constant(id).unwrap().data));
    assert_eq!(got[0], 2f32.powi(-24));
    assert_eq!(got[1].to_bits(), 0x8000_0000);
    assert_eq!(got[2], f32::INFINITY);
    assert_eq!(got[4], -65504.0);
    assert!(got[5].is_nan());
}

#[test]
fn column_major_half_is_decoded_in_row_major_order() {
    // [2, 3] stored by column: element [r, c] at c*2 + r.
    let logical = [[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let mut bytes = Vec::new();
    for c in 0..3 {
        for row in &logical {
            bytes.extend(half::f16::from_f32(row[c]).to_bits().to_le_bytes());
        }
    }
    let w = Tensor {
        spec: spec("cm", &[2, 3], DType::F16),
        storage: Storage::Half { bytes: Lent::Slice(&bytes), layout: HalfLayout::ColumnMajor },
    };
    let (trace, _, id) = matmul_trace(w);
    let got = f32s(&bytes_of(&finalize(&trace, &ExtractOptions::default()).unwrap().constant(id).unwrap().data));
    assert_eq!(got, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn forced_inputs_dynamic_shapes_and_mapped_storage_stay_inputs() {
    let weights = vec![1f32; 8];
    let blocks = vec![0u8; 34];
    let mut t = Trace::new();
    let x = t.add_placeholder(spec("x", &[4, 2], DType::F32));
    let forced = t.add_tensor(Tensor::f32(spec("forced", &[2, 4], DType::F32), &weights));
    let dynamic = t.add_tensor(Tensor {
        spec: TensorSpec::new("dyn", Shape(vec![Dim::Dynamic, Dim::Static(32)]), DType::F32),
        storage: Storage::Packed { encoding: Encoding::Q8_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    });
    let mapped = t.add_tensor(Tensor {
        spec: spec("mapped", &[4, 4], DType::F32),
        storage: Storage::Mapped { path: "w.bin".into(), offset: 0, len: 64 },
    });
    let y = t.add_placeholder(spec("y", &[4, 4], DType::F32));
    let z = t.add_placeholder(spec("z", &[4, 4], DType::F32));
    let d = t.add_placeholder(TensorSpec::new("d", Shape(vec![Dim::Dynamic, Dim::Static(32)]), DType::F32));
    t.record(OpKind::Matmul, Attrs::new(), &[x, forced], &[y]);
    t.record(OpKind::Add, Attrs::new(), &[y, mapped], &[z]);
    t.record(OpKind::Neg, Attrs::new(), &[dynamic], &[d]);
    t.set_outputs(&[z, d]);
    let opts = ExtractOptions { forced_inputs: [forced].into(), ..ExtractOptions::default() };
    let g = finalize(&t, &opts).unwrap();
    assert_eq!(g.inputs(), [x, forced, dynamic, mapped], "declaration order (the tensor table), not first use");
    assert!(g.constants().is_empty(), "a dynamic packed tensor is an input, not a FAIL");
}

#[test]
fn a_tied_weight_used_twice_is_one_constant() {
    let emb = vec![0.5f32; 16 * 4];
    let mut t = Trace::new();
    let ids = t.add_placeholder(spec("ids", &[3], DType::I32));
    let w = t.add_tensor(Tensor::f32(spec("t7", &[16, 4], DType::F32).with_path("model.embed.weight"), &emb));
    let wt = t.add_placeholder(spec("wt", &[4, 16], DType::F32));
    let h = t.add_placeholder(spec("h", &[3, 4], DType::F32));
    let logits = t.add_placeholder(spec("logits", &[3, 16], DType::F32));
    t.record(OpKind::Gather, Attrs::new(), &[w, ids], &[h]);
    t.record(OpKind::Transpose, Attrs::new(), &[w], &[wt]);
    t.record(OpKind::Matmul, Attrs::new(), &[h, wt], &[logits]);
    t.set_outputs(&[logits]);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    assert_eq!(g.constants().len(), 1);
    assert_eq!(g.constants()[0].key, "model.embed.weight");
    assert_eq!(g.inputs(), [ids]);
}

#[test]
fn keys_are_stable_unique_and_collisions_are_reported() {
    let a = vec![1f32; 4];
    let build = || {
        let mut t = Trace::new();
        let x = t.add_placeholder(spec("x", &[4], DType::F32));
        let w1 = t.add_tensor(Tensor::f32(spec("t1", &[4], DType::F32).with_path("layer.w"), &a));
        let w2 = t.add_tensor(Tensor::f32(spec("t2", &[4], DType::F32).with_path("layer.w"), &a));
        let w3 = t.add_tensor(Tensor::f32(spec("", &[4], DType::F32), &a));
        let (y1, y2, y3) = (
            t.add_placeholder(spec("y1", &[4], DType::F32)),
            t.add_placeholder(spec("y2", &[4], DType::F32)),
            t.add_placeholder(spec("y3", &[4], DType::F32)),
        );
        t.record(OpKind::Add, Attrs::new(), &[x, w1], &[y1]);
        t.record(OpKind::Add, Attrs::new(), &[y1, w2], &[y2]);
        t.record(OpKind::Add, Attrs::new(), &[y2, w3], &[y3]);
        t.set_outputs(&[y3]);
        t
    };
    let (t1, t2) = (build(), build());
    let (g1, g2) =
        (finalize(&t1, &ExtractOptions::default()).unwrap(), finalize(&t2, &ExtractOptions::default()).unwrap());
    let keys = |g: &tapeout_graph::ComputeGraph<'_>| g.constants().iter().map(|c| c.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&g1), ["layer.w", "layer.w.1", "param.2"]);
    assert_eq!(keys(&g1), keys(&g2), "same model, same keys");
    assert_eq!(g1.key_collisions().len(), 1);
    assert_eq!(g1.key_collisions()[0].assigned, "layer.w.1");
    assert_eq!(g1.key_collisions()[0].tensor, "t2");
}

// --- validation -------------------------------------------------------------------------------

#[test]
fn validation_names_the_node_and_the_problem() {
    let mut t = Trace::new();
    let a = t.add_placeholder(spec("a", &[2, 3], DType::F32));
    let b = t.add_placeholder(spec("b", &[4], DType::F32));
    let c = t.add_placeholder(spec("c", &[2, 3], DType::F32));
    t.record(OpKind::Add, Attrs::new(), &[a, b], &[c]);
    t.set_outputs(&[c]);
    let e = finalize(&t, &ExtractOptions::default()).unwrap_err().to_string();
    assert!(e.contains("node 0 (add -> 'c')") && e.contains("do not broadcast"), "{e}");

    let mut t = Trace::new();
    let a = t.add_placeholder(spec("a", &[2], DType::F32));
    let c = t.add_placeholder(spec("c", &[2], DType::F32));
    t.record(OpKind::Add, Attrs::new(), &[a], &[c]);
    t.set_outputs(&[c]);
    let e = finalize(&t, &ExtractOptions::default()).unwrap_err();
    assert!(matches!(&e, GraphError::Arity { port: "input", found: 1, .. }), "{e}");

    // An id of another, larger trace.
    let mut other = Trace::new();
    for i in 0..10 {
        other.add_placeholder(spec(&format!("o{i}"), &[2], DType::F32));
    }
    let foreign: TensorId = other.id(9).unwrap();
    let mut t = Trace::new();
    let a = t.add_placeholder(spec("a", &[2], DType::F32));
    t.record(OpKind::Neg, Attrs::new(), &[foreign], &[a]);
    t.set_outputs(&[a]);
    let e = finalize(&t, &ExtractOptions::default()).unwrap_err();
    assert!(matches!(&e, GraphError::DanglingReference { tensor: 9, port: "input", .. }), "{e}");

    // A cycle a -> b -> a, with a node downstream of it that is not on it.
    let mut t = Trace::new();
    let a = t.add_placeholder(spec("a", &[2], DType::F32));
    let b = t.add_placeholder(spec("b", &[2], DType::F32));
    let after = t.add_placeholder(spec("after", &[2], DType::F32));
    t.record(OpKind::Exp, Attrs::new(), &[a], &[after]);
    t.record(OpKind::Neg, Attrs::new(), &[b], &[a]);
    t.record(OpKind::Abs, Attrs::new(), &[a], &[b]);
    t.set_outputs(&[after]);
    let e = finalize(&t, &ExtractOptions::default()).unwrap_err();
    let GraphError::Cycle { nodes } = &e else { panic!("expected a cycle: {e}") };
    assert_eq!(nodes, &["node 2 (abs -> 'b')", "node 1 (neg -> 'a')"], "{e}");
    assert!(!e.to_string().contains("after"), "nothing downstream of the cycle is named: {e}");

    let mut t = Trace::new();
    let a = t.add_placeholder(spec("a", &[2], DType::F32));
    let b = t.add_placeholder(spec("b", &[2], DType::F32));
    t.record(OpKind::Neg, Attrs::new(), &[a], &[b]);
    t.record(OpKind::Abs, Attrs::new(), &[a], &[b]);
    t.set_outputs(&[b]);
    assert!(matches!(finalize(&t, &ExtractOptions::default()), Err(GraphError::DuplicateProducer { .. })));

    let t = Trace::new();
    assert!(matches!(finalize(&t, &ExtractOptions::default()), Err(GraphError::NoOutputs)));
}

#[test]
fn out_of_order_traces_are_sorted_and_dangling_intermediates_are_not_outputs() {
    let mut t = Trace::new();
    let x = t.add_placeholder(spec("x", &[2], DType::F32));
    let a = t.add_placeholder(spec("a", &[2], DType::F32));
    let b = t.add_placeholder(spec("b", &[2], DType::F32));
    let unused = t.add_placeholder(spec("unused", &[2], DType::F32));
    t.record(OpKind::Exp, Attrs::new(), &[a], &[b]); // consumes `a` before it is recorded
    t.record(OpKind::Neg, Attrs::new(), &[x], &[a]);
    t.record(OpKind::Abs, Attrs::new(), &[x], &[unused]);
    t.set_outputs(&[b]);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    let order: Vec<_> = g.nodes().iter().map(|n| (n.index, n.op)).collect();
    assert_eq!(order, [(1, OpKind::Neg), (2, OpKind::Abs), (0, OpKind::Exp)]);
    assert_eq!(g.outputs(), [b]);
}

#[test]
fn storage_that_disagrees_with_its_spec_is_refused() {
    let w = vec![1f32; 5];
    let (trace, _, _) = matmul_trace(Tensor::f32(spec("t1", &[2, 3], DType::F32), &w));
    let e = finalize(&trace, &ExtractOptions::default()).unwrap_err().to_string();
    assert!(e.contains("'t1'") && e.contains("5 values for 6 elements"), "{e}");

    let blocks = vec![0u8; 30];
    let w = Tensor {
        spec: spec("t2", &[1, 32], DType::F32),
        storage: Storage::Packed { encoding: Encoding::Q8_0, order: BlockOrder::RowMajor, bytes: Lent::Slice(&blocks) },
    };
    let (trace, _, _) = matmul_trace(w);
    let opts = ExtractOptions { packed: PackedConstantHandling::Dequantize, ..ExtractOptions::default() };
    assert!(matches!(finalize(&trace, &opts), Err(GraphError::StorageMismatch { .. })));

    let w = Tensor {
        spec: spec("t3", &[1, 32], DType::F32),
        storage: Storage::Packed {
            encoding: Encoding::Other("TQ1_0".into()),
            order: BlockOrder::RowMajor,
            bytes: Lent::Slice(&blocks),
        },
    };
    let (trace, _, _) = matmul_trace(w);
    let e = finalize(&trace, &opts).unwrap_err().to_string();
    assert!(e.contains("TQ1_0") && e.contains("load it dense"), "{e}");
}

// --- the 2^31-byte tensor -----------------------------------------------------------------------

/// bf16 bytes synthesised per chunk: value of element i is bf16(i % 1024).
struct SyntheticBf16 {
    elements: u64,
    max_lent: AtomicUsize,
}

impl ChunkLender<u8> for SyntheticBf16 {
    fn len(&self) -> u64 {
        self.elements * 2
    }
    fn with_chunk(
        &self,
        start: u64,
        len: u64,
        f: &mut dyn FnMut(&[u8]) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        self.max_lent.fetch_max(usize::try_from(len).map_err(|e| StreamError::Lend(e.into()))?, Ordering::SeqCst);
        let chunk: Vec<u8> = (start / 2..(start + len) / 2)
            .flat_map(|i| half::bf16::from_f32((i % 1024) as f32).to_bits().to_le_bytes())
            .collect();
        f(&chunk)
    }
}

#[test]
fn embedding_of_2_pow_31_bytes_needs_no_allocation_of_its_size() {
    let _serial = MEASURE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // f32, borrowed: 262144 x 2048 from an anonymous mapping (pages appear only when touched).
    let map = memmap2::MmapMut::map_anon(1 << 31).unwrap();
    let values: &[f32] = bytemuck::cast_slice(&map[..]);
    let (trace, _, w) = matmul_trace(Tensor::f32(spec("embed", &[262_144, 2048], DType::F32), values));
    let (g, extra) = peak_extra_alloc(|| finalize(&trace, &ExtractOptions::default()).unwrap());
    assert!(extra < 64 << 10, "finalize allocated {extra} bytes");
    let data = &g.constant(w).unwrap().data;
    assert_eq!(data.byte_len(), 1 << 31);
    assert!(matches!(data, ConstantData::F32(Lent::Slice(s)) if s.as_ptr() == values.as_ptr()));

    // bf16 through a chunked lender, widened lazily: 2^30 source bytes become 2^31 f32 bytes.
    let lender = SyntheticBf16 { elements: 1 << 29, max_lent: AtomicUsize::new(0) };
    let w = Tensor {
        spec: spec("embed_bf16", &[262_144, 2048], DType::BF16),
        storage: Storage::Half { bytes: Lent::Chunked(&lender), layout: HalfLayout::RowMajor },
    };
    let (trace, _, id) = matmul_trace(w);
    let g = finalize(&trace, &widen()).unwrap();
    let data = &g.constant(id).unwrap().data;
    let last = (1u64 << 29) - 1;
    let mut probe = Probe::at(&[1000, 1025, last]);
    let ((), extra) = peak_extra_alloc(|| data.stream(&mut probe).unwrap());
    assert_eq!(probe.len, 1 << 31);
    let chunk = usize::try_from(tapeout_graph::CHUNK_VALUES).unwrap();
    assert!(extra <= 4 * chunk + 2 * chunk + (64 << 10), "peak extra allocation {extra} bytes for a 2 GiB constant");
    assert_eq!(lender.max_lent.load(Ordering::SeqCst), 2 * chunk, "one chunk lent at a time");
    assert_eq!(probe.value(1000), 1000.0);
    assert_eq!(probe.value(1025), 1.0, "1025 % 1024");
    // The source holds bf16(i % 1024): 1023 is not representable and rounds to 1024.
    let bf16 = |v: f32| half::bf16::from_f32(v).to_f32();
    assert_eq!(probe.value(last), bf16((last % 1024) as f32));
    assert_eq!(probe.value(last), 1024.0);
}

/// `y = x @ wᵀ` with `w` `[rows, cols]`.
fn linear_trace<'a>(w: Tensor<'a>, transposes: usize) -> (Trace<'a>, TensorId, Vec<TensorId>) {
    let mut t = Trace::new();
    let dims = w.spec.shape.static_dims().unwrap();
    let (rows, cols) = (dims[0], dims[1]);
    let x = t.add_placeholder(spec("x", &[2, cols], DType::F32));
    let w = t.add_tensor(w);
    let mut outs = Vec::new();
    for i in 0..transposes {
        let wt = t.add_placeholder(spec(&format!("wt{i}"), &[cols, rows], DType::F32));
        let y = t.add_placeholder(spec(&format!("y{i}"), &[2, rows], DType::F32));
        t.record(OpKind::Transpose, Attrs::new(), &[w], &[wt]);
        t.record(OpKind::Matmul, Attrs::new(), &[x, wt], &[y]);
        outs.push(y);
    }
    t.set_outputs(&outs);
    (t, w, outs)
}

#[test]
fn a_weight_used_only_transposed_is_written_transposed_and_the_transpose_leaves() {
    let values: Vec<f32> = (0..12).map(|i| i as f32).collect(); // [3, 4]
    let w = || Tensor::f32(spec("w", &[3, 4], DType::F32).with_path("model.fc.weight"), &values);
    let (trace, wid, _) = linear_trace(w(), 1);
    let g = finalize(&trace, &ExtractOptions::default()).unwrap();
    assert!(g.constant(wid).is_none(), "the weight as held is no longer a value of the program");
    let [c] = g.constants() else { panic!("one constant") };
    assert_eq!(c.key, "model.fc.weight", "the weight keeps its key");
    assert_eq!(g.spec(c.tensor).shape, Shape::of(&[4, 3]));
    assert!(matches!(c.data, ConstantData::Transposed { rows: 3, cols: 4, .. }));
    let want: Vec<f32> = (0..4).flat_map(|c| (0..3).map(move |r| (r * 4 + c) as f32)).collect();
    assert_eq!(f32s(&bytes_of(&c.data)), want);
    assert!(g.nodes().iter().all(|n| n.op != OpKind::Transpose), "no transpose left");

    // As held on request, or when the weight has two uses that are not a transpose and gathers.
    let as_held = ExtractOptions { layout: tapeout_graph::WeightLayout::AsHeld, ..ExtractOptions::default() };
    let g = finalize(&trace, &as_held).unwrap();
    assert!(g.constant(wid).is_some() && g.nodes().iter().any(|n| n.op == OpKind::Transpose));
    let (trace, wid, _) = linear_trace(w(), 2);
    let g = finalize(&trace, &ExtractOptions::default()).unwrap();
    assert!(matches!(g.constant(wid).unwrap().data, ConstantData::F32(_)));
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let lender = Chunks(bytes);
    let chunked = Tensor { spec: spec("w", &[3, 4], DType::F32), storage: Storage::Dense(Lent::Chunked(&lender)) };
    let (trace, wid, _) = linear_trace(chunked, 1);
    let g = finalize(&trace, &ExtractOptions::default()).unwrap();
    assert!(g.constant(wid).is_none(), "memory lent in chunks is transposed too, through strided lends");
    assert_eq!(f32s(&bytes_of(&g.constants()[0].data)), want);
}

#[test]
fn a_tied_embedding_and_head_is_stored_once_transposed_and_gathered_by_columns() {
    // table [5, 3]: ids [2] gather rows -> h [2, 3]; logits = h @ tableᵀ [2, 5]; optionally a third use.
    let values: Vec<f32> = (0..15).map(|i| i as f32).collect();
    let tied = |third_use: bool| {
        let mut t = Trace::new();
        let emb = spec("emb", &[5, 3], DType::F32).with_path("model.embed.weight");
        let table = t.add_tensor(Tensor::f32(emb, &values));
        let ids = t.add_placeholder(spec("ids", &[2], DType::I32));
        let h = t.add_placeholder(spec("h", &[2, 3], DType::F32));
        let tt = t.add_placeholder(spec("tt", &[3, 5], DType::F32));
        let logits = t.add_placeholder(spec("logits", &[2, 5], DType::F32));
        t.record(OpKind::Gather, Attrs::new(), &[table, ids], &[h]);
        t.record(OpKind::Transpose, Attrs::new(), &[table], &[tt]);
        t.record(OpKind::Matmul, Attrs::new(), &[h, tt], &[logits]);
        let mut outs = vec![logits];
        if third_use {
            let neg = t.add_placeholder(spec("neg", &[5, 3], DType::F32));
            t.record(OpKind::Neg, Attrs::new(), &[table], &[neg]);
            outs.push(neg);
        }
        t.set_outputs(&outs);
        (t, [table, ids, h, tt])
    };

    let (t, [_, ids, h, tt]) = tied(false);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    let [c] = g.constants() else { panic!("one parameter") };
    assert_eq!((c.key.as_str(), c.tensor), ("model.embed.weight", tt), "stored once, as the head reads it");
    let ops: Vec<OpKind> = g.nodes().iter().map(|n| n.op).collect();
    assert_eq!(ops, [OpKind::Gather, OpKind::Transpose, OpKind::Matmul]);
    let gather = &g.nodes()[0];
    assert_eq!(gather.inputs, [tt, ids]);
    assert_eq!(gather.attrs.get("axis"), Some(&Attr::Int(1)));
    let columns = gather.outputs[0];
    assert_eq!(g.spec(columns).shape, Shape::of(&[3, 2]));
    assert_eq!((g.nodes()[1].inputs.clone(), g.nodes()[1].outputs.clone()), (vec![columns], vec![h]));
    assert_eq!(g.nodes()[1].attrs.get("perm"), Some(&Attr::Ints(vec![1, 0])));
    // The inserted transpose has a fresh index and stands for the gather (node 0); the recorded nodes keep theirs.
    let origins: Vec<_> = g.nodes().iter().map(|n| (n.index, n.is_inserted(), n.origin())).collect();
    assert_eq!(origins, [(0, false, Some(0)), (3, true, Some(0)), (2, false, Some(2))]);
    assert_eq!(g.describe(&g.nodes()[1]), "node 0 (transpose -> 'h', op #3 inserted for it by a rewrite)");
    let want: Vec<f32> = (0..3).flat_map(|c| (0..5).map(move |r| (r * 3 + c) as f32)).collect();
    assert_eq!(f32s(&bytes_of(&c.data)), want);

    // Any other use keeps it as held.
    let (t, [table, ..]) = tied(true);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    assert!(g.constant(table).is_some() && g.nodes().iter().any(|n| n.op == OpKind::Transpose && n.inputs == [table]));
}

#[test]
fn transposing_at_export_is_exact_across_bands_and_tiles() {
    // 300 x 5000 bf16 kept: rows beyond one 64-row tile, a 3 MiB source, bands of output rows.
    let (rows, cols) = (300u64, 5000u64);
    let bits: Vec<u8> = (0..rows * cols).flat_map(|i| u16::try_from(i % 65521).unwrap().to_le_bytes()).collect();
    let w = Tensor {
        spec: spec("w", &[rows, cols], DType::BF16),
        storage: Storage::Half { bytes: Lent::Slice(&bits), layout: HalfLayout::RowMajor },
    };
    let (trace, _, _) = linear_trace(w, 1);
    let g = finalize(&trace, &ExtractOptions::default()).unwrap();
    let c = &g.constants()[0];
    assert_eq!(c.data.dtype(), DType::BF16);
    let got = bytes_of(&c.data);
    assert_eq!(got.len(), bits.len());
    for (k, n) in [(0u64, 0u64), (4999, 299), (1234, 64), (63, 65), (2500, 150)] {
        let at = usize::try_from(2 * (k * rows + n)).unwrap();
        let src = usize::try_from(2 * (n * cols + k)).unwrap();
        assert_eq!(got[at..at + 2], bits[src..src + 2], "element [{k}, {n}]");
    }

    // Widened on the way: the same transposition, f32 out.
    let g = finalize(&trace, &widen()).unwrap();
    let c = &g.constants()[0];
    assert!(
        matches!(&c.data, ConstantData::Transposed { of, .. } if matches!(**of, ConstantData::Widen { from: DType::BF16, .. }))
    );
    assert_eq!((c.data.dtype(), c.data.byte_len()), (DType::F32, 4 * rows * cols));
    let got = f32s(&bytes_of(&c.data));
    for (k, n) in [(0u64, 0u64), (4999, 299), (1234, 64), (63, 65), (2500, 150)] {
        let src = usize::try_from(2 * (n * cols + k)).unwrap();
        let want = f32::from_bits(u32::from(u16::from_le_bytes([bits[src], bits[src + 1]])) << 16);
        let got = got[usize::try_from(k * rows + n).unwrap()];
        assert_eq!(got.to_bits(), want.to_bits(), "element [{k}, {n}]");
    }
}

/// Bytes lent one chunk at a time, like a pinned JVM array.
struct Chunks(Vec<u8>);

impl ChunkLender<u8> for Chunks {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn with_chunk(
        &self,
        start: u64,
        len: u64,
        f: &mut dyn FnMut(&[u8]) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        let (s, e) = (usize::try_from(start).unwrap(), usize::try_from(start + len).unwrap());
        f(&self.0[s..e])
    }
}

#[test]
fn arguments_keep_the_declared_order_when_ops_read_them_in_another() {
    let mut t = Trace::new();
    // Declared tokens, positions, mask; the ops read mask first, then positions, then tokens.
    let tokens = t.add_placeholder(spec("tokens", &[4], DType::F32));
    let positions = t.add_placeholder(spec("positions", &[4], DType::F32));
    let mask = t.add_placeholder(spec("mask", &[4], DType::F32));
    let a = t.add_placeholder(spec("a", &[4], DType::F32));
    let b = t.add_placeholder(spec("b", &[4], DType::F32));
    let c = t.add_placeholder(spec("c", &[4], DType::F32));
    t.record(OpKind::Neg, Attrs::new(), &[mask], &[a]);
    t.record(OpKind::Add, Attrs::new(), &[a, positions], &[b]);
    t.record(OpKind::Add, Attrs::new(), &[b, tokens], &[c]);
    t.set_outputs(&[c]);
    let g = finalize(&t, &ExtractOptions::default()).unwrap();
    assert_eq!(g.inputs(), [tokens, positions, mask]);
}
