//! The rewrites [`crate::finalize`] runs after it has checked what the user recorded, each a pass from one
//! [`Program`] to the next: [`keep_packed()`] ([`PackedConstantHandling::Keep`](crate::PackedConstantHandling::Keep))
//! and [`transpose_at_export()`] ([`WeightLayout::ChosenForUse`](crate::WeightLayout::ChosenForUse)).
//!
//! Passes read and write the IR ([`Op`], [`TensorSpec`], [`Constant`]) and nothing of the graph module, which runs
//! them and verifies each one's output with the checks the recorded graph passed.

pub(crate) mod keep_packed;
mod transpose_at_export;

pub(crate) use keep_packed::keep_packed;
pub(crate) use transpose_at_export::transpose_at_export;

use crate::constant::Constant;
use crate::ops::OpKind;
use crate::tensor::TensorSpec;
use crate::trace::{Attr, Attrs, Op, TensorId};

/// What a device's pass adds to the portable lowering, asked by the rewrites where a form is the device's to
/// choose. [`Portable`] adds nothing: every answer is the portable form, so a device with no pass of its own gets
/// exactly that lowering, and a device's forms are one implementation of this trait in a module of its own
/// (the CPU's: `crate::target::cpu`, a private module of the target's, which the rewrites cannot see).
pub(crate) trait DeviceForms {
    /// Rows per band in which the codes of a weight kept packed in `encoding` (`kb` blocks per row, `np` plane
    /// rows; no use gathers its rows) are stored (`[Np / T, Kb, B, T]`); `None` (the portable form): `[Kb, B, Np]`.
    fn code_bands(&self, _encoding: &crate::packed::Encoding, _kb: u64, _np: u64) -> Option<u64> {
        None
    }

    /// Writes `y = x @ Wᵀ` for the linear `m`, whose `x` has `?` dimensions, onto the planes `pl`, and says so;
    /// `false` (the portable form) leaves it to the weight dequantized for that product.
    fn dynamic_linear(&self, _b: &mut keep_packed::Builder<'_>, _pl: &mut keep_packed::Planes, _m: &Op) -> bool {
        false
    }

    /// Source rows per band of a linear's weight written transposed (`[rows / tile, cols, tile]`); `rows` (the
    /// portable form): a plain transpose.
    fn weight_row_tile(&self, rows: u64) -> u64 {
        rows
    }

    /// The device's own rewrite of the whole program, run after the portable ones; the portable lowering has none.
    ///
    /// # Errors
    /// What the device cannot compute exactly in any form ([`crate::GraphError::Target`]).
    fn rewrite<'a>(&self, program: Program<'a>) -> crate::Result<Program<'a>> {
        Ok(program)
    }
}

/// The portable lowering alone: no device's forms.
pub(crate) struct Portable;

impl DeviceForms for Portable {}

/// What a pass takes and returns: every tensor's spec, the runtime inputs and constants that define tensors no
/// node produces, the nodes in topological order, and the results.
#[derive(Debug)]
pub(crate) struct Program<'a> {
    /// Specs of every tensor, indexed by [`TensorId::index`]; a pass appends the tensors it creates.
    pub(crate) specs: Vec<TensorSpec>,
    /// Runtime inputs (function arguments), in the order the trace declared them (its tensor table).
    pub(crate) inputs: Vec<TensorId>,
    /// Frozen values, with unique keys.
    pub(crate) constants: Vec<Constant<'a>>,
    /// The nodes in topological order.
    pub(crate) nodes: Vec<Op>,
    /// The model's results.
    pub(crate) outputs: Vec<TensorId>,
    /// The index the next inserted op gets: past every recorded node, and past every op inserted so far.
    pub(crate) next_index: usize,
}

impl Program<'_> {
    /// How messages name `node`.
    pub(crate) fn describe(&self, node: &Op) -> String {
        node.describe(|t| self.specs.get(t.index()))
    }
}

/// Hands out fresh node indices for inserted ops.
#[derive(Debug)]
pub(crate) struct Fresh {
    next: usize,
}

impl Fresh {
    /// Indices from `next` on.
    pub(crate) fn from(next: usize) -> Self {
        Fresh { next }
    }

    /// A new op with a fresh index, inserted for the recorded node `origin`.
    pub(crate) fn op(
        &mut self,
        origin: Option<usize>,
        op: OpKind,
        attrs: Attrs,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
    ) -> Op {
        let index = self.next;
        self.next += 1;
        Op::inserted(index, origin, op, attrs, inputs, outputs)
    }

    /// The next index it would hand out.
    pub(crate) fn next(&self) -> usize {
        self.next
    }
}

/// True when `node` swaps the two dimensions of a rank-2 operand (`perm` absent, i.e. reversed, or `[1, 0]`).
pub(crate) fn swaps_two_dims(node: &Op) -> bool {
    node.op == OpKind::Transpose
        && match node.attrs.get("perm") {
            None => true,
            Some(Attr::Ints(p)) => p.as_slice() == [1, 0] || p.as_slice() == [-1, -2],
            Some(Attr::Int(_) | Attr::Float(_) | Attr::Bool(_) | Attr::Str(_) | Attr::Floats(_)) => false,
        }
}

/// True when `node` gathers rows (axis 0) of a rank-2 `table` operand.
pub(crate) fn gathers_rows_of(node: &Op, table: TensorId) -> bool {
    node.op == OpKind::Gather
        && node.inputs.first() == Some(&table)
        && node.inputs.get(1) != Some(&table)
        && matches!(node.attrs.get("axis"), None | Some(Attr::Int(0 | -2)))
}

/// Every use of each tensor: the positions of the nodes that read it, in order.
pub(crate) fn uses(nodes: &[Op]) -> std::collections::HashMap<TensorId, Vec<usize>> {
    let mut uses: std::collections::HashMap<TensorId, Vec<usize>> = std::collections::HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for &t in &n.inputs {
            uses.entry(t).or_default().push(i);
        }
    }
    uses
}

#[cfg(test)]
mod tests {
    /// Constants stream through the transposer, which reads what they lend, not the other way. (The passes'
    /// boundary is visibility: the graph module has no crate-visible item a pass could call, and a device's pass is
    /// a private module of `crate::target` that the portable rewrites cannot name.)
    #[test]
    fn the_transposer_does_not_import_the_constants() {
        let constant = concat!("crate", "::constant");
        assert!(!include_str!("../transpose/mod.rs").contains(constant), "transpose.rs imports the constants");
    }
}
