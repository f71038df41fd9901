//! What a tape records: tensors with borrowed storage, and the ops between them.

use std::collections::BTreeMap;

use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorSpec};

/// A tensor of a [`Trace`] (and of the [`crate::ComputeGraph`] made from it). Only a trace hands them
/// out, so an id always names a tensor of the trace that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(usize);

impl TensorId {
    /// Its position in the trace's tensor list.
    #[must_use]
    pub fn index(self) -> usize {
        self.0
    }

    /// The id at `index` (crate-internal: the trace checks the range).
    pub(crate) fn at(index: usize) -> Self {
        TensorId(index)
    }
}

/// A typed op attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
    /// A list of integers (axes, permutations, strides, …).
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
}

/// Named attributes, sorted by name (so output is deterministic).
pub type Attrs = BTreeMap<String, Attr>;

/// One recorded operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Its position in recording order (the node's index in a graph file).
    pub index: usize,
    /// The op.
    pub op: OpKind,
    /// Attributes.
    pub attrs: Attrs,
    /// Operands, in order.
    pub inputs: Vec<TensorId>,
    /// Results, in order.
    pub outputs: Vec<TensorId>,
}

impl Op {
    /// How messages name this node: its position, op and first result by module path or name, e.g.
    /// `node 3 (reshape -> 'model.h')`. `spec` looks up a tensor's spec.
    pub fn describe<'s>(&self, spec: impl Fn(TensorId) -> Option<&'s TensorSpec>) -> String {
        match self.outputs.first().and_then(|&t| spec(t)) {
            Some(s) => format!("node {} ({} -> '{}')", self.index, self.op, s.label()),
            None => format!("node {} ({})", self.index, self.op),
        }
    }
}

/// A recorded execution: the input to [`crate::finalize`].
#[derive(Debug, Default)]
pub struct Trace<'a> {
    tensors: Vec<Tensor<'a>>,
    ops: Vec<Op>,
    outputs: Vec<TensorId>,
}

impl<'a> Trace<'a> {
    /// An empty trace.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a tensor.
    pub fn add_tensor(&mut self, tensor: Tensor<'a>) -> TensorId {
        self.tensors.push(tensor);
        TensorId(self.tensors.len() - 1)
    }

    /// Records a tensor without values (an activation or a runtime input).
    pub fn add_placeholder(&mut self, spec: TensorSpec) -> TensorId {
        self.add_tensor(Tensor::placeholder(spec))
    }

    /// Records an op.
    pub fn record(&mut self, op: OpKind, attrs: Attrs, inputs: &[TensorId], outputs: &[TensorId]) -> &Op {
        let index = self.ops.len();
        self.ops.push(Op { index, op, attrs, inputs: inputs.to_vec(), outputs: outputs.to_vec() });
        &self.ops[index]
    }

    /// Declares the model's results, in order. A tensor nobody consumes is not an output unless it is
    /// listed here.
    pub fn set_outputs(&mut self, outputs: &[TensorId]) {
        self.outputs = outputs.to_vec();
    }

    /// The tensor with `id`, if it exists.
    #[must_use]
    pub fn tensor(&self, id: TensorId) -> Option<&Tensor<'a>> {
        self.tensors.get(id.0)
    }

    /// The id of the tensor at `index`, if there is one.
    #[must_use]
    pub fn id(&self, index: usize) -> Option<TensorId> {
        (index < self.tensors.len()).then_some(TensorId(index))
    }

    /// Every tensor, indexed by [`TensorId::index`].
    #[must_use]
    pub fn tensors(&self) -> &[Tensor<'a>] {
        &self.tensors
    }

    /// The ops in recording order.
    #[must_use]
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The declared results.
    #[must_use]
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }
}
