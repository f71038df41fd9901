//! Reshapes (grouping `?` dims), transposes, slices and concatenations.

use tapeout_graph::{DType, Dim, Shape};

use super::{Emitter, Val, list, signless, ty};
use crate::error::Result;

/// The most parts [`Emitter::concat_tree`] concatenates in one op.
const CONCAT_FAN_IN: usize = 16;

/// The dimensions `0..rank` grouped around the ones `kept`: each group holds exactly one kept dimension, the
/// others before the first kept one join its group and every other joins the group before it. Empty when no
/// dimension is kept.
pub(super) fn groups_around(rank: usize, kept: impl Fn(usize) -> bool) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut leading = Vec::new();
    for i in 0..rank {
        if kept(i) {
            let mut g = std::mem::take(&mut leading);
            g.push(i);
            groups.push(g);
        } else if let Some(last) = groups.last_mut() {
            last.push(i);
        } else {
            leading.push(i);
        }
    }
    groups
}

/// The dimensions of `shape` grouped around those that are not a static 1 ([`groups_around`]), with those
/// dimensions as the squeezed shape. None when `shape` has no dimension other than static 1s.
pub(super) fn squeeze_groups(shape: &Shape) -> Option<(Vec<Vec<usize>>, Shape)> {
    let kept = |i: usize| shape.0[i] != Dim::Static(1);
    let groups = groups_around(shape.rank(), kept);
    let squeezed = Shape((0..shape.rank()).filter(|&i| kept(i)).map(|i| shape.0[i]).collect());
    if groups.is_empty() { None } else { Some((groups, squeezed)) }
}

/// The dimensions of `many` grouped under each dimension of `few` for a reshape that splits (or, read the
/// other way, merges) whole dimensions: consecutive groups whose static sizes multiply to the `few` size, a `?`
/// of `few` owning exactly one `?` of `many`. Trailing 1s join the last group. `None` when no such grouping exists.
pub(super) fn group_dims(few: &[Dim], many: &[Dim], collapsing: bool) -> Option<Vec<Vec<usize>>> {
    let mut groups = Vec::with_capacity(few.len());
    let mut j = 0;
    let statics =
        |dims: &[Dim]| dims.iter().try_fold(1u64, |p, d| if let Dim::Static(n) = d { p.checked_mul(*n) } else { None });
    for (i, d) in few.iter().enumerate() {
        let mut g = Vec::new();
        match d {
            Dim::Static(n) => {
                let mut p = 1u64;
                while p < *n || (g.is_empty() && *n == 1) {
                    match many.get(j)? {
                        Dim::Static(m) => p = p.checked_mul(*m)?,
                        Dim::Dynamic => return None,
                    }
                    g.push(j);
                    j += 1;
                }
                if p != *n {
                    return None;
                }
            }
            Dim::Dynamic => {
                loop {
                    let m = many.get(j)?;
                    g.push(j);
                    j += 1;
                    if *m == Dim::Dynamic {
                        break;
                    }
                }
                // Collapsing, static dims after the `?` merge into it while the rest of `many` holds more than the
                // rest of `few` (both static): `[?, 32, N]` into `[?, N]`. Not when expanding: `[?, N]` into
                // `[?, 32, N]` would split a `?` by 32 at run time, which no size check guards.
                if let Some(rest) = statics(&few[i + 1..]).filter(|_| collapsing) {
                    while let (Some(Dim::Static(_)), Some(more)) = (many.get(j), statics(&many[j..])) {
                        if more <= rest {
                            break;
                        }
                        g.push(j);
                        j += 1;
                    }
                }
            }
        }
        groups.push(g);
    }
    while j < many.len() {
        if many[j] != Dim::Static(1) {
            return None;
        }
        groups.last_mut()?.push(j);
        j += 1;
    }
    Some(groups)
}

impl Emitter<'_, '_, '_> {
    /// `x` reshaped to `shape`. With `?` dimensions the reshape must split or merge whole dimensions (each `?`
    /// on one side in a group with exactly one `?` on the other), written as `tensor.expand_shape` /
    /// `tensor.collapse_shape`: IREE 3.13 does not lower `stablehlo.dynamic_reshape` at all. Anything else is
    /// an error naming the shapes, never MLIR IREE rejects.
    pub(crate) fn reshape(&mut self, x: &Val, shape: &Shape) -> Result<Val> {
        if !shape.is_dynamic() && !x.shape.is_dynamic() {
            if shape.element_count() != x.shape.element_count() {
                return Err(self.err(format!("cannot reshape [{}] to [{shape}]: the element counts differ", x.shape)));
            }
            let rhs = format!("stablehlo.reshape {} : ({}) -> {}", x.name, x.ty(), ty(shape, x.dtype));
            return Ok(self.assign(&rhs, shape.clone(), x.dtype));
        }
        let unsupported = || {
            self.err(format!(
                "cannot reshape [{}] to [{shape}] with `?` dimensions: a dynamic reshape must split or merge whole \
                 dimensions, each `?` grouped with exactly one `?` of the other shape (IREE 3.13 lowers only those)",
                x.shape
            ))
        };
        let expand = shape.0.len() >= x.shape.0.len();
        let (few, many) = if expand { (&x.shape.0, &shape.0) } else { (&shape.0, &x.shape.0) };
        let groups = group_dims(few, many, !expand).ok_or_else(unsupported)?;
        Ok(self.reshape_grouped(x, shape, &groups))
    }

    /// `tensor.expand_shape` / `tensor.collapse_shape` of `x` to `shape`, dimension `i` of the shorter shape
    /// being the dimensions `groups[i]` of the longer one (each group holding at most one `?`).
    pub(super) fn reshape_grouped(&mut self, x: &Val, shape: &Shape, groups: &[Vec<usize>]) -> Val {
        let expand = shape.0.len() >= x.shape.0.len();
        let assoc = format!("[{}]", list(groups.iter().map(|g| format!("[{}]", list(g.clone())))));
        if !expand {
            let rhs = format!("tensor.collapse_shape {} {assoc} : {} into {}", x.name, x.ty(), ty(shape, x.dtype));
            return self.assign(&rhs, shape.clone(), x.dtype);
        }
        // expand_shape names every output size: static ones as numbers, a `?` as the input size divided by the
        // static sizes of its group.
        let mut sizes = Vec::with_capacity(shape.0.len());
        for (i, g) in groups.iter().enumerate() {
            let statics: u64 =
                g.iter().filter_map(|&j| if let Dim::Static(n) = shape.0[j] { Some(n) } else { None }).product();
            for &j in g {
                match shape.0[j] {
                    Dim::Static(n) => sizes.push(n.to_string()),
                    Dim::Dynamic => {
                        let d = self.dim_index(x, i);
                        let size = if statics > 1 {
                            let c = self.fresh();
                            self.line(&format!("{c} = arith.constant {statics} : index"));
                            let q = self.fresh();
                            self.line(&format!("{q} = arith.divui {d}, {c} : index"));
                            q
                        } else {
                            d
                        };
                        sizes.push(size);
                    }
                }
            }
        }
        self.expand_shape(x, shape, groups, &sizes)
    }

    /// `tensor.expand_shape` of `x` to `shape` (dimension `i` of `x` being the dimensions `groups[i]` of `shape`),
    /// each `?` of `shape` sized as the same dimension of `like`: for groups holding several `?`, whose split the
    /// merged size alone does not give.
    pub(super) fn expand_like(&mut self, x: &Val, shape: &Shape, groups: &[Vec<usize>], like: &Val) -> Val {
        let mut sizes = Vec::with_capacity(shape.0.len());
        for j in 0..shape.0.len() {
            sizes.push(match shape.0[j] {
                Dim::Static(n) => n.to_string(),
                Dim::Dynamic => self.dim_index(like, j),
            });
        }
        self.expand_shape(x, shape, groups, &sizes)
    }

    /// `tensor.expand_shape` of `x` to `shape` with every output size given (`sizes`: numbers or `index` values).
    fn expand_shape(&mut self, x: &Val, shape: &Shape, groups: &[Vec<usize>], sizes: &[String]) -> Val {
        let assoc = format!("[{}]", list(groups.iter().map(|g| format!("[{}]", list(g.clone())))));
        let rhs = format!(
            "tensor.expand_shape {} {assoc} output_shape [{}] : {} into {}",
            x.name,
            list(sizes),
            x.ty(),
            ty(shape, x.dtype)
        );
        self.assign(&rhs, shape.clone(), x.dtype)
    }

    /// The reduction `r` of `x` over `axes` with those axes put back as size 1 (`keepdims`): a broadcast, which
    /// IREE lowers for dynamic shapes where it does not lower a dynamic reshape.
    pub(crate) fn keep_dims(&mut self, r: &Val, x: &Val, axes: &[usize], shape: &Shape) -> Result<Val> {
        if !shape.is_dynamic() {
            return self.reshape(r, shape);
        }
        let mut parts = Vec::with_capacity(x.rank());
        for i in 0..x.rank() {
            parts.push(if axes.contains(&i) {
                self.splat(1.0, &Shape::scalar(), DType::I32)
            } else {
                self.dim_size(x, i)?
            });
        }
        let st = self.shape_of_parts(&parts);
        let dims: Vec<usize> = (0..x.rank()).filter(|i| !axes.contains(i)).collect();
        Ok(self.dynamic_broadcast(r, &dims, shape, &st))
    }

    pub(crate) fn transpose(&mut self, x: &Val, perm: &[usize]) -> Val {
        let shape = Shape(perm.iter().map(|&p| x.shape.0[p]).collect());
        let rhs = format!(
            "stablehlo.transpose {}, dims = [{}] : ({}) -> {}",
            x.name,
            list(perm),
            x.ty(),
            ty(&shape, x.dtype)
        );
        self.assign(&rhs, shape, x.dtype)
    }

    pub(crate) fn slice(&mut self, x: &Val, ranges: &[(u64, u64, u64)]) -> Val {
        let shape = Shape(ranges.iter().map(|&(s, l, st)| Dim::Static((l - s).div_ceil(st))).collect());
        let spec =
            list(ranges.iter().map(|&(s, l, st)| if st == 1 { format!("{s}:{l}") } else { format!("{s}:{l}:{st}") }));
        let rhs = format!("stablehlo.slice {} [{spec}] : ({}) -> {}", x.name, x.ty(), ty(&shape, x.dtype));
        self.assign(&rhs, shape, x.dtype)
    }

    /// The parts joined along `axis`: `stablehlo.concatenate` where the result's extent there is static; with a `?`
    /// extent there (HF's KV cache `cat(past, new)`), each part inserted at its offset
    /// ([`Emitter::concat_in_place`]).
    pub(crate) fn concat(&mut self, parts: &[Val], axis: usize) -> Result<Val> {
        let mut shape = parts[0].shape.clone();
        let mut total = Some(0u64);
        for p in parts {
            total = match (total, p.shape.0.get(axis)) {
                (Some(t), Some(Dim::Static(n))) => t.checked_add(*n),
                (_, Some(_)) => None,
                (_, None) => return Err(self.err(format!("operand [{}] has no axis {axis}", p.shape))),
            };
        }
        shape.0[axis] = total.map_or(Dim::Dynamic, Dim::Static);
        // IREE 3.13 lowers a `stablehlo.concatenate` with any `?` extent into one dispatch choosing each element's part
        // by branches, which its SPIR-V code gets wrong (two merged branches lose a buffer) and which needs two push
        // constants per part: for Vulkan every such concatenation is insertions (docs/devices.md).
        let vulkan = self.g.forms() == tapeout_graph::Forms::Vulkan && shape.is_dynamic();
        if total.is_none() || vulkan {
            // `tensor` ops take signless integers only in IREE 3.13: unsigned parts are joined as their bits.
            if let Some(bits) = signless(parts[0].dtype) {
                let signless: Vec<Val> = parts.iter().map(|p| self.bitcast(p, bits)).collect();
                let joined = self.concat_in_place(&signless, axis, shape);
                return Ok(self.bitcast(&joined, parts[0].dtype));
            }
            return Ok(self.concat_in_place(parts, axis, shape));
        }
        let rhs = format!(
            "stablehlo.concatenate {}, dim = {axis} : ({}) -> {}",
            list(parts.iter().map(|p| p.name.clone())),
            list(parts.iter().map(Val::ty)),
            ty(&shape, parts[0].dtype)
        );
        Ok(self.assign(&rhs, shape, parts[0].dtype))
    }

    /// A concatenation whose extent along `axis` is `?` (`shape`, checked by [`Emitter::concat`]), written as
    /// each part inserted into an empty result at its offset (`tensor.insert_slice`). IREE 3.13 lowers a
    /// `stablehlo.concatenate` with a `?` extent into one dispatch that computes every element's source with
    /// divisions and a branch. For HF's KV cache `cat(past, new)` at 1024 positions that took most of a decode
    /// step's dispatch time (docs/performance.md#llm-decode-and-prefill). Each insertion of a whole part becomes a
    /// copy of its bytes.
    pub(super) fn concat_in_place(&mut self, parts: &[Val], axis: usize, shape: Shape) -> Val {
        let rank = shape.rank();
        // Every part's extents as MLIR writes them in a slice: a number, or its `tensor.dim`.
        let mut extents: Vec<Vec<String>> = Vec::with_capacity(parts.len());
        for p in parts {
            let mut e = Vec::with_capacity(rank);
            for (i, d) in p.shape.0.iter().enumerate() {
                e.push(match d {
                    Dim::Static(n) => n.to_string(),
                    Dim::Dynamic => self.dim_index(p, i),
                });
            }
            extents.push(e);
        }
        // The result's `?` extents: the parts' sum along `axis`, the first part's elsewhere.
        let mut offsets = Vec::with_capacity(parts.len());
        let mut at = "0".to_owned();
        for e in &extents {
            offsets.push(at.clone());
            at = if at == "0" {
                e[axis].clone()
            } else {
                let (a, b) = (self.index_value(&at), self.index_value(&e[axis]));
                let sum = self.fresh();
                self.line(&format!("{sum} = arith.addi {a}, {b} : index"));
                sum
            };
        }
        let dynamic: Vec<String> = (0..rank)
            .filter(|&i| shape.0[i] == Dim::Dynamic)
            .map(|i| if i == axis { self.index_value(&at) } else { self.index_value(&extents[0][i]) })
            .collect();
        let out_ty = ty(&shape, parts[0].dtype);
        let mut acc =
            self.assign(&format!("tensor.empty({}) : {out_ty}", list(&dynamic)), shape.clone(), parts[0].dtype);
        let ones = list(std::iter::repeat_n("1", rank));
        for ((p, e), off) in parts.iter().zip(&extents).zip(&offsets) {
            let at = list((0..rank).map(|i| if i == axis { off.clone() } else { "0".to_owned() }));
            let rhs = format!(
                "tensor.insert_slice {} into {}[{at}] [{}] [{ones}] : {} into {out_ty}",
                p.name,
                acc.name,
                list(e),
                p.ty()
            );
            acc = self.assign(&rhs, shape.clone(), parts[0].dtype);
        }
        acc
    }

    /// Dimension `i` of `x` as an `index` value (`tensor.dim`).
    pub(crate) fn dim_index(&mut self, x: &Val, i: usize) -> String {
        let x = &self.measurable(x, i);
        let idx = self.fresh();
        self.line(&format!("{idx} = arith.constant {i} : index"));
        let d = self.fresh();
        self.line(&format!("{d} = tensor.dim {}, {idx} : {}", x.name, x.ty()));
        d
    }

    /// An extent written as a number or an SSA name, as an `index` value.
    pub(super) fn index_value(&mut self, extent: &str) -> String {
        if extent.starts_with('%') {
            return extent.to_owned();
        }
        let c = self.fresh();
        self.line(&format!("{c} = arith.constant {extent} : index"));
        c
    }

    /// [`Emitter::concat`] of any number of parts, at most [`CONCAT_FAN_IN`] at a time: IREE 3.13 may write a
    /// concatenation as one dispatch with a binding per part, and refuses one of more than 32 bindings at run time.
    /// Parts with a `?` extent along `axis` (for Vulkan, along any axis) are inserted one by one, with no limit, into
    /// one result.
    pub(crate) fn concat_tree(&mut self, mut parts: Vec<Val>, axis: usize) -> Result<Val> {
        let vulkan = self.g.forms() == tapeout_graph::Forms::Vulkan && parts.iter().any(|p| p.shape.is_dynamic());
        if vulkan || parts.iter().any(|p| p.shape.0.get(axis) == Some(&Dim::Dynamic)) {
            return self.concat(&parts, axis);
        }
        while parts.len() > CONCAT_FAN_IN {
            let mut next = Vec::with_capacity(parts.len().div_ceil(CONCAT_FAN_IN));
            for chunk in parts.chunks(CONCAT_FAN_IN) {
                next.push(if chunk.len() == 1 { chunk[0].clone() } else { self.concat(chunk, axis)? });
            }
            parts = next;
        }
        self.concat(&parts, axis)
    }

    /// `x[..., lo:hi]` along its last (static) dimension, the other dimensions whole, static or `?`.
    pub(crate) fn slice_last(&mut self, x: &Val, lo: u64, hi: u64) -> Result<Val> {
        let last = x.rank() - 1;
        let ranges: Vec<Option<(u64, u64, u64)>> = (0..x.rank()).map(|i| (i == last).then_some((lo, hi, 1))).collect();
        self.slice_whole_or(x, &ranges)
    }

    /// A slice where `None` takes a dimension whole (static or `?`) and `Some((start, limit, stride))` a range of
    /// a static one: `stablehlo.slice` for static shapes, `stablehlo.real_dynamic_slice` otherwise.
    pub(crate) fn slice_whole_or(&mut self, x: &Val, ranges: &[Option<(u64, u64, u64)>]) -> Result<Val> {
        let full: Vec<(u64, Option<u64>, u64)> = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| match (*r, x.shape.0[i]) {
                (Some((lo, hi, st)), _) => (lo, Some(hi), st),
                (None, Dim::Static(n)) => (0, Some(n), 1),
                (None, Dim::Dynamic) => (0, None, 1),
            })
            .collect();
        self.slice_ranges(x, &full)
    }

    /// A strided slice, each dimension `(start, limit, stride)` where a `None` limit is the run-time end of a `?`
    /// dimension (its result dimension is `?`): `stablehlo.slice` when everything is static, else
    /// `stablehlo.real_dynamic_slice` with the limits read by `get_dimension_size` (IREE 3.13 lowers it).
    pub(crate) fn slice_ranges(&mut self, x: &Val, ranges: &[(u64, Option<u64>, u64)]) -> Result<Val> {
        if !x.shape.is_dynamic() {
            let mut full = Vec::with_capacity(ranges.len());
            for &(lo, hi, st) in ranges {
                let hi = hi.ok_or_else(|| self.err("a slice of a static dimension needs its limit"))?;
                full.push((lo, hi, st));
            }
            return Ok(self.slice(x, &full));
        }
        let mut shape = x.shape.clone();
        let as_i32 = |e: &Self, v: u64| i32::try_from(v).map_err(|_| e.err(format!("slice bound {v} is above i32")));
        let (mut starts, mut limits, mut strides) = (Vec::new(), Vec::new(), Vec::new());
        for (i, &(lo, hi, st)) in ranges.iter().enumerate() {
            let (lo32, st32) = (as_i32(self, lo)?, as_i32(self, st)?);
            starts.push(self.splat(f64::from(lo32), &Shape::scalar(), DType::I32));
            limits.push(match hi {
                Some(hi) => {
                    shape.0[i] = Dim::Static(hi.saturating_sub(lo).div_ceil(st.max(1)));
                    let hi = as_i32(self, hi)?;
                    self.splat(f64::from(hi), &Shape::scalar(), DType::I32)
                }
                None => {
                    shape.0[i] = Dim::Dynamic;
                    self.dim_size(x, i)?
                }
            });
            strides.push(self.splat(f64::from(st32), &Shape::scalar(), DType::I32));
        }
        let (start, limit, stride) =
            (self.shape_of_parts(&starts), self.shape_of_parts(&limits), self.shape_of_parts(&strides));
        let rhs = format!(
            "stablehlo.real_dynamic_slice {}, {}, {}, {} : ({}, {}, {}, {}) -> {}",
            x.name,
            start.name,
            limit.name,
            stride.name,
            x.ty(),
            start.ty(),
            limit.ty(),
            stride.ty(),
            ty(&shape, x.dtype)
        );
        Ok(self.assign(&rhs, shape, x.dtype))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_dim_absorbs_the_statics_after_it_only_when_collapsing() {
        let (d, s) = (Dim::Dynamic, Dim::Static);
        // `[?, 32, 4]` into `[?, 4]`: the `?` takes the 32.
        assert_eq!(group_dims(&[d, s(4)], &[d, s(32), s(4)], true), Some(vec![vec![0, 1], vec![2]]));
        // `[?, 4]` into `[?, 32, 4]` would split the `?` by 32 unchecked: refused, as before.
        assert_eq!(group_dims(&[d, s(4)], &[d, s(32), s(4)], false), None);
        assert_eq!(group_dims(&[d], &[d, s(32)], false), None);
        // Reshapes that matched before group as before, either way.
        for collapsing in [true, false] {
            assert_eq!(group_dims(&[d, s(6)], &[d, s(2), s(3)], collapsing), Some(vec![vec![0], vec![1, 2]]));
            assert_eq!(group_dims(&[d, s(5)], &[d, s(1), s(5)], collapsing), Some(vec![vec![0], vec![1, 2]]));
            assert_eq!(group_dims(&[d], &[d, s(1)], collapsing), Some(vec![vec![0, 1]]));
        }
    }
}
