//! The Kotlin library records ops by the names and arities of [`OpKind`]: its `OpTable.kt` is rendered from
//! `OpKind::ALL` and `signature()` here, and this test fails when the committed file differs from the table.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::fmt::Write as _;
use std::path::PathBuf;

use tapeout_graph::OpKind;
use tapeout_graph::ops::Arity;

/// The committed Kotlin file, relative to the workspace root.
const KOTLIN_FILE: &str = "jvm/src/main/kotlin/dev/tapeout/OpTable.kt";

/// The command that rewrites [`KOTLIN_FILE`] from the table.
const REGENERATE: &str = "TAPEOUT_REGENERATE=1 cargo test -p tapeout-graph --test kotlin_op_table";

/// `(min, max)` of an arity, `max` as Kotlin source (`Int.MAX_VALUE` for "at least n").
fn bounds(a: Arity) -> (String, String) {
    match a {
        Arity::Exactly(n) => (n.to_string(), n.to_string()),
        Arity::AtLeast(n) => (n.to_string(), "Int.MAX_VALUE".to_owned()),
        Arity::Between(lo, hi) => (lo.to_string(), hi.to_string()),
    }
}

/// `rms_norm` → `RMS_NORM`, `conv2d` → `CONV2D`.
fn constant_name(op: &str) -> String {
    op.to_ascii_uppercase()
}

/// The Kotlin source of the op table.
fn render() -> String {
    let mut s = String::new();
    s.push_str(
        "// Generated from tapeout_graph::OpKind (rust/graph/src/ops.rs) by rust/graph/tests/kotlin_op_table.rs: do not \
         edit.\n",
    );
    let _ = writeln!(s, "// Regenerate with: {REGENERATE}");
    s.push_str("package dev.tapeout\n\n");
    s.push_str(
        "/**\n * The native op table as the tape records it: each op's name in the graph JSON and how many operands and\n \
         * results it takes ([minInputs]..[maxInputs], [maxInputs] `Int.MAX_VALUE` for \"or more\"). Every recording\n \
         * function names its op by one of these; [ExecutionTape.record] checks the operand count against it.\n */\n",
    );
    s.push_str(
        "internal enum class Op(val opName: String, val minInputs: Int, val maxInputs: Int, val minOutputs: Int, val \
         maxOutputs: Int) {\n",
    );
    for op in OpKind::ALL {
        let sig = op.signature();
        let (imin, imax) = bounds(sig.inputs);
        let (omin, omax) = bounds(sig.outputs);
        let _ = writeln!(s, "    {}(\"{}\", {imin}, {imax}, {omin}, {omax}),", constant_name(op.name()), op.name());
    }
    s.push_str("    ;\n\n");
    s.push_str("    /** True when [n] operands fit. */\n");
    s.push_str("    fun acceptsInputs(n: Int): Boolean = n in minInputs..maxInputs\n\n");
    s.push_str("    /** The operand counts it takes, in words (`2`, `1 to 3`, `at least 2`). */\n");
    s.push_str("    val inputsText: String\n");
    s.push_str("        get() = when {\n");
    s.push_str("            minInputs == maxInputs -> \"$minInputs\"\n");
    s.push_str("            maxInputs == Int.MAX_VALUE -> \"at least $minInputs\"\n");
    s.push_str("            else -> \"$minInputs to $maxInputs\"\n");
    s.push_str("        }\n\n");
    s.push_str("    companion object {\n");
    s.push_str("        private val byName: Map<String, Op> = values().associateBy { it.opName }\n\n");
    s.push_str("        /** The op called [name], or `null` for a name the native table does not have. */\n");
    s.push_str("        fun named(name: String): Op? = byName[name]\n");
    s.push_str("    }\n");
    s.push_str("}\n");
    s
}

#[test]
fn the_committed_kotlin_op_table_is_the_rust_one() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join(KOTLIN_FILE);
    let want = render();
    if std::env::var_os("TAPEOUT_REGENERATE").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{KOTLIN_FILE} differs from tapeout_graph::OpKind (an op was added, renamed or its arity changed); \
         regenerate with: {REGENERATE}\n--- committed\n{have}\n--- from the table\n{want}"
    );
}

#[test]
fn every_op_has_its_own_kotlin_constant() {
    let mut names: Vec<String> = OpKind::ALL.iter().map(|o| constant_name(o.name())).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "two op names map to one Kotlin constant");
}
