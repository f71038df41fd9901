//! The emitter's state, its SSA values, and the StableHLO primitives every lowering builds on, by concern:
//! conversions and IREE 3.13's ordering forms (`values`), broadcasting (`broadcast`), shapes (`shapes`), reductions
//! (`reduce`), products (`contract`) and products over row bands (`bands`).

use std::collections::{HashMap, HashSet};

use tapeout_graph::{Attr, Attrs, ComputeGraph, DType, Op as Node, Shape, TensorId};

use super::{TextOut, spill};

mod bands;
mod broadcast;
mod contract;
mod reduce;
mod shapes;
mod values;
mod words;
use crate::error::{HloError, Result};

/// An SSA value with its type.
#[derive(Debug, Clone)]
pub(crate) struct Val {
    pub(crate) name: String,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
}

/// The signless integer of an unsigned one's width (`ui8` -> `i8`), `None` for every other dtype. `arith` ops and
/// IREE 3.13's `util.global` of a parameter take signless integers only; StableHLO ops take either.
pub(crate) const fn signless(dtype: DType) -> Option<DType> {
    match dtype {
        DType::U8 => Some(DType::I8),
        DType::U16 => Some(DType::I16),
        DType::U32 => Some(DType::I32),
        DType::U64 => Some(DType::I64),
        _ => None,
    }
}

pub(crate) fn ty(shape: &Shape, dtype: DType) -> String {
    shape.mlir_type(dtype)
}

impl Val {
    pub(crate) fn ty(&self) -> String {
        ty(&self.shape, self.dtype)
    }
    pub(crate) fn rank(&self) -> usize {
        self.shape.rank()
    }
}

/// `: a, b` for `array<i64: a, b>`; empty for an empty array (`array<i64>`).
pub(super) fn i64_array(v: &[usize]) -> String {
    if v.is_empty() { String::new() } else { format!(": {}", list(v)) }
}

pub(crate) fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items.into_iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// One element of `dtype` holding `value`, as the text inside `dense<…>`.
pub(crate) fn scalar_literal(value: f64, dtype: DType) -> String {
    #[allow(clippy::cast_possible_truncation)] // narrowing a literal to the tensor's own dtype is the point
    match dtype {
        DType::F32 => format!("0x{:08X}", (value as f32).to_bits()),
        DType::F64 => format!("0x{:016X}", value.to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(value).to_bits()),
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(value).to_bits()),
        DType::Bool => (if value != 0.0 { "true" } else { "false" }).to_string(),
        _ => format!("{}", value as i64),
    }
}

pub(crate) struct Emitter<'g, 'a, 'w> {
    pub(crate) g: &'g ComputeGraph<'a>,
    /// Pending text, written to `out` in pieces of about `SPILL_BYTES`.
    pub(crate) body: String,
    pub(crate) out: &'w mut dyn TextOut,
    pub(crate) next: usize,
    pub(crate) vals: HashMap<TensorId, Val>,
    /// Tensors computed from a narrower element type by ops IREE 3.13 counts as a "bit extend" (a widening
    /// convert, then only arithmetic and reshaping): see [`Emitter::unfused`].
    pub(crate) widened: HashSet<TensorId>,
    pub(crate) node: Option<&'g Node>,
    /// For CUDA and ROCm, the last `reduce_window` init value written, per dtype and kind (max or sum): the next is it behind a barrier
    /// ([`Emitter::pool`]).
    pub(crate) pool_inits: HashMap<(DType, bool), Val>,
}

impl<'g, 'a> Emitter<'g, 'a, '_> {
    pub(crate) fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%v{}", self.next - 1)
    }

    pub(crate) fn line(&mut self, text: &str) {
        self.body.push_str("    ");
        self.body.push_str(text);
        self.body.push('\n');
    }

    /// Writes the pending text out when enough has accumulated (or always, with `force`).
    pub(crate) fn spill(&mut self, force: bool) -> Result<()> {
        spill(&mut self.body, &mut *self.out, force)
    }

    /// `%v = <rhs>` returning the new value.
    pub(crate) fn assign(&mut self, rhs: &str, shape: Shape, dtype: DType) -> Val {
        let name = self.fresh();
        self.line(&format!("{name} = {rhs}"));
        Val { name, shape, dtype }
    }

    /// The node being lowered, as messages name it, and its op.
    fn current(&self) -> (String, &'static str) {
        self.node.map_or_else(|| ("the module".to_owned(), ""), |n| (self.g.describe(n), n.op.name()))
    }

    pub(crate) fn err(&self, detail: impl Into<String>) -> HloError {
        let (node, op) = self.current();
        HloError::Unsupported { node, op, detail: detail.into() }
    }

    pub(crate) fn attr_err(&self, attr: &str, detail: impl Into<String>) -> HloError {
        let (node, op) = self.current();
        HloError::BadAttribute { node, op, attr: attr.into(), detail: detail.into() }
    }

    /// The attributes of the node being lowered.
    pub(crate) fn node_attrs(&self) -> &'g Attrs {
        static NONE: Attrs = Attrs::new();
        self.node.map_or(&NONE, |n| &n.attrs)
    }

    pub(crate) fn attr(&self, name: &str) -> Option<&'g Attr> {
        self.node.and_then(|n| n.attrs.get(name))
    }

    pub(crate) fn attr_int(&self, name: &str, default: i64) -> Result<i64> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(other) => Err(self.attr_err(name, format!("must be an integer, got {other:?}"))),
        }
    }

    pub(crate) fn attr_f64(&self, name: &str, default: f64) -> Result<f64> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            #[allow(clippy::cast_precision_loss)] // an integer literal for a float attribute
            Some(Attr::Int(v)) => Ok(*v as f64),
            Some(other) => Err(self.attr_err(name, format!("must be a number, got {other:?}"))),
        }
    }

    pub(crate) fn attr_bool(&self, name: &str, default: bool) -> Result<bool> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Bool(v)) => Ok(*v),
            Some(other) => Err(self.attr_err(name, format!("must be true or false, got {other:?}"))),
        }
    }

    pub(crate) fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.attr_err(name, format!("must be a list of integers, got {other:?}"))),
        }
    }

    /// Normalises a possibly negative axis for a tensor of `rank`.
    pub(crate) fn axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize> {
        let back = usize::try_from(axis.unsigned_abs()).ok();
        let a = if axis < 0 { back.and_then(|b| rank.checked_sub(b)) } else { back };
        a.filter(|&a| a < rank).ok_or_else(|| self.attr_err(name, format!("{axis} is out of range for rank {rank}")))
    }

    pub(crate) fn static_dims(&self, v: &Val) -> Result<Vec<u64>> {
        v.shape.static_dims().ok_or_else(|| {
            self.err(format!(
                "needs a static shape, got [{}]: this op has no `?` lowering; give its input static sizes (a \
                 `?` dimension cannot reach it)",
                v.shape
            ))
        })
    }

    // --- primitives ---------------------------------------------------------------------

    pub(crate) fn val(&self, id: TensorId) -> Result<Val> {
        self.vals
            .get(&id)
            .cloned()
            .ok_or_else(|| self.err(format!("operand '{}' has no value yet", self.g.spec(id).label())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_literals_are_exact_bit_patterns() {
        assert_eq!(scalar_literal(1.0, DType::F32), "0x3F800000");
        assert_eq!(scalar_literal(f64::NEG_INFINITY, DType::F32), "0xFF800000");
        assert_eq!(scalar_literal(f64::NAN, DType::F32), "0x7FC00000");
        assert_eq!(scalar_literal(-0.0, DType::F32), "0x80000000");
        assert_eq!(scalar_literal(1.0, DType::BF16), "0x3F80");
        assert_eq!(scalar_literal(1.0, DType::F16), "0x3C00");
        assert_eq!(scalar_literal(65520.0, DType::F16), "0x7C00");
        assert_eq!(scalar_literal(5.0, DType::I32), "5");
        assert_eq!(scalar_literal(1.0, DType::Bool), "true");
    }
}
