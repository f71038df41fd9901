//! The contractions the emitter writes and the CPU tuning spec tiles, each described once: its loops and the
//! loops that index each operand. The emitter writes its `linalg.generic`s' indexing maps from these
//! ([`Loops::emitted`]); the spec matches the maps IREE 3.13 holds once it has folded the emitter's transposes into
//! the contraction and dropped unit loops ([`Loops::as_iree_holds`]), derived from the same description, so that a
//! change to what the emitter writes changes what the spec matches.

/// A contraction's loops (its iteration space, in order), and the loops that index each operand and the result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Loops {
    /// Every loop, in order; the reduction loop is the last one.
    pub(crate) loops: &'static [&'static str],
    /// The rows' indices (the left operand).
    pub(crate) lhs: &'static [&'static str],
    /// The weight's indices (the right operand).
    pub(crate) rhs: &'static [&'static str],
    /// The result's indices.
    pub(crate) out: &'static [&'static str],
}

/// A product of rows with a weight in row bands (`[N / T, K, T]`, a `banded` matmul): loops band, row, column in
/// the band, k. The emitter writes it as one `linalg.generic` over the rows read as `[M, K]`.
pub(crate) const BAND: Loops =
    Loops { loops: &["b", "m", "t", "k"], lhs: &["m", "k"], rhs: &["b", "k", "t"], out: &["m", "b", "t"] };

/// The per-block product over codes stored in row bands (`[Np / T, Kb, B, T]`): loops block, row, band, column in
/// the band, k (the value in the block). The emitter writes it as one `linalg.generic` over the rows read as
/// `[Kb, M, B]`, a transpose of `[M, Kb, B]` that IREE folds into the contraction.
pub(crate) const BLOCK_BAND: Loops = Loops {
    loops: &["b", "m", "p", "t", "k"],
    lhs: &["b", "m", "k"],
    rhs: &["p", "b", "k", "t"],
    out: &["b", "m", "p", "t"],
};

/// The per-block product over codes in block rows (`[Kb, B, N]`): loops block, row, column, k. The emitter writes it
/// as a `stablehlo.dot_general` batched over the blocks, which IREE makes a batch matmul of these loops.
pub(crate) const BLOCK: Loops =
    Loops { loops: &["b", "m", "n", "k"], lhs: &["b", "m", "k"], rhs: &["b", "k", "n"], out: &["b", "m", "n"] };

/// The per-block product over codes gated in groups of columns (`[Kb, B, G, T]`, a `grouped` matmul): loops block,
/// row, group, column in the group, k. The emitter writes it as a `stablehlo.dot_general` batched over the blocks
/// of rows read as `[Kb, M, B]`, a transpose IREE folds in.
pub(crate) const BLOCK_GROUPS: Loops = Loops {
    loops: &["b", "m", "g", "t", "k"],
    lhs: &["b", "m", "k"],
    rhs: &["b", "k", "g", "t"],
    out: &["b", "m", "g", "t"],
};

/// What IREE 3.13 does to a contraction's maps before a tuning spec sees them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Folded {
    /// A unit loop it drops (one row: `m`).
    pub(crate) dropped: Option<&'static str>,
    /// The rows' indices once the transpose that made them is folded in (the rows as `[M, Kb, B]`: `m, b, k`).
    pub(crate) lhs: Option<&'static [&'static str]>,
}

impl Loops {
    /// The indexing maps as the emitter writes them: `affine_map<(b, m, t, k) -> (m, k)>, …`.
    pub(crate) fn emitted(&self) -> String {
        let dims = self.loops.join(", ");
        [self.lhs, self.rhs, self.out]
            .iter()
            .map(|ix| format!("affine_map<({dims}) -> ({})>", ix.join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The indexing maps as IREE 3.13 holds them after `folded`: the loops renamed `d0, d1, …` in order, without
    /// the dropped one, the rows' indices as the folded transpose reads them.
    pub(crate) fn as_iree_holds(&self, folded: Folded) -> String {
        let kept: Vec<&str> = self.loops.iter().copied().filter(|l| Some(*l) != folded.dropped).collect();
        let name = |l: &str| kept.iter().position(|k| *k == l).map(|i| format!("d{i}"));
        let dims = (0..kept.len()).map(|i| format!("d{i}")).collect::<Vec<_>>().join(", ");
        [folded.lhs.unwrap_or(self.lhs), self.rhs, self.out]
            .iter()
            .map(|ix| {
                let ix: Vec<String> = ix.iter().filter_map(|l| name(l)).collect();
                format!("affine_map<({dims}) -> ({})>", ix.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_render_as_written_and_as_iree_holds_them() {
        assert_eq!(
            BAND.emitted(),
            "affine_map<(b, m, t, k) -> (m, k)>, affine_map<(b, m, t, k) -> (b, k, t)>, affine_map<(b, m, t, k) -> (m, b, t)>"
        );
        // One row: IREE drops the unit row loop.
        assert_eq!(
            BAND.as_iree_holds(Folded { dropped: Some("m"), lhs: None }),
            "affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>"
        );
        // The rows' transpose folded in.
        assert_eq!(
            BLOCK_BAND.as_iree_holds(Folded { dropped: None, lhs: Some(&["m", "b", "k"]) }),
            "affine_map<(d0, d1, d2, d3, d4) -> (d1, d0, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d2, d0, d4, d3)>, \
             affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>"
        );
    }
}
