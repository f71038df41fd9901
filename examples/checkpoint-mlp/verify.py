"""Compiles the exported module with iree-compile, runs it with iree-run-module on the checkpoint's input batch, and
compares the logits with the float64 numpy result make_checkpoint.py wrote.

    python verify.py EXPORT_DIR CHECKPOINT_DIR WORK_DIR [IREE_BIN_DIR]

The compiled module and the results go to WORK_DIR, not the export's directory (another task's output).
"""
import pathlib
import subprocess
import sys

import numpy as np


def main(export: pathlib.Path, ckpt: pathlib.Path, work: pathlib.Path, bin_dir: str) -> int:
    tool = lambda t: str(pathlib.Path(bin_dir) / t) if bin_dir else t  # noqa: E731
    work.mkdir(parents=True, exist_ok=True)
    vmfb, got = work / "mlp.vmfb", work / "logits.npy"
    text = (export / "mlp.mlir").read_text()
    assert "stablehlo.transpose" not in text, "the [out, in] weights are contracted as stored"
    subprocess.run([tool("iree-compile"), str(export / "mlp.mlir"), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic",
                    "-o", str(vmfb)], check=True)
    subprocess.run([tool("iree-run-module"), "--device=local-task", f"--module={vmfb}", "--function=main",
                    f"--parameters=model={export / 'mlp.irpa'}", f"--input=@{ckpt / 'x.npy'}",
                    f"--output=@{got}"], check=True)
    y, want = np.load(got), np.load(ckpt / "want.npy")
    err = float(np.abs(y - want).max())
    print(f"verify: {export / 'mlp.irpa'} ({(export / 'mlp.irpa').stat().st_size} bytes); IREE's logits {y.shape}, "
          f"max abs error {err:.2e} against numpy float64")
    if err > 1e-4 * float(np.abs(want).max()):
        print(f"tapeout: error: IREE's logits differ from numpy by {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]),
                  sys.argv[4] if len(sys.argv) > 4 else ""))
