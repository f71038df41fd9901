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

/// Where a node of a graph comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The user recorded it: its index is its position in recording order.
    Recorded,
    /// A rewrite of [`crate::finalize`] inserted it (its index is fresh, past every recorded node) for the recorded
    /// node at this index, or for no one node (`None`: e.g. the dequantization of a weight that is only an output).
    Inserted(Option<usize>),
}

/// One recorded operation, or one a rewrite inserted.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Its position in recording order (the node's index in a graph file); for an op a rewrite inserted, a fresh
    /// index past every recorded node (see [`Op::origin`]).
    pub index: usize,
    /// The op.
    pub op: OpKind,
    /// Attributes.
    pub attrs: Attrs,
    /// Operands, in order.
    pub inputs: Vec<TensorId>,
    /// Results, in order.
    pub outputs: Vec<TensorId>,
    /// Recorded, or inserted by a rewrite (for which recorded node).
    pub(crate) origin: Origin,
}

impl Op {
    /// An op a rewrite inserts, with the fresh `index` it gets, for the recorded node `origin` (see [`Op::origin`]).
    pub(crate) fn inserted(
        index: usize,
        origin: Option<usize>,
        op: OpKind,
        attrs: Attrs,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
    ) -> Op {
        Op { index, op, attrs, inputs, outputs, origin: Origin::Inserted(origin) }
    }

    /// The recorded node this op stands for: its own index when the user recorded it, the node a rewrite inserted
    /// it for otherwise (`None` when it was inserted for no one node).
    #[must_use]
    pub fn origin(&self) -> Option<usize> {
        match self.origin {
            Origin::Recorded => Some(self.index),
            Origin::Inserted(origin) => origin,
        }
    }

    /// True when a rewrite inserted this op (the user did not record it).
    #[must_use]
    pub fn is_inserted(&self) -> bool {
        matches!(self.origin, Origin::Inserted(_))
    }

    /// How messages name this node: the recorded node's position, the op and its first result by module path or
    /// name, e.g. `node 3 (reshape -> 'model.h')`. An op a rewrite inserted is named by the recorded node it stands
    /// for, e.g. `node 3 (convert -> 'w.qs_f32', op #12 inserted for it by a rewrite)`, so that a message leads to
    /// what the user wrote. `spec` looks up a tensor's spec.
    pub fn describe<'s>(&self, spec: impl Fn(TensorId) -> Option<&'s TensorSpec>) -> String {
        let what = match self.outputs.first().and_then(|&t| spec(t)) {
            Some(s) => format!("{} -> '{}'", self.op, s.label()),
            None => self.op.to_string(),
        };
        match self.origin {
            Origin::Recorded => format!("node {} ({what})", self.index),
            Origin::Inserted(Some(node)) => {
                format!("node {node} ({what}, op #{} inserted for it by a rewrite)", self.index)
            }
            Origin::Inserted(None) => format!("op #{} ({what}, inserted by a rewrite)", self.index),
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
        self.ops.push(Op {
            index,
            op,
            attrs,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            origin: Origin::Recorded,
        });
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
