//! The one error type of this crate.

fn encoding_part(encoding: &Option<String>) -> String {
    encoding.as_ref().map(|e| format!(" (encoding {e})")).unwrap_or_default()
}

/// Everything that can go wrong while building, validating or extracting a graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// A frozen weight is packed and the caller did not ask for dequantization.
    #[error(
        "frozen parameter '{tensor}' has packed storage{} and cannot be embedded as a float graph constant. \
         tapeout refuses to turn it into a function-argument placeholder instead: a module whose weights are \
         arguments cannot be served with a parameter archive. Either load this weight dense, or have it \
         dequantized, which decodes it to f32 chunk by chunk while exporting",
        encoding_part(.encoding)
    )]
    PackedConstant {
        /// The tensor, by module path when it has one, else by name.
        tensor: String,
        /// Its module path, when it has one.
        path: Option<String>,
        /// The encoding name, when known.
        encoding: Option<String>,
    },

    /// A tensor's storage disagrees with its spec (wrong dtype or byte count).
    #[error("tensor '{tensor}': its {storage} storage does not match its spec: {detail}")]
    StorageMismatch {
        /// The tensor's name.
        tensor: String,
        /// Storage kind.
        storage: &'static str,
        /// What disagrees.
        detail: String,
    },

    /// A packed weight cannot be kept packed (`PackedConstantHandling::Keep`) in its shape.
    #[error("tensor '{tensor}': cannot keep its {encoding} blocks packed: {detail}; dequantize it instead")]
    CannotKeepPacked {
        /// The tensor, by module path when it has one.
        tensor: String,
        /// The encoding.
        encoding: String,
        /// Why.
        detail: String,
    },

    /// A packed weight cannot be decoded (unknown encoding, unsupported block order).
    #[error("tensor '{tensor}': cannot dequantize: {detail}")]
    CannotDecode {
        /// The tensor's name.
        tensor: String,
        /// Why.
        detail: String,
    },

    /// A node refers to a tensor that does not exist.
    #[error("{node}: {port} {index} refers to tensor #{tensor}, which the trace does not contain")]
    DanglingReference {
        /// The node, as [`crate::Op::describe`] names it.
        node: String,
        /// Op name.
        op: &'static str,
        /// "input" or "output".
        port: &'static str,
        /// Port index.
        index: usize,
        /// The missing tensor index.
        tensor: usize,
    },

    /// Two nodes produce the same tensor.
    #[error("tensor '{tensor}' is produced by both node {first} and node {second}; every tensor has one producer")]
    DuplicateProducer {
        /// The tensor's name.
        tensor: String,
        /// First producer.
        first: String,
        /// Second producer.
        second: String,
    },

    /// The nodes form a cycle.
    #[error("the graph has a cycle: {}, back to the first; a traced graph must be acyclic", .nodes.join(" -> "))]
    Cycle {
        /// The nodes on one cycle, in data-flow order (nothing downstream of it).
        nodes: Vec<String>,
    },

    /// A node has the wrong number of inputs or outputs for its op.
    #[error("{node}: expected {expected} {port}s, got {found}")]
    Arity {
        /// The node, as [`crate::Op::describe`] names it.
        node: String,
        /// Op name.
        op: &'static str,
        /// "input" or "output".
        port: &'static str,
        /// What the op takes.
        expected: String,
        /// What the node has.
        found: usize,
    },

    /// A node's operand or result types do not fit its op.
    #[error("{node}: {detail}")]
    TypeMismatch {
        /// The node, as [`crate::Op::describe`] names it.
        node: String,
        /// Op name.
        op: &'static str,
        /// What does not fit.
        detail: String,
    },

    /// A graph output is not a tensor of the trace.
    #[error("graph output {index} refers to tensor #{tensor}, which the trace does not contain")]
    BadOutput {
        /// Output position.
        index: usize,
        /// The missing tensor index.
        tensor: usize,
    },

    /// A recorded graph names an op, or sets an attribute, that only tapeout's own passes write.
    #[error(
        "{node}: {what} is written by tapeout's own passes, not recorded: a graph file, a trace or a tape cannot \
         name it; record the plain op (a matmul without it, no row gates or barriers) and let the export choose the \
         device's forms (--target)"
    )]
    PassOnly {
        /// The node, as messages name nodes.
        node: String,
        /// The op (`op 'gate_rows'`) or attribute (`attribute 'banded'`).
        what: String,
    },

    /// The export's options contradict each other.
    #[error("the export's options contradict each other: {detail}")]
    Options {
        /// Which options, and what to do.
        detail: String,
    },

    /// The target device cannot hold a value of the graph exactly, and no form of tapeout's avoids it: a function
    /// argument or result narrower than 32 bits on IREE 3.13's default Vulkan profile, which stores only 32-bit
    /// values and reads narrower buffers passed to it wrongly (docs/devices.md).
    #[error(
        "{what} is {dtype}: on {target}, IREE 3.13 misreads buffers of values narrower than 32 bits passed in or out          of a function (its default Vulkan profile stores only 32-bit values); {remedy}"
    )]
    Target {
        /// The target (`vulkan`).
        target: String,
        /// The value: `argument 'x'` or `result 'y'`.
        what: String,
        /// Its dtype.
        dtype: String,
        /// What to do instead.
        remedy: String,
    },

    /// The graph declares no outputs: the module would compute nothing.
    #[error("the graph has no outputs: it would compute nothing")]
    NoOutputs,

    /// A rewrite of `finalize` produced a graph that breaks a rule the recorded graph was checked against (a use
    /// before its definition, a tensor without a producer, an op whose types do not fit, a constant whose values
    /// disagree with its tensor). This is a bug in tapeout, not in the model: file it with the message and the
    /// graph that triggers it. Until it is fixed, turning the rewrite off avoids it (`keep_packed` runs for
    /// `PackedConstantHandling::Keep`, `transpose_at_export` for `WeightLayout::ChosenForUse`).
    #[error(
        "internal error: the {pass} rewrite broke the graph at {node}: {detail}. This is a bug in tapeout, not in          the model: please report it with this message and the graph; until it is fixed, {}",
        pass_workaround(pass)
    )]
    PassBroke {
        /// The rewrite whose output failed verification.
        pass: &'static str,
        /// Where: the node as [`crate::Op::describe`] names it (an inserted op by the recorded node it stands
        /// for), or the tensor or output.
        node: String,
        /// The rule it breaks.
        detail: String,
    },
}

/// How a user avoids a broken rewrite until it is fixed.
fn pass_workaround(pass: &str) -> &'static str {
    match pass {
        "keep_packed" => "have packed weights dequantized instead of kept packed",
        "transpose_at_export" => "export with the weight layout as held (WeightLayout::AsHeld)",
        _ => "export without the rewrite",
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = GraphError> = std::result::Result<T, E>;

/// The index of a node label as [`crate::Op::describe`] writes it (`node 3 (add -> 'y')`); `None` for any other
/// subject (a function, a parameter). The label's owner is this crate, and a test ties the two together.
fn label_index(label: &str) -> Option<u64> {
    let rest = label.strip_prefix("node ")?;
    let end = rest.find(' ').unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl GraphError {
    /// The indices of the recorded nodes this error is about, in the order its message names them (empty when it
    /// names none): front ends use them to point at the code that recorded each node.
    #[must_use]
    pub fn nodes(&self) -> Vec<u64> {
        match self {
            GraphError::DanglingReference { node, .. }
            | GraphError::Arity { node, .. }
            | GraphError::TypeMismatch { node, .. }
            | GraphError::PassBroke { node, .. } => label_index(node).into_iter().collect(),
            GraphError::DuplicateProducer { first, second, .. } => {
                [first, second].into_iter().filter_map(|l| label_index(l)).collect()
            }
            GraphError::Cycle { nodes } => nodes.iter().filter_map(|l| label_index(l)).collect(),
            _ => Vec::new(),
        }
    }

    /// The tensor (by module path when it has one, else by name) this error is about, when it is about one.
    #[must_use]
    pub fn tensor(&self) -> Option<&str> {
        match self {
            GraphError::PackedConstant { tensor, .. }
            | GraphError::StorageMismatch { tensor, .. }
            | GraphError::CannotKeepPacked { tensor, .. }
            | GraphError::CannotDecode { tensor, .. }
            | GraphError::DuplicateProducer { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Op, OpKind, Shape, TensorId, TensorSpec};

    #[test]
    fn nodes_are_the_indices_describe_writes() {
        let spec = TensorSpec::new("y", Shape::of(&[2]), DType::F32);
        let op = Op {
            index: 17,
            op: OpKind::Add,
            inputs: vec![],
            outputs: vec![TensorId::at(0)],
            attrs: Default::default(),
            origin: crate::trace::Origin::Recorded,
        };
        let labelled = op.describe(|_| Some(&spec));
        let bare = op.describe(|_| None);
        let e = GraphError::Cycle { nodes: vec![labelled.clone(), bare, "function 'f'".into()] };
        assert_eq!(e.nodes(), vec![17, 17]);
        let e = GraphError::TypeMismatch { node: labelled, op: "add", detail: "d".into() };
        assert_eq!((e.nodes(), e.tensor()), (vec![17], None));
        // An op a rewrite inserted is about the recorded node it stands for, never its own fresh index.
        let inserted = Op::inserted(40, Some(3), OpKind::Convert, Default::default(), vec![], vec![TensorId::at(0)]);
        let orphan = Op::inserted(41, None, OpKind::Convert, Default::default(), vec![], vec![TensorId::at(0)]);
        let e =
            GraphError::PassBroke { pass: "keep_packed", node: inserted.describe(|_| Some(&spec)), detail: "d".into() };
        assert_eq!(e.nodes(), vec![3]);
        let e = GraphError::Cycle { nodes: vec![orphan.describe(|_| Some(&spec))] };
        assert_eq!(e.nodes(), Vec::<u64>::new());
        let e = GraphError::PackedConstant { tensor: "model.w".into(), path: None, encoding: None };
        assert_eq!((e.nodes(), e.tensor()), (vec![], Some("model.w")));
    }
}
