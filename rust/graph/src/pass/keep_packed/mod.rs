//! [`PackedConstantHandling::Keep`](crate::PackedConstantHandling::Keep): a packed weight becomes its planes
//! ([`crate::planar`]) and the ops that use it become ops on the planes, so that IREE reads the integer codes in
//! its matrix products and never materializes the f32 weight for them. This is the portable lowering: every form
//! here is plain StableHLO that every IREE backend compiles, with no layout, tile hint or scheduling op chosen for
//! one device. A device's pass ([`DeviceForms`]: the CPU's in `target::cpu`) may store the codes in another layout
//! and write its own form of a product of `?` rows; it is checked against these forms by the IREE gate.
//!
//! For a packed `W [N, K]` (blocks along `K`), with `A` the per-sub-block scale and `C` the offset term:
//! - `matmul(x, transpose(W))` (a linear layer, `x [.., K]` of static shape): `x` as `[Kb, P, B]` sub-blocks,
//!   one batched `matmul` with the converted codes `[Kb, B, N]`, times `A`, summed over the sub-blocks, plus
//!   `Σ_l x · C` when the format has an offset term;
//! - `gather(W, ids)` (an embedding, `ids` of any shape, `?` dims included: a prefill's token ids): the codes,
//!   `A` and `C` gathered by columns, scaled, reshaped to `[K, ids..]` and transposed to `[ids.., K]`;
//! - `matmul(x, transpose(W))` with `?` dimensions in `x` (a prefill's rows, where the per-block partials would
//!   grow with the rows): the whole weight dequantized for that product alone, just before it, then one plain
//!   product ([`dequantized_use`]), unless the device pass writes its own form;
//! - any other use (including `W` or `transpose(W)` as a graph output): the whole weight dequantized from its
//!   planes in the program, once.
//!
//! The planes hold `Np ≥ N` rows ([`Split::padded_rows`]); every value computed on them is `Np` wide and sliced to
//! `N` where it leaves the rewrite.
//!
//! A device pass that stores the codes in row bands ([`DeviceForms::code_bands`]: `ConstantData::Plane`'s `band`)
//! is asked only for a weight no use gathers rows of; the program still names the codes `[Kb, B, Np]`. Functions
//! that share the weight (a prefill and a decode step) declare it alike unless only some of them gather it, which
//! the export refuses with the remedy (`tapeout`'s shared-key check).
//!
//! Every op the rewrite inserts has a fresh index and stands for the recorded node it replaces (the matmul, the
//! gather), or, for the values derived from the planes before any use, for the weight's first use
//! ([`Op::origin`]): a message about it names what the user recorded.

mod planes;

use std::collections::HashMap;

pub(crate) use planes::{Builder, Planes};
pub(crate) use planes::{MAX_DIM, axis, band_view, blocks_shape, flag, ints, plane_rows, slice_along, slice_to};

use super::{DeviceForms, Fresh, Program, gathers_rows_of, swaps_two_dims, uses};
use crate::constant::{Constant, ConstantData};
use crate::dtype::DType;
use crate::error::{GraphError, Result};
use crate::ops::OpKind;
use crate::packed::Encoding;
use crate::planar::{Plane, Split};
use crate::shape::{Dim, Shape};
use crate::tensor::{Lent, TensorSpec};
use crate::trace::{Attrs, Op, TensorId};

static EIGHT: [u8; 4] = 8.0f32.to_le_bytes();
static MINUS_EIGHT: [u8; 4] = (-8.0f32).to_le_bytes();
static SIXTEEN: [u8; 4] = 16.0f32.to_le_bytes();

/// The f32 bytes of a scalar the rewrite uses: the formats' code offsets (8 for Q4_1 and Q4_K, 16 for Q5_1 and
/// Q5_K), their high bits' biases (−8 for 5-bit codes, 8 for 6-bit ones) and the high bits' weight 16, every one
/// checked end to end by the IREE gate. `None` for any other: [`Split::of`] has grown a value this rewrite does
/// not know.
fn scalar_bytes(v: i32) -> Option<&'static [u8; 4]> {
    match v {
        8 => Some(&EIGHT),
        -8 => Some(&MINUS_EIGHT),
        16 => Some(&SIXTEEN),
        _ => None,
    }
}

/// Rewrites every packed constant that is to be dequantized ([`ConstantData::Dequantize`]) and splits into planes;
/// see the module docs. `forms` is the device pass's say in it: the layout of the codes and the form of a product
/// of `?` rows, where it has one.
///
/// # Errors
/// [`GraphError::CannotKeepPacked`] for a weight that cannot be kept packed in its shape;
/// [`GraphError::PassBroke`] when a format's split asks for a scalar the rewrite has no constant for.
pub(crate) fn keep_packed<'a>(program: Program<'a>, forms: &dyn DeviceForms) -> Result<Program<'a>> {
    let Program { mut specs, inputs, mut constants, mut nodes, outputs, next_index } = program;
    let uses = uses(&nodes);
    let mut rw = Rewrite {
        nodes: &nodes,
        outputs: &outputs,
        uses: &uses,
        forms,
        prelude: Vec::new(),
        replaced: HashMap::new(),
        removed: Vec::new(),
    };
    let mut fresh = Fresh::from(next_index);
    let mut planes_out: Vec<Constant<'a>> = Vec::new();
    let mut kept_ids = Vec::new();
    for c in constants.iter() {
        let ConstantData::Dequantize { encoding, .. } = &c.data else { continue };
        let Some(split) = Split::of(encoding) else { continue };
        kept_ids.push(c.tensor);
        // The planes' shared values stand for the weight's first use (none when it is only a graph output).
        let first_use = uses.get(&c.tensor).and_then(|u| u.first()).and_then(|&i| nodes[i].origin());
        let mut b = Builder::new(&mut specs, first_use, fresh);
        let mut pl = rw.planes(&mut b, c, &split, &mut planes_out)?;
        rw.rewrite_uses(&mut b, &mut pl, c.tensor, first_use);
        rw.prelude.append(&mut b.ops);
        fresh = b.fresh;
    }
    let next_index = fresh.next();
    if kept_ids.is_empty() {
        return Ok(Program { specs, inputs, constants, nodes, outputs, next_index });
    }
    let Rewrite { mut prelude, mut replaced, removed, .. } = rw;
    constants.retain(|c| !kept_ids.contains(&c.tensor));
    constants.append(&mut planes_out);
    let old = std::mem::take(&mut nodes);
    nodes.append(&mut prelude);
    for (i, node) in old.into_iter().enumerate() {
        if let Some(seq) = replaced.remove(&i) {
            nodes.extend(seq);
        } else if !removed.contains(&i) {
            nodes.push(node);
        }
    }
    Ok(Program { specs, inputs, constants, nodes, outputs, next_index })
}

/// The rewrite's view of the program and what it has decided so far.
struct Rewrite<'r> {
    nodes: &'r [Op],
    outputs: &'r [TensorId],
    uses: &'r HashMap<TensorId, Vec<usize>>,
    forms: &'r dyn DeviceForms,
    /// The values derived from the planes before any use, in the order they were built.
    prelude: Vec<Op>,
    /// The ops that replace a recorded node, by its position.
    replaced: HashMap<usize, Vec<Op>>,
    /// The positions of the recorded nodes that leave the program (the weight's transposes).
    removed: Vec<usize>,
}

impl Rewrite<'_> {
    /// The planes of the kept weight `c` (constants appended to `planes_out`), and `A` and `C` derived from them.
    fn planes<'a>(
        &self,
        b: &mut Builder<'_>,
        c: &Constant<'a>,
        split: &Split,
        planes_out: &mut Vec<Constant<'a>>,
    ) -> Result<Planes> {
        let ConstantData::Dequantize { encoding, bytes, .. } = &c.data else {
            return Err(GraphError::PassBroke {
                pass: "keep_packed",
                node: format!("constant '{}'", c.key),
                detail: "asked to keep a constant that is not packed".into(),
            });
        };
        let spec = b.specs[c.tensor.index()].clone();
        let dims = spec.shape.static_dims();
        let cannot = |why: String| GraphError::CannotKeepPacked {
            tensor: spec.label().to_owned(),
            encoding: encoding.name().to_owned(),
            detail: why,
        };
        let Some(&[n, k]) = dims.as_deref() else {
            return Err(cannot(format!(
                "it is [{}]; only a rank-2 [rows, cols] weight can be kept packed",
                spec.shape
            )));
        };
        if n > MAX_DIM || k > MAX_DIM {
            return Err(cannot(format!("its [{n}, {k}] has an extent past {MAX_DIM}")));
        }
        if k % split.block_values != 0 {
            return Err(cannot(format!("its rows of {k} values are not whole {}-value blocks", split.block_values)));
        }
        // Every plane holds `np` rows (`n` rounded up to a multiple IREE reads sub-byte codes right at; the extra
        // rows are zero) and the program computes on `np`, slicing the `n` real rows out of its results.
        let np = split
            .padded_rows(n)
            .filter(|&np| np <= MAX_DIM)
            .ok_or_else(|| cannot(format!("its {n} rows cannot be padded")))?;
        let (kb, ks, bsub) = (k / split.sub_values, k / split.block_values, split.sub_values);
        let name = spec.name.clone();

        // The codes in row bands where the device pass stores them so, when no use gathers rows of the weight (an
        // embedding reads the codes by rows: `[Kb, B, Np]` keeps each row's codes in place for it).
        let gathered =
            self.uses.get(&c.tensor).is_some_and(|u| u.iter().any(|&i| gathers_rows_of(&self.nodes[i], c.tensor)));
        let band = self.forms.code_bands(encoding, kb, np).filter(|_| !gathered);

        // The planes, as constants of their own.
        let mut plane_ids = HashMap::new();
        // Codes in row bands are named as stored: `[Np / T, Kb, B, T]` ([`Planes::codes`] views them).
        let codes_dims = match band {
            Some(t) if t > 0 => vec![np / t, kb, bsub, t],
            _ => vec![kb, bsub, np],
        };
        for p in split.planes(encoding) {
            let pdims: Vec<u64> = match p {
                Plane::Quants => codes_dims.clone(),
                Plane::QuantsHigh => vec![kb, bsub, np],
                // K-quants' `d` and `dmin` are per super-block; every other number is per sub-block.
                Plane::Scale | Plane::SuperMin if split.two_level => vec![ks, np],
                Plane::Scale | Plane::SuperMin | Plane::Min | Plane::SubScales | Plane::SubMins => vec![kb, np],
            };
            let t = b.tensor(format!("{name}.{}", p.suffix()), &pdims, split.dtype(p));
            plane_ids.insert(p, t);
            let data = ConstantData::Plane {
                encoding: encoding.clone(),
                bytes: *bytes,
                dims: [n, k],
                padded_rows: np,
                plane: p,
                band: band.filter(|_| p == Plane::Quants),
            };
            planes_out.push(Constant { tensor: t, key: format!("{}.{}", c.key, p.suffix()), data });
        }
        let weight = Weight { name: &name, key: &c.key, label: spec.label(), encoding };
        let Derived { scale, offset, high } =
            scale_and_offset(b, split, &plane_ids, &weight, (kb, ks, np), planes_out)?;
        Ok(Planes {
            name,
            n,
            np,
            row_multiple: split.row_multiple(),
            banded: band.is_some(),
            k,
            kb,
            b: bsub,
            quants: plane_ids[&Plane::Quants],
            high,
            high_f32: None,
            codes_whole: None,
            codes_view: None,
            scale,
            offset,
            codes_f32: None,
            scale_3d: None,
            offset_3d: None,
        })
    }

    /// Rewrites each use of the kept weight `w` onto its planes `pl`: linear layers through its transpose, gathers
    /// of its rows, and the whole weight dequantized once for any other use.
    fn rewrite_uses(&mut self, b: &mut Builder<'_>, pl: &mut Planes, w: TensorId, first_use: Option<usize>) {
        let (nodes, uses) = (self.nodes, self.uses);
        let mut needs_whole = self.outputs.contains(&w);
        // The first recorded node that needs the whole weight, which its dequantization stands for.
        let mut whole_for = None;
        for &i in uses.get(&w).map(Vec::as_slice).unwrap_or(&[]) {
            let node = &nodes[i];
            if swaps_two_dims(node) && node.outputs.len() == 1 {
                let tt = node.outputs[0];
                self.removed.push(i);
                let mut tt_whole = self.outputs.contains(&tt);
                for &j in uses.get(&tt).map(Vec::as_slice).unwrap_or(&[]) {
                    let m = &nodes[j];
                    let Some(how) = linear_of(m, tt, b.specs, pl.k, &self.replaced, j) else {
                        tt_whole = true;
                        continue;
                    };
                    b.origin = m.origin();
                    let start = b.ops.len();
                    match how {
                        Linear::PerBlock(xd) => linear_use(b, pl, m.inputs[0], &xd, m.outputs[0]),
                        Linear::Dynamic if self.forms.dynamic_linear(b, pl, m) => {}
                        Linear::Dynamic => dequantized_use(b, pl, m),
                    }
                    let seq = b.take_use(start);
                    self.replaced.insert(j, seq);
                }
                if tt_whole {
                    b.origin = node.origin();
                    pl.dequantized_t(b, tt);
                }
                continue;
            }
            match gather_ids(node, w, b.specs, &self.replaced, i) {
                Some(ids) => {
                    b.origin = node.origin();
                    let start = b.ops.len();
                    gather_use(b, pl, node.inputs[1], &ids, node.outputs[0]);
                    let seq = b.take_use(start);
                    self.replaced.insert(i, seq);
                }
                None => {
                    needs_whole = true;
                    whole_for = whole_for.or(node.origin());
                }
            }
        }
        if needs_whole {
            b.origin = whole_for.or(first_use);
            // W itself, for uses that need every value: dequantized as Wᵀ, then transposed back.
            let wt = b.tensor(format!("{}.t", pl.name), &[pl.k, pl.n], DType::F32);
            pl.dequantized_t(b, wt);
            b.op_into(OpKind::Transpose, ints("perm", [1, 0]), &[wt], w);
        }
    }
}

/// The kept weight a rewrite is deriving values for: its tensor's name, its archive key, how messages name it, and
/// its format.
struct Weight<'w> {
    name: &'w str,
    key: &'w str,
    label: &'w str,
    encoding: &'w Encoding,
}

/// What [`scale_and_offset`] derives from a weight's planes.
struct Derived {
    /// `A [Kb, N]` f32.
    scale: TensorId,
    /// `C [Kb, N]` f32, for formats with an offset term.
    offset: Option<TensorId>,
    /// The high-bit plane and the scalar 16 it is weighted by.
    high: Option<(TensorId, TensorId)>,
}

/// `A [Kb, N]` (the per-sub-block scale), `C [Kb, N]` (the offset term, for formats that have one) and the high-bit
/// plane with the scalar 16 it is weighted by, derived from the planes `plane_ids` of weight `w`; the scalars they
/// need are constants appended to `planes_out`, one per value and weight.
fn scale_and_offset<'a>(
    b: &mut Builder<'_>,
    split: &Split,
    plane_ids: &HashMap<Plane, TensorId>,
    w: &Weight<'_>,
    (kb, ks, np): (u64, u64, u64),
    planes_out: &mut Vec<Constant<'a>>,
) -> Result<Derived> {
    let name = w.name;
    // One constant per scalar value and weight, however many terms use it (Q5_1 and Q5_K offset their codes
    // by 16 and weight their high bits by 16): keys stay unique.
    let mut scalars: HashMap<i32, TensorId> = HashMap::new();
    let mut scalar = |b: &mut Builder<'_>, planes_out: &mut Vec<Constant<'a>>, v: i32| {
        if let Some(&t) = scalars.get(&v) {
            return Ok(t);
        }
        let Some(bytes) = scalar_bytes(v) else {
            return Err(GraphError::PassBroke {
                pass: "keep_packed",
                node: format!("weight '{}'", w.label),
                detail: format!("the {} planes need the scalar {v}, which the rewrite has no constant for", w.encoding),
            });
        };
        let t = b.tensor(format!("{name}.const{v}"), &[], DType::F32);
        planes_out.push(Constant {
            tensor: t,
            key: format!("{}.const{v}", w.key),
            data: ConstantData::Raw { dtype: DType::F32, bytes: Lent::Slice(bytes) },
        });
        scalars.insert(v, t);
        Ok(t)
    };
    let f32_of = |b: &mut Builder<'_>, p: Plane, dims: &[u64]| {
        b.op(OpKind::Convert, Attrs::new(), &[plane_ids[&p]], format!("{name}.{}_f32", p.suffix()), dims, DType::F32)
    };
    // A [Kb, N] and C [Kb, N].
    let per_super = |b: &mut Builder<'_>, t: TensorId, what: &str| {
        let spread = b.op(
            OpKind::Broadcast,
            ints("dims", [0, 2]),
            &[t],
            format!("{name}.{what}_b"),
            &[ks, kb / ks, np],
            DType::F32,
        );
        b.op(OpKind::Reshape, Attrs::new(), &[spread], format!("{name}.{what}_kb"), &[kb, np], DType::F32)
    };
    let scale = if split.two_level {
        let d = f32_of(b, Plane::Scale, &[ks, np]);
        let d = per_super(b, d, "d");
        let sc = f32_of(b, Plane::SubScales, &[kb, np]);
        b.op(OpKind::Mul, Attrs::new(), &[d, sc], format!("{name}.a"), &[kb, np], DType::F32)
    } else {
        f32_of(b, Plane::Scale, &[kb, np])
    };
    let base_offset = if split.has_offset_term {
        let o = scalar(b, planes_out, split.offset)?;
        let oa = b.op(OpKind::Mul, Attrs::new(), &[scale, o], format!("{name}.oa"), &[kb, np], DType::F32);
        Some(if split.two_level {
            let dmin = f32_of(b, Plane::SuperMin, &[ks, np]);
            let dmin = per_super(b, dmin, "dmin");
            let mn = f32_of(b, Plane::SubMins, &[kb, np]);
            let m = b.op(OpKind::Mul, Attrs::new(), &[dmin, mn], format!("{name}.mk"), &[kb, np], DType::F32);
            b.op(OpKind::Sub, Attrs::new(), &[oa, m], format!("{name}.c"), &[kb, np], DType::F32)
        } else {
            let m = f32_of(b, Plane::Min, &[kb, np]);
            b.op(OpKind::Add, Attrs::new(), &[oa, m], format!("{name}.c"), &[kb, np], DType::F32)
        })
    } else {
        None
    };
    // With a high plane the contracted codes are `qs + 16·qh`; the bias that centres them joins C.
    let (offset, high) = match split.high {
        Some(hb) => {
            let bias = scalar(b, planes_out, hb.bias)?;
            let ba = b.op(OpKind::Mul, Attrs::new(), &[scale, bias], format!("{name}.ba"), &[kb, np], DType::F32);
            let c = match base_offset {
                Some(c) => b.op(OpKind::Add, Attrs::new(), &[c, ba], format!("{name}.cb"), &[kb, np], DType::F32),
                None => ba,
            };
            let sixteen = scalar(b, planes_out, 16)?;
            (Some(c), Some((plane_ids[&Plane::QuantsHigh], sixteen)))
        }
        None => (base_offset, None),
    };
    Ok(Derived { scale, offset, high })
}

/// `y = x @ Wᵀ` for `x` with `?` dimensions, the portable form: the whole weight dequantized for this product
/// alone, just before it ([`Planes::dequantized_for_use`]), then one plain product. The per-block product would
/// hold partials that grow with the rows (`4·Kb·rows·N` bytes, past the f32 weight's `4·K·N` from 32 rows on).
fn dequantized_use(b: &mut Builder<'_>, pl: &mut Planes, m: &Op) {
    let (x, y) = (m.inputs[0], m.outputs[0]);
    let label = b.specs[y.index()].name.clone();
    let wt = pl.dequantized_for_use(b, &label);
    b.op_into(OpKind::Matmul, m.attrs.clone(), &[x, wt], y);
}

/// How a linear layer `matmul(x, tt)` is rewritten on the planes.
enum Linear {
    /// `x` of these static dims: contracted per block ([`linear_use`]).
    PerBlock(Vec<u64>),
    /// `x [.., K]` with `?` dimensions (a prefill's rows), where the per-block product's partials grow with the rows:
    /// the weight dequantized for it alone ([`dequantized_use`]), or the device pass's form.
    Dynamic,
}

/// How `m` is rewritten when it is a linear layer `matmul(x, tt)` of an f32 `x [.., K]` not rewritten yet.
fn linear_of(
    m: &Op,
    tt: TensorId,
    specs: &[TensorSpec],
    k: u64,
    replaced: &HashMap<usize, Vec<Op>>,
    j: usize,
) -> Option<Linear> {
    let linear = m.op == OpKind::Matmul && m.inputs.get(1) == Some(&tt) && m.inputs.first() != Some(&tt);
    let x = m.inputs.first().map(|x| &specs[x.index()]).filter(|x| x.dtype == DType::F32)?;
    if !linear || m.outputs.len() != 1 || replaced.contains_key(&j) || x.shape.0.last() != Some(&Dim::Static(k)) {
        return None;
    }
    let Some(xd) = x.shape.static_dims() else { return Some(Linear::Dynamic) };
    // `x` is contracted as `[P, Kb, B]`: `P`, its leading extents' product, is written into a slice's limits.
    let (_, lead) = xd.split_last()?;
    lead.iter().try_fold(1u64, |p, &d| p.checked_mul(d)).filter(|&p| p <= MAX_DIM)?;
    Some(Linear::PerBlock(xd))
}

/// The dims of the ids (static or `?`) when `node` gathers rows of `w` the rewrite gathers from the planes.
fn gather_ids(
    node: &Op,
    w: TensorId,
    specs: &[TensorSpec],
    replaced: &HashMap<usize, Vec<Op>>,
    i: usize,
) -> Option<Vec<Dim>> {
    let gather_rows = gathers_rows_of(node, w);
    let ids = node.inputs.get(1).map(|t| specs[t.index()].shape.0.clone())?;
    (gather_rows && node.outputs.len() == 1 && !replaced.contains_key(&i)).then_some(ids)
}

/// `y = x @ Wᵀ` per sub-block, for `x` of static dims `xd` (last `K`).
fn linear_use(b: &mut Builder<'_>, pl: &mut Planes, x: TensorId, xd: &[u64], y: TensorId) {
    let (kb, bs, n) = (pl.kb, pl.b, pl.np);
    let p: u64 = xd[..xd.len() - 1].iter().product();
    let y_name = b.specs[y.index()].name.clone();
    let xb = b.op(OpKind::Reshape, Attrs::new(), &[x], format!("{y_name}.xb"), &[p, kb, bs], DType::F32);
    let xt = b.op(OpKind::Transpose, ints("perm", [1, 0, 2]), &[xb], format!("{y_name}.xt"), &[kb, p, bs], DType::F32);
    // Codes in row bands are contracted as stored (each code converted inside the product); others as f32.
    let (attrs, q) = if pl.banded { (flag("banded"), pl.quants) } else { (Attrs::new(), pl.codes_f32(b)) };
    let mut s = b.op(OpKind::Matmul, attrs, &[xt, q], format!("{y_name}.s"), &[kb, p, n], DType::F32);
    if let (Some(hf), Some((_, sixteen))) = (pl.high_f32(b), pl.high) {
        // 5/6-bit codes: a second contraction on the high bits (IREE reads the i2 plane directly), weighted 16.
        let sh = b.op(OpKind::Matmul, Attrs::new(), &[xt, hf], format!("{y_name}.sh"), &[kb, p, n], DType::F32);
        let sh16 = b.op(OpKind::Mul, Attrs::new(), &[sh, sixteen], format!("{y_name}.sh16"), &[kb, p, n], DType::F32);
        s = b.op(OpKind::Add, Attrs::new(), &[s, sh16], format!("{y_name}.sq"), &[kb, p, n], DType::F32);
    }
    let a = pl.scale_3d(b);
    let sa = b.op(OpKind::Mul, Attrs::new(), &[s, a], format!("{y_name}.sa"), &[kb, p, n], DType::F32);
    // The result is written straight into `y` when nothing follows: no reshape back to `x`'s leading dims, no slice
    // of the padding rows.
    let flat = xd.len() == 2 && pl.np == pl.n;
    let offset = pl.offset;
    let sum_into = |b: &mut Builder<'_>, last: bool, op: OpKind, attrs: Attrs, ins: &[TensorId], label: &str| {
        if last && flat {
            b.op_into(op, attrs, ins, y)
        } else {
            b.op(op, attrs, ins, format!("{y_name}.{label}"), &[p, n], DType::F32)
        }
    };
    let mut out = sum_into(b, offset.is_none(), OpKind::ReduceSum, ints("axes", [0]), &[sa], "y0");
    if let Some(c) = offset {
        let xs = b.op(OpKind::ReduceSum, ints("axes", [2]), &[xt], format!("{y_name}.xs"), &[kb, p], DType::F32);
        let xst = b.op(OpKind::Transpose, ints("perm", [1, 0]), &[xs], format!("{y_name}.xst"), &[p, kb], DType::F32);
        let y1 = b.op(OpKind::Matmul, Attrs::new(), &[xst, c], format!("{y_name}.y1"), &[p, n], DType::F32);
        out = sum_into(b, true, OpKind::Add, Attrs::new(), &[out, y1], "y");
    }
    if flat {
        return;
    }
    if pl.np != pl.n {
        let sliced = if xd.len() == 2 { y } else { b.tensor(format!("{y_name}.ys"), &[p, pl.n], DType::F32) };
        out = b.op_into(OpKind::Slice, slice_to(&[p, pl.n]), &[out], sliced);
        if xd.len() == 2 {
            return;
        }
    }
    b.op_into(OpKind::Reshape, Attrs::new(), &[out], y);
}

/// `g = W[ids]` (rows), from the planes gathered by columns. The ids may have `?` dimensions (a prefill's token
/// ids): every value is then as wide as the ids, never the whole table.
fn gather_use(b: &mut Builder<'_>, pl: &mut Planes, ids: TensorId, id_dims: &[Dim], g: TensorId) {
    let codes = pl.codes(b);
    let (kb, bs, k) = (pl.kb, pl.b, pl.k);
    let g_name = b.specs[g.index()].name.clone();
    let with = |head: &[u64]| Shape(head.iter().map(|&d| Dim::Static(d)).chain(id_dims.iter().copied()).collect());
    let gq = b.op_shaped(
        OpKind::Gather,
        axis(2),
        &[codes, ids],
        format!("{g_name}.qs"),
        with(&[kb, bs]),
        b.specs[codes.index()].dtype,
    );
    let mut gqf =
        b.op_shaped(OpKind::Convert, Attrs::new(), &[gq], format!("{g_name}.qs_f32"), with(&[kb, bs]), DType::F32);
    if let Some((h, sixteen)) = pl.high {
        let qh_dtype = b.specs[h.index()].dtype;
        let gh = b.op_shaped(OpKind::Gather, axis(2), &[h, ids], format!("{g_name}.qh"), with(&[kb, bs]), qh_dtype);
        let ghf =
            b.op_shaped(OpKind::Convert, Attrs::new(), &[gh], format!("{g_name}.qh_f32"), with(&[kb, bs]), DType::F32);
        let gh16 = b.op_shaped(
            OpKind::Mul,
            Attrs::new(),
            &[ghf, sixteen],
            format!("{g_name}.qh16"),
            with(&[kb, bs]),
            DType::F32,
        );
        gqf = b.op_shaped(
            OpKind::Add,
            Attrs::new(),
            &[gqf, gh16],
            format!("{g_name}.codes"),
            with(&[kb, bs]),
            DType::F32,
        );
    }
    let ga = b.op_shaped(OpKind::Gather, axis(1), &[pl.scale, ids], format!("{g_name}.a"), with(&[kb]), DType::F32);
    let ga3 = b.op_shaped(OpKind::Reshape, Attrs::new(), &[ga], format!("{g_name}.a3"), with(&[kb, 1]), DType::F32);
    let mut v =
        b.op_shaped(OpKind::Mul, Attrs::new(), &[gqf, ga3], format!("{g_name}.wa"), with(&[kb, bs]), DType::F32);
    if let Some(c) = pl.offset {
        let gc = b.op_shaped(OpKind::Gather, axis(1), &[c, ids], format!("{g_name}.c"), with(&[kb]), DType::F32);
        let gc3 = b.op_shaped(OpKind::Reshape, Attrs::new(), &[gc], format!("{g_name}.c3"), with(&[kb, 1]), DType::F32);
        v = b.op_shaped(OpKind::Add, Attrs::new(), &[v, gc3], format!("{g_name}.wc"), with(&[kb, bs]), DType::F32);
    }
    let cols = b.op_shaped(OpKind::Reshape, Attrs::new(), &[v], format!("{g_name}.cols"), with(&[k]), DType::F32);
    let r = id_dims.len() as u64;
    b.op_into(OpKind::Transpose, ints("perm", (1..=r).chain([0])), &[cols], g);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::Encoding;

    #[test]
    fn every_scalar_a_split_asks_for_has_a_constant() {
        for e in Encoding::DECODABLE {
            let s = Split::of(&e).expect("decodable encodings split");
            let offset = s.has_offset_term.then_some(s.offset);
            let high = s.high.map(|h| h.bias).into_iter().chain(s.high.map(|_| 16));
            for v in offset.into_iter().chain(high) {
                let bytes = scalar_bytes(v).unwrap_or_else(|| panic!("{e}: no constant for {v}"));
                assert_eq!(f64::from(f32::from_le_bytes(*bytes)), f64::from(v), "{e}");
            }
        }
        assert_eq!(scalar_bytes(32), None, "a value no format uses has no constant (no wildcard)");
    }
}
