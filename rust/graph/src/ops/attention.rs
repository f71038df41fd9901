//! The type rules of the attention ops (`sdpa`, `rope`) and of the logical ops, beside `rules.rs`'s others.

use super::rules::{AttrView, expect_shape, same_dtype};
use super::{Spec, broadcast, shapes_agree};
use crate::shape::Dim;
use crate::trace::Attr;

/// Two dimensions that can be one extent (a `?` matches anything).
fn dims_agree(a: Dim, b: Dim) -> bool {
    matches!((a, b), (Dim::Dynamic, _) | (_, Dim::Dynamic)) || a == b
}

/// How many query heads share one key/value head in `sdpa`: the query head count (the dimension before S) must
/// be a multiple of the key/value one. 1 when they are equal (both `?` counts as equal).
///
/// # Errors
/// When the counts do not divide, or only one of them is `?` (the grouping must be known when the graph is made).
pub fn query_groups(q_heads: Dim, kv_heads: Dim) -> Result<u64, String> {
    match (q_heads, kv_heads) {
        (Dim::Dynamic, Dim::Dynamic) => Ok(1),
        (Dim::Static(h), Dim::Static(kv)) if kv > 0 && h % kv == 0 => Ok(h / kv),
        (Dim::Static(h), Dim::Static(kv)) => Err(format!(
            "q has {h} heads and k/v {kv}: grouped-query attention needs the query heads to be a multiple of the \
             key/value heads (the dimension before the sequence)"
        )),
        (h, kv) => Err(format!(
            "q has {} heads and k/v {}: with a `?` head count on one side only the grouping of query heads is \
             unknown; give both a static head count (or both the same `?`)",
            h, kv
        )),
    }
}

/// `sdpa`: q `[.., H, S, D]`, k `[.., KV, T, D]`, v `[.., KV, T, Dv]` (H a multiple of KV), an optional additive
/// mask broadcastable to the scores `[.., H, S, T]`; the result is `[.., H, S, Dv]`.
/// `and`, `or` and `not` take bool operands (logical) or integer ones (bitwise), never floats.
pub(super) fn logical(ins: &[Spec<'_>]) -> Result<(), String> {
    match ins.iter().find(|(_, d)| d.is_float()) {
        Some((_, d)) => {
            Err(format!("logical ops take bool (or integer, bitwise) operands, not {d}: compare the values first"))
        }
        None => Ok(()),
    }
}

/// sdpa's optional `softcap` (a finite number above 0) and `window` (an integer of at least 1, with `causal`).
fn sdpa_softcap_window(a: &AttrView<'_>, causal: bool) -> Result<(), String> {
    match a.0.get("softcap") {
        None => {}
        Some(&Attr::Float(c)) if c.is_finite() && c > 0.0 => {}
        #[allow(clippy::cast_precision_loss)] // an integer literal's value, compared with 0 only
        Some(&Attr::Int(c)) if c > 0 => {}
        Some(other) => return Err(format!("attribute 'softcap' must be a finite number above 0, got {other:?}")),
    }
    if a.0.contains_key("window") {
        let w = a.int("window", 0)?;
        if w < 1 {
            return Err(format!("attribute 'window' must be at least 1 (keys a query sees), got {w}"));
        }
        if !causal {
            return Err(
                "attribute 'window' needs causal = true (a sliding window ends at the query's own position)".into()
            );
        }
    }
    Ok(())
}

pub(super) fn sdpa(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let (q, k, v) = (ins[0].0, ins[1].0, ins[2].0);
    let r = q.rank();
    if r < 2 || k.rank() != r || v.rank() != r {
        return Err(format!(
            "q, k and v must have one rank >= 2 ([.., S, D], [.., T, D], [.., T, Dv]), got [{q}], [{k}], [{v}]"
        ));
    }
    let causal = a.bool("causal", false)?;
    a.number("scale")?;
    sdpa_softcap_window(a, causal)?;
    let (qd, kd, vd) = (&q.0, &k.0, &v.0);
    if qd[r - 1] == Dim::Dynamic {
        return Err(format!(
            "q [{q}] has a `?` head dimension (the last): sdpa needs it static (it sets the default scale and the \
             product's shape); give the head size"
        ));
    }
    if let (true, Dim::Static(s), Dim::Static(t)) = (causal, qd[r - 2], kd[r - 2]) {
        if s > t {
            return Err(format!(
                "causal attention of {s} queries over {t} keys: causal is bottom-right aligned (query i sees keys \
                 j <= i + T - S), so the first {} queries would see no key; give at least as many keys as queries",
                s - t
            ));
        }
    }
    if !dims_agree(qd[r - 1], kd[r - 1]) {
        return Err(format!("q [{q}] and k [{k}] have different head dimensions (the last)"));
    }
    if !dims_agree(kd[r - 2], vd[r - 2]) {
        return Err(format!("k [{k}] and v [{v}] have different key lengths (dimension {})", r - 2));
    }
    if r >= 3 {
        if !dims_agree(kd[r - 3], vd[r - 3]) {
            return Err(format!("k [{k}] and v [{v}] have different head counts (dimension {})", r - 3));
        }
        query_groups(qd[r - 3], kd[r - 3])?;
        for i in 0..r - 3 {
            if !dims_agree(qd[i], kd[i]) || !dims_agree(qd[i], vd[i]) {
                return Err(format!("q [{q}], k [{k}] and v [{v}] differ in dimension {i}"));
            }
        }
    }
    let mut scores = q.clone();
    scores.0[r - 1] = kd[r - 2];
    if let Some((m, _)) = ins.get(3) {
        let fits = m.rank() <= r && broadcast(m, &scores).is_some_and(|b| shapes_agree(&b, &scores));
        if !fits {
            return Err(format!(
                "the mask [{m}] does not broadcast to the attention scores [{scores}] ([.., H, S, T])"
            ));
        }
    }
    let mut want = q.clone();
    want.0[r - 1] = vd[r - 1];
    same_dtype(ins[0], out)?;
    expect_shape(&want, out.0, "q and v give")
}

/// The width a `rope` table may have for an `x` of last dimension `d`: `d` (full tables), `d / 2` (half tables,
/// one angle per pair) or 1 (one angle for every pair).
///
/// # Errors
/// A `?` or odd `d`, or any other table width, described.
pub fn rope_table_width(d: Dim, width: Dim) -> Result<RopeTable, String> {
    let Dim::Static(d) = d else {
        return Err("rope needs a static last dimension (the rotated head dimension)".into());
    };
    if d % 2 != 0 {
        return Err(format!("rope needs an even last dimension, got {d}"));
    }
    match width {
        Dim::Static(w) if w == d => Ok(RopeTable::Full),
        Dim::Static(w) if w == d / 2 => Ok(RopeTable::Half),
        Dim::Static(1) => Ok(RopeTable::Full),
        w => Err(format!(
            "a cos/sin table of width {} for a head dimension of {d}: the width must be {d} (full tables) or {} \
             (half tables, one angle per pair)",
            w,
            d / 2
        )),
    }
}

/// Which form of cos/sin table `rope` was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeTable {
    /// As wide as x (or 1, one angle for all): `x·cos + rotate(x)·sin`.
    Full,
    /// Half as wide: one angle per rotated pair.
    Half,
}

/// `rope`: x `[.., S, D]` (D even and static), cos and sin of one shape `[.., S, D]` or `[.., S, D/2]`
/// broadcastable to x; the result has x's shape.
pub(super) fn rope(a: &AttrView<'_>, ins: &[Spec<'_>], out: Spec<'_>) -> Result<(), String> {
    let ((x, _), (c, _), (s, _)) = (ins[0], ins[1], ins[2]);
    a.bool("interleaved", false)?;
    let Some(&d) = x.0.last() else {
        return Err("rope needs a tensor of rank >= 1".into());
    };
    if c != s {
        return Err(format!("cos [{c}] and sin [{s}] must have one shape"));
    }
    let Some(&w) = c.0.last() else {
        return Err(format!("cos and sin must be tables [.., S, D] or [.., S, D/2], got [{c}]"));
    };
    let table = rope_table_width(d, w)?;
    let mut like = x.clone();
    if table == RopeTable::Half {
        if let Some(last) = like.0.last_mut() {
            *last = w;
        }
    }
    let fits = c.rank() <= x.rank() && broadcast(c, &like).is_some_and(|b| shapes_agree(&b, &like));
    if !fits {
        return Err(format!("the cos/sin tables [{c}] do not broadcast to [{like}] (x is [{x}])"));
    }
    expect_shape(x, out.0, "x's shape is")
}
