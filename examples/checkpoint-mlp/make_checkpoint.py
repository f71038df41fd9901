"""Writes the checkpoint the example exports: a two-layer MLP saved as PyTorch would name it (`fc1.weight` [out, in],
`fc1.bias`, `fc2.weight`, `fc2.bias`), with the PyPI `safetensors` package, plus an input batch and the float64
numpy result for it. fc2.weight is stored f16 (kept as stored by the export, converted in the module).

    python make_checkpoint.py OUT_DIR
"""
import pathlib
import sys

import numpy as np
from safetensors.numpy import save_file

IN, HIDDEN, OUT, BATCH = 16, 64, 10, 4


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261201)
    tensors = {
        "fc1.weight": rng.standard_normal((HIDDEN, IN)).astype(np.float32) * 0.3,
        "fc1.bias": rng.standard_normal(HIDDEN).astype(np.float32) * 0.1,
        "fc2.weight": (rng.standard_normal((OUT, HIDDEN)) * 0.3).astype(np.float16),
        "fc2.bias": rng.standard_normal(OUT).astype(np.float32) * 0.1,
    }
    save_file(tensors, str(out / "mlp.safetensors"), metadata={"format": "pt", "model": "checkpoint-mlp"})
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    h = np.maximum(x.astype(np.float64) @ t["fc1.weight"].T + t["fc1.bias"], 0)
    np.save(out / "x.npy", x)
    np.save(out / "want.npy", h @ t["fc2.weight"].T + t["fc2.bias"])


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
