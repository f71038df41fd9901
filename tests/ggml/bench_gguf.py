"""Baseline for the dequantization benchmark: PyPI gguf 0.19.0's numpy `dequantize`.

    python tests/ggml/bench_gguf.py DIR   # writes DIR/{Q4_K,Q8_0}.bin, prints JSON {format: values/s}

Writes the block files first (16 Mi values per format, finite scales), then times gguf on them;
the Rust benchmark reads the same files through TAPEOUT_DEQUANT_DATA.
"""
import json
import pathlib
import sys
import time

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

VALUES = 16 << 20


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    result = {}
    for fmt in ("Q4_K", "Q8_0"):
        elems, nbytes = GGML_QUANT_SIZES[T[fmt]]
        raw = rng.integers(0, 256, size=(VALUES // elems, nbytes), dtype=np.uint8)
        raw[:, 0:2] = np.array([0.01], dtype="<f2").view(np.uint8)
        if fmt == "Q4_K":
            raw[:, 2:4] = np.array([0.01], dtype="<f2").view(np.uint8)
        raw.tofile(out / f"{fmt}.bin")
        flat = raw.reshape(1, -1)
        dequantize(flat, T[fmt])  # warm up
        best = min(_timed(flat, T[fmt]) for _ in range(3))
        result[fmt] = VALUES / best
    print(json.dumps(result))


def _timed(flat, qtype):
    t = time.perf_counter()
    dequantize(flat, qtype)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
