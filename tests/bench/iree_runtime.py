"""What IREE does with what tapeout writes, measured by IREE itself (scripts/bench;
docs/performance.md#weights-in-iree).

A decode-sized step (one query row) through L square layers of D x D weights, stored in the PyTorch layout
`[out, in]` and used as `y = x @ W^T` (a `transpose` feeding a `matmul` in the graph), in safetensors as bf16. The
same graph is exported with 16-bit weights kept as stored (the default) and widened to f32 (`--half widen`), and for
each: the archive's bytes, `iree-run-module`'s peak RSS (`/usr/bin/time`), and `iree-benchmark-module`'s median time
of one step, on the host CPU. One JSON line per export form.

Also (subcommands): `tied`, a decode step through a tied embedding + LM head (V x D bf16) exported with the table as
held and in the layout tapeout chooses ([D, V], gathered by columns); and `tiny-llm`, the example model's two
Gradle exports (16-bit kept and widened) run as they are.

    python tests/bench/iree_runtime.py [pytorch-layout] [--dim 8192] [--layers 8] [--out DIR]
    python tests/bench/iree_runtime.py tied [--vocab 262144] [--dim 2048] [--out DIR]
    python tests/bench/iree_runtime.py tiny-llm --keep DIR --widen DIR
    python tests/bench/iree_runtime.py packed [--dim 4096] [--layers 4] [--out DIR]
    python tests/bench/iree_runtime.py packed-layout [--dim 4096] [--rounds 3] [--out DIR]

`packed`: a decode step through `layers` linear layers of dim x dim GGML weights (Q8_0, Q4_0, Q4_K; random blocks
with finite scales) in a GGUF file, exported with the blocks kept packed (`--packed keep`, for the CPU and as the
portable lowering, `--target portable`) and dequantized to f32 (`--packed dequantize`), each compiled with IREE's
defaults (no tuning spec): archive bytes against the GGUF tensor bytes, peak RSS, step time.

`packed-layout`: how the i4 code plane of one dim x N weight (K = dim, 32-value blocks) should be laid out, in
hand-written modules of the per-block contraction: `[K/32, 32, N]` (N innermost: what tapeout writes, N padded to a
multiple of 64) against `[K/32, N, 32]` (the block innermost, always whole bytes, no padding), at N = dim and
N = dim - 1; archive bytes, peak RSS and step time, in alternating rounds, each checked against numpy.
"""
import argparse
import json
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from harness import iree_tool, signature  # noqa: E402

TAPEOUT = ROOT / "target/release/tapeout"


def write_model(d, dim, layers):
    """g.json + w.safetensors: layers of bf16 [dim, dim] weights (values that keep activations O(1))."""
    header, off = {}, 0
    for i in range(layers):
        header[f"w{i}"] = {"dtype": "BF16", "shape": [dim, dim], "data_offsets": [off, off + dim * dim * 2]}
        off += dim * dim * 2
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    rng = np.random.default_rng(5)
    with open(d / "w.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(layers):
            rows = 256
            for _ in range(dim // rows):
                block = (rng.standard_normal((rows, dim), dtype=np.float32) / np.sqrt(dim)).astype(np.float32)
                f.write((block.view(np.uint32) >> 16).astype("<u2").tobytes())
    write_linear_stack(d, dim, layers, "bf16", lambda i: (f"model.layers.{i}.weight", f"w{i}"))
    return off


def write_linear_stack(d, dim, layers, dtype, weight):
    """d/g.json: a decode step `x [1, dim]` through `layers` linear layers `h = h @ Wᵀ`, each W `[dim, dim]` held
    `[out, in]` in the weight file; `weight(i)` gives layer i's (key, tensor name in the file)."""
    tensors = [{"name": "x", "shape": [1, dim], "dtype": "f32"}]
    nodes, h = [], "x"
    for i in range(layers):
        key, name = weight(i)
        tensors += [{"name": f"w{i}", "shape": [dim, dim], "dtype": dtype, "path": key, "data": {"tensor": name}},
                    {"name": f"wt{i}", "shape": [dim, dim], "dtype": "f32"},
                    {"name": f"h{i}", "shape": [1, dim], "dtype": "f32"}]
        nodes += [{"op": "transpose", "inputs": [f"w{i}"], "outputs": [f"wt{i}"]},
                  {"op": "matmul", "inputs": [h, f"wt{i}"], "outputs": [f"h{i}"]}]
        h = f"h{i}"
    (d / "g.json").write_text(json.dumps({"name": "step", "tensors": tensors, "nodes": nodes, "outputs": [h]}))


def weight_transposes(text):
    """Transposes of a weight in the module: of a `util.global.load` result, or of its `convert`."""
    weights = set(re.findall(r"(%v\d+) = util\.global\.load", text))
    weights |= {m[0] for m in re.findall(r"(%v\d+) = stablehlo\.convert (%v\d+)", text) if m[1] in weights}
    return sum(op in weights for op in re.findall(r"stablehlo\.transpose (%v\d+)", text))


def run_module(d, label, mlir, irpas, inputs, scope="model", function="main", outputs=1):
    """Compiles `mlir` for the host CPU and measures it with IREE: `iree-run-module` peak RSS and outputs, and the
    `iree-benchmark-module` median time of one call. `inputs` are .npy files, `irpas` every archive of the export."""
    vmfb = d / f"{label}.vmfb"
    subprocess.run([iree_tool("iree-compile"), mlir, "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", vmfb], check=True, capture_output=True)
    common = [f"--module={vmfb}", "--device=local-task", f"--function={function}",
              *[f"--parameters={scope}={p}" for p in irpas], *[f"--input=@{i}" for i in inputs]]
    rss_file = d / f"{label}.rss"
    out = d / f"{label}.out.npy"
    extra = [f"--output=@{d / f'{label}.out{i}.npy'}" for i in range(1, outputs)]
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file, iree_tool("iree-run-module"), *common,
                    f"--output=@{out}", *extra], check=True, capture_output=True)
    rss = int(rss_file.read_text().split()[-1]) * 1024
    b = subprocess.run([iree_tool("iree-benchmark-module"), *common, "--benchmark_repetitions=5",
                        "--benchmark_format=json"], check=True, capture_output=True, text=True)
    runs = json.loads(b.stdout[b.stdout.index("{"):])["benchmarks"]
    median = [r for r in runs if r.get("aggregate_name") == "median"]
    step = (median[0] if median else runs[0])
    unit = step.get("time_unit", "ms")
    step_ms = step["real_time"] / (1e6 if unit == "ns" else 1e3 if unit == "us" else 1)
    irpa = sum(pathlib.Path(p).stat().st_size for p in irpas)
    text = pathlib.Path(mlir).read_text()
    return {"irpa_bytes": irpa, "iree_run_peak_rss": rss, "rss_vs_archive": rss / irpa, "step_ms": step_ms,
            "weight_transposes_in_module": weight_transposes(text),
            "output": np.load(out).reshape(-1)[:4].tolist()}


def export(d, form, extra=()):
    out = d / form
    subprocess.run([TAPEOUT, "export", d / "g.json", "--weights", d / "w.safetensors", "-o", out, *extra],
                   check=True, capture_output=True)
    return out


def measure(d, form, dim, weight_bytes):
    out = export(d, form, ["--half", form])
    np.save(d / "x.npy", np.ones((1, dim), np.float32))
    m = run_module(d, form, out / "step.mlir", [out / "step.irpa"], [d / "x.npy"])
    return {"figure": "iree_runtime", "form": form, "layout": "[out, in] via transpose", "dim": dim,
            "weight_bytes_held": weight_bytes, "archive_vs_held": m["irpa_bytes"] / weight_bytes, **m}


def write_tied(d, vocab, dim):
    """g.json + w.safetensors: ids [1] -> embedding row -> h + h -> logits = h @ E^T, E [vocab, dim] bf16."""
    nbytes = vocab * dim * 2
    h = json.dumps({"e": {"dtype": "BF16", "shape": [vocab, dim], "data_offsets": [0, nbytes]}}).encode()
    h += b" " * ((-len(h)) % 8)
    rng = np.random.default_rng(6)
    with open(d / "w.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        rows = max(1, (64 << 20) // (dim * 4))
        for r0 in range(0, vocab, rows):
            block = rng.standard_normal((min(rows, vocab - r0), dim), dtype=np.float32) * 0.02
            f.write((block.view(np.uint32) >> 16).astype("<u2").tobytes())
    tensors = [{"name": "ids", "shape": [1], "dtype": "i32"},
               {"name": "e", "shape": [vocab, dim], "dtype": "bf16", "path": "model.embed_tokens.weight",
                "data": {"tensor": "e"}},
               {"name": "h", "shape": [1, dim], "dtype": "f32"}, {"name": "h2", "shape": [1, dim], "dtype": "f32"},
               {"name": "et", "shape": [dim, vocab], "dtype": "f32"},
               {"name": "logits", "shape": [1, vocab], "dtype": "f32"}]
    nodes = [{"op": "gather", "inputs": ["e", "ids"], "outputs": ["h"]},
             {"op": "add", "inputs": ["h", "h"], "outputs": ["h2"]},
             {"op": "transpose", "inputs": ["e"], "outputs": ["et"]},
             {"op": "matmul", "inputs": ["h2", "et"], "outputs": ["logits"]}]
    (d / "g.json").write_text(json.dumps({"name": "step", "tensors": tensors, "nodes": nodes, "outputs": ["logits"]}))
    np.save(d / "ids.npy", np.array([vocab // 3], np.int32))
    return nbytes


def tied(a):
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        held = write_tied(d, a.vocab, a.dim)
        rows = []
        for form, extra in (("for-use", []), ("as-held", ["--layout", "as-held"]),
                            ("for-use-widened", ["--half", "widen"])):
            out = export(d, form, extra)
            m = run_module(d, form, out / "step.mlir", [out / "step.irpa"], [d / "ids.npy"])
            rows.append({"figure": "iree_tied_embedding", "form": form, "vocab": a.vocab, "dim": a.dim,
                         "weight_bytes_held": held, "archive_vs_held": m["irpa_bytes"] / held, **m})
        assert np.allclose(rows[0]["output"], rows[1]["output"], rtol=1e-5, atol=1e-6), rows
        rows[0]["step_vs_as_held"] = rows[0]["step_ms"] / rows[1]["step_ms"]
        for r in rows:
            print(json.dumps(r))


def arg_order(mlir, fn):
    """The names of `fn`'s arguments in order, from the signature file beside the module (docs/signature-format.md)."""
    return signature(mlir, fn)[0]


def tiny_llm(a):
    """The Gradle exports of examples/tiny-llm (functions prefill and decode), 16-bit kept (`--keep DIR`) and
    widened (`--widen DIR`): prefill of the 8-token prompt with iree-benchmark-module; then, on the kept export,
    one decode step at position 63 (a full 64-token cache) against re-running prefill on all 64 tokens."""
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        feeds = {"tokens": np.array([3, 14, 15, 9, 26, 5, 35, 8], np.int32),  # TinyLlm.TOKENS
                 "positions": np.arange(8, dtype=np.int32)}
        rows = []
        for form, src in (("keep", a.keep), ("widen", a.widen)):
            src = pathlib.Path(src)
            inputs = []
            for name in arg_order(src / "tiny_llm.mlir", "prefill"):
                np.save(d / f"{name}.npy", feeds[name])
                inputs.append(d / f"{name}.npy")
            m = run_module(d, form, src / "tiny_llm.mlir", [src / "tiny_llm.irpa"], inputs, function="prefill",
                           outputs=6)
            rows.append({"figure": "iree_tiny_llm", "form": form, **m})
        keep, widen = rows
        assert np.allclose(keep["output"], widen["output"], rtol=1e-5, atol=1e-5), rows
        keep["step_vs_widened"] = keep["step_ms"] / widen["step_ms"]
        keep["archive_vs_widened"] = keep["irpa_bytes"] / widen["irpa_bytes"]
        rows.append(serving(d, pathlib.Path(a.keep)))
        for r in rows:
            print(json.dumps(r))


def arg_types(mlir, fn):
    """`{name: (shape, numpy dtype)}` of `fn`'s arguments, in argument order, from the signature file beside the
    module (these exports have static shapes)."""
    mlir = pathlib.Path(mlir)
    doc = json.loads(mlir.with_name(mlir.name[: -len(".mlir")] + ".signature.json").read_text())
    [f] = [f for f in doc["functions"] if f["name"] == fn]
    dtypes = {"f32": np.float32, "i32": np.int32, "i64": np.int64}
    return {a["name"]: (tuple(a["shape"]), dtypes[a["dtype"]]) for a in f["arguments"]}


def tiny_llm_decode(a):
    """One decode step (one token, position 63, the 64-row caches as arguments) of two Gradle exports of
    examples/tiny-llm at the same size, 16-bit kept (`--keep DIR`) and widened (`--widen DIR`): archive bytes,
    `iree-run-module` peak RSS and the `iree-benchmark-module` time of the step, side by side."""
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        rows = []
        for form, src in (("keep", a.keep), ("widen", a.widen)):
            src = pathlib.Path(src)
            mlir = src / "tiny_llm.mlir"
            types = arg_types(mlir, "decode")
            rng = np.random.default_rng(8)
            feeds = {"token": np.array([5], np.int32), "position": np.array([63], np.int32), "pos": np.array(63)}
            inputs = []
            for name, (shape, dtype) in types.items():
                value = feeds.get(name)
                if value is None:  # a cache: random keys and values, the same for both forms
                    value = (rng.standard_normal(shape) * 0.5).astype(dtype)
                np.save(d / f"{form}-{name}.npy", np.asarray(value, dtype).reshape(shape))
                inputs.append(d / f"{form}-{name}.npy")
            caches = sum(n.startswith("cache_") for n in types)
            m = run_module(d, f"decode-{form}", mlir, [src / "tiny_llm.irpa"], inputs, function="decode",
                           outputs=2 + caches)  # logits, next and each updated cache
            rows.append({"figure": "iree_tiny_llm_decode", "form": form, "size": a.size, **m})
        keep, widen = rows
        assert np.allclose(keep["output"], widen["output"], rtol=1e-4, atol=1e-4), rows
        keep["step_vs_widened"] = keep["step_ms"] / widen["step_ms"]
        keep["archive_vs_widened"] = keep["irpa_bytes"] / widen["irpa_bytes"]
        for r in rows:
            print(json.dumps(r))


def with_cache_globals(text):
    """The module with decode's caches as mutable module globals instead of arguments and results: each cache
    argument becomes a `util.global private mutable` loaded at the start of decode, each updated cache is stored
    back, and decode returns only the logits and the next token (the alternative the serving figure measures).
    The value caches start as -0.0 and the key caches as 0.0: with one `dense<0.0>` initializer for all four,
    IREE 3.13 computed different logits (max 1.8 off from position 1 on), as if a key and a value cache shared
    storage; with distinct initializers the results equal the argument version's."""
    import re
    head = re.search(r"  func\.func @decode\((.*?)\) -> \((.*?)\) \{\n", text, re.S)
    args = re.findall(r'(%arg\d+): (tensor<[^>]*>) \{tapeout\.name = "([^"]*)"(?:, tapeout\.dims = "[^"]*")?\}',
                      head.group(1))
    keep = [f"{a}: {t} {{tapeout.name = \"{n}\"}}" for a, t, n in args if not n.startswith("cache_")]
    caches = [(a, t, n[len("cache_"):]) for a, t, n in args if n.startswith("cache_")]
    results = re.findall(r'(tensor<[^>]*>) \{tapeout\.name = "([^"]*)"\}', head.group(2))
    globals_ = "".join(f"  util.global private mutable @{n} = dense<{'-0.0' if n.startswith('v') else '0.0'}> : {t}\n"
                       for _, t, n in caches)
    loads = "".join(f"    {a} = util.global.load @{n} : {t}\n" for a, t, n in caches)
    cn = {c[2] for c in caches}
    kept = [f"{t} {{tapeout.name = \"{n}\"}}" for t, n in results if n not in cn]
    body_start = head.end()
    end = text.index("\n  }\n", body_start)
    body = text[body_start:end]
    ret = re.search(r"    return (.*) : (.*)$", body, re.M)
    names = [v.strip() for v in ret.group(1).split(",")]
    types = re.findall(r"tensor<[^>]*>", ret.group(2))
    stores, outs, out_types = "", [], []
    for (t, n), v, ty in zip(results, names, types):
        if n in cn:
            stores += f"    util.global.store {v}, @{n} : {ty}\n"
        else:
            outs.append(v); out_types.append(ty)
    body = body[:ret.start()] + stores + f"    return {', '.join(outs)} : {', '.join(out_types)}" + body[ret.end():]
    new_head = f"  func.func @decode({', '.join(keep)}) -> ({', '.join(kept)}) {{\n"
    module_open = text.index("{\n") + 2
    return text[:module_open] + globals_ + text[module_open:head.start()] + new_head + loads + body + text[end:]


def serving(d, src, seq=64, repeats=200):
    """IREE's Python runtime on the kept export: the median time of one decode step with a full cache (position
    seq - 1) and of prefill on all `seq` tokens, in one process, interleaved."""
    import time
    import iree.runtime as rt
    vmfb = d / "serving.vmfb"
    subprocess.run([iree_tool("iree-compile"), src / "tiny_llm.mlir", "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", vmfb], check=True, capture_output=True)
    config = rt.Config("local-task")
    index = rt.ParameterIndex()
    index.load(str(src / "tiny_llm.irpa"))
    params = rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model"))
    m = rt.load_vm_modules(params, rt.create_hal_module(config.vm_instance, config.device),
                           rt.VmModule.mmap(config.vm_instance, str(vmfb)), config=config)[-1]
    order = {fn: arg_order(src / "tiny_llm.mlir", fn) for fn in ("prefill", "decode")}
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 64, seq).astype(np.int32)
    pre = {"tokens": tokens, "positions": np.arange(seq, dtype=np.int32)}
    out = [np.array(o.to_host(), copy=True) for o in m.prefill(*[pre[n] for n in order["prefill"]])]
    caches = {f"cache_{k}{i}": out[2 + 2 * i + (k == "v")] for i in range(2) for k in "kv"}
    dec = {"token": tokens[-1:], "position": np.array([seq - 1], np.int32), "pos": np.array(seq - 1, np.int64), **caches}
    dec_args = [dec[n] for n in order["decode"]]
    pre_args = [pre[n] for n in order["prefill"]]
    t_dec, t_pre = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m.decode(*dec_args)[0].to_host()
        t1 = time.perf_counter()
        m.prefill(*pre_args)[0].to_host()
        t2 = time.perf_counter()
        t_dec.append(t1 - t0)
        t_pre.append(t2 - t1)
    decode_ms, prefill_ms = 1e3 * float(np.median(t_dec)), 1e3 * float(np.median(t_pre))
    # The cache kept on the device between steps: the results passed straight back as the next arguments.
    dev = [o for o in m.decode(*dec_args)]
    t_dev = []
    for _ in range(repeats):
        args = {**dec, **{f"cache_{k}{i}": dev[2 + 2 * i + (k == "v")] for i in range(2) for k in "kv"}}
        t0 = time.perf_counter()
        dev = [o for o in m.decode(*[args[n] for n in order["decode"]])]
        dev[0].to_host()
        t_dev.append(time.perf_counter() - t0)
    device_ms = 1e3 * float(np.median(t_dev))
    # The alternative: the caches as mutable module globals (no cache arguments or results at all).
    g_mlir = d / "serving_globals.mlir"
    g_mlir.write_text(with_cache_globals((src / "tiny_llm.mlir").read_text()))
    g_vmfb = d / "serving_globals.vmfb"
    subprocess.run([iree_tool("iree-compile"), g_mlir, "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", g_vmfb], check=True, capture_output=True)

    def globals_module():
        return rt.load_vm_modules(
            rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model")),
            rt.create_hal_module(config.vm_instance, config.device),
            rt.VmModule.mmap(config.vm_instance, str(g_vmfb)), config=config)[-1]

    # The rewritten decode keeps the original's non-cache arguments, in their order (with_cache_globals).
    g_args = [dec[n] for n in order["decode"] if not n.startswith("cache_")]
    # Same numbers: both variants from zero caches (the globals start at zero).
    zero = {**dec, **{k: np.zeros_like(v) for k, v in caches.items()}}
    want = m.decode(*[zero[n] for n in order["decode"]])[0].to_host()
    got = globals_module().decode(*g_args)[0].to_host()
    assert np.allclose(want, got, rtol=1e-5, atol=1e-5), float(np.abs(want - got).max())
    gm = globals_module()
    t_glob = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gm.decode(*g_args)[0].to_host()
        t_glob.append(time.perf_counter() - t0)
    globals_ms = 1e3 * float(np.median(t_glob))
    return {"figure": "iree_tiny_llm_serving", "sequence": seq, "decode_step_ms": decode_ms,
            "decode_cache_on_device_ms": device_ms, "decode_cache_globals_ms": globals_ms,
            "globals_vs_arguments": globals_ms / device_ms,
            "prefill_all_ms": prefill_ms, "decode_vs_prefill": decode_ms / prefill_ms, "repeats": repeats}


def write_packed(d, fmt, dim, layers):
    from gguf import GGUFWriter, GGML_QUANT_SIZES, GGMLQuantizationType as T
    qt = T[fmt]
    elems, nbytes = GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng(8)
    w = GGUFWriter(str(d / "w.gguf"), "llama")
    for i in range(layers):
        blocks = rng.integers(0, 256, (dim * dim // elems, nbytes), dtype=np.uint8)
        # Scales small enough that activations stay O(1) through the layers.
        scale = (rng.uniform(0.5, 1.0, blocks.shape[0]) / (8 * np.sqrt(dim))).astype(np.float16).view(np.uint8).reshape(-1, 2)
        if fmt in ("Q4_K", "Q5_K"):  # d scales 6-bit sub-block codes (up to 63): smaller d, no mins
            k_scale = (scale.view(np.float16) / 32).astype(np.float16).view(np.uint8).reshape(-1, 2)
            blocks[:, 0:2], blocks[:, 2:4] = k_scale, np.zeros_like(k_scale)
        elif fmt == "Q6_K":  # d last; int8 sub-block scales up to ±127
            k_scale = (scale.view(np.float16) / 64).astype(np.float16).view(np.uint8).reshape(-1, 2)
            blocks[:, 208:210] = k_scale
        else:
            blocks[:, 0:2] = scale
        w.add_tensor(f"blk.{i}.w", blocks.reshape(dim, -1), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    write_linear_stack(d, dim, layers, "f32", lambda i: (f"blk.{i}.w", f"blk.{i}.w"))
    return layers * dim * dim // elems * nbytes


def packed(a):
    for fmt in a.formats.split(","):
        with tempfile.TemporaryDirectory(dir=a.out) as d:
            d = pathlib.Path(d)
            gguf_bytes = write_packed(d, fmt, a.dim, a.layers)
            np.save(d / "x.npy", np.random.default_rng(1).standard_normal((1, a.dim)).astype(np.float32))
            rows = []
            # Every module is compiled as IREE's own docs compile one, with no tuning spec: kept packed for the
            # CPU (the default target), the portable lowering (`--target portable`), and dequantized.
            for form, flags in (("keep", ["--packed", "keep"]), ("portable", ["--packed", "keep", "--target", "portable"]),
                                ("dequantize", ["--packed", "dequantize"])):
                out = d / form
                subprocess.run([TAPEOUT, "export", d / "g.json", "--weights", d / "w.gguf", "-o", out, *flags],
                               check=True, capture_output=True)
                m = run_module(d, form, out / "step.mlir", [out / "step.irpa"], [d / "x.npy"])
                rows.append({"figure": "iree_packed", "format": fmt, "form": form, "dim": a.dim, "layers": a.layers,
                             "gguf_tensor_bytes": gguf_bytes, "archive_vs_gguf": m["irpa_bytes"] / gguf_bytes, **m})
            *kept, deq = rows
            for r in kept:
                assert np.allclose(r["output"], deq["output"], rtol=1e-4, atol=1e-4), (r["output"], deq["output"])
                r["step_vs_dequantized"] = r["step_ms"] / deq["step_ms"]
            for r in rows:
                print(json.dumps(r), flush=True)


def packed_layout(a):
    """See the module docs. Writes the archives with IREE's own ParameterIndex, so nothing of tapeout is measured
    but the layout."""
    import iree.runtime as rt
    kb, b = a.dim // 32, 32
    rng = np.random.default_rng(0)
    cases = []
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        x = rng.standard_normal((1, kb * b)).astype(np.float32)
        np.save(d / "x.npy", x)
        for n in (a.dim, a.dim - 1):
            for layout in ("kbn", "knb"):
                np_ = -(-n // 64) * 64 if layout == "kbn" else n
                shape = (kb, b, np_) if layout == "kbn" else (kb, np_, b)
                q = rng.integers(-8, 8, shape).astype(np.int8)
                sc = rng.uniform(0.01, 0.02, (kb, np_)).astype(np.float16)
                nib = (q.reshape(-1).astype(np.int64) & 15).astype(np.uint8)
                label = f"{layout}{n}"
                idx = rt.ParameterIndex()
                idx.add_buffer("q", (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes())
                idx.add_buffer("d", sc.tobytes())
                idx.create_archive_file(str(d / f"{label}.irpa"))
                t = "x".join(map(str, shape))
                contract = "[2] x [1]" if layout == "kbn" else "[2] x [2]"
                (d / f"{label}.mlir").write_text(f"""
util.global private @q = #flow.parameter.named<"model"::"q"> : tensor<{t}xi4>
util.global private @d = #flow.parameter.named<"model"::"d"> : tensor<{kb}x{np_}xf16>
func.func @main(%x: tensor<1x{kb * b}xf32>) -> tensor<1x{n}xf32> {{
  %q = util.global.load @q : tensor<{t}xi4>
  %d = util.global.load @d : tensor<{kb}x{np_}xf16>
  %df = stablehlo.convert %d : (tensor<{kb}x{np_}xf16>) -> tensor<{kb}x{np_}xf32>
  %xb = stablehlo.reshape %x : (tensor<1x{kb * b}xf32>) -> tensor<1x{kb}x{b}xf32>
  %xt = stablehlo.transpose %xb, dims = [1, 0, 2] : (tensor<1x{kb}x{b}xf32>) -> tensor<{kb}x1x{b}xf32>
  %qf = stablehlo.convert %q : (tensor<{t}xi4>) -> tensor<{t}xf32>
  %s = stablehlo.dot_general %xt, %qf, batching_dims = [0] x [0], contracting_dims = {contract} : (tensor<{kb}x1x{b}xf32>, tensor<{t}xf32>) -> tensor<{kb}x1x{np_}xf32>
  %d3 = stablehlo.reshape %df : (tensor<{kb}x{np_}xf32>) -> tensor<{kb}x1x{np_}xf32>
  %sa = stablehlo.multiply %s, %d3 : tensor<{kb}x1x{np_}xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%sa init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{kb}x1x{np_}xf32>, tensor<f32>) -> tensor<1x{np_}xf32>
  %y = stablehlo.slice %r [0:1, 0:{n}] : (tensor<1x{np_}xf32>) -> tensor<1x{n}xf32>
  return %y : tensor<1x{n}xf32>
}}""")
                codes = q if layout == "kbn" else q.transpose(0, 2, 1)
                want = (np.einsum("kb,kbn->kn", x.reshape(kb, b).astype(np.float64), codes.astype(np.float64))
                        * sc.astype(np.float64)).sum(0)[:n]
                cases.append((label, n, layout, np_, want))
        rows = {c[0]: [] for c in cases}
        for _ in range(a.rounds):
            for label, n, layout, np_, want in cases:
                m = run_module(d, label, d / f"{label}.mlir", [d / f"{label}.irpa"], [d / "x.npy"])
                got = np.load(d / f"{label}.out.npy").reshape(-1).astype(np.float64)
                assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max()), label
                rows[label].append(m)
        for label, n, layout, np_, _ in cases:
            ms = sorted(r["step_ms"] for r in rows[label])
            r = rows[label][0]
            print(json.dumps({"figure": "iree_packed_layout", "layout": "[K/32, 32, N]" if layout == "kbn" else
                              "[K/32, N, 32]", "k": a.dim, "n": n, "rows_written": np_, "irpa_bytes": r["irpa_bytes"],
                              "iree_run_peak_rss": r["iree_run_peak_rss"], "step_ms_rounds": ms,
                              "step_ms": ms[len(ms) // 2]}), flush=True)


def pytorch_layout(a):
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        held = write_model(d, a.dim, a.layers)
        rows = [measure(d, form, a.dim, held) for form in ("keep", "widen")]
        keep, widen = rows
        assert np.allclose(keep["output"], widen["output"], rtol=1e-5, atol=1e-6), (keep["output"], widen["output"])
        keep["step_vs_widened"] = keep["step_ms"] / widen["step_ms"]
        for r in rows:
            print(json.dumps(r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", default="pytorch-layout", choices=["pytorch-layout", "tied", "tiny-llm", "tiny-llm-decode", "packed", "packed-layout"])
    ap.add_argument("--dim", type=int, default=None)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--keep")
    ap.add_argument("--widen")
    ap.add_argument("--size", default="", help="tiny-llm-decode: the size the exports were made at (a label)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--formats", default="Q8_0,Q4_0,Q4_K,Q5_K,Q6_K")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.what == "tied":
        a.dim = a.dim or 2048
        tied(a)
    elif a.what == "tiny-llm":
        tiny_llm(a)
    elif a.what == "tiny-llm-decode":
        tiny_llm_decode(a)
    elif a.what == "packed-layout":
        a.dim = a.dim or 4096
        packed_layout(a)
    elif a.what == "packed":
        a.dim = a.dim or 4096
        a.layers = 4 if a.layers == 8 else a.layers
        packed(a)
    else:
        a.dim = a.dim or 8192
        pytorch_layout(a)


if __name__ == "__main__":
    main()
