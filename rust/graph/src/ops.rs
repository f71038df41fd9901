//! The op table ([`OpKind`]): every op's name and signature (arity and type rule), and the type rules
//! themselves: `check_types` is the one place that decides whether a node's operand and result specs and
//! attributes fit its op (the emitter only asks what it can lower). `finalize` runs it on every node.

use crate::dtype::DType;
use crate::shape::{Dim, Shape};
use crate::trace::{Attr, Attrs};

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
    Matmul = "matmul": Exactly(2), Exactly(1), SameDType;
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
    /// `1 / sqrt x`.
    Rsqrt = "rsqrt": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Scaled dot-product attention (q, k, v, optional mask), grouped-query when k and v have fewer heads.
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
        matches!(self, OpKind::After | OpKind::GateRows | OpKind::PadRows | OpKind::PlaceRows)
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
    let ([lead @ .., ka], [Dim::Static(bands), kb, Dim::Static(t)]) = (a.0.as_slice(), b.0.as_slice()) else {
        return Err(format!("[{a}] x bands [{b}]: a banded matmul is [.., K] x [N / T, K, T] with N / T and T static"));
    };
    if ka != kb {
        return Err(format!("[{a}] x bands [{b}]: the contracted dimensions differ"));
    }
    let dynamic = lead.iter().filter(|d| **d == Dim::Dynamic).count();
    let ones_after = lead.iter().skip_while(|d| **d != Dim::Dynamic).skip(1).all(|d| *d == Dim::Static(1));
    if dynamic > 1 || !ones_after {
        return Err(format!(
            "[{a}] x bands [{b}]: the rows are read as one dimension and back, so they hold at most one `?` and no \
             dim after it but 1s (reshape [{a}] so that the `?` comes last among the rows)"
        ));
    }
    let n = bands.checked_mul(*t).ok_or_else(|| format!("bands [{b}]: {bands} x {t} columns overflow u64"))?;
    Ok(Shape(lead.iter().copied().chain([Dim::Static(n)]).collect()))
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

/// Checks one node (its operands, results and attributes) against its op's type rules: the family rule of
/// its [`Signature`], then the op's own rule. The arity is checked before (so `ins` and `outs` have counts the
/// table accepts). Returns a description of the first problem; a malformed attribute is described as
/// `attribute 'name' …`.
pub(crate) fn check_types(op: OpKind, attrs: &Attrs, ins: &[Spec<'_>], outs: &[Spec<'_>]) -> Result<(), String> {
    check_rule(op.signature().rule, ins, outs)?;
    let a = AttrView(attrs);
    match op {
        OpKind::Abs
        | OpKind::Add
        | OpKind::Cos
        | OpKind::Div
        | OpKind::Exp
        | OpKind::Gelu
        | OpKind::Log
        | OpKind::Max
        | OpKind::Min
        | OpKind::Mul
        | OpKind::Neg
        | OpKind::Pow
        | OpKind::Relu
        | OpKind::Rsqrt
        | OpKind::Sigmoid
        | OpKind::Silu
        | OpKind::Sin
        | OpKind::Sqrt
        | OpKind::Sub
        | OpKind::Tanh => Ok(()),
        OpKind::AvgPool2d | OpKind::MaxPool2d => {
            let (x, r) = (ins[0].0, outs[0].0);
            if x.rank() != 4 {
                return Err("pooling takes an NCHW tensor".into());
            }
            let window = pool_window(a.0)?;
            match x.static_dims() {
                Some(xd) => expect_window_output(&xd, xd[1], &window, r),
                None => Ok(()), // a `?` dimension: the emitter says it needs static ones
            }
        }
        OpKind::Conv2d => conv2d(&a, ins, outs[0].0),
        OpKind::CausalMask if ins[0].0.rank() < 2 => Err("a causal mask needs scores of rank >= 2 ([.., S, T])".into()),
        OpKind::CausalMask => Ok(()),
        OpKind::LayerNorm | OpKind::RmsNorm if ins[0].0.rank() == 0 => Err("normalisation needs rank >= 1".into()),
        OpKind::LayerNorm | OpKind::RmsNorm => Ok(()),
        OpKind::Rope => rope(&a, ins, outs[0]),
        OpKind::Sdpa => sdpa(&a, ins, outs[0]),
        OpKind::Concat => concat(&a, ins, outs[0]),
        OpKind::Argmax => argmax(&a, ins[0], outs[0]),
        OpKind::Broadcast => broadcast_rule(&a, ins, outs[0]),
        OpKind::Clamp => clamp(&a, ins, outs[0]),
        OpKind::Compare => compare(&a, ins, outs[0]),
        OpKind::Convert => {
            let ((s, _), (rs, _)) = (ins[0], outs[0]);
            expect_shape(s, rs, "the operand's shape is")
        }
        OpKind::After => {
            let ((s, d), (rs, rd)) = (ins[0], outs[0]);
            if d != rd {
                return Err(format!("the result is the first operand: its dtype {d}, not {rd}"));
            }
            expect_shape(s, rs, "the first operand's shape is")
        }
        OpKind::GateRows => gate_rows(&a, ins, outs[0]),
        OpKind::PadRows => pad_rows(&a, ins[0], outs[0]),
        OpKind::PlaceRows => place_rows(&a, ins, outs[0]),
        OpKind::DynamicSlice => dynamic_slice(&a, ins, outs[0]),
        OpKind::DynamicUpdateSlice => dynamic_update_slice(ins, outs[0]),
        OpKind::Gather => gather(&a, ins, outs[0]),
        OpKind::Iota => iota(&a, ins, outs[0]),
        OpKind::ReduceMax | OpKind::ReduceMean | OpKind::ReduceSum => reduce(&a, ins[0], outs[0]),
        OpKind::Matmul => {
            let (grouped, banded) = (a.bool("grouped", false)?, a.bool("banded", false)?);
            let ((a, _), (b, _), (r, _)) = (ins[0], ins[1], outs[0]);
            if banded {
                if grouped {
                    return Err("a matmul is banded or grouped, not both".into());
                }
                let want = banded_matmul(a, b)?;
                return if shapes_agree(&want, r) {
                    Ok(())
                } else {
                    Err(format!("[{a}] x bands [{b}] gives [{want}], but the node declares [{r}]"))
                };
            }
            // `[B.., M, K] x [B.., K, N, T]` only when asked for: NumPy would broadcast those ranks instead.
            let two_dim_columns = a.rank() >= 2 && b.rank() == a.rank() + 1;
            if grouped != two_dim_columns {
                return Err(if two_dim_columns {
                    format!(
                        "[{a}] x [{b}]: a right side of one more dim is read as [B.., K, N, T] (its columns in two \
                         dims) only with the attribute grouped = true; NumPy's broadcasting of those ranks is not \
                         supported: broadcast the left side to the right side's batch dims"
                    )
                } else {
                    format!(
                        "[{a}] x [{b}]: grouped = true needs [B.., M, K] x [B.., K, N, T] (a right side of one more dim)"
                    )
                });
            }
            let want = matmul(a, b)?;
            if shapes_agree(&want, r) {
                Ok(())
            } else {
                Err(format!("[{a}] x [{b}] gives [{want}], but the node declares [{r}]"))
            }
        }
        OpKind::Reshape => reshape(ins[0], outs[0]),
        OpKind::Select => select(ins, outs[0]),
        OpKind::Slice => slice(&a, ins[0], outs[0]),
        OpKind::Softmax => {
            a.axis("axis", a.int("axis", -1)?, ins[0].0.rank())?;
            same_dtype(ins[0], outs[0])?;
            expect_shape(ins[0].0, outs[0].0, "the operand's shape is")
        }
        OpKind::Transpose => transpose(&a, ins[0], outs[0]),
    }
}

/// A node's attributes, read with the messages every type rule uses.
pub(crate) struct AttrView<'a>(pub(crate) &'a Attrs);

impl AttrView<'_> {
    fn bad(name: &str, detail: impl std::fmt::Display) -> String {
        format!("attribute '{name}' {detail}")
    }

    /// An integer attribute, or `default` when absent.
    pub(crate) fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.0.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(other) => Err(Self::bad(name, format!("must be an integer, got {other:?}"))),
        }
    }

    /// A list of integers, if present.
    pub(crate) fn ints(&self, name: &str) -> Result<Option<&[i64]>, String> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v)),
            Some(other) => Err(Self::bad(name, format!("must be a list of integers, got {other:?}"))),
        }
    }

    /// A boolean attribute, or `default` when absent.
    pub(crate) fn bool(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.0.get(name) {
            None => Ok(default),
            Some(Attr::Bool(v)) => Ok(*v),
            Some(other) => Err(Self::bad(name, format!("must be true or false, got {other:?}"))),
        }
    }

    /// Checks that an attribute, when present, is a number (an integer literal counts).
    pub(crate) fn number(&self, name: &str) -> Result<(), String> {
        match self.0.get(name) {
            None | Some(Attr::Float(_) | Attr::Int(_)) => Ok(()),
            Some(other) => Err(Self::bad(name, format!("must be a number, got {other:?}"))),
        }
    }

    /// A possibly negative axis normalised for a tensor of `rank`.
    pub(crate) fn axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize, String> {
        let back = usize::try_from(axis.unsigned_abs()).ok();
        let a = if axis < 0 { back.and_then(|b| rank.checked_sub(b)) } else { back };
        a.filter(|&a| a < rank).ok_or_else(|| Self::bad(name, format!("{axis} is out of range for rank {rank}")))
    }

    /// A list of axes for a tensor of `rank` (`None` when absent).
    fn axes(&self, name: &str, rank: usize) -> Result<Option<Vec<usize>>, String> {
        self.ints(name)?.map(|v| v.iter().map(|&x| self.axis(name, x, rank)).collect()).transpose()
    }
}

fn same_dtype((_, d): Spec<'_>, (_, rd): Spec<'_>) -> Result<(), String> {
    if d == rd { Ok(()) } else { Err(format!("result dtype {rd} differs from operand dtype {d}")) }
}

/// The declared result shape `got` must agree with the inferred `want`; `how` says where `want` comes from
/// ("the operand's shape is", "reducing [2x3] over axes [1] gives").
fn expect_shape(want: &Shape, got: &Shape, how: &str) -> Result<(), String> {
    if shapes_agree(want, got) {
        Ok(())
    } else {
        Err(format!("the node declares the result shape [{got}], but {how} [{want}]"))
    }
}

fn broadcast_many(shapes: &[&Shape]) -> Result<Shape, String> {
    let mut target = shapes[0].clone();
    for s in &shapes[1..] {
        target =
            broadcast(&target, s).ok_or_else(|| format!("operand shapes [{target}] and [{s}] do not broadcast"))?;
    }
    Ok(target)
}

fn argmax(a: &AttrView<'_>, (s, d): Spec<'_>, (rs, rd): Spec<'_>) -> Result<(), String> {
    let axis = a.axis("axis", a.int("axis", -1)?, s.rank())?;
    if !matches!(rd, DType::I32 | DType::I64) {
        return Err(format!("the result must be i32 or i64, not {rd}"));
    }
    if !d.is_float() {
        return Err(format!("argmax takes a float tensor, not {d}; convert it first"));
    }
    let kept = Shape(s.0.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, d)| *d).collect());
    expect_shape(&kept, rs, &format!("taking axis {axis} out of [{s}] gives"))
}

fn broadcast_rule(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let x = ins[0];
    same_dtype(x, out)?;
    let (xs, rs) = (x.0, out.0);
    let rank = rs.rank();
    let dims = match a.axes("dims", rank)? {
        Some(dims) if dims.len() != xs.rank() => {
            return Err(AttrView::bad(
                "dims",
                format!("needs one entry per operand dimension ({}), got {}", xs.rank(), dims.len()),
            ));
        }
        Some(dims) => dims,
        None if xs.rank() > rank => return Err(format!("cannot broadcast [{xs}] to the lower rank [{rs}]")),
        None => (rank - xs.rank()..rank).collect(),
    };
    for (i, &d) in dims.iter().enumerate() {
        match (xs.0[i], rs.0[d]) {
            (Dim::Static(1) | Dim::Dynamic, _) | (_, Dim::Dynamic) => {}
            (Dim::Static(m), Dim::Static(n)) if m == n => {}
            (m, n) => {
                return Err(format!("dimension {i} of [{xs}] ({m}) cannot broadcast to dimension {d} of [{rs}] ({n})"));
            }
        }
    }
    match ins.get(1) {
        Some((like, _)) => expect_shape(like, rs, "the reference operand `like` has the shape"),
        None if rs.is_dynamic() => Err(format!(
            "the result [{rs}] has `?` dimensions, which a broadcast can only take from a reference tensor: give it \
             as a second operand (`like`; in Kotlin expand(x, like))"
        )),
        None => Ok(()),
    }
}

fn iota(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    if rd == DType::Bool {
        return Err("an iota counts in a number type, not bool".into());
    }
    let Some(&(like, _)) = ins.first() else {
        a.axis("dim", a.int("dim", 0)?, rs.rank())?;
        if rs.is_dynamic() {
            return Err(format!(
                "the result [{rs}] has a `?` length, which an iota can only take from a reference tensor: give it as \
                 the operand with attribute 'axis' (in Kotlin arange(like, axis))"
            ));
        }
        return Ok(());
    };
    let axis = a.axis("axis", a.int("axis", 0)?, like.rank())?;
    if rs.rank() != 1 {
        return Err(format!("an iota of a reference's dimension is 1-D, but the node declares [{rs}]"));
    }
    a.axis("dim", a.int("dim", 0)?, 1)?;
    expect_shape(&Shape(vec![like.0[axis]]), rs, &format!("dimension {axis} of the reference [{like}] gives"))
}

fn clamp(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let x = ins[0];
    if let [_, (lo_s, lo), (hi_s, hi)] = ins {
        if *lo != x.1 || *hi != x.1 {
            return Err(format!("the bounds ({lo}, {hi}) must have the operand's dtype {}", x.1));
        }
        same_dtype(x, out)?;
        return expect_shape(&broadcast_many(&[x.0, lo_s, hi_s])?, out.0, "the operand and its bounds broadcast to");
    }
    a.number("min")?;
    a.number("max")?;
    same_dtype(x, out)?;
    expect_shape(x.0, out.0, "the operand's shape is")
}

fn compare(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    match a.0.get("direction") {
        Some(Attr::Str(s)) if ["EQ", "NE", "LT", "LE", "GT", "GE"].contains(&s.as_str()) => {}
        _ => return Err(AttrView::bad("direction", "must be one of EQ, NE, LT, LE, GT, GE")),
    }
    let ((x, dx), (y, dy)) = (ins[0], ins[1]);
    if dx != dy {
        return Err(format!("operand dtypes {dx} and {dy} must be equal (insert a convert)"));
    }
    if rd != DType::Bool {
        return Err(format!("the result must be bool, not {rd}"));
    }
    expect_shape(&broadcast_many(&[x, y])?, rs, "the operands broadcast to")
}

fn concat(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, _): Spec<'_>) -> Result<(), String> {
    let first = ins[0].0;
    let axis = a.axis("axis", a.int("axis", 0)?, first.rank())?;
    let mut want = first.clone();
    let mut total = Some(0u64);
    for (i, (s, _)) in ins.iter().enumerate() {
        let others_agree = s.rank() == first.rank()
            && (0..s.rank())
                .filter(|&d| d != axis)
                .all(|d| shapes_agree(&Shape(vec![s.0[d]]), &Shape(vec![first.0[d]])));
        if !others_agree {
            return Err(format!("operand {i} [{s}] does not match operand 0 [{first}] outside axis {axis}"));
        }
        total = match (total, s.0[axis]) {
            (Some(t), Dim::Static(n)) => t.checked_add(n),
            _ => None,
        };
    }
    want.0[axis] = total.map_or(Dim::Dynamic, Dim::Static);
    expect_shape(&want, rs, "the concatenation's shape is")
}

/// Two dimensions that can be one extent (a `?` matches anything).
fn dims_agree(a: Dim, b: Dim) -> bool {
    matches!((a, b), (Dim::Dynamic, _) | (_, Dim::Dynamic)) || a == b
}

/// How many query heads share one key/value head in `sdpa`: the query head count (the dimension before S) must
/// be a multiple of the key/value one. 1 when they are equal (both `?` counts as equal).
///
/// # Errors
/// When the counts do not divide, or only one of them is `?` (the grouping must be known when the graph is made).
pub fn query_groups(q_heads: Dim, kv_heads: Dim) -> Result<u64, String> {
    match (q_heads, kv_heads) {
        (Dim::Dynamic, Dim::Dynamic) => Ok(1),
        (Dim::Static(h), Dim::Static(kv)) if kv > 0 && h % kv == 0 => Ok(h / kv),
        (Dim::Static(h), Dim::Static(kv)) => Err(format!(
            "q has {h} heads and k/v {kv}: grouped-query attention needs the query heads to be a multiple of the \
             key/value heads (the dimension before the sequence)"
        )),
        (h, kv) => Err(format!(
            "q has {} heads and k/v {}: with a `?` head count on one side only the grouping of query heads is \
             unknown; give both a static head count (or both the same `?`)",
            h, kv
        )),
    }
}

/// `sdpa`: q `[.., H, S, D]`, k `[.., KV, T, D]`, v `[.., KV, T, Dv]` (H a multiple of KV), an optional additive
/// mask broadcastable to the scores `[.., H, S, T]`; the result is `[.., H, S, Dv]`.
fn sdpa(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let (q, k, v) = (ins[0].0, ins[1].0, ins[2].0);
    let r = q.rank();
    if r < 2 || k.rank() != r || v.rank() != r {
        return Err(format!(
            "q, k and v must have one rank >= 2 ([.., S, D], [.., T, D], [.., T, Dv]), got [{q}], [{k}], [{v}]"
        ));
    }
    let causal = a.bool("causal", false)?;
    a.number("scale")?;
    let (qd, kd, vd) = (&q.0, &k.0, &v.0);
    if qd[r - 1] == Dim::Dynamic {
        return Err(format!(
            "q [{q}] has a `?` head dimension (the last): sdpa needs it static (it sets the default scale and the \
             product's shape); give the head size"
        ));
    }
    if let (true, Dim::Static(s), Dim::Static(t)) = (causal, qd[r - 2], kd[r - 2]) {
        if s > t {
            return Err(format!(
                "causal attention of {s} queries over {t} keys: causal is bottom-right aligned (query i sees keys \
                 j <= i + T - S), so the first {} queries would see no key; give at least as many keys as queries",
                s - t
            ));
        }
    }
    if !dims_agree(qd[r - 1], kd[r - 1]) {
        return Err(format!("q [{q}] and k [{k}] have different head dimensions (the last)"));
    }
    if !dims_agree(kd[r - 2], vd[r - 2]) {
        return Err(format!("k [{k}] and v [{v}] have different key lengths (dimension {})", r - 2));
    }
    if r >= 3 {
        if !dims_agree(kd[r - 3], vd[r - 3]) {
            return Err(format!("k [{k}] and v [{v}] have different head counts (dimension {})", r - 3));
        }
        query_groups(qd[r - 3], kd[r - 3])?;
        for i in 0..r - 3 {
            if !dims_agree(qd[i], kd[i]) || !dims_agree(qd[i], vd[i]) {
                return Err(format!("q [{q}], k [{k}] and v [{v}] differ in dimension {i}"));
            }
        }
    }
    let mut scores = q.clone();
    scores.0[r - 1] = kd[r - 2];
    if let Some((m, _)) = ins.get(3) {
        let fits = m.rank() <= r && broadcast(m, &scores).is_some_and(|b| shapes_agree(&b, &scores));
        if !fits {
            return Err(format!(
                "the mask [{m}] does not broadcast to the attention scores [{scores}] ([.., H, S, T])"
            ));
        }
    }
    let mut want = q.clone();
    want.0[r - 1] = vd[r - 1];
    same_dtype(ins[0], out)?;
    expect_shape(&want, out.0, "q and v give")
}

/// The width a `rope` table may have for an `x` of last dimension `d`: `d` (full tables), `d / 2` (half tables,
/// one angle per pair) or 1 (one angle for every pair).
///
/// # Errors
/// A `?` or odd `d`, or any other table width, described.
pub fn rope_table_width(d: Dim, width: Dim) -> Result<RopeTable, String> {
    let Dim::Static(d) = d else {
        return Err("rope needs a static last dimension (the rotated head dimension)".into());
    };
    if d % 2 != 0 {
        return Err(format!("rope needs an even last dimension, got {d}"));
    }
    match width {
        Dim::Static(w) if w == d => Ok(RopeTable::Full),
        Dim::Static(w) if w == d / 2 => Ok(RopeTable::Half),
        Dim::Static(1) => Ok(RopeTable::Full),
        w => Err(format!(
            "a cos/sin table of width {} for a head dimension of {d}: the width must be {d} (full tables) or {} \
             (half tables, one angle per pair)",
            w,
            d / 2
        )),
    }
}

/// Which form of cos/sin table `rope` was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeTable {
    /// As wide as x (or 1, one angle for all): `x·cos + rotate(x)·sin`.
    Full,
    /// Half as wide: one angle per rotated pair.
    Half,
}

/// `rope`: x `[.., S, D]` (D even and static), cos and sin of one shape `[.., S, D]` or `[.., S, D/2]`
/// broadcastable to x; the result has x's shape.
fn rope(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let ((x, _), (c, _), (s, _)) = (ins[0], ins[1], ins[2]);
    a.bool("interleaved", false)?;
    let Some(&d) = x.0.last() else {
        return Err("rope needs a tensor of rank >= 1".into());
    };
    if c != s {
        return Err(format!("cos [{c}] and sin [{s}] must have one shape"));
    }
    let Some(&w) = c.0.last() else {
        return Err(format!("cos and sin must be tables [.., S, D] or [.., S, D/2], got [{c}]"));
    };
    let table = rope_table_width(d, w)?;
    let mut like = x.clone();
    if table == RopeTable::Half {
        if let Some(last) = like.0.last_mut() {
            *last = w;
        }
    }
    let fits = c.rank() <= x.rank() && broadcast(c, &like).is_some_and(|b| shapes_agree(&b, &like));
    if !fits {
        return Err(format!("the cos/sin tables [{c}] do not broadcast to [{like}] (x is [{x}])"));
    }
    expect_shape(x, out.0, "x's shape is")
}

/// A 2-D window over an NCHW tensor (pooling, convolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Kernel height and width.
    pub kernel: [u64; 2],
    /// Stride along height and width.
    pub stride: [u64; 2],
    /// Dilation along height and width.
    pub dilation: [u64; 2],
    /// Padding: top, bottom, left, right.
    pub pad: [u64; 4],
}

fn window_attr(a: &AttrView<'_>, name: &str, default: [u64; 2]) -> Result<[u64; 2], String> {
    match a.ints(name)? {
        None => Ok(default),
        Some([x, y]) => match (u64::try_from(*x), u64::try_from(*y)) {
            (Ok(x), Ok(y)) => Ok([x, y]),
            _ => Err(AttrView::bad(name, "must not be negative")),
        },
        Some(_) => Err(AttrView::bad(name, "needs two entries (height, width)")),
    }
}

/// `[top, bottom, left, right]` from `padding` given as 2 or 4 entries.
fn padding(a: &AttrView<'_>) -> Result<[u64; 4], String> {
    let Some(v) = a.ints("padding")? else { return Ok([0; 4]) };
    let v: Vec<u64> = v
        .iter()
        .map(|&p| u64::try_from(p))
        .collect::<Result<_, _>>()
        .map_err(|_| AttrView::bad("padding", "must not be negative"))?;
    match v.as_slice() {
        [h, w] => Ok([*h, *h, *w, *w]),
        [t, b, l, r] => Ok([*t, *b, *l, *r]),
        _ => Err(AttrView::bad("padding", "needs 2 (h, w) or 4 (top, bottom, left, right) entries")),
    }
}

/// The window of a pooling node's attributes: `kernel` (2x2 by default), `stride` (the kernel by default),
/// `padding` (none by default).
///
/// # Errors
/// A malformed attribute, described as `attribute 'name' …`.
pub fn pool_window(attrs: &Attrs) -> Result<Window, String> {
    let a = AttrView(attrs);
    let kernel = window_attr(&a, "kernel", [2, 2])?;
    let stride = window_attr(&a, "stride", kernel)?;
    Ok(Window { kernel, stride, dilation: [1, 1], pad: padding(&a)? })
}

/// The window of a convolution node's attributes (`stride`, `dilation`, `padding`) with the weight's
/// `kernel` (its `[KH, KW]`).
///
/// # Errors
/// A malformed attribute, described as `attribute 'name' …`.
pub fn conv2d_window(attrs: &Attrs, kernel: [u64; 2]) -> Result<Window, String> {
    let a = AttrView(attrs);
    let stride = window_attr(&a, "stride", [1, 1])?;
    let dilation = window_attr(&a, "dilation", [1, 1])?;
    Ok(Window { kernel, stride, dilation, pad: padding(&a)? })
}

/// The `[N, channels, H', W']` result of `w` over an `[N, C, H, W]` input.
///
/// # Errors
/// When the window does not fit the padded input (or its stride is 0).
pub fn window_output(x: &[u64], channels: u64, w: &Window) -> Result<Shape, String> {
    let mut want = vec![x[0], channels];
    for i in 0..2 {
        let span = w.dilation[i].saturating_mul(w.kernel[i].saturating_sub(1)) + 1;
        let padded = x[2 + i] + w.pad[2 * i] + w.pad[2 * i + 1];
        if w.stride[i] == 0 || padded < span {
            return Err(format!("the {}x{} window does not fit the padded input", w.kernel[0], w.kernel[1]));
        }
        want.push((padded - span) / w.stride[i] + 1);
    }
    Ok(Shape::of(&want))
}

fn expect_window_output(x: &[u64], channels: u64, w: &Window, out: &Shape) -> Result<(), String> {
    let want = window_output(x, channels, w)?;
    if &want == out { Ok(()) } else { Err(format!("the result shape is [{want}] but the node declares [{out}]")) }
}

fn conv2d(a: &AttrView<'_>, ins: &[Spec<'_>], out: &Shape) -> Result<(), String> {
    let (x, w) = (ins[0].0, ins[1].0);
    if x.rank() != 4 || w.rank() != 4 {
        return Err("input and weight must be rank 4 (NCHW, OIHW)".into());
    }
    let (Some(xd), Some(wd)) = (x.static_dims(), w.static_dims()) else {
        return Ok(()); // a `?` dimension: the emitter says it needs static ones
    };
    let window = conv2d_window(a.0, [wd[2], wd[3]])?;
    let groups = a.int("groups", 1)?;
    let g = u64::try_from(groups).ok().filter(|&g| g > 0 && xd[1] % g == 0 && wd[0] % g == 0 && wd[1] * g == xd[1]);
    if g.is_none() {
        return Err(AttrView::bad(
            "groups",
            format!("{groups} does not fit {} input channels and a [{w}] weight", xd[1]),
        ));
    }
    expect_window_output(&xd, wd[0], &window, out)
}

fn offsets(offsets: &[Spec<'_>]) -> Result<(), String> {
    let first = offsets.first().map(|o| o.1);
    for (i, (s, d)) in offsets.iter().enumerate() {
        if s.rank() != 0 || !matches!(d, DType::I32 | DType::I64) || Some(*d) != first {
            return Err(format!("offset {i} must be an i32 or i64 scalar like the others, got [{s}] {d}"));
        }
    }
    Ok(())
}

fn dynamic_slice(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let (x, offs) = (ins[0], &ins[1..]);
    if offs.len() != x.0.rank() {
        return Err(format!(
            "takes the tensor and one offset per dimension ({}), got {} offsets",
            x.0.rank(),
            offs.len()
        ));
    }
    let sizes = a.ints("sizes")?.ok_or_else(|| AttrView::bad("sizes", "is required"))?;
    if sizes.len() != x.0.rank() {
        return Err(AttrView::bad("sizes", format!("needs one entry per dimension ({})", x.0.rank())));
    }
    let mut shape = Vec::with_capacity(sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let fits = |&n: &u64| match x.0.0[i] {
            Dim::Static(d) => n <= d,
            Dim::Dynamic => true,
        };
        let size = u64::try_from(n).ok().filter(fits);
        shape.push(size.ok_or_else(|| AttrView::bad("sizes", format!("dimension {i}: {n} does not fit [{}]", x.0)))?);
    }
    offsets(offs)?;
    same_dtype(x, out)?;
    expect_shape(&Shape::of(&shape), out.0, "the `sizes` attribute gives")
}

fn dynamic_update_slice(ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let ((x, dx), (u, du), offs) = (ins[0], ins[1], &ins[2..]);
    if offs.len() != x.rank() || u.rank() != x.rank() {
        return Err(format!(
            "takes the tensor, an update of its rank ({}) and one offset per dimension, got an update of rank {} and              {} offsets",
            x.rank(),
            u.rank(),
            offs.len()
        ));
    }
    if du != dx {
        return Err(format!("the update is {du}, the tensor {dx}"));
    }
    for i in 0..x.rank() {
        if let (Dim::Static(a), Dim::Static(b)) = (u.0[i], x.0[i]) {
            if a > b {
                return Err(format!("the update [{u}] does not fit the tensor [{x}] (dimension {i})"));
            }
        }
    }
    offsets(offs)?;
    same_dtype(ins[0], out)?;
    expect_shape(x, out.0, "the updated tensor's shape is")
}

fn gather(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    let ((table, dt), (idx, _)) = (ins[0], ins[1]);
    let axis = a.axis("axis", a.int("axis", 0)?, table.rank())?;
    if rd != dt {
        return Err(format!("result dtype {rd} differs from the table's dtype {dt}"));
    }
    let want = Shape(table.0[..axis].iter().chain(&idx.0).chain(&table.0[axis + 1..]).copied().collect());
    if shapes_agree(&want, rs) {
        Ok(())
    } else {
        Err(format!("gathering [{idx}] from [{table}] along axis {axis} gives [{want}], but the node declares [{rs}]"))
    }
}

fn reduce(a: &AttrView<'_>, x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    let s = x.0;
    let axes = a.axes("axes", s.rank())?.unwrap_or_else(|| (0..s.rank()).collect());
    let keep = a.bool("keepdims", false)?;
    same_dtype(x, out)?;
    let want = Shape(
        s.0.iter()
            .enumerate()
            .filter_map(|(i, d)| match (axes.contains(&i), keep) {
                (false, _) => Some(*d),
                (true, true) => Some(Dim::Static(1)),
                (true, false) => None,
            })
            .collect(),
    );
    expect_shape(&want, out.0, &format!("reducing [{s}] over axes {axes:?} gives"))
}

fn reshape(x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    same_dtype(x, out)?;
    match (x.0.element_count(), out.0.element_count()) {
        (Some(a), Some(b)) if a != b => {
            Err(format!("cannot reshape [{}] to [{}]: the element counts differ", x.0, out.0))
        }
        _ => Ok(()),
    }
}

fn select(ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    let ((p, dp), (x, dx), (y, dy)) = (ins[0], ins[1], ins[2]);
    if dp != DType::Bool {
        return Err(format!("the predicate must be bool (i1), got {dp}"));
    }
    if dx != dy || dx != rd {
        return Err(format!("the two choices ({dx}, {dy}) and the result ({rd}) must share one dtype"));
    }
    expect_shape(&broadcast_many(&[p, x, y])?, rs, "the operands broadcast to")
}

/// The `rows` attribute of the row-count ops ([`OpKind::PadRows`], [`OpKind::GateRows`], [`OpKind::PlaceRows`]):
/// required, at least 1.
fn rows_attr(a: &AttrView<'_>) -> Result<u64, String> {
    if !a.0.contains_key("rows") {
        return Err(AttrView::bad("rows", "is required"));
    }
    u64::try_from(a.int("rows", 0)?).ok().filter(|&r| r >= 1).ok_or_else(|| AttrView::bad("rows", "must be at least 1"))
}

fn pad_rows(a: &AttrView<'_>, (x, _): Spec<'_>, (r, _): Spec<'_>) -> Result<(), String> {
    let rows = rows_attr(a)?;
    let Some(k) = x.0.last().filter(|_| x.rank() >= 2) else {
        return Err(format!("pad_rows takes [L.., K] (rank >= 2), not [{x}]"));
    };
    if *r != Shape(vec![Dim::Static(rows), *k]) {
        return Err(format!("padding [{x}] to {rows} rows gives [{rows}, {k}], but the node declares [{r}]"));
    }
    Ok(())
}

fn gate_rows(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    rows_attr(a)?;
    a.bool("few", true)?;
    let ((t, _), (like, _)) = (ins[0], ins[1]);
    if like.rank() < 2 {
        return Err(format!("like [{like}] must be [L.., K] (rank >= 2): its rows are its leading dimensions"));
    }
    let axis = a.axis("axis", a.int("axis", 0)?, t.rank())?;
    same_dtype(ins[0], out)?;
    let mut want = t.clone();
    want.0[axis] = Dim::Dynamic;
    if *out.0 != want {
        return Err(format!("gating [{t}] along axis {axis} gives [{want}], but the node declares [{}]", out.0));
    }
    Ok(())
}

fn place_rows(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let rows = rows_attr(a)?;
    let ((small, sd), (base, bd)) = (ins[0], ins[1]);
    if sd != bd {
        return Err(format!("small ({sd}) and base ({bd}) must have one dtype"));
    }
    same_dtype(ins[1], out)?;
    if small.rank() != 2 || small.0[0] != Dim::Static(rows) {
        return Err(format!("small must be [{rows}, C] (rows, columns), not [{small}]"));
    }
    if base.rank() < 2 {
        return Err(format!("base [{base}] must be [L.., N] (rank >= 2)"));
    }
    if out.0 != base {
        return Err(format!("the result is base's shape [{base}], but the node declares [{}]", out.0));
    }
    Ok(())
}

fn slice(a: &AttrView<'_>, x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    let s = x.0;
    let rank = s.rank();
    let start = a.ints("start")?.ok_or_else(|| AttrView::bad("start", "is required"))?;
    let limit = a.ints("limit")?.ok_or_else(|| AttrView::bad("limit", "is required"))?;
    let ones = vec![1; rank];
    let stride = a.ints("stride")?.unwrap_or(&ones);
    if start.len() != rank || limit.len() != rank || stride.len() != rank {
        return Err(AttrView::bad("start", format!("start, limit and stride need one entry per dimension ({rank})")));
    }
    let mut want = Vec::with_capacity(rank);
    for i in 0..rank {
        let (st, li, sd) = (start[i], limit[i], stride[i]);
        let dim = match s.0[i] {
            // A `?` dimension is sliced to the end (limit -1) from a static start with a static stride: the
            // result is `?` (the run-time size must be at least the start).
            Dim::Dynamic if st >= 0 && li == -1 && sd > 0 => Dim::Dynamic,
            Dim::Dynamic => {
                return Err(AttrView::bad(
                    "start",
                    format!(
                        "dimension {i} is `?`: it can only be sliced to the end (limit -1, a start >= 0 and a stride \
                         > 0), not [{st}:{li}:{sd}]; for a window of static size at a run-time offset use dynamic_slice"
                    ),
                ));
            }
            Dim::Static(d) => {
                let l = if li == -1 { Ok(d) } else { u64::try_from(li) };
                match (u64::try_from(st), l, u64::try_from(sd)) {
                    (Ok(b), Ok(e), Ok(k)) if b <= e && e <= d && k > 0 => Dim::Static((e - b).div_ceil(k)),
                    _ => {
                        return Err(AttrView::bad(
                            "start",
                            format!("dimension {i}: [{st}:{li}:{sd}] does not fit size {d}"),
                        ));
                    }
                }
            }
        };
        want.push(dim);
    }
    same_dtype(x, out)?;
    expect_shape(&Shape(want), out.0, "the slice bounds give")
}

fn transpose(a: &AttrView<'_>, x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    let r = x.0.rank();
    let perm = a.axes("perm", r)?.unwrap_or_else(|| (0..r).rev().collect());
    let mut sorted = perm.clone();
    sorted.sort_unstable();
    if sorted != (0..r).collect::<Vec<_>>() {
        return Err(AttrView::bad("perm", format!("{perm:?} is not a permutation of 0..{r}")));
    }
    same_dtype(x, out)?;
    let want = Shape(perm.iter().map(|&p| x.0.0[p]).collect());
    expect_shape(&want, out.0, &format!("permuting [{}] by {perm:?} gives", x.0))
}

/// Checks operands and results against a family rule. Returns a description of the first problem.
fn check_rule(rule: Rule, ins: &[Spec<'_>], outs: &[Spec<'_>]) -> Result<(), String> {
    match rule {
        Rule::Own => Ok(()),
        Rule::ElementwiseUnaryDType => {
            let ((_, d), (_, rd)) = (ins[0], outs[0]);
            if d == rd { Ok(()) } else { Err(format!("result dtype {rd} differs from operand dtype {d}")) }
        }
        Rule::SameDType => {
            let mut all = ins.iter().chain(outs);
            let Some(&(_, first)) = all.next() else { return Ok(()) };
            match all.find(|(_, d)| *d != first) {
                Some((_, other)) => {
                    Err(format!("operands and results must share one dtype, found {first} and {other}"))
                }
                None => Ok(()),
            }
        }
        Rule::ElementwiseUnary => {
            let ((s, d), (rs, rd)) = (ins[0], outs[0]);
            if d != rd {
                return Err(format!("result dtype {rd} differs from operand dtype {d}"));
            }
            if !shapes_agree(s, rs) {
                return Err(format!("result shape [{rs}] differs from operand shape [{s}]"));
            }
            Ok(())
        }
        Rule::ElementwiseBinary => {
            let ((a, da), (b, db), (r, dr)) = (ins[0], ins[1], outs[0]);
            if da != db || da != dr {
                return Err(format!(
                    "operand dtypes {da} and {db} and result dtype {dr} must be equal (insert a convert)"
                ));
            }
            let Some(want) = broadcast(a, b) else {
                return Err(format!("operand shapes [{a}] and [{b}] do not broadcast"));
            };
            if !shapes_agree(&want, r) {
                return Err(format!("result shape [{r}] is not the broadcast shape [{want}] of [{a}] and [{b}]"));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(known_op_names().starts_with("abs, add, argmax, avg_pool2d"), "after is no op a graph records");
        let pass_only: Vec<&str> = OpKind::ALL.iter().filter(|o| o.inserted_by_passes()).map(|o| o.name()).collect();
        assert_eq!(pass_only, ["after", "gate_rows", "pad_rows", "place_rows"]);
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
        let two = Shape(vec![Dim::Dynamic, Dim::Dynamic, Dim::Static(4)]);
        assert!(banded_matmul(&two, &s(&[3, 4, 2])).unwrap_err().contains("at most one `?`"));
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
        assert!(
            ok(&[1, 2, 4, 8], &[1, 2, 4, 6], &[1, 2, 4, 8], &[1, 2, 4, 8]).unwrap_err().contains("head dimensions")
        );
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
        let e =
            check_types(OpKind::Sdpa, &Attrs::new(), &[(&dynamic, F32), (&kv, F32), (&kv, F32)], &[(&dynamic, F32)]);
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
            rope(&[2, 5, 8], &[5, 8], &[("interleaved", Attr::Int(1))])
                .unwrap_err()
                .contains("attribute 'interleaved'")
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
}
