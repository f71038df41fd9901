"""Fails when an op of the Rust table (rust/graph/src/ops/mod.rs, `op_table!`) is missing from the numpy
reference (reference.py, the oracle of tests/iree/test_graphs.py) or from every snapshot graph here, so that
a new op cannot be added without a reference and a locked, IREE-run lowering. (The Rust side checks the
snapshot graphs against `OpKind::ALL` too: rust/hlo/tests/snapshots.rs.)"""
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).parent
OPS_RS = HERE.parent.parent / "rust/graph/src/ops/mod.rs"
sys.path.insert(0, str(HERE))
import reference  # noqa: E402

# One table row: `    Variant = "name": inputs, outputs, Rule;`
ROW = re.compile(r'^\s+[A-Z]\w* = "([a-z0-9_]+)":', re.M)


def table_ops():
    body = OPS_RS.read_text().split("op_table! {", 1)[1].split("\n}", 1)[0]
    names = ROW.findall(body)
    assert len(names) >= 40, f"read only {len(names)} op names from {OPS_RS}: has the table's syntax changed?"
    return set(names)


def graph_ops():
    used = set()
    for path in HERE.glob("*.json"):
        if path.name.endswith(".test.json"):
            continue
        used |= {n["op"] for n in json.loads(path.read_text())["nodes"]}
    return used


def test_the_numpy_reference_interprets_every_op_of_the_table():
    ops = table_ops()
    assert sorted(ops - set(reference.OPS)) == [], "ops of the Rust table without a numpy reference"
    assert sorted(set(reference.OPS) - ops) == [], "numpy reference entries the Rust table does not know"


def test_every_op_of_the_table_appears_in_a_snapshot_graph():
    missing = table_ops() - graph_ops()
    assert sorted(missing) == [], "ops no test graph uses: add them in make_graphs.py and commit the snapshot"
