"""Decode at the memory floor (scripts/bench; docs/performance.md#llm-decode-and-prefill): one Llama
checkpoint made by transformers, exported by tapeout (examples/hf-llama, the Kotlin model) and run by IREE 3.13, side
by side with the same checkpoint through llama.cpp's own converter run by llama-cpp-python, on this machine's CPU
with the same thread count, in alternating rounds, and the read-bandwidth floor measured in the same run.

    python tests/bench/llama_decode.py --out DIR [--rounds 3] [--threads 2] [--small] [--no-llamacpp]
        [--checkpoint DIR] [--reuse-times]

- the checkpoint: tests/bench/llama_checkpoint.py (transformers, seeded random weights, bf16; 156M parameters:
  vocab 32000, hidden 1024, FFN 2816, 8 layers, 16 query / 4 KV heads; `--small` a 2-layer, 128-wide twin), run by
  the bench venv (`scripts/setup bench`: .bench-venv); scripts/test runs `--small --no-llamacpp --checkpoint
  examples/hf-llama/testdata/llama-bf16`, which checks only that the IREE side runs;
- tapeout: `gradle :examples:hf-llama:exportIrpaCheckpoint` (bf16 kept), `iree-compile` for the host CPU with the
  flags docs/performance.md documents; prefill of 8 and 128 tokens (exported with HF's logits_to_keep=1: the last
  position's logits, as generate() asks and as llama.cpp's prefill is timed) and one decode step after 64 and 1024
  cached positions, each the median of `iree-benchmark-module` repetitions (under `chrt -b 0`, as llama.cpp; the
  decode at 64 also without it); the same decode step served in process by tapeout-iree (`serve_bench`, the archive
  mapped), in the same rounds: its time and its RssFile / RssAnon, and its time with IREE's own wait
  (`--batch-waits off`); each export's prefill served the same way: its time and the process's peak memory (VmHWM);
- llama.cpp: tests/bench/llamacpp.py (convert_hf_to_gguf.py to F16, llama.cpp's quantizer to Q8_0 and Q4_0, pure;
  timing through llama-cpp-python's low-level API, F32 KV cache);
- GGUF through tapeout (when examples/hf-llama has the GGUF entry): the Q8_0 and Q4_0 files exported with their
  blocks kept packed, the codes in block rows (`tapeout_q8_0`) and in row bands (`tapeout_q8_0_bands`), timed as
  above against llama.cpp's same files;
- numbers: prefill logits of one prompt against transformers' float32 forward (max abs difference), for tapeout
  (the last position) and for llama.cpp F16 (every position).

Prints one JSON object (every median, the ratios of docs/performance.md#llm-decode-and-prefill, and the machine's
bandwidth). Every round's samples are also kept in DIR/times.json; `--reuse-times` takes them from there instead
of timing again (the exports, the served prefills, the bandwidth and the logits are still run; the served decode
steps too if the saved rounds lack them).
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from harness import bench_sh, benchmark_median_ms, iree_tool  # noqa: E402

GRADLE = ["gradle", "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--console=plain", "--quiet"]
# The flags tapeout documents for a CPU build (docs/performance.md#llm-decode-and-prefill): the host's own
# instruction set, and loops peeled rather than masked at the edges of a vector tile (prefill's `?` rows: 1.4x
# faster at 128 tokens on IREE 3.13, decode unchanged).
COMPILE = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
           "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
           "--iree-llvmcpu-vector-pproc-strategy=peel"]
PROMPT = [1, 3, 14, 15, 92, 65, 35, 89]
# Both systems' timed processes run under SCHED_BATCH (`chrt -b 0`, as docs/performance.md#how-we-measure documents
# for IREE's tools): IREE 3.13's blocking wait ends by spinning until the worker thread that woke it has finished, and a
# waiter woken on that worker's CPU preempts it (tapeout-iree switches its waiting thread itself). llama.cpp's own
# threads spin rather than sleep, and time the same either way. `plain_decode_*` is IREE's decode started as is.
SCHED = ["chrt", "-b", "0"] if sys.platform.startswith("linux") else []


def log(*a):
    print("llama_decode:", *a, file=sys.stderr, flush=True)


def sh(*args, **kw):
    return bench_sh("llama_decode", *args, **kw)


def config(ckpt):
    return json.loads((pathlib.Path(ckpt) / "config.json").read_text())


def export(ckpt, out, gguf=None, static=None, packed=None):
    """The checkpoint (or a GGUF file) exported by the Kotlin model through Gradle; returns (mlir, irpa). With
    `static`, decode is HF's StaticCache form: caches of that many rows, this step written at cache_position.
    Prefill returns the last position's logits (HF's logits_to_keep=1, what generate() asks for), as llama.cpp's
    prefill is timed. `packed` is a GGUF's packedConstants setting (default KEEP: Q8_0 / Q4_0 codes in block rows;
    KEEP_ROW_BANDS: in row bands)."""
    out = pathlib.Path(out)
    if gguf is None:
        task, props = ":examples:hf-llama:exportIrpaCheckpoint", [f"-PhfLlama.checkpoint={ckpt}"]
        if static:
            props.append(f"-PhfLlama.staticCache={static}")
    else:
        task, props = ":examples:hf-llama:exportIrpaGguf", [f"-PhfLlama.gguf={gguf}"]
        if packed:
            props.append(f"-PhfLlama.packedConstants={packed}")
    props.append("-PhfLlama.logitsToKeep=1")
    sh(*GRADLE, task, *props, f"-PtapeoutOut={out}", "-PtapeoutHeap=1g", cwd=ROOT)
    return out / "llama.mlir", out / "llama.irpa"


def compile_host(mlir, extra=()):
    """Compiles for this CPU with the tuning spec the export wrote beside the module, as users are told to (and as
    Gradle's compileIree and IreeCompiler do)."""
    vmfb = pathlib.Path(mlir).with_suffix(".vmfb")
    spec = pathlib.Path(mlir).with_suffix(".tuning.mlir")
    # One thread with a spec: IREE 3.13 can deadlock loading it on several (docs/performance.md#cpu-tuning).
    tuning = [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"] if spec.is_file() else []
    sh(iree_tool("iree-compile"), mlir, *COMPILE, *tuning, *extra, "-o", vmfb)
    return vmfb


def signature(mlir, fn):
    """Argument types of `fn` from the module text: [(name, 'AxBx?xf32')]."""
    text = pathlib.Path(mlir).read_text()
    head = re.search(rf"func\.func @{fn}\((.*?)\) ->", text, re.S).group(1)
    return [(m.group(2), m.group(1)) for m in re.finditer(r"%\w+: tensor<([^>]*)>\s*\{tapeout\.name = \"([^\"]+)\"", head)]


def bench_inputs(mlir, fn, dynamic):
    """iree-benchmark-module --input flags: every `?` set to `dynamic`; token ids 5, caches zero, a static cache's
    cache_position `dynamic` (the step after `dynamic` cached positions)."""
    flags = []
    for name, t in signature(mlir, fn):
        t = t.replace("?", str(dynamic))
        value = dynamic if name == "cache_position" else 5 if t.endswith("i32") else 0
        flags.append(f"--input={t}={value}")
    return flags


def iree_time(vmfb, irpa, mlir, fn, dynamic, threads, min_time="2s", sched=True):
    out = sh(*(SCHED if sched else []), iree_tool("iree-benchmark-module"), f"--module={vmfb}", f"--parameters=model={irpa}", "--device=local-task",
             f"--task_topology_max_group_count={threads}", f"--function={fn}", *bench_inputs(mlir, fn, dynamic),
             "--benchmark_repetitions=3", f"--benchmark_min_time={min_time}")
    return benchmark_median_ms("llama_decode", out)


def serve(vmfb, irpa, fn, dynamic, threads, repeats=20, batch_waits=True):
    exe = ROOT / "target/release/examples/serve_bench"
    return json.loads(sh(exe, vmfb, irpa, fn, dynamic, "--workers", threads, "--repeats", repeats,
                         "--batch-waits", "on" if batch_waits else "off"))


def weight_bytes(irpa, skip=("embed_tokens", "token_embd")):
    """Bytes a decode step reads from the archive: every entry but the embedding table (one row of it is read)."""
    sys.path.insert(0, str(ROOT / "tests"))
    dump = sh(ROOT / "target/release/tapeout", "dump", "--json", irpa)
    total = 0
    for line in dump.splitlines():
        row = json.loads(line)
        if not any(s in row["key"] for s in skip):
            total += int(row["length"])
    return total


def kv_bytes(cfg, context):
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * context * head * 4


def iree_logits(vmfb, irpa, mlir, d, tokens):
    """Prefill logits of `tokens`, [rows, vocab] (the last position's only under logits_to_keep=1); the caches
    prefill also returns are not written (`--output=`)."""
    ids = d / "prompt.npy"
    np.save(ids, np.array([tokens], np.int32))
    out = d / "logits.npy"
    head = re.search(r"func\.func @prefill\(.*?\) -> \((.*?)\) \{", pathlib.Path(mlir).read_text(), re.S).group(1)
    rest = ["--output="] * (head.count("tensor<") - 1)
    sh(iree_tool("iree-run-module"), "--device=local-task", f"--module={vmfb}", "--function=prefill",
       f"--parameters=model={irpa}", f"--input=@{ids}", f"--output=@{out}", *rest)
    return np.load(out)[0]


TRANSFORMERS = """
import sys, numpy as np, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
ids = torch.tensor([[int(t) for t in sys.argv[3].split(',')]])
with torch.no_grad():
    np.save(sys.argv[2], m(ids).logits[0].float().numpy())
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--small", action="store_true", help="a 2-layer, 128-wide checkpoint, 1 short round")
    p.add_argument("--no-llamacpp", action="store_true")
    p.add_argument("--checkpoint", help="a transformers checkpoint directory to use instead of making one")
    p.add_argument("--bench-python", default=str(ROOT / ".bench-venv/bin/python"))
    p.add_argument("--reuse-times", action="store_true",
                   help="take the timing rounds from OUT/times.json (written after each round) instead of running them")
    a = p.parse_args()
    out = pathlib.Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # The release tools read at the end (before any timing, so that a missing one fails first): `tapeout dump` for
    # the archive's bytes and tapeout-iree's serve_bench for the step served in process.
    sh("cargo", "build", "--release", "--locked", "--quiet", "-p", "tapeout-cli", "-p", "tapeout-iree", "--bin", "tapeout",
       "--example", "serve_bench", cwd=ROOT)
    py = a.bench_python
    if not pathlib.Path(py).exists() and not (a.no_llamacpp and a.checkpoint):
        raise SystemExit(f"llama_decode: {py} is missing: run `scripts/setup bench` (transformers, llama-cpp-python)")
    small = ["--layers", "2", "--hidden", "128", "--ffn", "256", "--vocab", "512", "--heads", "2", "--kv-heads", "1"]
    ckpt = pathlib.Path(a.checkpoint).resolve() if a.checkpoint else out / ("checkpoint-small" if a.small else "checkpoint")
    if not (ckpt / "model.safetensors").exists():
        log("making the checkpoint with transformers")
        sh(py, ROOT / "tests/bench/llama_checkpoint.py", ckpt, *(small if a.small else []))
    cfg = config(ckpt)
    prefills, contexts = ((8, 32), (16, 64)) if a.small else ((8, 128), (64, 1024))
    min_time = "0.2s" if a.small else "2s"
    served_calls = 5 if a.small else 50

    def serve_both(f, arch, r):
        """The decode step at the first context served with tapeout-iree's batch waits ("on") and with IREE's own
        wait ("off"), each a process of its own, in the order round `r` takes (alternating)."""
        return {on: serve(f, arch, "decode", contexts[0], a.threads, served_calls, batch_waits=on == "on")
                for on in (("on", "off") if r % 2 == 0 else ("off", "on"))}

    log("exporting with tapeout")
    mlir, irpa = export(ckpt, out / ("tapeout-small" if a.small else "tapeout"))
    vmfb = compile_host(mlir)
    systems = {"tapeout_bf16": ("iree", vmfb, irpa, mlir)}
    # HF's StaticCache form: caches of the longest context, this step's keys written in place.
    s_mlir, s_irpa = export(ckpt, out / ("tapeout-static-small" if a.small else "tapeout-static"), static=contexts[1] + 1)
    systems["tapeout_bf16_static"] = ("iree", compile_host(s_mlir), s_irpa, s_mlir)
    ggufs = {}
    if not a.no_llamacpp:
        log("converting with llama.cpp")
        conv = json.loads(sh(py, ROOT / "tests/bench/llamacpp.py", "convert", ckpt, out / ("gguf-small" if a.small else "gguf")))
        ggufs = {k: conv["files"][k]["path"] for k in ("f16", "q8_0", "q4_0")}
        for k, f in ggufs.items():
            systems[f"llamacpp_{k}"] = ("llamacpp", f, None, None)
        for k in ("q8_0", "q4_0"):
            log(f"exporting the {k} GGUF with tapeout, blocks kept packed")
            g_mlir, g_irpa = export(None, out / f"tapeout-gguf-{k}", gguf=ggufs[k])
            systems[f"tapeout_{k}"] = ("iree", compile_host(g_mlir), g_irpa, g_mlir)
            # The same with the codes in row bands: the same numbers; which layout is faster depends on the CPU.
            g_mlir, g_irpa = export(None, out / f"tapeout-gguf-{k}-bands", gguf=ggufs[k], packed="KEEP_ROW_BANDS")
            systems[f"tapeout_{k}_bands"] = ("iree", compile_host(g_mlir), g_irpa, g_mlir)

    times = {s: {} for s in systems}
    # The exports whose decode step is also served in process (a static cache's step is not).
    served_systems = {s: (f, arch) for s, (kind, f, arch, _) in systems.items()
                      if kind == "iree" and not s.endswith("_static")}
    saved = out / "times.json"
    if a.reuse_times:
        times = json.loads(saved.read_text())
        if set(times) != set(systems):
            raise SystemExit(f"llama_decode: {saved} times {sorted(times)}, not this run's {sorted(systems)}")
    for r in range(0 if a.reuse_times else a.rounds if not a.small else 1):
        order = list(systems)
        order = order[r % len(order):] + order[:r % len(order)]
        for s in order:
            kind, f, arch, m = systems[s]
            log(f"round {r + 1}: {s}")
            if kind == "iree":
                for n in (prefills if not s.endswith("_static") else ()):
                    times[s].setdefault(f"prefill_{n}", []).append(iree_time(f, arch, m, "prefill", n, a.threads, min_time))
                # Under SCHED_BATCH at each context, and as started at the first: after them, or before them in
                # every other round.
                decodes = [(f"decode_{c}", c, True) for c in contexts]
                plain = [(f"plain_decode_{contexts[0]}", contexts[0], False)]
                for key, c, sched in (plain + decodes if r % 2 else decodes + plain):
                    times[s].setdefault(key, []).append(iree_time(f, arch, m, "decode", c, a.threads, min_time, sched=sched))
                # Served in process in the same round (so that its ratio to llama.cpp is of one sitting), with
                # tapeout-iree's batch waits and with IREE's own wait, the two in alternating order.
                if s in served_systems:
                    served = times[s].setdefault("served", {"on": [], "off": []})
                    for on, v in serve_both(f, arch, r).items():
                        served[on].append(v)
            else:
                t = json.loads(sh(*SCHED, py, ROOT / "tests/bench/llamacpp.py", "time", f, "--threads", a.threads,
                                  "--prefill", ",".join(map(str, prefills)), "--context", ",".join(map(str, contexts)),
                                  "--repeats", 3 if a.small else 10))
                for n in prefills:
                    times[s].setdefault(f"prefill_{n}", []).append(t["prefill"][str(n)]["median_ms"])
                for c in contexts:
                    times[s].setdefault(f"decode_{c}", []).append(t["decode"][str(c)]["median_ms"])
                times[s]["memory"] = t["memory"]["after_runs"]
                times[s]["system_info"] = t["system_info"]
        # Every sample so far, kept should a later step fail.
        part = saved.with_name(saved.name + ".part")
        part.write_text(json.dumps(times))
        part.replace(saved)
    medians = {s: {k: statistics.median(v) for k, v in d.items() if isinstance(v, list)} for s, d in times.items()}

    result = {"figure": "llama_decode", "small": a.small, "threads": a.threads, "rounds": a.rounds,
              "config": {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads")},
              "compile_flags": COMPILE, "medians_ms": medians}
    # In process, the archive mapped: every export's decode step and its memory (IREE's own tools time them with the
    # archive read into memory); `served` is the bf16 one. Each also with IREE's own wait (`served_decode_no_batch`:
    # Device::set_batch_waits's baseline), each call a process of its own: timed in the rounds above, or (times
    # reused from a run that predates that) in rounds of their own here.
    if not all(times[s].get("served") for s in served_systems):
        for s in served_systems:
            times[s]["served"] = {"on": [], "off": []}
        for r in range(1 if a.small else max(1, a.rounds)):
            for s, (f, arch) in served_systems.items():
                for on, v in serve_both(f, arch, r).items():
                    times[s]["served"][on].append(v)

    def median_round(runs):
        """The round with the median time (the lower of two middle ones; its memory with it), and every round's."""
        runs = sorted(runs, key=lambda v: v["median_ms"])
        return dict(runs[(len(runs) - 1) // 2], rounds_ms=[v["median_ms"] for v in runs])

    result["served_decode"] = {s: median_round(times[s]["served"]["on"]) for s in served_systems}
    result["served_decode_no_batch"] = {s: median_round(times[s]["served"]["off"]) for s in served_systems}
    result["served"] = result["served_decode"]["tapeout_bf16"]
    # Prefill served in process the same way: its time and the process's peak memory (VmHWM), beside the archive it
    # maps (a kept-packed prefill dequantizes weights for its `?` rows: how much of that is live at once).
    result["served_prefill"] = {
        s: {str(n): serve(f, arch, "prefill", n, a.threads, 2 if a.small else 5) for n in prefills}
        for s, (kind, f, arch, _) in systems.items() if kind == "iree" and not s.endswith("_static")}
    # Waiting under SCHED_BATCH, against waiting as IREE does, in this run (above 1.0: faster under it).
    c = contexts[0]
    result["batch_wait_speedup"] = {
        "iree_benchmark_module": {s: medians[s][f"plain_decode_{c}"] / medians[s][f"decode_{c}"]
                                  for s in medians if f"plain_decode_{c}" in medians[s]},
        "served": {s: result["served_decode_no_batch"][s]["median_ms"] / v["median_ms"]
                   for s, v in result["served_decode"].items()},
    }
    result["archive_bytes"] = irpa.stat().st_size
    result["decode_weight_bytes"] = weight_bytes(irpa)
    result["kv_bytes"] = {str(c): kv_bytes(cfg, c) for c in contexts}
    if not a.no_llamacpp:
        bw = json.loads(sh(py, ROOT / "tests/bench/llamacpp.py", "bandwidth", "--threads", a.threads))
        gbs = bw["gb_per_s"]
        result["bandwidth_gbs"] = gbs
        floor_ms = result["decode_weight_bytes"] / (gbs * 1e9) * 1e3
        result["floor_decode_ms"] = floor_ms
        ours = medians["tapeout_bf16"]
        c0, c1 = contexts
        result["ratios"] = {
            # tokens/s ratios: theirs time over ours (above 1.0: we are faster)
            "decode_vs_llamacpp_f16": medians["llamacpp_f16"][f"decode_{c0}"] / ours[f"decode_{c0}"],
            "prefill8_vs_llamacpp_f16": medians["llamacpp_f16"][f"prefill_{prefills[0]}"] / ours[f"prefill_{prefills[0]}"],
            "prefill128_vs_llamacpp_f16": medians["llamacpp_f16"][f"prefill_{prefills[1]}"] / ours[f"prefill_{prefills[1]}"],
            "decode_of_floor": floor_ms / ours[f"decode_{c0}"],
            "llamacpp_f16_decode_of_floor": floor_ms / medians["llamacpp_f16"][f"decode_{c0}"],
            # context 1024 against context 64 plus the KV bytes' own floor
            "ctx_long_vs_short_plus_kv": ours[f"decode_{c1}"] / (
                ours[f"decode_{c0}"] + (kv_bytes(cfg, c1) - kv_bytes(cfg, c0)) / (gbs * 1e9) * 1e3),
        }
        st = medians["tapeout_bf16_static"]
        kv_floor = (kv_bytes(cfg, c1) - kv_bytes(cfg, c0)) / (gbs * 1e9) * 1e3
        result["ratios"]["static_ctx_long_vs_short_plus_kv"] = st[f"decode_{c1}"] / (st[f"decode_{c0}"] + kv_floor)
        result["ratios"]["static_ctx_long_vs_dynamic_short_plus_kv"] = st[f"decode_{c1}"] / (ours[f"decode_{c0}"] + kv_floor)
        result["ratios"][f"decode_{c1}_static_vs_llamacpp_f16"] = \
            medians["llamacpp_f16"][f"decode_{c1}"] / st[f"decode_{c1}"]
        for k in ("q8_0", "q4_0"):
            for layout in ("", "_bands"):
                if f"tapeout_{k}{layout}" in medians:
                    ours_k = medians[f"tapeout_{k}{layout}"]
                    result["ratios"][f"decode_{k}{layout}_vs_llamacpp_{k}"] = \
                        medians[f"llamacpp_{k}"][f"decode_{c0}"] / ours_k[f"decode_{c0}"]
                    for n in prefills:
                        result["ratios"][f"prefill{n}_{k}{layout}_vs_llamacpp_{k}"] = \
                            medians[f"llamacpp_{k}"][f"prefill_{n}"] / ours_k[f"prefill_{n}"]
        result["llamacpp_memory"] = {s: times[s].get("memory") for s in systems if s.startswith("llamacpp")}
        # Numbers: prefill logits of one prompt against transformers' float32 forward.
        with tempfile.TemporaryDirectory(dir=out) as d:
            d = pathlib.Path(d)
            tokens = [t % cfg["vocab_size"] for t in PROMPT]
            want = d / "want.npy"
            sh(py, "-c", TRANSFORMERS, ckpt, want, ",".join(map(str, tokens)))
            want = np.load(want)
            got = iree_logits(vmfb, irpa, mlir, d, tokens)
            result["max_abs_vs_transformers"] = {"tapeout_bf16": float(np.abs(got - want[-len(got):]).max()),
                                                 "tapeout_bf16_positions": len(got)}
            lc = d / "lc.npy"
            sh(py, ROOT / "tests/bench/llamacpp.py", "logits", ggufs["f16"], "--tokens", ",".join(map(str, tokens)), "--out", lc)
            result["max_abs_vs_transformers"]["llamacpp_f16"] = float(np.abs(np.load(lc) - want).max())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
