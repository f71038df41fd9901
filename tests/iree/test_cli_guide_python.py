"""The signature file end to end in IREE: docs/cli.md's Python snippet (signature + ParameterIndex) runs on a real
export and agrees with the numpy reference, and arguments fed in the signature's order (the declared order, not
first use) give the right answers at two run-time sizes."""
import json
import sys

import numpy as np

from harness import ROOT, compile_iree, run, run_iree

sys.path.insert(0, str(ROOT / "tests/graphs"))
import reference  # noqa: E402

MARKER = "<!-- python-snippet: tests/iree/test_cli_guide_python.py"


def guide_snippet():
    text = (ROOT / "docs/cli.md").read_text()
    after = text.split(MARKER, 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_cli_guides_python_snippet_runs_an_export_by_its_signature(tapeout, tmp_path, monkeypatch):
    g = ROOT / "tests/graphs"
    out = tmp_path / "out"
    run(tapeout, "export", g / "mlp.json", "--weights", g / "mlp.safetensors", "-o", out, "--packed", "dequantize",
        "--inline-below", "0")
    compile_iree(tmp_path, out / "mlp.mlir", "mlp")   # mlp.vmfb, which the snippet loads
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(guide_snippet(), "docs/cli.md (Run it from Python)", "exec"), scope)
    graph = reference.Graph(g / "mlp.json", g / "mlp.safetensors")
    [want] = graph.evaluate(scope["feeds"])
    assert list(scope["outputs"]) == graph.doc["outputs"]
    np.testing.assert_allclose(scope["outputs"][graph.doc["outputs"][0]], want, rtol=1e-4, atol=1e-4)


def test_arguments_in_the_signatures_order_at_two_run_time_sizes(tapeout, tmp_path):
    # Declared tokens, positions; the first node reads positions.
    doc = {"format": "tapeout-graph/1", "name": "order", "tensors": [
        {"name": "tokens", "shape": ["?", 4], "dtype": "f32"},
        {"name": "positions", "shape": ["?", 4], "dtype": "i32"},
        {"name": "p", "shape": ["?", 4], "dtype": "f32"},
        {"name": "y", "shape": ["?", 4], "dtype": "f32"}],
        "nodes": [{"op": "convert", "inputs": ["positions"], "outputs": ["p"]},
                  {"op": "sub", "inputs": ["p", "tokens"], "outputs": ["y"]}],
        "outputs": ["y"]}
    (tmp_path / "order.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "order.json", "-o", out)
    sig = json.loads((out / "order.signature.json").read_text())
    [main] = sig["functions"]
    assert [a["name"] for a in main["arguments"]] == ["tokens", "positions"]
    assert main["arguments"][1] == {"name": "positions", "dtype": "i32", "shape": ["?", 4], "dims": ["d0", 4]}
    assert main["arguments"][0]["dims"] == ["d0", 4], "sub ties the two ? rows: one extent at run time"
    rng = np.random.default_rng(5)
    vmfb = compile_iree(tmp_path, out / "order.mlir", "order")   # one module, run at both sizes
    for size in (3, 5):
        feeds = {"tokens": rng.standard_normal((size, 4)).astype(np.float32),
                 "positions": rng.integers(0, 100, (size, 4)).astype(np.int32)}
        [y] = run_iree(tmp_path, vmfb, [], [feeds[a["name"]] for a in main["arguments"]], tag=f"s{size}-")
        np.testing.assert_allclose(y, feeds["positions"].astype(np.float32) - feeds["tokens"], rtol=1e-6, atol=1e-6)
