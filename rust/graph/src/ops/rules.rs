//! The type rules of the op table: `check_types` decides whether a node's operand and result specs and
//! attributes fit its op.

use super::attention::{logical, rope, sdpa};
use super::{OpKind, Rule, Spec, banded_matmul, broadcast, matmul, shapes_agree};
use crate::dtype::DType;
use crate::shape::{Dim, Shape};
use crate::trace::{Attr, Attrs};

/// Checks one node (its operands, results and attributes) against its op's type rules: the family rule of
/// its [`Signature`](super::Signature), then the op's own rule. The arity is checked before (so `ins` and `outs` have counts the
/// table accepts). Returns a description of the first problem; a malformed attribute is described as
/// `attribute 'name' …`.
pub(crate) fn check_types(op: OpKind, attrs: &Attrs, ins: &[Spec<'_>], outs: &[Spec<'_>]) -> Result<(), String> {
    check_rule(op.signature().rule, ins, outs)?;
    let a = AttrView(attrs);
    match op {
        OpKind::Abs
        | OpKind::Add
        | OpKind::Cos
        | OpKind::Div
        | OpKind::Exp
        | OpKind::Gelu
        | OpKind::Log
        | OpKind::Max
        | OpKind::Min
        | OpKind::Mul
        | OpKind::Neg
        | OpKind::Pow
        | OpKind::Relu
        | OpKind::Rsqrt
        | OpKind::Sigmoid
        | OpKind::Silu
        | OpKind::Sin
        | OpKind::Sqrt
        | OpKind::Sub
        | OpKind::Tanh => Ok(()),
        OpKind::And | OpKind::Or | OpKind::Not => logical(ins),
        OpKind::AvgPool2d | OpKind::MaxPool2d => {
            let (x, r) = (ins[0].0, outs[0].0);
            if x.rank() != 4 {
                return Err("pooling takes an NCHW tensor".into());
            }
            let window = pool_window(a.0)?;
            match x.static_dims() {
                Some(xd) => expect_window_output(&xd, xd[1], &window, r),
                None => Ok(()), // a `?` dimension: the emitter says it needs static ones
            }
        }
        OpKind::Conv2d => conv2d(&a, ins, outs[0].0),
        OpKind::CausalMask if ins[0].0.rank() < 2 => Err("a causal mask needs scores of rank >= 2 ([.., S, T])".into()),
        OpKind::CausalMask => Ok(()),
        OpKind::LayerNorm | OpKind::RmsNorm if ins[0].0.rank() == 0 => Err("normalisation needs rank >= 1".into()),
        OpKind::LayerNorm | OpKind::RmsNorm => Ok(()),
        OpKind::Rope => rope(&a, ins, outs[0]),
        OpKind::Sdpa => sdpa(&a, ins, outs[0]),
        OpKind::Concat => concat(&a, ins, outs[0]),
        OpKind::Argmax => argmax(&a, ins[0], outs[0]),
        OpKind::Broadcast => broadcast_rule(&a, ins, outs[0]),
        OpKind::Clamp => clamp(&a, ins, outs[0]),
        OpKind::Compare => compare(&a, ins, outs[0]),
        OpKind::Convert => {
            let ((s, _), (rs, _)) = (ins[0], outs[0]);
            expect_shape(s, rs, "the operand's shape is")
        }
        OpKind::After => {
            let ((s, d), (rs, rd)) = (ins[0], outs[0]);
            if d != rd {
                return Err(format!("the result is the first operand: its dtype {d}, not {rd}"));
            }
            expect_shape(s, rs, "the first operand's shape is")
        }
        OpKind::GateRows => gate_rows(&a, ins, outs[0]),
        OpKind::PadRows => pad_rows(&a, ins[0], outs[0]),
        OpKind::DecodeWords => decode_words(a.0, ins[0], outs[0]),
        OpKind::RoundAs => {
            super::round_as_dtype(a.0)?;
            let ((s, d), (rs, rd)) = (ins[0], outs[0]);
            if d != DType::F32 || rd != DType::F32 {
                return Err(format!("round_as takes and gives f32, not {d} -> {rd}"));
            }
            expect_shape(s, rs, "the operand's shape is")
        }
        OpKind::PlaceRows => place_rows(&a, ins, outs[0]),
        OpKind::DynamicSlice => dynamic_slice(&a, ins, outs[0]),
        OpKind::DynamicUpdateSlice => dynamic_update_slice(ins, outs[0]),
        OpKind::Gather => gather(&a, ins, outs[0]),
        OpKind::Iota => iota(&a, ins, outs[0]),
        OpKind::ReduceMax | OpKind::ReduceMean | OpKind::ReduceSum => reduce(&a, ins[0], outs[0]),
        OpKind::Matmul => {
            let (grouped, banded) = (a.bool("grouped", false)?, a.bool("banded", false)?);
            let ((a, ad), (b, bd), (r, rd)) = (ins[0], ins[1], outs[0]);
            // One dtype throughout, but for the codes of a per-block product over bands: signed integers, each
            // converted to the rows' float type inside the product.
            let codes = banded && b.rank() == 4 && ad.is_float() && matches!(bd, DType::I4 | DType::I8);
            if ad != rd || (ad != bd && !codes) {
                return Err(format!(
                    "matmul of {} and {} into {}: its operands and result share one dtype{}",
                    ad.name(),
                    bd.name(),
                    rd.name(),
                    if banded { " (or, over bands of codes, float rows and i4 / i8 codes)" } else { "" }
                ));
            }
            if banded {
                if grouped {
                    return Err("a matmul is banded or grouped, not both".into());
                }
                let want = banded_matmul(a, b)?;
                return if shapes_agree(&want, r) {
                    Ok(())
                } else {
                    Err(format!("[{a}] x bands [{b}] gives [{want}], but the node declares [{r}]"))
                };
            }
            // `[B.., M, K] x [B.., K, N, T]` only when asked for: NumPy would broadcast those ranks instead.
            let two_dim_columns = a.rank() >= 2 && b.rank() == a.rank() + 1;
            if grouped != two_dim_columns {
                return Err(if two_dim_columns {
                    format!(
                        "[{a}] x [{b}]: a right side of one more dim is read as [B.., K, N, T] (its columns in two \
                         dims) only with the attribute grouped = true; NumPy's broadcasting of those ranks is not \
                         supported: broadcast the left side to the right side's batch dims"
                    )
                } else {
                    format!(
                        "[{a}] x [{b}]: grouped = true needs [B.., M, K] x [B.., K, N, T] (a right side of one more dim)"
                    )
                });
            }
            let want = matmul(a, b)?;
            if shapes_agree(&want, r) {
                Ok(())
            } else {
                Err(format!("[{a}] x [{b}] gives [{want}], but the node declares [{r}]"))
            }
        }
        OpKind::Reshape => reshape(ins[0], outs[0]),
        OpKind::Select => select(ins, outs[0]),
        OpKind::Slice => slice(&a, ins[0], outs[0]),
        OpKind::Softmax => {
            a.axis("axis", a.int("axis", -1)?, ins[0].0.rank())?;
            same_dtype(ins[0], outs[0])?;
            expect_shape(ins[0].0, outs[0].0, "the operand's shape is")
        }
        OpKind::Transpose => transpose(&a, ins[0], outs[0]),
    }
}

/// A node's attributes, read with the messages every type rule uses.
pub(crate) struct AttrView<'a>(pub(crate) &'a Attrs);

impl AttrView<'_> {
    fn bad(name: &str, detail: impl std::fmt::Display) -> String {
        format!("attribute '{name}' {detail}")
    }

    /// An integer attribute, or `default` when absent.
    pub(crate) fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.0.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(other) => Err(Self::bad(name, format!("must be an integer, got {other:?}"))),
        }
    }

    /// A list of integers, if present.
    pub(crate) fn ints(&self, name: &str) -> Result<Option<&[i64]>, String> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v)),
            Some(other) => Err(Self::bad(name, format!("must be a list of integers, got {other:?}"))),
        }
    }

    /// A boolean attribute, or `default` when absent.
    pub(crate) fn bool(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.0.get(name) {
            None => Ok(default),
            Some(Attr::Bool(v)) => Ok(*v),
            Some(other) => Err(Self::bad(name, format!("must be true or false, got {other:?}"))),
        }
    }

    /// Checks that an attribute, when present, is a number (an integer literal counts).
    pub(crate) fn number(&self, name: &str) -> Result<(), String> {
        match self.0.get(name) {
            None | Some(Attr::Float(_) | Attr::Int(_)) => Ok(()),
            Some(other) => Err(Self::bad(name, format!("must be a number, got {other:?}"))),
        }
    }

    /// A possibly negative axis normalised for a tensor of `rank`.
    pub(crate) fn axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize, String> {
        let back = usize::try_from(axis.unsigned_abs()).ok();
        let a = if axis < 0 { back.and_then(|b| rank.checked_sub(b)) } else { back };
        a.filter(|&a| a < rank).ok_or_else(|| Self::bad(name, format!("{axis} is out of range for rank {rank}")))
    }

    /// A list of axes for a tensor of `rank` (`None` when absent).
    pub(crate) fn axes(&self, name: &str, rank: usize) -> Result<Option<Vec<usize>>, String> {
        self.ints(name)?.map(|v| v.iter().map(|&x| self.axis(name, x, rank)).collect()).transpose()
    }
}

pub(super) fn same_dtype((_, d): Spec<'_>, (_, rd): Spec<'_>) -> Result<(), String> {
    if d == rd { Ok(()) } else { Err(format!("result dtype {rd} differs from operand dtype {d}")) }
}

/// The declared result shape `got` must agree with the inferred `want`; `how` says where `want` comes from
/// ("the operand's shape is", "reducing \[2x3\] over axes \[1\] gives").
pub(super) fn expect_shape(want: &Shape, got: &Shape, how: &str) -> Result<(), String> {
    if shapes_agree(want, got) {
        Ok(())
    } else {
        Err(format!("the node declares the result shape [{got}], but {how} [{want}]"))
    }
}

fn broadcast_many(shapes: &[&Shape]) -> Result<Shape, String> {
    let mut target = shapes[0].clone();
    for s in &shapes[1..] {
        target =
            broadcast(&target, s).ok_or_else(|| format!("operand shapes [{target}] and [{s}] do not broadcast"))?;
    }
    Ok(target)
}

fn argmax(a: &AttrView<'_>, (s, d): Spec<'_>, (rs, rd): Spec<'_>) -> Result<(), String> {
    let axis = a.axis("axis", a.int("axis", -1)?, s.rank())?;
    if !matches!(rd, DType::I32 | DType::I64) {
        return Err(format!("the result must be i32 or i64, not {rd}"));
    }
    if !d.is_float() {
        return Err(format!("argmax takes a float tensor, not {d}; convert it first"));
    }
    let kept = Shape(s.0.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, d)| *d).collect());
    expect_shape(&kept, rs, &format!("taking axis {axis} out of [{s}] gives"))
}

fn broadcast_rule(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let x = ins[0];
    same_dtype(x, out)?;
    let (xs, rs) = (x.0, out.0);
    let rank = rs.rank();
    let dims = match a.axes("dims", rank)? {
        Some(dims) if dims.len() != xs.rank() => {
            return Err(AttrView::bad(
                "dims",
                format!("needs one entry per operand dimension ({}), got {}", xs.rank(), dims.len()),
            ));
        }
        Some(dims) => dims,
        None if xs.rank() > rank => return Err(format!("cannot broadcast [{xs}] to the lower rank [{rs}]")),
        None => (rank - xs.rank()..rank).collect(),
    };
    for (i, &d) in dims.iter().enumerate() {
        match (xs.0[i], rs.0[d]) {
            (Dim::Static(1) | Dim::Dynamic, _) | (_, Dim::Dynamic) => {}
            (Dim::Static(m), Dim::Static(n)) if m == n => {}
            (m, n) => {
                return Err(format!("dimension {i} of [{xs}] ({m}) cannot broadcast to dimension {d} of [{rs}] ({n})"));
            }
        }
    }
    match ins.get(1) {
        Some((like, _)) => expect_shape(like, rs, "the reference operand `like` has the shape"),
        None if rs.is_dynamic() => Err(format!(
            "the result [{rs}] has `?` dimensions, which a broadcast can only take from a reference tensor: give it \
             as a second operand (`like`; in Kotlin expand(x, like))"
        )),
        None => Ok(()),
    }
}

fn iota(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    if rd == DType::Bool {
        return Err("an iota counts in a number type, not bool".into());
    }
    let Some(&(like, _)) = ins.first() else {
        a.axis("dim", a.int("dim", 0)?, rs.rank())?;
        if rs.is_dynamic() {
            return Err(format!(
                "the result [{rs}] has a `?` length, which an iota can only take from a reference tensor: give it as \
                 the operand with attribute 'axis' (in Kotlin arange(like, axis))"
            ));
        }
        return Ok(());
    };
    let axis = a.axis("axis", a.int("axis", 0)?, like.rank())?;
    if rs.rank() != 1 {
        return Err(format!("an iota of a reference's dimension is 1-D, but the node declares [{rs}]"));
    }
    a.axis("dim", a.int("dim", 0)?, 1)?;
    expect_shape(&Shape(vec![like.0[axis]]), rs, &format!("dimension {axis} of the reference [{like}] gives"))
}

fn clamp(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let x = ins[0];
    if let [_, (lo_s, lo), (hi_s, hi)] = ins {
        if *lo != x.1 || *hi != x.1 {
            return Err(format!("the bounds ({lo}, {hi}) must have the operand's dtype {}", x.1));
        }
        same_dtype(x, out)?;
        return expect_shape(&broadcast_many(&[x.0, lo_s, hi_s])?, out.0, "the operand and its bounds broadcast to");
    }
    a.number("min")?;
    a.number("max")?;
    same_dtype(x, out)?;
    expect_shape(x.0, out.0, "the operand's shape is")
}

fn compare(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    match a.0.get("direction") {
        Some(Attr::Str(s)) if ["EQ", "NE", "LT", "LE", "GT", "GE"].contains(&s.as_str()) => {}
        _ => return Err(AttrView::bad("direction", "must be one of EQ, NE, LT, LE, GT, GE")),
    }
    let ((x, dx), (y, dy)) = (ins[0], ins[1]);
    if dx != dy {
        return Err(format!("operand dtypes {dx} and {dy} must be equal (insert a convert)"));
    }
    if rd != DType::Bool {
        return Err(format!("the result must be bool, not {rd}"));
    }
    expect_shape(&broadcast_many(&[x, y])?, rs, "the operands broadcast to")
}

fn concat(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, _): Spec<'_>) -> Result<(), String> {
    let first = ins[0].0;
    let axis = a.axis("axis", a.int("axis", 0)?, first.rank())?;
    let mut want = first.clone();
    let mut total = Some(0u64);
    for (i, (s, _)) in ins.iter().enumerate() {
        let others_agree = s.rank() == first.rank()
            && (0..s.rank())
                .filter(|&d| d != axis)
                .all(|d| shapes_agree(&Shape(vec![s.0[d]]), &Shape(vec![first.0[d]])));
        if !others_agree {
            return Err(format!("operand {i} [{s}] does not match operand 0 [{first}] outside axis {axis}"));
        }
        total = match (total, s.0[axis]) {
            (Some(t), Dim::Static(n)) => t.checked_add(n),
            _ => None,
        };
    }
    want.0[axis] = total.map_or(Dim::Dynamic, Dim::Static);
    expect_shape(&want, rs, "the concatenation's shape is")
}

/// A 2-D window over an NCHW tensor (pooling, convolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Kernel height and width.
    pub kernel: [u64; 2],
    /// Stride along height and width.
    pub stride: [u64; 2],
    /// Dilation along height and width.
    pub dilation: [u64; 2],
    /// Padding: top, bottom, left, right.
    pub pad: [u64; 4],
}

fn window_attr(a: &AttrView<'_>, name: &str, default: [u64; 2]) -> Result<[u64; 2], String> {
    match a.ints(name)? {
        None => Ok(default),
        Some([x, y]) => match (u64::try_from(*x), u64::try_from(*y)) {
            (Ok(x), Ok(y)) => Ok([x, y]),
            _ => Err(AttrView::bad(name, "must not be negative")),
        },
        Some(_) => Err(AttrView::bad(name, "needs two entries (height, width)")),
    }
}

/// `[top, bottom, left, right]` from `padding` given as 2 or 4 entries.
fn padding(a: &AttrView<'_>) -> Result<[u64; 4], String> {
    let Some(v) = a.ints("padding")? else { return Ok([0; 4]) };
    let v: Vec<u64> = v
        .iter()
        .map(|&p| u64::try_from(p))
        .collect::<Result<_, _>>()
        .map_err(|_| AttrView::bad("padding", "must not be negative"))?;
    match v.as_slice() {
        [h, w] => Ok([*h, *h, *w, *w]),
        [t, b, l, r] => Ok([*t, *b, *l, *r]),
        _ => Err(AttrView::bad("padding", "needs 2 (h, w) or 4 (top, bottom, left, right) entries")),
    }
}

/// The window of a pooling node's attributes: `kernel` (2x2 by default), `stride` (the kernel by default),
/// `padding` (none by default).
///
/// # Errors
/// A malformed attribute, described as `attribute 'name' …`.
pub fn pool_window(attrs: &Attrs) -> Result<Window, String> {
    let a = AttrView(attrs);
    let kernel = window_attr(&a, "kernel", [2, 2])?;
    let stride = window_attr(&a, "stride", kernel)?;
    Ok(Window { kernel, stride, dilation: [1, 1], pad: padding(&a)? })
}

/// The window of a convolution node's attributes (`stride`, `dilation`, `padding`) with the weight's
/// `kernel` (its `[KH, KW]`).
///
/// # Errors
/// A malformed attribute, described as `attribute 'name' …`.
pub fn conv2d_window(attrs: &Attrs, kernel: [u64; 2]) -> Result<Window, String> {
    let a = AttrView(attrs);
    let stride = window_attr(&a, "stride", [1, 1])?;
    let dilation = window_attr(&a, "dilation", [1, 1])?;
    Ok(Window { kernel, stride, dilation, pad: padding(&a)? })
}

/// The `[N, channels, H', W']` result of `w` over an `[N, C, H, W]` input.
///
/// # Errors
/// When the window does not fit the padded input (or its stride is 0).
pub fn window_output(x: &[u64], channels: u64, w: &Window) -> Result<Shape, String> {
    let mut want = vec![x[0], channels];
    for i in 0..2 {
        let span = w.dilation[i].saturating_mul(w.kernel[i].saturating_sub(1)) + 1;
        let padded = x[2 + i] + w.pad[2 * i] + w.pad[2 * i + 1];
        if w.stride[i] == 0 || padded < span {
            return Err(format!("the {}x{} window does not fit the padded input", w.kernel[0], w.kernel[1]));
        }
        want.push((padded - span) / w.stride[i] + 1);
    }
    Ok(Shape::of(&want))
}

fn expect_window_output(x: &[u64], channels: u64, w: &Window, out: &Shape) -> Result<(), String> {
    let want = window_output(x, channels, w)?;
    if &want == out { Ok(()) } else { Err(format!("the result shape is [{want}] but the node declares [{out}]")) }
}

fn conv2d(a: &AttrView<'_>, ins: &[Spec<'_>], out: &Shape) -> Result<(), String> {
    let (x, w) = (ins[0].0, ins[1].0);
    if x.rank() != 4 || w.rank() != 4 {
        return Err("input and weight must be rank 4 (NCHW, OIHW)".into());
    }
    let (Some(xd), Some(wd)) = (x.static_dims(), w.static_dims()) else {
        return Ok(()); // a `?` dimension: the emitter says it needs static ones
    };
    let window = conv2d_window(a.0, [wd[2], wd[3]])?;
    let groups = a.int("groups", 1)?;
    let g = u64::try_from(groups).ok().filter(|&g| g > 0 && xd[1] % g == 0 && wd[0] % g == 0 && wd[1] * g == xd[1]);
    if g.is_none() {
        return Err(AttrView::bad(
            "groups",
            format!("{groups} does not fit {} input channels and a [{w}] weight", xd[1]),
        ));
    }
    expect_window_output(&xd, wd[0], &window, out)
}

fn offsets(offsets: &[Spec<'_>]) -> Result<(), String> {
    let first = offsets.first().map(|o| o.1);
    for (i, (s, d)) in offsets.iter().enumerate() {
        if s.rank() != 0 || !matches!(d, DType::I32 | DType::I64) || Some(*d) != first {
            return Err(format!("offset {i} must be an i32 or i64 scalar like the others, got [{s}] {d}"));
        }
    }
    Ok(())
}

fn dynamic_slice(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let (x, offs) = (ins[0], &ins[1..]);
    if offs.len() != x.0.rank() {
        return Err(format!(
            "takes the tensor and one offset per dimension ({}), got {} offsets",
            x.0.rank(),
            offs.len()
        ));
    }
    let sizes = a.ints("sizes")?.ok_or_else(|| AttrView::bad("sizes", "is required"))?;
    if sizes.len() != x.0.rank() {
        return Err(AttrView::bad("sizes", format!("needs one entry per dimension ({})", x.0.rank())));
    }
    let mut shape = Vec::with_capacity(sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let fits = |&n: &u64| match x.0.0[i] {
            Dim::Static(d) => n <= d,
            Dim::Dynamic => true,
        };
        let size = u64::try_from(n).ok().filter(fits);
        shape.push(size.ok_or_else(|| AttrView::bad("sizes", format!("dimension {i}: {n} does not fit [{}]", x.0)))?);
    }
    offsets(offs)?;
    same_dtype(x, out)?;
    expect_shape(&Shape::of(&shape), out.0, "the `sizes` attribute gives")
}

fn dynamic_update_slice(ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let ((x, dx), (u, du), offs) = (ins[0], ins[1], &ins[2..]);
    if offs.len() != x.rank() || u.rank() != x.rank() {
        return Err(format!(
            "takes the tensor, an update of its rank ({}) and one offset per dimension, got an update of rank {} and              {} offsets",
            x.rank(),
            u.rank(),
            offs.len()
        ));
    }
    if du != dx {
        return Err(format!("the update is {du}, the tensor {dx}"));
    }
    for i in 0..x.rank() {
        if let (Dim::Static(a), Dim::Static(b)) = (u.0[i], x.0[i]) {
            if a > b {
                return Err(format!("the update [{u}] does not fit the tensor [{x}] (dimension {i})"));
            }
        }
    }
    offsets(offs)?;
    same_dtype(ins[0], out)?;
    expect_shape(x, out.0, "the updated tensor's shape is")
}

fn gather(a: &AttrView<'_>, ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    let ((table, dt), (idx, _)) = (ins[0], ins[1]);
    let axis = a.axis("axis", a.int("axis", 0)?, table.rank())?;
    if rd != dt {
        return Err(format!("result dtype {rd} differs from the table's dtype {dt}"));
    }
    let want = Shape(table.0[..axis].iter().chain(&idx.0).chain(&table.0[axis + 1..]).copied().collect());
    if shapes_agree(&want, rs) {
        Ok(())
    } else {
        Err(format!("gathering [{idx}] from [{table}] along axis {axis} gives [{want}], but the node declares [{rs}]"))
    }
}

fn reduce(a: &AttrView<'_>, x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    let s = x.0;
    let axes = a.axes("axes", s.rank())?.unwrap_or_else(|| (0..s.rank()).collect());
    let keep = a.bool("keepdims", false)?;
    same_dtype(x, out)?;
    let want = Shape(
        s.0.iter()
            .enumerate()
            .filter_map(|(i, d)| match (axes.contains(&i), keep) {
                (false, _) => Some(*d),
                (true, true) => Some(Dim::Static(1)),
                (true, false) => None,
            })
            .collect(),
    );
    expect_shape(&want, out.0, &format!("reducing [{s}] over axes {axes:?} gives"))
}

fn reshape(x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    same_dtype(x, out)?;
    match (x.0.element_count(), out.0.element_count()) {
        (Some(a), Some(b)) if a != b => {
            Err(format!("cannot reshape [{}] to [{}]: the element counts differ", x.0, out.0))
        }
        _ => Ok(()),
    }
}

fn select(ins: &[Spec<'_>], (rs, rd): Spec<'_>) -> Result<(), String> {
    let ((p, dp), (x, dx), (y, dy)) = (ins[0], ins[1], ins[2]);
    if dp != DType::Bool {
        return Err(format!("the predicate must be bool (i1), got {dp}"));
    }
    if dx != dy || dx != rd {
        return Err(format!("the two choices ({dx}, {dy}) and the result ({rd}) must share one dtype"));
    }
    expect_shape(&broadcast_many(&[p, x, y])?, rs, "the operands broadcast to")
}

/// The `rows` attribute of the row-count ops ([`OpKind::PadRows`], [`OpKind::GateRows`], [`OpKind::PlaceRows`]):
/// required, at least 1.
fn rows_attr(a: &AttrView<'_>) -> Result<u64, String> {
    if !a.0.contains_key("rows") {
        return Err(AttrView::bad("rows", "is required"));
    }
    u64::try_from(a.int("rows", 0)?).ok().filter(|&r| r >= 1).ok_or_else(|| AttrView::bad("rows", "must be at least 1"))
}

fn decode_words(attrs: &Attrs, (w, wd): Spec<'_>, (r, rd): Spec<'_>) -> Result<(), String> {
    let (from, bits, to) = super::decode_words_from(attrs)?;
    let words = match (wd, w.0.last()) {
        (DType::I32, Some(&Dim::Static(n))) => n,
        _ => return Err(format!("decode_words takes i32 words [.., W] (W static), not {wd} [{w}]")),
    };
    let mut want = w.clone();
    if let Some(last) = want.0.last_mut() {
        *last = Dim::Static(words * u64::from(32 / bits));
    }
    if rd != to || *r != want {
        return Err(format!("decoding [{w}] words of {from} gives {to} [{want}], but the node declares {rd} [{r}]"));
    }
    Ok(())
}

fn pad_rows(a: &AttrView<'_>, (x, _): Spec<'_>, (r, _): Spec<'_>) -> Result<(), String> {
    let rows = rows_attr(a)?;
    let Some(k) = x.0.last().filter(|_| x.rank() >= 2) else {
        return Err(format!("pad_rows takes [L.., K] (rank >= 2), not [{x}]"));
    };
    if *r != Shape(vec![Dim::Static(rows), *k]) {
        return Err(format!("padding [{x}] to {rows} rows gives [{rows}, {k}], but the node declares [{r}]"));
    }
    Ok(())
}

fn gate_rows(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    rows_attr(a)?;
    a.bool("few", true)?;
    let ((t, _), (like, _)) = (ins[0], ins[1]);
    if like.rank() < 2 {
        return Err(format!("like [{like}] must be [L.., K] (rank >= 2): its rows are its leading dimensions"));
    }
    let axis = a.axis("axis", a.int("axis", 0)?, t.rank())?;
    same_dtype(ins[0], out)?;
    let mut want = t.clone();
    want.0[axis] = Dim::Dynamic;
    if *out.0 != want {
        return Err(format!("gating [{t}] along axis {axis} gives [{want}], but the node declares [{}]", out.0));
    }
    Ok(())
}

fn place_rows(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let rows = rows_attr(a)?;
    let ((small, sd), (base, bd)) = (ins[0], ins[1]);
    if sd != bd {
        return Err(format!("small ({sd}) and base ({bd}) must have one dtype"));
    }
    same_dtype(ins[1], out)?;
    if small.rank() != 2 || small.0[0] != Dim::Static(rows) {
        return Err(format!("small must be [{rows}, C] (rows, columns), not [{small}]"));
    }
    if base.rank() < 2 {
        return Err(format!("base [{base}] must be [L.., N] (rank >= 2)"));
    }
    if out.0 != base {
        return Err(format!("the result is base's shape [{base}], but the node declares [{}]", out.0));
    }
    Ok(())
}

fn slice(a: &AttrView<'_>, x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    let s = x.0;
    let rank = s.rank();
    let start = a.ints("start")?.ok_or_else(|| AttrView::bad("start", "is required"))?;
    let limit = a.ints("limit")?.ok_or_else(|| AttrView::bad("limit", "is required"))?;
    let ones = vec![1; rank];
    let stride = a.ints("stride")?.unwrap_or(&ones);
    if start.len() != rank || limit.len() != rank || stride.len() != rank {
        return Err(AttrView::bad("start", format!("start, limit and stride need one entry per dimension ({rank})")));
    }
    let mut want = Vec::with_capacity(rank);
    for i in 0..rank {
        let (st, li, sd) = (start[i], limit[i], stride[i]);
        let dim = match s.0[i] {
            // A `?` dimension is sliced to the end (limit -1) from a static start with a static stride: the
            // result is `?` (the run-time size must be at least the start).
            Dim::Dynamic if st >= 0 && li == -1 && sd > 0 => Dim::Dynamic,
            Dim::Dynamic => {
                return Err(AttrView::bad(
                    "start",
                    format!(
                        "dimension {i} is `?`: it can only be sliced to the end (limit -1, a start >= 0 and a stride \
                         > 0), not [{st}:{li}:{sd}]; for a window of static size at a run-time offset use dynamic_slice"
                    ),
                ));
            }
            Dim::Static(d) => {
                let l = if li == -1 { Ok(d) } else { u64::try_from(li) };
                match (u64::try_from(st), l, u64::try_from(sd)) {
                    (Ok(b), Ok(e), Ok(k)) if b <= e && e <= d && k > 0 => Dim::Static((e - b).div_ceil(k)),
                    _ => {
                        return Err(AttrView::bad(
                            "start",
                            format!("dimension {i}: [{st}:{li}:{sd}] does not fit size {d}"),
                        ));
                    }
                }
            }
        };
        want.push(dim);
    }
    same_dtype(x, out)?;
    expect_shape(&Shape(want), out.0, "the slice bounds give")
}

fn transpose(a: &AttrView<'_>, x: Spec<'_>, out: Spec<'_>) -> Result<(), String> {
    let r = x.0.rank();
    let perm = a.axes("perm", r)?.unwrap_or_else(|| (0..r).rev().collect());
    let mut sorted = perm.clone();
    sorted.sort_unstable();
    if sorted != (0..r).collect::<Vec<_>>() {
        return Err(AttrView::bad("perm", format!("{perm:?} is not a permutation of 0..{r}")));
    }
    same_dtype(x, out)?;
    let want = Shape(perm.iter().map(|&p| x.0.0[p]).collect());
    expect_shape(&want, out.0, &format!("permuting [{}] by {perm:?} gives", x.0))
}

/// Checks operands and results against a family rule. Returns a description of the first problem.
pub(super) fn check_rule(rule: Rule, ins: &[Spec<'_>], outs: &[Spec<'_>]) -> Result<(), String> {
    match rule {
        Rule::Own => Ok(()),
        Rule::ElementwiseUnaryDType => {
            let ((_, d), (_, rd)) = (ins[0], outs[0]);
            if d == rd { Ok(()) } else { Err(format!("result dtype {rd} differs from operand dtype {d}")) }
        }
        Rule::SameDType => {
            let mut all = ins.iter().chain(outs);
            let Some(&(_, first)) = all.next() else { return Ok(()) };
            match all.find(|(_, d)| *d != first) {
                Some((_, other)) => {
                    Err(format!("operands and results must share one dtype, found {first} and {other}"))
                }
                None => Ok(()),
            }
        }
        Rule::ElementwiseUnary => {
            let ((s, d), (rs, rd)) = (ins[0], outs[0]);
            if d != rd {
                return Err(format!("result dtype {rd} differs from operand dtype {d}"));
            }
            if !shapes_agree(s, rs) {
                return Err(format!("result shape [{rs}] differs from operand shape [{s}]"));
            }
            Ok(())
        }
        Rule::ElementwiseBinary => {
            let ((a, da), (b, db), (r, dr)) = (ins[0], ins[1], outs[0]);
            if da != db || da != dr {
                return Err(format!(
                    "operand dtypes {da} and {db} and result dtype {dr} must be equal (insert a convert)"
                ));
            }
            let Some(want) = broadcast(a, b) else {
                return Err(format!("operand shapes [{a}] and [{b}] do not broadcast"));
            };
            if !shapes_agree(&want, r) {
                return Err(format!("result shape [{r}] is not the broadcast shape [{want}] of [{a}] and [{b}]"));
            }
            Ok(())
        }
    }
}
