//! What the graph layer knows about op signatures: arity, and dtype/shape rules for the
//! elementwise families. Ops not listed here are checked by the emitter.

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

/// The signature of `op`, when the graph layer knows it.
#[must_use]
pub fn signature(op: &str) -> Option<Signature> {
    use Arity::{AtLeast, Between, Exactly};
    let sig = |inputs, outputs, rule| Some(Signature { inputs, outputs, rule });
    match op {
        "add" | "sub" | "mul" | "div" | "pow" | "max" | "min" => sig(Exactly(2), Exactly(1), Rule::ElementwiseBinary),
        "neg" | "abs" | "exp" | "log" | "sqrt" | "rsqrt" | "tanh" | "sigmoid" | "relu" | "gelu" | "silu" | "sin"
        | "cos" => sig(Exactly(1), Exactly(1), Rule::ElementwiseUnary),
        "matmul" => sig(Exactly(2), Exactly(1), Rule::SameDType),
        "convert" | "reshape" | "transpose" | "broadcast" | "slice" | "reduce_sum" | "reduce_mean" | "reduce_max"
        | "softmax" => sig(Exactly(1), Exactly(1), Rule::Free),
        "concat" => sig(AtLeast(1), Exactly(1), Rule::SameDType),
        "gather" | "compare" => sig(Exactly(2), Exactly(1), Rule::Free),
        "select" => sig(Exactly(3), Exactly(1), Rule::Free),
        "clamp" => sig(Between(1, 3), Exactly(1), Rule::Free),
        "layer_norm" | "rms_norm" => sig(Between(1, 3), Exactly(1), Rule::SameDType),
        "conv2d" => sig(Between(2, 3), Exactly(1), Rule::SameDType),
        "max_pool2d" | "avg_pool2d" | "causal_mask" => sig(Exactly(1), Exactly(1), Rule::ElementwiseUnaryDType),
        "rope" => sig(Exactly(3), Exactly(1), Rule::SameDType),
        "iota" => sig(Exactly(0), Exactly(1), Rule::Free),
        "sdpa" => sig(Between(3, 4), Exactly(1), Rule::SameDType),
        _ => None,
    }
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
