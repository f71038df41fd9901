"""Checks examples/hf-llama's IREE logits against transformers' own (the goldens of make_golden.py).

    python verify_parity.py WORK_DIR [IREE_BIN_DIR] -- NAME=EXPORT_DIR=TESTDATA_DIR ...

For each model: compiles its module once (functions prefill and decode over one archive), runs prefill on the
golden prompts (lengths 7 and 1: two run-time sizes of the `?` sequence length), then greedy decode from the 7-token
prompt with the KV cache the module returns (each step's cache one position longer: two more run-time sizes of the
`?` past length), feeding transformers' tokens. Every position's and step's logits must be within TOL of
transformers' float32 logits, with the same argmax; exits 1 otherwise.
"""
import json
import pathlib
import subprocess
import sys

import numpy as np
import iree.runtime as rt
from safetensors.numpy import load_file

TOL = 1e-4


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


def signature(export: pathlib.Path, name: str, fn: str):
    """`fn`'s arguments (name -> shape, in call order) from <name>.signature.json, the export's signature file."""
    doc = json.loads((export / f"{name}.signature.json").read_text())
    f = next(f for f in doc["functions"] if f["name"] == fn)
    return {a["name"]: a["shape"] for a in f["arguments"]}


def call(m, names, fn, args):
    return [np.array(o.to_host(), copy=True) for o in getattr(m, fn)(*[args[n] for n in names[fn]])]


def check(label, got, want, failures):
    err = float(np.abs(got - want).max())
    same = bool((got.argmax(-1) == want.argmax(-1)).all())
    print(f"verify: {label}: max abs {err:.2e} vs transformers, same argmax: {same}")
    if err > TOL or not same:
        failures.append(f"{label}: max abs {err:.2e} (limit {TOL:.0e}), same argmax {same}")
    return err


def verify(name, export, testdata, work, bin_dir, failures):
    g = load_file(str(testdata / "golden.safetensors"))
    m = load(export, name, work, bin_dir)
    names = {fn: list(signature(export, name, fn)) for fn in ("prefill", "decode")}
    decode_args = signature(export, name, "decode")
    # HF's DynamicCache (past_key_<i> [1, KV, ?, D], grown by concat) or StaticCache (a fixed length, cache_position).
    static = decode_args["past_key_0"][2] if "cache_position" in decode_args else None
    worst = 0.0
    presents = None
    for tag in ("a", "b"):
        tokens = g[f"prefill_{tag}_tokens"]
        logits, *kv = call(m, names, "prefill", {"input_ids": tokens.reshape(1, -1).astype(np.int32)})
        worst = max(worst, check(f"{name} prefill of {tokens.size}", logits[0], g[f"prefill_{tag}_logits"], failures))
        if tag == "a":
            presents = kv
    layers = len(presents) // 2
    past = presents[0].shape[2]
    if static is not None:
        padded = []
        for x in presents:
            c = np.zeros(x.shape[:2] + (static,) + x.shape[3:], np.float32)
            c[:, :, :past] = x
            padded.append(c)
        presents = padded
    for step, tok in enumerate(g["decode_tokens"]):
        args = {"input_ids": np.array([[tok]], np.int32)}
        if static is not None:
            args["cache_position"] = np.array(past, np.int32)
        for i in range(layers):
            args[f"past_key_{i}"], args[f"past_value_{i}"] = presents[2 * i], presents[2 * i + 1]
        logits, *presents = call(m, names, "decode", args)
        want = static if static is not None else past + 1
        assert presents[0].shape[2] == want, f"{name}: the cache is {presents[0].shape}, not {want} long"
        worst = max(worst, check(f"{name} decode step {step} (past {past})", logits[0], g["decode_logits"][step:step + 1],
                                 failures))
        past += 1
    print(f"verify: {name}: KV cache " + (f"static, {static} rows (cache_position)" if static else "dynamic (concat on ?)"))
    print(f"verify: {name}: worst max abs {worst:.2e} over 2 prefills and {len(g['decode_tokens'])} decode steps")


def main(argv):
    split = argv.index("--")
    work = pathlib.Path(argv[0])
    bin_dir = argv[1] if split > 1 else ""
    work.mkdir(parents=True, exist_ok=True)
    failures = []
    for spec in argv[split + 1:]:
        name, export, testdata = spec.split("=")
        verify(name, pathlib.Path(export), pathlib.Path(testdata), work, bin_dir, failures)
    for f in failures:
        print(f"tapeout: error: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
