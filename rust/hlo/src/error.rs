//! The one error type of this crate.

/// Everything that can go wrong while emitting or exporting a module.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HloError {
    /// An error in one function of a module with several.
    #[error("function '{function}': {source}")]
    InFunction {
        /// The function's name.
        function: String,
        /// What went wrong in it.
        source: Box<HloError>,
    },

    /// A node's attribute is missing or malformed.
    #[error("{node}: attribute '{attr}' {detail}")]
    BadAttribute {
        /// The node, as `ComputeGraph::describe` names it.
        node: String,
        /// Op name.
        op: &'static str,
        /// Attribute name.
        attr: String,
        /// What is wrong.
        detail: String,
    },

    /// A node is valid but cannot be lowered as given (shape, rank or dtype outside what the
    /// lowering supports).
    #[error("{node}: {detail}")]
    Unsupported {
        /// The node, as `ComputeGraph::describe` names it.
        node: String,
        /// Op name.
        op: &'static str,
        /// What is not supported, and what to do.
        detail: String,
    },

    /// A constant is too large to be written inline as text.
    #[error(
        "constant '{tensor}' is {bytes} bytes, above the {ceiling}-byte ceiling for an inline constant (one 2 GiB buffer); \
         make it an external parameter (a size threshold at or below {bytes} bytes)"
    )]
    ConstantTooLarge {
        /// The tensor.
        tensor: String,
        /// Its size in bytes.
        bytes: u64,
        /// The largest inline constant.
        ceiling: u64,
    },

    /// An inline constant's values could not be produced (its memory could not be lent, or its blocks
    /// cannot be decoded).
    #[error("constant '{tensor}': {source}")]
    ConstantValues {
        /// The tensor.
        tensor: String,
        /// What stopped the stream.
        #[source]
        source: tapeout_graph::StreamError,
    },

    /// Writing the module text failed (the sink's own error; the caller knows which file it is).
    #[error("cannot write the module text: {0}")]
    Output(#[source] std::io::Error),
}

/// Shorthand for results of this crate.
pub type Result<T, E = HloError> = std::result::Result<T, E>;

impl HloError {
    /// The index of the node this error is about, when it is about a recorded node (the subject label
    /// `node N (…)` that `ComputeGraph::describe` writes), for front ends to point at the code that recorded it.
    #[must_use]
    pub fn node(&self) -> Option<u64> {
        match self {
            HloError::InFunction { source, .. } => source.node(),
            HloError::BadAttribute { node, .. } | HloError::Unsupported { node, .. } => {
                let rest = node.strip_prefix("node ")?;
                rest[..rest.find(' ').unwrap_or(rest.len())].parse().ok()
            }
            _ => None,
        }
    }

    /// The function of a module with several that this error is in: [`Self::node`] indexes its graph.
    #[must_use]
    pub fn function(&self) -> Option<&str> {
        match self {
            HloError::InFunction { function, .. } => Some(function),
            _ => None,
        }
    }

    /// The tensor this error is about, when it is about one.
    #[must_use]
    pub fn tensor(&self) -> Option<&str> {
        match self {
            HloError::InFunction { source, .. } => source.tensor(),
            HloError::ConstantTooLarge { tensor, .. } | HloError::ConstantValues { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_tensor_come_from_the_fields() {
        let e = HloError::Unsupported { node: "node 12 (clamp -> 'y')".into(), op: "clamp", detail: "d".into() };
        let e = HloError::InFunction { function: "decode".into(), source: Box::new(e) };
        assert_eq!((e.node(), e.tensor()), (Some(12), None));
        let e = HloError::Unsupported { node: "parameter 'model.w'".into(), op: "", detail: "d".into() };
        assert_eq!(e.node(), None);
        let e = HloError::ConstantTooLarge { tensor: "w".into(), bytes: 9, ceiling: 1 };
        assert_eq!((e.node(), e.tensor()), (None, Some("w")));
    }
}
