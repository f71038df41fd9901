"""Serves examples/tiny-llm with IREE's Python runtime: compiles the exported module (functions prefill and
decode over one archive), runs prefill on the prompt, then greedy decode steps with the KV cache, and checks
every decode step's logits against a full-sequence prefill of the tokens so far.

    python verify_serving.py EXPORT_DIR NAME WORK_DIR PROMPT(comma-separated) STEPS OUT [IREE_BIN_DIR]

Writes OUT (text): a line of the tokens (prompt, then one per step), then a line of logits per position fed,
for the Kotlin reference to check (Verify.kt). Exits 1 when decode and the full-sequence forward disagree.
"""
import json
import pathlib
import subprocess
import sys

import numpy as np
import iree.runtime as rt

HEADS, MAX, HEAD_DIM, LAYERS = 2, 64, 16, 2


def load(export: pathlib.Path, name: str, work: pathlib.Path, bin_dir: str):
    tool = str(pathlib.Path(bin_dir) / "iree-compile") if bin_dir else "iree-compile"
    vmfb = work / f"{name}.vmfb"
    subprocess.run([tool, str(export / f"{name}.mlir"), "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic",
                    "-o", str(vmfb)], check=True)
    config = rt.Config("local-task")
    index = rt.ParameterIndex()
    index.load(str(export / f"{name}.irpa"))
    params = rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model"))
    hal = rt.create_hal_module(config.vm_instance, config.device)
    return rt.load_vm_modules(params, hal, rt.VmModule.mmap(config.vm_instance, str(vmfb)), config=config)[-1]


def arg_names(signature, fn):
    """The names of `fn`'s arguments, in call order, from the export's signature file (docs/signature-format.md)."""
    [f] = [f for f in signature["functions"] if f["name"] == fn]
    return [a["name"] for a in f["arguments"]]


def call(m, names, fn, **args):
    return [np.array(o.to_host(), copy=True) for o in getattr(m, fn)(*[args[n] for n in names[fn]])]


def prefill(m, names, tokens):
    out = call(m, names, "prefill", tokens=np.array(tokens, np.int32), positions=np.arange(len(tokens), dtype=np.int32))
    logits, nxt, *kv = out
    return logits, nxt, kv


def main(export, name, work, prompt, steps, out_json, bin_dir=""):
    work.mkdir(parents=True, exist_ok=True)
    m = load(export, name, work, bin_dir)
    signature = json.loads((export / f"{name}.signature.json").read_text())
    names = {fn: arg_names(signature, fn) for fn in ("prefill", "decode")}
    logits, nxt, kv = prefill(m, names, prompt)
    caches = [np.zeros((HEADS, MAX, HEAD_DIM), np.float32) for _ in range(2 * LAYERS)]
    for c, x in zip(caches, kv):
        c[:, :len(prompt)] = x
    seq = list(prompt) + [int(nxt[-1])]
    rows = [r for r in logits]
    for _ in range(steps):
        p = len(seq) - 1
        cache_args = {f"cache_{kind}{i}": caches[2 * i + (kind == "v")] for i in range(LAYERS) for kind in "kv"}
        step_logits, step_next, *caches = call(m, names, "decode", token=np.array([seq[-1]], np.int32),
                                               position=np.array([p], np.int32), pos=np.array(p, np.int64),
                                               **cache_args)
        rows.append(step_logits[0])
        seq.append(int(step_next[0]))
    fed = seq[:-1]
    full, full_next, _ = prefill(m, names, fed)
    got = np.stack(rows)
    err = float(np.abs(got - full).max())
    same = [int(t) for t in full_next[len(prompt) - 1:]] == seq[len(prompt):]
    print(f"verify: IREE prefill of {len(prompt)} tokens, then {steps} decode steps with the KV cache: tokens {seq}")
    print(f"verify: decode vs full-sequence prefill of {len(fed)} tokens: max abs logit difference {err:.2e}, "
          f"same greedy tokens: {same}")
    lines = [" ".join(map(str, seq))] + [" ".join(repr(float(x)) for x in row) for row in got]
    pathlib.Path(out_json).write_text("\n".join(lines) + "\n")
    if err > 1e-5 or not same:
        print(f"tapeout: error: decode with the cache differs from the full-sequence forward by {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    a = sys.argv
    sys.exit(main(pathlib.Path(a[1]), a[2], pathlib.Path(a[3]), [int(t) for t in a[4].split(",")], int(a[5]), a[6],
                  a[7] if len(a) > 7 else ""))
