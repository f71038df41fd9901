//! Tensor shapes: static or dynamic dimensions, with 64-bit element counts.

use std::fmt;

/// One dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A known extent.
    Static(u64),
    /// Known only at run time (`?` in MLIR). A shape with one has no volume.
    Dynamic,
}

/// A tensor shape, outermost dimension first (row-major).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// A fully static shape.
    #[must_use]
    pub fn of(dims: &[u64]) -> Self {
        Shape(dims.iter().map(|&d| Dim::Static(d)).collect())
    }

    /// The scalar (rank-0) shape.
    #[must_use]
    pub fn scalar() -> Self {
        Shape(Vec::new())
    }

    /// Number of dimensions.
    #[must_use]
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// True when any dimension is dynamic.
    #[must_use]
    pub fn is_dynamic(&self) -> bool {
        self.0.contains(&Dim::Dynamic)
    }

    /// The static extents, or `None` when any dimension is dynamic.
    #[must_use]
    pub fn static_dims(&self) -> Option<Vec<u64>> {
        self.0
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Some(*n),
                Dim::Dynamic => None,
            })
            .collect()
    }

    /// The MLIR ranked tensor type of this shape with elements of `dtype`: `tensor<4x?xf32>`, `tensor<i1>` for a
    /// scalar. The one spelling of tensor types, for [`crate::TensorSpec::mlir_type`] and the emitter alike.
    #[must_use]
    pub fn mlir_type(&self, dtype: crate::DType) -> String {
        if self.rank() == 0 {
            format!("tensor<{}>", dtype.mlir_name())
        } else {
            format!("tensor<{self}x{}>", dtype.mlir_name())
        }
    }

    /// The element count as a `u64`: `None` for a dynamic shape, and `None` on overflow.
    /// A dynamic shape never gets a volume.
    #[must_use]
    pub fn element_count(&self) -> Option<u64> {
        self.0.iter().try_fold(1u64, |acc, d| match d {
            Dim::Static(n) => acc.checked_mul(*n),
            Dim::Dynamic => None,
        })
    }
}

impl fmt::Display for Dim {
    /// The extent, or `?` for a run-time one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Dynamic => f.write_str("?"),
        }
    }
}

impl fmt::Display for Shape {
    /// `4x3`, `?x128`, or the empty string for a scalar (the MLIR spelling without the dtype).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("x")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_64_bit_and_checked() {
        assert_eq!(Shape::of(&[262_144, 2048]).element_count(), Some(1 << 29));
        assert_eq!(Shape::of(&[65_536, 32_768]).element_count(), Some(1 << 31));
        assert_eq!(Shape::of(&[1 << 40, 1 << 40]).element_count(), None);
        assert_eq!(Shape::scalar().element_count(), Some(1));
        assert_eq!(Shape(vec![Dim::Dynamic, Dim::Static(4)]).element_count(), None);
        assert_eq!(Shape(vec![Dim::Dynamic, Dim::Static(4)]).to_string(), "?x4");
    }
}
