//! What a tape records: tensors with borrowed storage, and the ops between them.

use std::collections::BTreeMap;

use crate::tensor::{Tensor, TensorSpec};

/// Index of a tensor in a [`Trace`] (and in the [`crate::ComputeGraph`] made from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

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
    /// Deterministic id: `n<seq>_<op>`.
    pub id: String,
    /// The op name (`add`, `matmul`, `rms_norm`, …).
    pub op: String,
    /// Attributes.
    pub attrs: Attrs,
    /// Operands, in order.
    pub inputs: Vec<TensorId>,
    /// Results, in order.
    pub outputs: Vec<TensorId>,
}

/// A recorded execution: the input to [`crate::finalize`].
#[derive(Debug, Default)]
pub struct Trace<'a> {
    /// Every tensor, indexed by [`TensorId`].
    pub tensors: Vec<Tensor<'a>>,
    /// Ops in recording order.
    pub ops: Vec<Op>,
    /// The tensors the model returns, in order. A tensor nobody consumes is not an output unless
    /// it is listed here.
    pub outputs: Vec<TensorId>,
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

    /// Records an op and returns its id.
    pub fn record(&mut self, op: &str, attrs: Attrs, inputs: &[TensorId], outputs: &[TensorId]) -> &Op {
        let id = format!("n{}_{op}", self.ops.len());
        self.ops.push(Op { id, op: op.to_owned(), attrs, inputs: inputs.to_vec(), outputs: outputs.to_vec() });
        let last = self.ops.len() - 1;
        &self.ops[last]
    }

    /// Declares the model's results.
    pub fn set_outputs(&mut self, outputs: &[TensorId]) {
        self.outputs = outputs.to_vec();
    }

    /// The tensor with `id`, if it exists.
    #[must_use]
    pub fn tensor(&self, id: TensorId) -> Option<&Tensor<'a>> {
        self.tensors.get(id.0)
    }
}
