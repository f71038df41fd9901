//! The op table ([`OpKind`]): every op's name and signature (arity, and dtype/shape rules for the
//! elementwise families; ops with a `Free` rule have their types checked by the emitter).

use crate::dtype::DType;
use crate::shape::{Dim, Shape};

/// How many operands or results an op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// Exactly n.
    Exactly(usize),
    /// n or more.
    AtLeast(usize),
    /// Between lo and hi inclusive.
    Between(usize, usize),
}

impl Arity {
    /// True when `n` fits.
    #[must_use]
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Between(lo, hi) => (lo..=hi).contains(&n),
        }
    }
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
            Arity::Between(lo, hi) => write!(f, "{lo} to {hi}"),
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
    /// Nothing checked here.
    Free,
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
                use Arity::{AtLeast, Between, Exactly};
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
    /// Index of the largest element along `axis` (the first one on ties), an integer result.
    Argmax = "argmax": Exactly(1), Exactly(1), Free;
    /// 2-D average pooling (NCHW).
    AvgPool2d = "avg_pool2d": Exactly(1), Exactly(1), ElementwiseUnaryDType;
    /// Broadcast to the result shape (`dims` maps operand dimensions).
    Broadcast = "broadcast": Exactly(1), Exactly(1), Free;
    /// Mask the scores above the diagonal with -inf.
    CausalMask = "causal_mask": Exactly(1), Exactly(1), ElementwiseUnaryDType;
    /// `min(max(x, lo), hi)`.
    Clamp = "clamp": Between(1, 3), Exactly(1), Free;
    /// Elementwise comparison (`direction`), a bool result.
    Compare = "compare": Exactly(2), Exactly(1), Free;
    /// Concatenation along `axis`.
    Concat = "concat": AtLeast(1), Exactly(1), SameDType;
    /// 2-D convolution (NCHW input, OIHW weight, optional bias).
    Conv2d = "conv2d": Between(2, 3), Exactly(1), SameDType;
    /// Element type conversion.
    Convert = "convert": Exactly(1), Exactly(1), Free;
    /// `cos x`.
    Cos = "cos": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `a / b`, broadcast.
    Div = "div": Exactly(2), Exactly(1), ElementwiseBinary;
    /// A window of static `sizes` at run-time offsets (one integer scalar per dimension), clamped into range.
    DynamicSlice = "dynamic_slice": AtLeast(2), Exactly(1), Free;
    /// `x` with `update` written at run-time offsets (one integer scalar per dimension), clamped into range.
    DynamicUpdateSlice = "dynamic_update_slice": AtLeast(3), Exactly(1), Free;
    /// `e^x`.
    Exp = "exp": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Rows of a table by index along `axis`.
    Gather = "gather": Exactly(2), Exactly(1), Free;
    /// GELU (tanh approximation).
    Gelu = "gelu": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Indices along `dim`.
    Iota = "iota": Exactly(0), Exactly(1), Free;
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
    /// `a ^ b`, broadcast.
    Pow = "pow": Exactly(2), Exactly(1), ElementwiseBinary;
    /// Maximum over `axes`.
    ReduceMax = "reduce_max": Exactly(1), Exactly(1), Free;
    /// Mean over `axes`.
    ReduceMean = "reduce_mean": Exactly(1), Exactly(1), Free;
    /// Sum over `axes`.
    ReduceSum = "reduce_sum": Exactly(1), Exactly(1), Free;
    /// `max(x, 0)`.
    Relu = "relu": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Same elements, another shape.
    Reshape = "reshape": Exactly(1), Exactly(1), Free;
    /// RMS normalization over the last axis (optional gamma).
    RmsNorm = "rms_norm": Between(1, 3), Exactly(1), SameDType;
    /// Rotary position embedding (x, cos, sin).
    Rope = "rope": Exactly(3), Exactly(1), SameDType;
    /// `1 / sqrt x`.
    Rsqrt = "rsqrt": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Scaled dot-product attention (q, k, v, optional mask).
    Sdpa = "sdpa": Between(3, 4), Exactly(1), SameDType;
    /// `pred ? a : b`.
    Select = "select": Exactly(3), Exactly(1), Free;
    /// `1 / (1 + e^-x)`.
    Sigmoid = "sigmoid": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `x · sigmoid(x)`.
    Silu = "silu": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `sin x`.
    Sin = "sin": Exactly(1), Exactly(1), ElementwiseUnary;
    /// A strided static slice.
    Slice = "slice": Exactly(1), Exactly(1), Free;
    /// Softmax along `axis`.
    Softmax = "softmax": Exactly(1), Exactly(1), Free;
    /// `sqrt x`.
    Sqrt = "sqrt": Exactly(1), Exactly(1), ElementwiseUnary;
    /// `a - b`, broadcast.
    Sub = "sub": Exactly(2), Exactly(1), ElementwiseBinary;
    /// `tanh x`.
    Tanh = "tanh": Exactly(1), Exactly(1), ElementwiseUnary;
    /// Permutation of the dimensions (`perm`, reversed by default).
    Transpose = "transpose": Exactly(1), Exactly(1), Free;
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of every op, comma-separated (for "unknown op" messages).
#[must_use]
pub fn known_op_names() -> String {
    OpKind::ALL.iter().map(|o| o.name()).collect::<Vec<_>>().join(", ")
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

/// True when two shapes can describe the same tensor (a dynamic dim matches any extent).
#[must_use]
pub fn shapes_agree(a: &Shape, b: &Shape) -> bool {
    a.rank() == b.rank()
        && a.0.iter().zip(&b.0).all(|(x, y)| matches!((x, y), (Dim::Dynamic, _) | (_, Dim::Dynamic)) || x == y)
}

/// Checks one node against its rule. Returns a description of the first problem.
pub(crate) fn check_types(rule: Rule, ins: &[(&Shape, DType)], outs: &[(&Shape, DType)]) -> Result<(), String> {
    match rule {
        Rule::Free => Ok(()),
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
        assert!(known_op_names().starts_with("abs, add, argmax, avg_pool2d"));
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
    fn binary_rule_reports_the_problem() {
        let (a, b) = (Shape::of(&[2, 3]), Shape::of(&[4]));
        let err = check_types(Rule::ElementwiseBinary, &[(&a, DType::F32), (&b, DType::F32)], &[(&a, DType::F32)]);
        assert!(err.unwrap_err().contains("do not broadcast"));
        let err = check_types(Rule::ElementwiseBinary, &[(&a, DType::F32), (&a, DType::I32)], &[(&a, DType::F32)]);
        assert!(err.unwrap_err().contains("insert a convert"));
    }
}
