"""isa_census reads the inner loop IREE writes: the documented finding (docs/benchmarks/2026-12-07.md) that IREE 3.13
lowers an i8 product to 32-bit multiplies, and to 16-bit-pair dot products only with data tiling, holds on the
pinned compiler; and the census finds the product's dispatch and its loop at all."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def census(*flags):
    out = subprocess.run([sys.executable, ROOT / "tests/bench/isa_census.py", "--cpus", "haswell", *flags,
                          ROOT / "tests/bench/reproducers/plain_i8_product.mlir"],
                         capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    (row,) = [r for r in rows if "vecmat" in r["dispatch"] or "matmul" in r["dispatch"]]
    return row


def test_an_i8_product_uses_dot_products_only_with_data_tiling():
    plain, tiled = census(), census("--data-tiling")
    assert plain["i32_multiply"] > 0 and plain["function_int_dot_products"] == 0, plain
    assert tiled["function_int_dot_products"] > 0 and tiled["function_i32_multiplies"] == 0, tiled
    assert 0 < tiled["inner_block_instructions"] < plain["inner_block_instructions"], (plain, tiled)
