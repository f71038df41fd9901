//! Which `?` dimensions of a function's arguments the graph requires to be equal at run time ([`argument_dims`]).
//!
//! Every op whose type rule lets two `?` dimensions meet (NumPy broadcasting, a matmul's contracted and batch
//! dimensions, a concatenation's other dimensions, a result that keeps an operand's dimensions, …) is lowered on the
//! assumption that they are one extent, and a `?` that meets a static n is assumed to be n. Nothing in the module
//! checks those assumptions, and IREE reads out of bounds when a caller breaks them (issue 61). This module writes
//! them down: the dimensions of every tensor are joined into classes, node by node, with one rule per op (an
//! exhaustive `match` over [`OpKind`], so a new op does not compile until it says what it equates), and the classes
//! are read back at the arguments.

use std::fmt;

use super::OpKind;
use super::rules::AttrView;
use crate::graph::ComputeGraph;
use crate::shape::{Dim, Shape};
use crate::trace::{Op, TensorId};

/// What the graph requires of one dimension of an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgDim {
    /// A static dimension of the argument's type.
    Static(u64),
    /// A `?` that no other argument dimension is tied to: any extent.
    Free,
    /// A `?` that must equal every other argument dimension of the same class (`d<k>`, numbered per function in
    /// order of first appearance, arguments first to last, outermost dimension first).
    Class(usize),
    /// A `?` that meets a static extent somewhere in the graph, and so must be that extent.
    Extent(u64),
}

impl fmt::Display for ArgDim {
    /// `4` for a static or required extent, `?` for a free one, `d0` for class 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgDim::Static(n) | ArgDim::Extent(n) => write!(f, "{n}"),
            ArgDim::Free => f.write_str("?"),
            ArgDim::Class(k) => write!(f, "d{k}"),
        }
    }
}

/// The `tapeout.dims` spelling of an argument's dimensions: [`ArgDim`]s joined by `x`, as MLIR joins a shape
/// (`d0x4`, `?xd1`, `8x4`). Empty for a scalar.
#[must_use]
pub fn dims_text(dims: &[ArgDim]) -> String {
    dims.iter().map(ToString::to_string).collect::<Vec<_>>().join("x")
}

/// For each argument of `graph` (in [`ComputeGraph::inputs`] order), what each of its dimensions must be at run
/// time: its static extent, or for a `?` whether the graph ties it to other arguments' `?` dimensions (a class) or
/// to a static extent. Two argument dimensions are in one class when some chain of ops makes them meet, through
/// intermediate tensors too (`c = a + x`, `d = c * b` ties `a` to `b`).
#[must_use]
pub fn argument_dims(graph: &ComputeGraph<'_>) -> Vec<Vec<ArgDim>> {
    let mut classes = Classes::new(graph.tensors().iter().map(|t| &t.shape));
    for node in graph.nodes() {
        relate(node, &|id| &graph.spec(id).shape, &mut classes);
    }
    let mut members = std::collections::HashMap::<usize, usize>::new();
    for &id in graph.inputs() {
        for slot in classes.slots(id) {
            if classes.dims[slot] == Dim::Dynamic {
                *members.entry(classes.find(slot)).or_default() += 1;
            }
        }
    }
    let mut names = std::collections::HashMap::<usize, usize>::new();
    let mut out = Vec::with_capacity(graph.inputs().len());
    for &id in graph.inputs() {
        let mut dims = Vec::new();
        for slot in classes.slots(id) {
            let root = classes.find(slot);
            dims.push(match (classes.dims[slot], classes.extent[root]) {
                (Dim::Static(n), _) => ArgDim::Static(n),
                (Dim::Dynamic, Some(n)) => ArgDim::Extent(n),
                (Dim::Dynamic, None) if members.get(&root).copied().unwrap_or(0) >= 2 => {
                    let next = names.len();
                    ArgDim::Class(*names.entry(root).or_insert(next))
                }
                (Dim::Dynamic, None) => ArgDim::Free,
            });
        }
        out.push(dims);
    }
    out
}

/// Union-find over every dimension of every tensor (a slot: tensor, axis), each class with the static extent one
/// of its dimensions has, if any.
struct Classes {
    /// Where each tensor's slots start; its slots are `offset[t]..offset[t + 1]`.
    offset: Vec<usize>,
    dims: Vec<Dim>,
    parent: Vec<usize>,
    extent: Vec<Option<u64>>,
}

impl Classes {
    fn new<'s>(shapes: impl Iterator<Item = &'s Shape>) -> Classes {
        let mut offset = vec![0];
        let mut dims = Vec::new();
        for s in shapes {
            dims.extend_from_slice(&s.0);
            offset.push(dims.len());
        }
        let extent = dims.iter().map(|d| if let Dim::Static(n) = d { Some(*n) } else { None }).collect();
        Classes { offset, parent: (0..dims.len()).collect(), dims, extent }
    }

    fn slots(&self, id: TensorId) -> std::ops::Range<usize> {
        let i = id.index();
        match (self.offset.get(i), self.offset.get(i + 1)) {
            (Some(&a), Some(&b)) => a..b,
            _ => 0..0,
        }
    }

    /// Dimension `axis` of `id`, if it has one.
    fn slot(&self, id: TensorId, axis: usize) -> Option<usize> {
        let range = self.slots(id);
        range.clone().nth(axis)
    }

    fn find(&mut self, mut s: usize) -> usize {
        while self.parent[s] != s {
            self.parent[s] = self.parent[self.parent[s]];
            s = self.parent[s];
        }
        s
    }

    /// The two dimensions are one extent. Two static ones need no class (the type rules compared them).
    fn same(&mut self, a: Option<usize>, b: Option<usize>) {
        let (Some(a), Some(b)) = (a, b) else { return };
        if self.dims[a] != Dim::Dynamic && self.dims[b] != Dim::Dynamic {
            return;
        }
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[rb] = ra;
            // A class that meets two different static extents can never be called correctly; the first is
            // recorded, so the call is refused unless it has that one.
            self.extent[ra] = self.extent[ra].or(self.extent[rb]);
        }
    }

    /// The two dimensions meet in NumPy broadcasting: one extent unless either is a static 1, which broadcasts.
    /// A `?` is never broadcast (a `?` that is 1 at run time against a `?` of 5 is not read as 1).
    fn meet(&mut self, a: Option<usize>, b: Option<usize>) {
        let one = |s: Option<usize>| s.is_some_and(|s| self.dims[s] == Dim::Static(1));
        if !one(a) && !one(b) {
            self.same(a, b);
        }
    }

    /// Every dimension of `x` equals the one of `y` at the same axis.
    fn same_shape(&mut self, x: TensorId, y: TensorId) {
        for axis in 0..self.slots(x).len() {
            self.same(self.slot(x, axis), self.slot(y, axis));
        }
    }

    /// `x` and `y` broadcast against each other, right-aligned.
    fn meet_right(&mut self, x: TensorId, y: TensorId) {
        let (rx, ry) = (self.slots(x).len(), self.slots(y).len());
        for k in 1..=rx.min(ry) {
            self.meet(self.slot(x, rx - k), self.slot(y, ry - k));
        }
    }
}

/// Joins the classes one node's lowering assumes equal. Each op's rule mirrors its type rule in `rules.rs` (and
/// what the emitter assumes beyond it, as a norm's result having its operand's shape); a dimension computed from
/// others (a concatenation's joined axis, a slice not from 0, a reshape's merged dimension) is tied to nothing.
fn relate<'g>(node: &Op, shape: &dyn Fn(TensorId) -> &'g Shape, c: &mut Classes) {
    let (ins, Some(&out)) = (node.inputs.as_slice(), node.outputs.first()) else { return };
    let a = AttrView(&node.attrs);
    let rank = |id: TensorId| shape(id).rank();
    let input = |i: usize| ins.get(i).copied();
    match node.op {
        OpKind::Abs
        | OpKind::Cos
        | OpKind::Exp
        | OpKind::Gelu
        | OpKind::Log
        | OpKind::Neg
        | OpKind::Relu
        | OpKind::Rsqrt
        | OpKind::Sigmoid
        | OpKind::Silu
        | OpKind::Sin
        | OpKind::Sqrt
        | OpKind::Tanh
        | OpKind::Not
        | OpKind::Convert
        | OpKind::RoundAs
        | OpKind::Softmax
        | OpKind::CausalMask
        | OpKind::After
        | OpKind::DynamicUpdateSlice
        | OpKind::LayerNorm
        | OpKind::RmsNorm => {
            if let Some(x) = input(0) {
                c.same_shape(x, out);
            }
            // A norm's gamma and beta broadcast against x's last dimensions.
            if matches!(node.op, OpKind::LayerNorm | OpKind::RmsNorm) {
                for &p in ins.iter().skip(1) {
                    c.meet_right(p, out);
                }
            }
        }
        OpKind::Add
        | OpKind::Sub
        | OpKind::Mul
        | OpKind::Div
        | OpKind::Pow
        | OpKind::Max
        | OpKind::Min
        | OpKind::And
        | OpKind::Or
        | OpKind::Compare
        | OpKind::Select
        | OpKind::Clamp => {
            for (i, &x) in ins.iter().enumerate() {
                c.meet_right(x, out);
                for &y in &ins[i + 1..] {
                    c.meet_right(x, y);
                }
            }
        }
        // Lowered only with static dimensions (the emitter refuses a `?`), so they tie nothing.
        OpKind::AvgPool2d | OpKind::MaxPool2d | OpKind::Conv2d | OpKind::DynamicSlice => {}
        OpKind::Broadcast => {
            let Some(x) = input(0) else { return };
            let targets = match a.axes("dims", rank(out)) {
                Ok(Some(dims)) => dims,
                Ok(None) => (rank(out).saturating_sub(rank(x))..rank(out)).collect(),
                Err(_) => return,
            };
            for (i, &d) in targets.iter().enumerate() {
                c.meet(c.slot(x, i), c.slot(out, d));
            }
            if let Some(like) = input(1) {
                c.same_shape(like, out);
            }
        }
        OpKind::Concat => {
            let Ok(axis) = a.int("axis", 0).and_then(|x| a.axis("axis", x, rank(out))) else { return };
            for &x in ins {
                for d in (0..rank(out)).filter(|&d| d != axis || ins.len() == 1) {
                    c.same(c.slot(x, d), c.slot(out, d));
                }
            }
        }
        OpKind::DecodeWords => {
            for d in 0..rank(out).saturating_sub(1) {
                c.same(input(0).and_then(|x| c.slot(x, d)), c.slot(out, d));
            }
        }
        OpKind::GateRows => {
            let (Some(t), Ok(axis)) = (input(0), a.int("axis", 0).and_then(|x| a.axis("axis", x, rank(out)))) else {
                return;
            };
            for d in (0..rank(out)).filter(|&d| d != axis) {
                c.same(c.slot(t, d), c.slot(out, d));
            }
        }
        OpKind::PadRows => {
            let Some(x) = input(0) else { return };
            c.same(rank(x).checked_sub(1).and_then(|k| c.slot(x, k)), c.slot(out, 1));
        }
        OpKind::PlaceRows => {
            if let Some(base) = input(1) {
                c.same_shape(base, out);
            }
        }
        OpKind::Gather => gather(ins, &a, out, shape, c),
        OpKind::Iota => {
            let Some(like) = input(0) else { return };
            if let Ok(axis) = a.int("axis", 0).and_then(|x| a.axis("axis", x, rank(like))) {
                c.same(c.slot(like, axis), c.slot(out, 0));
            }
        }
        OpKind::Matmul => matmul(ins, out, &a, shape, c),
        OpKind::ReduceMax | OpKind::ReduceMean | OpKind::ReduceSum | OpKind::Argmax => {
            if let Some(x) = input(0) {
                reduce(node.op, &a, x, rank(x), out, c);
            }
        }
        OpKind::Reshape => {
            if let Some(x) = input(0) {
                reshape(x, shape(x), out, shape(out), c);
            }
        }
        OpKind::Rope => {
            let (Some(x), Some(cos), Some(sin)) = (input(0), input(1), input(2)) else { return };
            c.same_shape(x, out);
            c.same_shape(cos, sin);
            c.meet_right(cos, x);
        }
        OpKind::Sdpa => sdpa(ins, out, shape, c),
        OpKind::Slice => {
            if let Some(x) = input(0) {
                slice(&a, x, rank(x), out, c);
            }
        }
        OpKind::Transpose => {
            let Some(x) = input(0) else { return };
            let r = rank(x);
            let perm = match a.axes("perm", r) {
                Ok(Some(p)) => p,
                Ok(None) => (0..r).rev().collect(),
                Err(_) => return,
            };
            for (j, &p) in perm.iter().enumerate() {
                c.same(c.slot(x, p), c.slot(out, j));
            }
        }
    }
}

/// A reduction or `argmax`: the dimensions it keeps are the result's, in order (a reduced one kept as a 1 with
/// `keepdims`).
fn reduce(op: OpKind, a: &AttrView<'_>, x: TensorId, r: usize, out: TensorId, c: &mut Classes) {
    let reduced: Vec<usize> = if op == OpKind::Argmax {
        a.int("axis", -1).and_then(|v| a.axis("axis", v, r)).map(|v| vec![v]).unwrap_or_default()
    } else {
        a.axes("axes", r).ok().flatten().unwrap_or_else(|| (0..r).collect())
    };
    let keep = op != OpKind::Argmax && a.bool("keepdims", false).unwrap_or(false);
    let mut d_out = 0;
    for d in 0..r {
        if !reduced.contains(&d) {
            c.same(c.slot(x, d), c.slot(out, d_out));
        }
        if keep || !reduced.contains(&d) {
            d_out += 1;
        }
    }
}

/// `slice`: a `?` sliced from 0 by 1 to its end is itself; from elsewhere, a smaller extent.
fn slice(a: &AttrView<'_>, x: TensorId, r: usize, out: TensorId, c: &mut Classes) {
    let (Ok(Some(start)), Ok(stride)) = (a.ints("start"), a.ints("stride")) else { return };
    for d in 0..r {
        let whole = start.get(d) == Some(&0) && stride.is_none_or(|s| s.get(d) == Some(&1));
        if whole {
            c.same(c.slot(x, d), c.slot(out, d));
        }
    }
}

/// `gather`: the result is the table's dimensions before `axis`, the indices', then the table's after it.
fn gather<'g>(
    ins: &[TensorId],
    a: &AttrView<'_>,
    out: TensorId,
    shape: &dyn Fn(TensorId) -> &'g Shape,
    c: &mut Classes,
) {
    let (Some(&table), Some(&idx)) = (ins.first(), ins.get(1)) else { return };
    let (rt, ri) = (shape(table).rank(), shape(idx).rank());
    let Ok(axis) = a.int("axis", 0).and_then(|x| a.axis("axis", x, rt)) else { return };
    let from = (0..axis)
        .map(|d| c.slot(table, d))
        .chain((0..ri).map(|d| c.slot(idx, d)))
        .chain((axis + 1..rt).map(|d| c.slot(table, d)))
        .collect::<Vec<_>>();
    for (d, s) in from.into_iter().enumerate() {
        c.same(s, c.slot(out, d));
    }
}

/// `matmul` in its four forms (see [`super::matmul`] and [`super::banded_matmul`]): contracted dimensions, batch
/// dimensions and the kept rows and columns.
fn matmul<'g>(
    ins: &[TensorId],
    out: TensorId,
    a: &AttrView<'_>,
    shape: &dyn Fn(TensorId) -> &'g Shape,
    c: &mut Classes,
) {
    let (Some(&x), Some(&y)) = (ins.first(), ins.get(1)) else { return };
    let (ra, rb) = (shape(x).rank(), shape(y).rank());
    let Some(k) = ra.checked_sub(1) else { return };
    let banded = a.bool("banded", false).unwrap_or(false);
    if banded && rb == 4 {
        // [Kb, M, B] x [NB, Kb, B, T] -> [Kb, M, NB·T]: M kept, the columns a product.
        c.same(c.slot(x, 0), c.slot(out, 0));
        c.same(c.slot(x, 1), c.slot(out, 1));
        return;
    }
    // The rows of `a` are kept as the result's leading dimensions in every form.
    for d in 0..k {
        c.same(c.slot(x, d), c.slot(out, d));
    }
    if banded {
        // [.., K] x [N / T, K, T] -> [.., N].
        c.same(c.slot(x, k), c.slot(y, 1));
    } else if rb == 2 {
        // [.., K] x [K, N] -> [.., N].
        c.same(c.slot(x, k), c.slot(y, 0));
        c.same(c.slot(y, 1), c.slot(out, k));
    } else if rb >= 2 && ra >= 2 {
        // [B.., M, K] x [B.., K, N] (or [B.., K, N, T]): batch dims and K equal, b's columns kept.
        for d in 0..ra - 2 {
            c.same(c.slot(x, d), c.slot(y, d));
        }
        c.same(c.slot(x, k), c.slot(y, ra - 2));
        for (j, d) in (ra - 1..rb).enumerate() {
            c.same(c.slot(y, d), c.slot(out, k + j));
        }
    }
}

/// `sdpa`: q `[.., H, S, D]`, k `[.., KV, T, D]`, v `[.., KV, T, Dv]`, an optional mask broadcast to the scores
/// `[.., H, S, T]`; the result `[.., H, S, Dv]`.
fn sdpa<'g>(ins: &[TensorId], out: TensorId, shape: &dyn Fn(TensorId) -> &'g Shape, c: &mut Classes) {
    let (Some(&q), Some(&k), Some(&v)) = (ins.first(), ins.get(1), ins.get(2)) else { return };
    let r = shape(q).rank();
    if r < 2 {
        return;
    }
    c.same(c.slot(q, r - 1), c.slot(k, r - 1));
    c.same(c.slot(k, r - 2), c.slot(v, r - 2));
    if r >= 3 {
        c.same(c.slot(k, r - 3), c.slot(v, r - 3));
        // Both head counts `?` means one group: the same count (`query_groups`).
        c.same(c.slot(q, r - 3), c.slot(k, r - 3));
        for d in 0..r - 3 {
            c.same(c.slot(q, d), c.slot(k, d));
            c.same(c.slot(q, d), c.slot(v, d));
        }
    }
    for d in 0..r - 1 {
        c.same(c.slot(q, d), c.slot(out, d));
    }
    c.same(c.slot(v, r - 1), c.slot(out, r - 1));
    if let Some(&mask) = ins.get(3) {
        // The scores are q's dimensions but the last, then k's key length.
        let rm = shape(mask).rank();
        for j in 1..=rm.min(r) {
            let score = if j == 1 { c.slot(k, r - 2) } else { c.slot(q, r - j) };
            c.meet(c.slot(mask, rm - j), score);
        }
    }
}

/// A reshape with `?` dimensions splits or merges whole dimensions, each `?` grouped with one `?` of the other
/// shape. The k-th `?` of each side is the same extent when the static dimensions before it multiply to the same
/// on both sides, and those after it too: then its group holds no static dimension but 1s (a group `[?, 32]` merged
/// into one `?` changes one of the sums). Otherwise the two are tied to nothing.
fn reshape(x: TensorId, xs: &Shape, out: TensorId, os: &Shape, c: &mut Classes) {
    let dynamic =
        |s: &Shape| s.0.iter().enumerate().filter(|(_, d)| **d == Dim::Dynamic).map(|(i, _)| i).collect::<Vec<_>>();
    let (dx, dout) = (dynamic(xs), dynamic(os));
    if dx.len() != dout.len() {
        return;
    }
    let product = |dims: &[Dim]| {
        dims.iter().try_fold(1u64, |p, d| match d {
            Dim::Static(n) => p.checked_mul(*n),
            Dim::Dynamic => Some(p),
        })
    };
    for (&i, &j) in dx.iter().zip(&dout) {
        let before = product(&xs.0[..i]).zip(product(&os.0[..j]));
        let after = product(&xs.0[i + 1..]).zip(product(&os.0[j + 1..]));
        let aligned = |p: Option<(u64, u64)>| p.is_some_and(|(a, b)| a == b && a > 0);
        if aligned(before) && aligned(after) {
            c.same(c.slot(x, i), c.slot(out, j));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report
    use super::ArgDim::{Class, Extent, Free, Static};
    use super::*;
    use crate::trace::{Attr, Attrs, Trace};
    use crate::{DType, ExtractOptions, TensorSpec};

    /// One node: op, attributes, operands and results (tensor indices).
    type Node<'a> = (OpKind, &'a [(&'a str, Attr)], &'a [usize], &'a [usize]);

    /// A graph over f32 tensors of these shapes (`?x4`): `placeholders` arguments, then the nodes, each
    /// `(op, attrs, operands, results)` by tensor index; the last tensor is the output.
    fn dims_of(shapes: &[&str], nodes: &[Node<'_>]) -> Vec<Vec<ArgDim>> {
        let mut t = Trace::new();
        let ids: Vec<_> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let shape = Shape(s.split('x').map(|d| d.parse().map_or(Dim::Dynamic, Dim::Static)).collect());
                t.add_placeholder(TensorSpec::new(format!("t{i}"), shape, DType::F32))
            })
            .collect();
        for (op, attrs, ins, outs) in nodes {
            let attrs: Attrs = attrs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            let ins: Vec<_> = ins.iter().map(|&i| ids[i]).collect();
            let outs: Vec<_> = outs.iter().map(|&i| ids[i]).collect();
            t.record(*op, attrs, &ins, &outs);
        }
        t.set_outputs(&ids[ids.len() - 1..]);
        let g = crate::finalize(&t, &ExtractOptions::default()).unwrap();
        argument_dims(&g)
    }

    #[test]
    fn two_dynamic_operands_of_an_elementwise_op_are_one_class() {
        let got = dims_of(&["?", "?", "?"], &[(OpKind::Add, &[], &[0, 1], &[2])]);
        assert_eq!(got, [vec![Class(0)], vec![Class(0)]]);
        assert_eq!(dims_text(&got[0]), "d0");
    }

    #[test]
    fn a_dynamic_dim_meeting_a_prime_extent_must_be_it_but_not_a_broadcast_one() {
        let got = dims_of(&["?x?", "7", "?x7"], &[(OpKind::Mul, &[], &[0, 1], &[2])]);
        assert_eq!(got, [vec![Free, Extent(7)], vec![Static(7)]]);
        assert_eq!(dims_text(&got[0]), "?x7");
        // A static 1 broadcasts: it ties the `?` to nothing.
        let got = dims_of(&["?", "1", "?"], &[(OpKind::Add, &[], &[0, 1], &[2])]);
        assert_eq!(got, [vec![Free], vec![Static(1)]]);
    }

    #[test]
    fn a_class_spans_three_arguments_through_an_intermediate() {
        // c = a + b; d = c * e: a, b and e are one extent; f's `?` is its own.
        let got = dims_of(
            &["?x3", "?x3", "?x1", "?x3", "?x3"],
            &[(OpKind::Add, &[], &[0, 1], &[3]), (OpKind::Mul, &[], &[3, 2], &[4])],
        );
        assert_eq!(got, [vec![Class(0), Static(3)], vec![Class(0), Static(3)], vec![Class(0), Static(1)]]);
    }

    #[test]
    fn classes_are_numbered_in_argument_order_and_one_argument_can_repeat_one() {
        // x [?, ?] + transpose(x): its two dims are one class; y's first dim meets x's after the add.
        let perm = [("perm", Attr::Ints(vec![1, 0]))];
        let got = dims_of(
            &["?x?", "?x?", "?x?", "?", "?", "?", "?x?", "?x?"],
            &[
                (OpKind::Transpose, &perm, &[0], &[1]),
                (OpKind::Add, &[], &[0, 1], &[2]),
                (OpKind::Add, &[], &[3, 4], &[5]),
                (OpKind::Neg, &[], &[6], &[7]),
            ],
        );
        assert_eq!(got, [vec![Class(0), Class(0)], vec![Class(1)], vec![Class(1)], vec![Free, Free]]);
    }

    #[test]
    fn matmul_ties_the_contracted_and_batch_dims() {
        // [?, ?] x [5, ?]: a's K must be 5; [?, ?, 4] x [?, 4, 2] ties the batch dims.
        let got = dims_of(&["?x?", "5x3", "?x3"], &[(OpKind::Matmul, &[], &[0, 1], &[2])]);
        assert_eq!(got, [vec![Free, Extent(5)], vec![Static(5), Static(3)]]);
        let got = dims_of(&["?x?x4", "?x4x?", "?x?x?"], &[(OpKind::Matmul, &[], &[0, 1], &[2])]);
        assert_eq!(got, [vec![Class(0), Free, Static(4)], vec![Class(0), Static(4), Free]]);
        let got = dims_of(&["?x?", "?x?", "?x?"], &[(OpKind::Matmul, &[], &[0, 1], &[2])]);
        assert_eq!(got, [vec![Free, Class(0)], vec![Class(0), Free]]);
    }

    #[test]
    fn concat_ties_the_other_dims_but_not_the_joined_one() {
        let axis = |a| [("axis", Attr::Int(a))];
        let got = dims_of(&["?x2", "?x3", "?x5"], &[(OpKind::Concat, &axis(1), &[0, 1], &[2])]);
        assert_eq!(got, [vec![Class(0), Static(2)], vec![Class(0), Static(3)]]);
        let got = dims_of(&["?", "?", "?"], &[(OpKind::Concat, &axis(0), &[0, 1], &[2])]);
        assert_eq!(got, [vec![Free], vec![Free]]);
    }

    #[test]
    fn a_reshape_ties_a_whole_split_dim_and_a_slice_from_zero_but_not_a_merged_or_shortened_one() {
        // [?, 64] -> [?, 4, 16], added to y [?, 4, 16]: x's rows are y's.
        let got = dims_of(
            &["?x64", "?x4x16", "?x4x16", "?x4x16"],
            &[(OpKind::Reshape, &[], &[0], &[2]), (OpKind::Add, &[], &[2, 1], &[3])],
        );
        assert_eq!(got, [vec![Class(0), Static(64)], vec![Class(0), Static(4), Static(16)]]);
        // [?, 32, 2] -> [?, 2] merges 32 rows into each: no tie.
        let got = dims_of(
            &["?x32x2", "?x2", "?x2", "?x2"],
            &[(OpKind::Reshape, &[], &[0], &[2]), (OpKind::Add, &[], &[2, 1], &[3])],
        );
        assert_eq!(got[0][0], Free);
        let slice = |start| {
            [("start", Attr::Ints(vec![start])), ("limit", Attr::Ints(vec![-1])), ("stride", Attr::Ints(vec![1]))]
        };
        for (start, tied) in [(0, true), (1, false)] {
            let got = dims_of(
                &["?", "?", "?", "?"],
                &[(OpKind::Slice, &slice(start), &[0], &[2]), (OpKind::Add, &[], &[2, 1], &[3])],
            );
            assert_eq!(got[0][0] == Class(0) && got[1][0] == Class(0), tied, "start {start}: {got:?}");
        }
    }

    /// The type rules are the judge of what each op ties: one node of `shapes` (operands, then the result;
    /// `?x4`, a dtype after a colon, f32 by default) gets a distinct extent per class of `?` its operands have (the
    /// class's static extent where it has one), its result each operand class's extent and, where the rules tie it
    /// to no operand, a fresh one. `check_types` must accept that unless `derived` (the result's untied extent is
    /// computed from the operands'): a tie the rules miss gives two dimensions it compares different extents.
    fn probe(op: OpKind, attrs: &[(&str, Attr)], shapes: &[&str], derived: bool) {
        let parse = |s: &str| {
            let (dims, dtype) = s.split_once(':').unwrap_or((s, "f32"));
            let shape = Shape(dims.split('x').map(|d| d.parse().map_or(Dim::Dynamic, Dim::Static)).collect());
            (shape, DType::parse(dtype).unwrap())
        };
        let specs: Vec<(Shape, DType)> = shapes.iter().map(|s| parse(s)).collect();
        let attrs: Attrs = attrs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let n = specs.len() - 1;
        let node = Op {
            index: 0,
            op,
            attrs: attrs.clone(),
            inputs: (0..n).map(TensorId::at).collect(),
            outputs: vec![TensorId::at(n)],
            origin: crate::trace::Origin::Recorded,
        };
        let mut c = Classes::new(specs.iter().map(|(s, _)| s));
        relate(&node, &|id| &specs[id.index()].0, &mut c);
        let mut extents = std::collections::HashMap::new();
        let mut primes = [3u64, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73].into_iter();
        let mut extent_of = |c: &mut Classes, slot: usize| {
            let root = c.find(slot);
            *extents.entry(root).or_insert_with(|| c.extent[root].unwrap_or_else(|| primes.next().unwrap()))
        };
        let mut fixed: Vec<Shape> = Vec::new();
        for (t, (shape, _)) in specs.iter().enumerate() {
            let mut dims = Vec::new();
            for d in 0..shape.rank() {
                let slot = c.slot(TensorId::at(t), d).unwrap();
                dims.push(Dim::Static(extent_of(&mut c, slot)));
            }
            fixed.push(Shape(dims));
        }
        let ins: Vec<Spec<'_>> = fixed[..n].iter().zip(&specs).map(|(s, (_, d))| (s, *d)).collect();
        let got = super::super::check_types(op, &attrs, &ins, &[(&fixed[n], specs[n].1)]);
        let shown: Vec<String> = fixed.iter().map(ToString::to_string).collect();
        assert_eq!(got.is_ok(), !derived, "{op} over {shown:?}: {got:?}");
    }

    use super::super::Spec;
    use crate::trace::Op;

    #[test]
    fn every_tie_the_type_rules_compare_is_found() {
        let i = |v: i64| Attr::Int(v);
        let is = |v: &[i64]| Attr::Ints(v.to_vec());
        probe(OpKind::Add, &[], &["?x?", "?x1", "?x?"], false);
        probe(OpKind::Sub, &[], &["?x?", "?", "?x?"], false);
        probe(OpKind::Max, &[], &["?x?", "4", "?x4"], false);
        probe(OpKind::Compare, &[("direction", Attr::Str("LT".into()))], &["?x?", "?", "?x?:bool"], false);
        probe(OpKind::Select, &[], &["?:bool", "?x?", "?x?", "?x?"], false);
        probe(OpKind::Clamp, &[], &["?x?", "?", "1", "?x?"], false);
        probe(OpKind::Matmul, &[], &["?x?x?", "?x?", "?x?x?"], false);
        probe(OpKind::Matmul, &[], &["?x?x?", "?x?x?", "?x?x?"], false);
        probe(OpKind::Matmul, &[], &["?", "?x?", "?"], false);
        probe(OpKind::Concat, &[("axis", i(1))], &["?x?", "?x?", "?x?"], true);
        probe(OpKind::Concat, &[("axis", i(1))], &["?x3", "?x4", "?x7"], false);
        probe(OpKind::Gather, &[("axis", i(1))], &["?x?x?", "?x?:i32", "?x?x?x?"], false);
        probe(OpKind::Sdpa, &[], &["?x?x?x8", "?x?x?x8", "?x?x?x?", "?x?", "?x?x?x?"], false);
        probe(OpKind::Rope, &[], &["?x?x8", "?x8", "?x8", "?x?x8"], false);
        probe(OpKind::Broadcast, &[], &["?", "?x?", "?x?"], false);
        probe(OpKind::Broadcast, &[("dims", is(&[0]))], &["?", "?x?", "?x?"], false);
        probe(OpKind::Iota, &[("axis", i(1))], &["?x?", "?:i32"], false);
        probe(OpKind::Transpose, &[("perm", is(&[2, 0, 1]))], &["?x?x?", "?x?x?"], false);
        probe(OpKind::ReduceSum, &[("axes", is(&[1])), ("keepdims", Attr::Bool(true))], &["?x?x?", "?x1x?"], false);
        probe(OpKind::ReduceMax, &[("axes", is(&[0]))], &["?x?", "?"], false);
        probe(OpKind::Argmax, &[], &["?x?", "?:i32"], false);
        probe(OpKind::Softmax, &[], &["?x?", "?x?"], false);
        probe(OpKind::Convert, &[], &["?x?:i32", "?x?"], false);
        probe(OpKind::Exp, &[], &["?x?", "?x?"], false);
        probe(OpKind::CausalMask, &[], &["?x?", "?x?"], false);
        probe(OpKind::Reshape, &[], &["?x64", "?x4x16"], false);
        let slice = |start| [("start", is(&[start, 0])), ("limit", is(&[-1, -1])), ("stride", is(&[1, 1]))];
        probe(OpKind::Slice, &slice(0), &["?x?", "?x?"], false);
        probe(OpKind::Slice, &slice(1), &["?x?", "?x?"], true);
    }
}
