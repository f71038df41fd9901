//! The row-count ops (`pad_rows`, `gate_rows`, `place_rows`): a product over `?` rows computed in several forms,
//! fast ones for a few rows (8, 16, 32) and one for many, each of whose operands is sliced to zero extent when it is
//! not the one for the actual rows (`keep_packed` writes them for each kept weight's `?`-row linear). No branch: IREE 3.13
//! ends its stream execution region at every `scf.if`, and a dispatch over zero elements costs next to nothing
//! (docs/performance.md#weights-in-iree).

use tapeout_graph::{Dim, Shape};

use super::builder::{Emitter, Val, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
    /// `x [L.., K]` as `[rows, K]`: the first `rows` of its merged leading dims, zero rows after them.
    pub(crate) fn pad_rows(&mut self, x: &Val, out: &Shape) -> Result<Val> {
        let (Some(Dim::Static(k)), Some(Dim::Static(rows))) = (x.shape.0.last().copied(), out.0.first().copied())
        else {
            return Err(self.err(format!("pad_rows of [{}] to [{out}]: K and rows must be static", x.shape)));
        };
        let flat = self.rows_of(x, k)?;
        let count = self.row_count(&flat);
        let limit = self.index_const(rows);
        let take = self.fresh();
        self.line(&format!("{take} = arith.minui {count}, {limit} : index"));
        let part_shape = Shape(vec![Dim::Dynamic, Dim::Static(k)]);
        let rhs = format!(
            "tensor.extract_slice {}[0, 0] [{take}, {k}] [1, 1] : {} to {}",
            flat.name,
            flat.ty(),
            ty(&part_shape, x.dtype)
        );
        let part = self.assign(&rhs, part_shape, x.dtype);
        let zeros = self.zeros(out, x.dtype, (&part, 0));
        let rhs = format!(
            "tensor.insert_slice {} into {}[0, 0] [{take}, {k}] [1, 1] : {} into {}",
            part.name,
            zeros.name,
            part.ty(),
            zeros.ty()
        );
        Ok(self.assign(&rhs, out.clone(), x.dtype))
    }

    /// `t`, or its first 0 entries along `axis`, by `like`'s row count against `rows` (`few`: whole when at most).
    pub(crate) fn gate_rows(&mut self, t: &Val, like: &Val, out: &Shape) -> Result<Val> {
        let axis = self.axis("axis", self.attr_int("axis", 0)?, t.rank())?;
        self.gate_rows_along(t, like, axis, out)
    }

    /// [`Emitter::gate_rows`] along `axis` rather than the node's own: the node's gate applied to another tensor
    /// (codes in row bands gated along their band axis where the program gates their columns).
    fn gate_rows_along(&mut self, t: &Val, like: &Val, axis: usize, out: &Shape) -> Result<Val> {
        let rows = self.rows_attr()?;
        let few = match self.attr("few") {
            None => true,
            Some(tapeout_graph::Attr::Bool(b)) => *b,
            Some(other) => return Err(self.err(format!("attribute 'few' must be a bool, got {other:?}"))),
        };
        let (_, _, open) = self.rows_against(like, rows, if few { "ule" } else { "ugt" })?;
        let whole = self.extent(t, axis);
        let zero = self.index_const(0);
        let extent = self.fresh();
        self.line(&format!("{extent} = arith.select {open}, {whole}, {zero} : index"));
        let sizes: Vec<String> =
            (0..t.rank()).map(|i| if i == axis { extent.clone() } else { self.extent_text(t, i) }).collect();
        let sizes = self.materialize(sizes, t);
        let zeros = vec!["0"; t.rank()].join(", ");
        let ones = vec!["1"; t.rank()].join(", ");
        let rhs = format!(
            "tensor.extract_slice {}[{zeros}] [{}] [{ones}] : {} to {}",
            t.name,
            sizes.join(", "),
            t.ty(),
            ty(out, t.dtype)
        );
        Ok(self.assign(&rhs, out.clone(), t.dtype))
    }

    /// `base` with its rows replaced by `small`'s first rows and columns when it has at most `rows` rows and `small`
    /// at least its columns.
    pub(crate) fn place_rows(&mut self, small: &Val, base: &Val, out: &Shape) -> Result<Val> {
        let rows = self.rows_attr()?;
        let (flat, count, few) = self.rows_against(base, rows, "ule")?;
        let Some(&Dim::Static(n)) = base.shape.0.last() else {
            return Err(self.err(format!("place_rows into [{}]: its last dim must be static", base.shape)));
        };
        let cols = self.extent(small, 1);
        let want = self.index_const(n);
        let wide = self.fresh();
        self.line(&format!("{wide} = arith.cmpi uge, {cols}, {want} : index"));
        let ok = self.fresh();
        self.line(&format!("{ok} = arith.andi {few}, {wide} : i1"));
        let zero = self.index_const(0);
        let (take, width) = (self.fresh(), self.fresh());
        self.line(&format!("{take} = arith.select {ok}, {count}, {zero} : index"));
        self.line(&format!("{width} = arith.select {ok}, {want}, {zero} : index"));
        let part_shape = Shape(vec![Dim::Dynamic, Dim::Dynamic]);
        let rhs = format!(
            "tensor.extract_slice {}[0, 0] [{take}, {width}] [1, 1] : {} to {}",
            small.name,
            small.ty(),
            ty(&part_shape, small.dtype)
        );
        let part = self.assign(&rhs, part_shape, small.dtype);
        let rhs = format!(
            "tensor.insert_slice {} into {}[0, 0] [{take}, {width}] [1, 1] : {} into {}",
            part.name,
            flat.name,
            part.ty(),
            flat.ty()
        );
        let placed = self.assign(&rhs, flat.shape.clone(), flat.dtype);
        if placed.shape == *out { Ok(placed) } else { self.reshape(&placed, out) }
    }

    /// `x [L.., K]` as `[P, K]`, P as an `index` value, and `P <pred> rows` (an `arith.cmpi` predicate) as an
    /// `i1` value.
    fn rows_against(&mut self, x: &Val, rows: u64, pred: &str) -> Result<(Val, String, String)> {
        let Some(&Dim::Static(k)) = x.shape.0.last() else {
            return Err(self.err(format!(
                "the row count of [{}] is read with its last dim static: give the tensor a static last dim",
                x.shape
            )));
        };
        let flat = self.rows_of(x, k)?;
        let count = self.row_count(&flat);
        let limit = self.index_const(rows);
        let flag = self.fresh();
        self.line(&format!("{flag} = arith.cmpi {pred}, {count}, {limit} : index"));
        Ok((flat, count, flag))
    }

    fn rows_attr(&self) -> Result<u64> {
        u64::try_from(self.attr_int("rows", 0)?)
            .ok()
            .filter(|&r| r >= 1)
            .ok_or_else(|| self.err("the row-count ops need `rows` of at least 1"))
    }

    /// `x [L.., K]` as `[P, K]`, its leading dims merged (at most one of them `?`).
    fn rows_of(&mut self, x: &Val, k: u64) -> Result<Val> {
        let lead = &x.shape.0[..x.rank().saturating_sub(1)];
        let p = if lead.contains(&Dim::Dynamic) {
            Dim::Dynamic
        } else {
            let p = lead.iter().try_fold(1u64, |p, d| if let Dim::Static(n) = d { p.checked_mul(*n) } else { Some(p) });
            Dim::Static(p.ok_or_else(|| self.err(format!("the rows of [{}] overflow u64", x.shape)))?)
        };
        let flat = Shape(vec![p, Dim::Static(k)]);
        if x.shape == flat { Ok(x.clone()) } else { self.reshape(x, &flat) }
    }

    /// The rows of a `[P, K]` value as an `index` value.
    fn row_count(&mut self, flat: &Val) -> String {
        self.extent(flat, 0)
    }

    /// Dimension `i` of `x` as an `index` value.
    fn extent(&mut self, x: &Val, i: usize) -> String {
        match x.shape.0.get(i) {
            Some(&Dim::Static(n)) => self.index_const(n),
            _ => self.dim_index(x, i),
        }
    }

    /// Dimension `i` of `x` as a slice writes it: the number, or `?` (made an SSA value by [`Self::materialize`]).
    fn extent_text(&self, x: &Val, i: usize) -> String {
        match x.shape.0.get(i) {
            Some(&Dim::Static(n)) => n.to_string(),
            _ => "?".to_owned(),
        }
    }

    /// Slice sizes with every `?` replaced by its `tensor.dim` of `x`.
    fn materialize(&mut self, sizes: Vec<String>, x: &Val) -> Vec<String> {
        sizes.into_iter().enumerate().map(|(i, s)| if s == "?" { self.dim_index(x, i) } else { s }).collect()
    }

    fn index_const(&mut self, v: u64) -> String {
        let c = self.fresh();
        self.line(&format!("{c} = arith.constant {v} : index"));
        c
    }
}
