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

/// An arity as Kotlin source (`OpArity.exactly(2)`, `OpArity.either(1, 3)`, …).
fn arity(a: Arity) -> String {
    match a {
        Arity::Exactly(n) => format!("OpArity.exactly({n})"),
        Arity::AtLeast(n) => format!("OpArity.atLeast({n})"),
        Arity::Between(lo, hi) => format!("OpArity.between({lo}, {hi})"),
        Arity::Either(a, b) => format!("OpArity.either({a}, {b})"),
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
        "// Generated from tapeout_graph::OpKind (rust/graph/src/ops/mod.rs) by rust/graph/tests/kotlin_op_table.rs: do not \
         edit.\n",
    );
    let _ = writeln!(s, "// Regenerate with: {REGENERATE}");
    s.push_str("package dev.tapeout\n\n");
    s.push_str(
        "/**\n * How many operands or results an op takes, as the native table says: [accepts] a count, and in words\n \
         * the same way the native messages say it (`2`, `1 to 3`, `1 or 3`, `at least 2`).\n */\n",
    );
    s.push_str(
        "internal class OpArity private constructor(private val lo: Int, private val hi: Int, private val either: \
         Boolean) {\n",
    );
    s.push_str("    /** True when [n] fits. */\n");
    s.push_str("    fun accepts(n: Int): Boolean = if (either) n == lo || n == hi else n in lo..hi\n\n");
    s.push_str("    override fun toString(): String = when {\n");
    s.push_str("        either -> \"$lo or $hi\"\n");
    s.push_str("        lo == hi -> \"$lo\"\n");
    s.push_str("        hi == Int.MAX_VALUE -> \"at least $lo\"\n");
    s.push_str("        else -> \"$lo to $hi\"\n");
    s.push_str("    }\n\n");
    s.push_str("    companion object {\n");
    s.push_str("        fun exactly(n: Int) = OpArity(n, n, false)\n");
    s.push_str("        fun atLeast(n: Int) = OpArity(n, Int.MAX_VALUE, false)\n");
    s.push_str("        fun between(lo: Int, hi: Int) = OpArity(lo, hi, false)\n");
    s.push_str("        fun either(a: Int, b: Int) = OpArity(a, b, true)\n");
    s.push_str("    }\n");
    s.push_str("}\n\n");
    s.push_str(
        "/**\n * The native op table as the tape records it: each op's name in the graph JSON and how many operands\n \
         * ([inputs]) and results ([outputs]) it takes. Every recording function names its op by one of these;\n \
         * [ExecutionTape.record] checks the operand count against it. The ops only tapeout's passes write are not\n \
         * in it: a tape cannot record them.\n */\n",
    );
    s.push_str("internal enum class Op(val opName: String, val inputs: OpArity, val outputs: OpArity) {\n");
    for op in OpKind::ALL.iter().filter(|o| !o.inserted_by_passes()) {
        let sig = op.signature();
        let _ = writeln!(
            s,
            "    {}(\"{}\", {}, {}),",
            constant_name(op.name()),
            op.name(),
            arity(sig.inputs),
            arity(sig.outputs)
        );
    }
    s.push_str("    ;\n\n");
    s.push_str("    /** True when [n] operands fit. */\n");
    s.push_str("    fun acceptsInputs(n: Int): Boolean = inputs.accepts(n)\n\n");
    s.push_str("    /** The operand counts it takes, in words (`2`, `1 to 3`, `1 or 3`, `at least 2`). */\n");
    s.push_str("    val inputsText: String\n");
    s.push_str("        get() = inputs.toString()\n\n");
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
