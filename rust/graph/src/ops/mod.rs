//! The op table ([`OpKind`]): every op's name and signature (arity and type rule), and the type rules
//! themselves: `check_types` is the one place that decides whether a node's operand and result specs and
//! attributes fit its op (the emitter only asks what it can lower). `finalize` runs it on every node.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};
use crate::trace::Attrs;

/// How many operands or results an op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// Exactly n.
    Exactly(usize),
    /// n or more.
    AtLeast(usize),
    /// Between lo and hi inclusive.
    Between(usize, usize),
    /// One of two counts (clamp: the operand alone, or with its two bounds).
    Either(usize, usize),
}

impl Arity {
    /// True when `n` fits.
    #[must_use]
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Between(lo, hi) => (lo..=hi).contains(&n),
            Arity::Either(a, b) => n == a || n == b,
        }
    }
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
            Arity::Between(lo, hi) => write!(f, "{lo} to {hi}"),
            Arity::Either(a, b) => write!(f, "{a} or {b}"),
        }
    }
}

/// The type rule of an op family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Two operands of one dtype, NumPy-broadcast; the result has that dtype and the broadcast shape.
    ElementwiseBinary,
    /// One operand; the result has its dtype and shape.
    ElementwiseUnary,
    /// All operands and results share one dtype.
    SameDType,
    /// One operand; the result has its dtype (the shape may differ, as for pooling).
    ElementwiseUnaryDType,
    /// The op's own rule (attributes, result shape), in `check_types`'s match over [`OpKind`].
    Own,
}

/// An op's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// Operands.
    pub inputs: Arity,
    /// Results.
    pub outputs: Arity,
    /// Type rule.
    pub rule: Rule,
}

/// Declares the op table: each op's variant, name and signature, once.
macro_rules! op_table {
    ($($(#[$doc:meta])* $variant:ident = $name:literal: $inputs:expr, $outputs:expr, $rule:ident;)*) => {
        /// Every op a trace can record, a graph file can name and the emitter lowers: the one table that
        /// validation, lowering dispatch and the graph format's "unknown op" list all read. Deliberately
        /// exhaustive: a new op does not compile until every `match` over the table (the emitter's
        /// dispatch among them) handles it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind {
            $($(#[$doc])* $variant,)*
        }

        impl OpKind {
            /// Every op, sorted by name.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$variant,)*];

            /// The op's name in traces and graph files (`add`, `rms_norm`, …).
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(OpKind::$variant => $name,)*
                }
            }

            /// The op called `name`, if there is one.
            #[must_use]
            pub fn from_name(name: &str) -> Option<OpKind> {
                match name {
                    $($name => Some(OpKind::$variant),)*
                    _ => None,
                }
            }

            /// Its arity and type rule.
            #[must_use]
            pub fn signature(self) -> Signature {
                #[allow(unused_imports)]
                use Arity::{AtLeast, Between, Either, Exactly};
                match self {
                    $(OpKind::$variant => Signature { inputs: $inputs, outputs: $outputs, rule: Rule::$rule },)*
                }
            }
        }
    };
}

op_table! {
    /// `|x|`.
    Abs = "abs": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `a + b`, broadcast.
    Add = "add": Exactly(2), Exactly(1), ElementwiseBinary;
    /// `a` unchanged, but not available before `b` is: an ordering barrier (`stablehlo.optimization_barrier`).
    /// What reads the result runs after `b` is computed; IREE then gives a large temporary derived from `a` (a
    /// weight dequantized for a product) a lifetime that starts at its use instead of at the call's start.
    After = "after": Exactly(2), Exactly(1), Own;
    /// `a AND b`, broadcast: logical for bool operands, bitwise for integers (no float form).
    And = "and": Exactly(2), Exactly(1), ElementwiseBinary;
    /// Index of the largest element along `axis` (the first one on ties), an integer result.
    Argmax = "argmax": Exactly(1), Exactly(1), Own;
    /// 2-D average pooling (NCHW).
    AvgPool2d = "avg_pool2d": Exactly(1), Exactly(1), ElementwiseUnaryDType;
    /// Broadcast to the result shape (`dims` maps operand dimensions; NumPy right-aligned without it). An optional
    /// second operand `like` gives the result's shape, `?` dimensions included (read at run time).
    Broadcast = "broadcast": Between(1, 2), Exactly(1), Own;
    /// Mask the scores above the diagonal with -inf.
    CausalMask = "causal_mask": Exactly(1), Exactly(1), ElementwiseUnaryDType;
    /// `min(max(x, lo), hi)`.
    Clamp = "clamp": Either(1, 3), Exactly(1), Own;
    /// Elementwise comparison (`direction`), a bool result.
    Compare = "compare": Exactly(2), Exactly(1), Own;
    /// Concatenation along `axis`.
    Concat = "concat": AtLeast(1), Exactly(1), SameDType;
    /// 2-D convolution (NCHW input, OIHW weight, optional bias).
    Conv2d = "conv2d": Between(2, 3), Exactly(1), SameDType;
    /// Element type conversion.
    Convert = "convert": Exactly(1), Exactly(1), Own;
    /// `cos x`.
    Cos = "cos": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `words [.., W]` (`i32`, `W` static) read as `[.., W · 32 / bits]` values of the narrower dtype `from` (each word's from its
    /// lowest bits, as little-endian bytes hold them), widened exactly: `f32` for `f16` / `bf16`, `i32` for integers
    /// (sign-extended when `from` is signed). How a device that stores only 32-bit values reads a narrow constant
    /// ([`crate::ConstantData::Words`]).
    DecodeWords = "decode_words": Exactly(1), Exactly(1), Own;
    /// `a / b`, broadcast.
    Div = "div": Exactly(2), Exactly(1), ElementwiseBinary;
    /// A window of static `sizes` at run-time offsets (one integer scalar per dimension), clamped into range.
    DynamicSlice = "dynamic_slice": AtLeast(2), Exactly(1), Own;
    /// `x` with `update` written at run-time offsets (one integer scalar per dimension), clamped into range.
    DynamicUpdateSlice = "dynamic_update_slice": AtLeast(3), Exactly(1), Own;
    /// `e^x`.
    Exp = "exp": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `t`, or its first 0 entries along `axis`, by `like`'s row count (the product of its leading dimensions):
    /// `t` whole when "at most `rows` rows" is `few`, else empty along `axis` (its result `?` there). A product of `?`
    /// rows computes several forms each of whose operands is gated so (some forms' through two gates: at most 16
    /// rows and more than 8, say), and only the one for the actual rows has work.
    GateRows = "gate_rows": Exactly(2), Exactly(1), Own;
    /// Rows of a table by index along `axis`.
    Gather = "gather": Exactly(2), Exactly(1), Own;
    /// GELU (tanh approximation).
    Gelu = "gelu": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Indices along `dim` of a static result shape; with one operand (a reference tensor) the 1-D indices
    /// `0..n` where n is the size of the reference's dimension `axis` (`?` allowed: read at run time).
    Iota = "iota": Between(0, 1), Exactly(1), Own;
    /// Layer normalization over the last axis (optional gamma, beta).
    LayerNorm = "layer_norm": Between(1, 3), Exactly(1), SameDType;
    /// `ln x`.
    Log = "log": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Matrix product (batched over leading dimensions).
    Matmul = "matmul": Exactly(2), Exactly(1), Own;
    /// `max(a, b)`, broadcast.
    Max = "max": Exactly(2), Exactly(1), ElementwiseBinary;
    /// 2-D max pooling (NCHW).
    MaxPool2d = "max_pool2d": Exactly(1), Exactly(1), ElementwiseUnaryDType;
    /// `min(a, b)`, broadcast.
    Min = "min": Exactly(2), Exactly(1), ElementwiseBinary;
    /// `a * b`, broadcast.
    Mul = "mul": Exactly(2), Exactly(1), ElementwiseBinary;
    /// `-x`.
    Neg = "neg": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `NOT x`: logical for a bool operand, bitwise for an integer one (no float form).
    Not = "not": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `a OR b`, broadcast: logical for bool operands, bitwise for integers (no float form).
    Or = "or": Exactly(2), Exactly(1), ElementwiseBinary;
    /// `x [L.., K]` as `[rows, K]`: its leading dimensions merged into one, the first `rows` of those kept and zero
    /// rows after them up to `rows` (a static shape for a product of `?` rows).
    PadRows = "pad_rows": Exactly(1), Exactly(1), SameDType;
    /// `base [L.., N]` with its `P` rows (the product of its leading dimensions) replaced by `small [rows, C]`'s first
    /// `P` rows and `N` columns when `P` is at most `rows` and `C` at least `N`; `base` unchanged otherwise.
    PlaceRows = "place_rows": Exactly(2), Exactly(1), Own;
    /// `a ^ b`, broadcast.
    Pow = "pow": Exactly(2), Exactly(1), ElementwiseBinary;
    /// Maximum over `axes`.
    ReduceMax = "reduce_max": Exactly(1), Exactly(1), Own;
    /// Mean over `axes`.
    ReduceMean = "reduce_mean": Exactly(1), Exactly(1), Own;
    /// Sum over `axes`.
    ReduceSum = "reduce_sum": Exactly(1), Exactly(1), Own;
    /// `max(x, 0)`.
    Relu = "relu": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Same elements, another shape.
    Reshape = "reshape": Exactly(1), Exactly(1), Own;
    /// RMS normalization over the last axis (optional gamma).
    RmsNorm = "rms_norm": Between(1, 2), Exactly(1), SameDType;
    /// Rotary position embedding (x, cos, sin): rotate-half pairs, or adjacent pairs with `interleaved`.
    Rope = "rope": Exactly(3), Exactly(1), SameDType;
    /// f32 `x` rounded to the precision of `dtype` (`f16` or `bf16`: to nearest, ties to even, overflowing to
    /// infinity, a NaN kept a NaN of its sign), still f32: how a device that computes no 16-bit floats (IREE's default
    /// Vulkan profile) holds a 16-bit value.
    RoundAs = "round_as": Exactly(1), Exactly(1), Own;
    /// `1 / sqrt x`.
    Rsqrt = "rsqrt": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Scaled dot-product attention (q, k, v, optional mask), grouped-query when k and v have fewer heads; optional
    /// `softcap` (`cap · tanh(scores / cap)` before the mask) and `window` (with `causal`: a query sees the `window`
    /// latest keys up to its own position, as transformers' sliding-window attention).
    Sdpa = "sdpa": Between(3, 4), Exactly(1), SameDType;
    /// `pred ? a : b`.
    Select = "select": Exactly(3), Exactly(1), Own;
    /// `1 / (1 + e^-x)`.
    Sigmoid = "sigmoid": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `x · sigmoid(x)`.
    Silu = "silu": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `sin x`.
    Sin = "sin": Exactly(1), Exactly(1), ElementwiseUnary;
    /// A strided static slice.
    Slice = "slice": Exactly(1), Exactly(1), Own;
    /// Softmax along `axis`.
    Softmax = "softmax": Exactly(1), Exactly(1), Own;
    /// `sqrt x`.
    Sqrt = "sqrt": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `a - b`, broadcast.
    Sub = "sub": Exactly(2), Exactly(1), ElementwiseBinary;
    /// `tanh x`.
    Tanh = "tanh": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Permutation of the dimensions (`perm`, reversed by default).
    Transpose = "transpose": Exactly(1), Exactly(1), Own;
}

impl OpKind {
    /// Whether only tapeout's own passes write this op: the ordering barrier and the row-count gates of the CPU
    /// pass's forms. A recorded graph (a trace, a graph file, a Kotlin tape) cannot name one: `finalize` refuses it
    /// ([`crate::GraphError::PassOnly`]), they are not in the Kotlin op table, and docs/graph-format.md lists them
    /// apart. The emitter lowers them for the passes.
    #[must_use]
    pub fn inserted_by_passes(self) -> bool {
        matches!(
            self,
            OpKind::After
                | OpKind::DecodeWords
                | OpKind::GateRows
                | OpKind::PadRows
                | OpKind::PlaceRows
                | OpKind::RoundAs
        )
    }

    /// The attribute of this op that only passes set, if `attrs` hold one: `matmul`'s `banded` (its right side in
    /// row bands) and `grouped` (its right side's columns in two dims), layouts a pass chose for a weight.
    #[must_use]
    pub fn pass_attribute(self, attrs: &Attrs) -> Option<&'static str> {
        match self {
            OpKind::Matmul => ["banded", "grouped"].into_iter().find(|a| attrs.contains_key(*a)),
            _ => None,
        }
    }
}

/// What a `decode_words` node with these attributes decodes: its `from` dtype, that dtype's bits, and the dtype of
/// the values it yields (`f32` for 16-bit floats, `i32` for integers).
///
/// # Errors
/// `from` missing, not a string, or not one of `f16`, `bf16`, `i16`, `u16`, `i8`, `u8`, `i4`, `i2`.
pub fn decode_words_from(attrs: &Attrs) -> Result<(DType, u32, DType), String> {
    let Some(crate::trace::Attr::Str(name)) = attrs.get("from") else {
        return Err("attribute 'from' (the narrow dtype, a string) is required".into());
    };
    let from = match name.as_str() {
        "i4" => DType::I4,
        "i2" => DType::I2,
        other => DType::parse(other).ok_or_else(|| format!("attribute 'from': unknown dtype '{other}'"))?,
    };
    match from {
        DType::F16 | DType::BF16 => Ok((from, 16, DType::F32)),
        DType::I16 | DType::U16 => Ok((from, 16, DType::I32)),
        DType::I8 | DType::U8 => Ok((from, 8, DType::I32)),
        DType::I4 => Ok((from, 4, DType::I32)),
        DType::I2 => Ok((from, 2, DType::I32)),
        other => Err(format!("attribute 'from': {other} is not a narrow dtype words hold")),
    }
}

/// The 16-bit float a `round_as` node with these attributes rounds to.
///
/// # Errors
/// `dtype` missing, not a string, or not `f16` / `bf16`.
pub fn round_as_dtype(attrs: &Attrs) -> Result<DType, String> {
    match attrs.get("dtype") {
        Some(crate::trace::Attr::Str(d)) if d == "f16" => Ok(DType::F16),
        Some(crate::trace::Attr::Str(d)) if d == "bf16" => Ok(DType::BF16),
        _ => Err("attribute 'dtype' must be \"f16\" or \"bf16\"".into()),
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of every op a graph can record, comma-separated (for "unknown op" messages).
#[must_use]
pub fn known_op_names() -> String {
    OpKind::ALL.iter().filter(|o| !o.inserted_by_passes()).map(|o| o.name()).collect::<Vec<_>>().join(", ")
}

/// NumPy broadcast of two shapes (right-aligned), or `None` when they are incompatible.
#[must_use]
pub fn broadcast(a: &Shape, b: &Shape) -> Option<Shape> {
    let rank = a.rank().max(b.rank());
    let at = |s: &Shape, i: usize| -> Dim {
        let pad = rank - s.rank();
        if i < pad { Dim::Static(1) } else { s.0[i - pad] }
    };
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        out.push(match (at(a, i), at(b, i)) {
            (Dim::Static(1), d) | (d, Dim::Static(1)) => d,
            (Dim::Static(x), Dim::Static(y)) if x == y => Dim::Static(x),
            (Dim::Static(_), Dim::Static(_)) => return None,
            (Dim::Dynamic, Dim::Static(n)) | (Dim::Static(n), Dim::Dynamic) => Dim::Static(n),
            (Dim::Dynamic, Dim::Dynamic) => Dim::Dynamic,
        });
    }
    Some(Shape(out))
}

/// The result shape of `a` times a weight in row bands (`matmul` with `banded = true`): `[.., K] x [N / T, K, T]
/// -> [.., N]`, the weight's `[K, N]` values being band `n / T`, column `n % T` (NumPy: `a @
/// b.transpose(1, 0, 2).reshape(K, N)`). The bands and `T` are static; `K` is static on both sides or `?` on both (a
/// product gated to no work, `keep_packed`: the two extents must then agree at run time, which is not checked); the
/// rows of `a` are static, or hold one `?` with no dim after it but 1s (they are read as one `[M]` and back).
/// Describes why when the shapes do not multiply.
///
/// # Errors
/// When `b` is not `[N / T, K, T]` with static bands, `a` has no dims or rows the product cannot read as one, or
/// the `K`s differ.
pub fn banded_matmul(a: &Shape, b: &Shape) -> Result<Shape, String> {
    if b.rank() == 4 {
        return banded_block_matmul(a, b);
    }
    let ([lead @ .., ka], [Dim::Static(bands), kb, Dim::Static(t)]) = (a.0.as_slice(), b.0.as_slice()) else {
        return Err(format!("[{a}] x bands [{b}]: a banded matmul is [.., K] x [N / T, K, T] with N / T and T static"));
    };
    if ka != kb {
        return Err(format!("[{a}] x bands [{b}]: the contracted dimensions differ"));
    }
    let dynamic = lead.iter().filter(|d| **d == Dim::Dynamic).count();
    let ones_after = lead.iter().skip_while(|d| **d != Dim::Dynamic).skip(1).all(|d| *d == Dim::Static(1));
    // Several `?` rows (a run-time batch and length) are merged and split back by the emitter with each `?` read
    // from `a`; one `?` is reshaped, which needs the dims after it to be 1s.
    if dynamic == 1 && !ones_after {
        return Err(format!(
            "[{a}] x bands [{b}]: the rows are read as one dimension and back, so a single `?` among them has no \
             dim after it but 1s (reshape [{a}] so that the `?` comes last among the rows)"
        ));
    }
    let n = bands.checked_mul(*t).ok_or_else(|| format!("bands [{b}]: {bands} x {t} columns overflow u64"))?;
    Ok(Shape(lead.iter().copied().chain([Dim::Static(n)]).collect()))
}

/// The result shape of the per-block product over codes stored in row bands (`matmul` with `banded = true` and a
/// right side of rank 4): `[Kb, M, B] x [NB, Kb, B, T] -> [Kb, M, NB·T]`, the codes' `[Kb, B, N]` values being band
/// `n / T`, column `n % T`. `Kb`, `B` and `T` are static; `M` and the band count `NB` may be `?` (a few-rows form's
/// codes gated along their bands).
///
/// # Errors
/// When the shapes are not of that form or their `Kb` or `B` differ.
fn banded_block_matmul(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let (&[Dim::Static(akb), m, Dim::Static(ab)], &[bands, Dim::Static(kb), Dim::Static(bs), Dim::Static(t)]) =
        (a.0.as_slice(), b.0.as_slice())
    else {
        return Err(format!(
            "[{a}] x bands [{b}]: a per-block product over codes in row bands is [Kb, M, B] x [NB, Kb, B, T] with Kb, \
             B and T static"
        ));
    };
    if (akb, ab) != (kb, bs) {
        return Err(format!("[{a}] x bands [{b}]: the blocks differ"));
    }
    let n = match bands {
        Dim::Static(nb) => Dim::Static(nb.checked_mul(t).ok_or_else(|| format!("bands [{b}]: too many columns"))?),
        Dim::Dynamic => Dim::Dynamic,
    };
    Ok(Shape(vec![Dim::Static(kb), m, n]))
}

/// The result shape of `a @ b`: `[.., K] x [K, N]` (a `?` K of `a` matches any K), the equal-rank batched
/// `[B.., M, K] x [B.., K, N]`, or `[B.., M, K] x [B.., K, N, T]` (the right side's columns in two dims, which a
/// node asks for with `grouped = true`). Describes why when the shapes do not multiply.
///
/// # Errors
/// When the contracted or batch dimensions differ, or the ranks are neither form.
pub fn matmul(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let (ra, rb) = (a.rank(), b.rank());
    let (ad, bd) = (&a.0, &b.0);
    let want = if rb == 2 && ra >= 1 {
        let k_ok =
            matches!((ad[ra - 1], bd[0]), (Dim::Static(x), Dim::Static(y)) if x == y) || ad[ra - 1] == Dim::Dynamic;
        k_ok.then(|| Shape(ad[..ra - 1].iter().copied().chain([bd[1]]).collect()))
    } else if ra == rb && ra >= 3 {
        let k_ok = ad[ra - 1] == bd[rb - 2];
        (k_ok && shapes_agree(&Shape(ad[..ra - 2].to_vec()), &Shape(bd[..rb - 2].to_vec())))
            .then(|| Shape(ad[..ra - 1].iter().copied().chain([bd[rb - 1]]).collect()))
    } else if rb == ra + 1 && ra >= 2 {
        // `[B.., M, K] x [B.., K, N, T]`: the right side's columns in two dimensions (a weight's codes gated in
        // groups of `T` columns, `keep_packed`).
        let k_ok = ad[ra - 1] == bd[ra - 2];
        (k_ok && shapes_agree(&Shape(ad[..ra - 2].to_vec()), &Shape(bd[..ra - 2].to_vec())))
            .then(|| Shape(ad[..ra - 1].iter().chain(&bd[ra - 1..]).copied().collect()))
    } else {
        None
    };
    match want {
        Some(w) => Ok(w),
        None if ra == rb || rb == 2 || (rb == ra + 1 && ra >= 2) => {
            Err(format!("[{a}] x [{b}]: the contracted (or batch) dimensions differ"))
        }
        None => Err(format!(
            "matmul of ranks {ra} and {rb}: supported are [.., K] x [K, N], equal-rank batched [B.., M, K] x [B.., K, N] \
             and [B.., M, K] x [B.., K, N, T]"
        )),
    }
}

/// True when two shapes can describe the same tensor (a dynamic dim matches any extent).
#[must_use]
pub fn shapes_agree(a: &Shape, b: &Shape) -> bool {
    a.rank() == b.rank()
        && a.0.iter().zip(&b.0).all(|(x, y)| matches!((x, y), (Dim::Dynamic, _) | (_, Dim::Dynamic)) || x == y)
}

/// An operand's or result's shape and dtype, as the type rules see it.
pub(crate) type Spec<'a> = (&'a Shape, DType);

mod attention;
mod dims;
mod rules;
#[cfg(test)]
mod tests;

pub use attention::{RopeTable, query_groups, rope_table_width};
pub use dims::{ArgDim, argument_dims, dims_text};
pub(crate) use rules::check_types;
pub use rules::{Window, conv2d_window, pool_window, window_output};
