"""The model-scale run: export a Gemma-3n-E2B-shaped model from Kotlin, measure it, and check it with IREE.

    python tests/bench/gemma_scale.py --config e2b --classpath-file CP --out DIR [--jvm-flags "..."]
    python tests/bench/gemma_scale.py --config tiny --classpath-file CP --out DIR

1. Runs `GemmaScaleMain` (examples/gemma-scale) in its own JVM under /usr/bin/time: it builds the weights on the
   heap (bf16 ShortArrays), exports `gemma.mlir` + `gemma.irpa`, and writes its float64 reference logits.
2. Recomputes sample values of every archive entry from (key, index) with numpy and reads them through IREE's
   ParameterIndex (mmap), including the last rows of the 262144 x 7680 table (offsets above 2^32).
3. Compiles the module with iree-compile and runs it with iree-run-module on the archive; compares the logits
   with the Kotlin reference.
Prints one JSON object; exits 1 when a check fails.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv/bin"
U64 = np.uint64


def fnv1a(key: str) -> int:
    h = 0xCBF29CE484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def mix(i, seed):
    """The generator of examples/gemma-scale (Synth.mix), on uint64 arrays."""
    z = i.astype(U64) * U64(0x9E3779B97F4A7C15) + U64(seed)
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    return z ^ (z >> U64(27))


def expected_f32_bits(param, idx):
    z = mix(idx, fnv1a(param["key"]))
    m = ((z >> U64(32)) & U64(0x7F)).astype(np.int64)
    if param["kind"] == "bf16":
        sign = (z >> U64(63)).astype(np.uint32)
        bits = (sign << 15) | np.uint32(127 + param["exponent"]) << 7 | m.astype(np.uint32)
        return bits.astype(np.uint32) << 16
    return (np.float32(1) + (m - 64).astype(np.float32) / np.float32(512)).view(np.uint32)


def timed(cmd, log):
    """Runs cmd under /usr/bin/time; returns (seconds, peak RSS in bytes). Output goes to log."""
    rss = log.with_suffix(".rss")
    t = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss)] + [str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        sys.stderr.write(log.read_text()[-4000:])
        raise SystemExit(f"gemma_scale: {cmd[0]} failed with exit code {p.returncode} (log: {log})")
    return secs, int(rss.read_text().split()[-1]) * 1024


def spot_check(irpa, params, samples=16):
    import iree.runtime as rt
    idx = rt.ParameterIndex()
    idx.load(str(irpa))
    entries = dict(idx.items())
    rng = np.random.default_rng(7)
    checked, max_offset = 0, 0
    for p in params:
        n = int(np.prod(p["shape"]))
        if p["kind"] == "q4k":  # kept packed: its i4 codes are an entry (the small planes may be inline); the
            # values of every plane are checked by the logits. Its rows are padded to a multiple of 64.
            qs = entries.get(f"{p['key']}.qs")
            meta = json.loads(bytes(qs.metadata).decode().removeprefix("TENSORv0:")) if qs is not None else {}
            rows, cols = meta.get("packed_shape", [0, 0])
            padded = -(-rows // 64) * 64
            if (qs is None or meta["dtype"] != "i4" or rows * cols != n or meta["shape"][-1] != padded
                    or qs.length != padded * cols // 2):
                raise SystemExit(f"gemma_scale: {p['key']}: no i4 code plane of [{n} values, rows padded to a multiple of 64] "
                                 f"in the archive: {meta}")
            checked += 1
            continue
        entry = entries.get(p["key"])
        if entry is None:
            continue  # small enough to be inline in the module
        # A bf16 weight is stored as its own 2 bytes (kept, the default) or widened to f32.
        kept = p["kind"] == "bf16" and entry.length == n * 2
        if not kept and entry.length != n * 4:
            raise SystemExit(f"gemma_scale: {p['key']}: {entry.length} bytes in the archive, expected {n * 4}"
                             + (f" or {n * 2}" if p["kind"] == "bf16" else ""))
        want_idx = np.unique(np.concatenate([np.arange(min(4, n)), np.arange(max(0, n - 4), n), rng.integers(0, n, samples)]))
        # A weight the program only uses transposed (the tied embedding) is stored as [cols, rows]: archive
        # element i is generator element (i % rows, i // rows).
        meta = json.loads(bytes(entry.metadata).decode().removeprefix("TENSORv0:") or "{}")
        src_idx = want_idx
        if "transposed_from" in meta:
            rows, cols = meta["transposed_from"]
            src_idx = (want_idx % rows) * cols + want_idx // rows
        if kept:
            got = np.frombuffer(entry.file_view, dtype="<u2")[want_idx]
            want = (expected_f32_bits(p, src_idx) >> np.uint32(16)).astype(np.uint16)
        else:
            got = np.frombuffer(entry.file_view, dtype="<u4")[want_idx]
            want = expected_f32_bits(p, src_idx)
        if not np.array_equal(got, want):
            bad = int(want_idx[np.argmax(got != want)])
            raise SystemExit(f"gemma_scale: {p['key']}[{bad}] differs from the generator")
        checked += want_idx.size
        max_offset = max(max_offset, entry.file_storage[1] + entry.length)
    return len(entries), checked, max_offset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="e2b")
    ap.add_argument("--classpath-file", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jvm-flags", default=None,
                    help="JVM options (default for e2b: a fixed 10 GiB heap, the parallel collector, a 64 MiB young "
                         "generation; for tiny: -Xmx512m)")
    ap.add_argument("--keep", action="store_true", help="keep the archive and module")
    ap.add_argument("--weights", default="bf16", choices=["bf16", "q4k"],
                    help="q4k: every matrix contracted or gathered along a multiple of 256 as Q4_K blocks, kept packed")
    ap.add_argument("--baseline-write", action="store_true",
                    help="the JVM also times a plain write() + fsync of as many bytes to the same directory, after the "
                         "export, in the same memory state (the export's throughput baseline)")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    flags = (a.jvm_flags if a.jvm_flags is not None else
             "-Xms10g -Xmx10g -XX:+UseParallelGC -Xmn64m" if a.config.startswith("e2b") else "-Xmx1g").split()
    cp = pathlib.Path(a.classpath_file).read_text().strip()
    java = shutil.which("java") or "java"

    flags.append(f"-Dgemma.weights={a.weights}")
    jvm_s, jvm_peak = timed([java, *flags, "-cp", cp, "dev.tapeout.examples.gemma.GemmaScaleMain", a.config, out,
                             *(["--baseline-write"] if a.baseline_write else [])], out / "jvm.log")
    print((out / "jvm.log").read_text(), end="", file=sys.stderr)
    m = json.loads((out / "measure.json").read_text())
    params = json.loads((out / "params.json").read_text())

    t = time.perf_counter()
    entries, checked, max_offset = spot_check(out / "gemma.irpa", params)
    spot_s = time.perf_counter() - t

    vmfb = out / "gemma.vmfb"
    compile_s, _ = timed([VENV_BIN / "iree-compile", out / "gemma.mlir", "--iree-hal-target-device=local",
                          "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host", "-o", vmfb],
                         out / "compile.log")
    run_s, run_peak = timed([VENV_BIN / "iree-run-module", "--device=local-task", f"--module={vmfb}", "--function=main",
                             f"--parameters=model={out / 'gemma.irpa'}", f"--input=@{out / 'tokens.npy'}",
                             f"--output=@{out / 'logits.npy'}"], out / "run.log")
    got = np.load(out / "logits.npy").astype(np.float64)
    want = np.load(out / "reference.npy").astype(np.float64)
    err = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want)))
    same_argmax = bool(np.array_equal(got.argmax(-1), want.argmax(-1)))

    result = {
        "figure": "gemma_scale", "config": a.config, "weights": a.weights, "jvm_flags": " ".join(flags), "parameters": m["parameters"],
        "heap_bytes": m["heap_bytes"], "irpa_bytes": m["irpa_bytes"], "mlir_bytes": m["mlir_bytes"],
        "externals": m["externals"], "pins": m["pins"], "copies": m["copies"],
        "jvm_peak_rss": jvm_peak, "jvm_peak_minus_heap_bytes": jvm_peak - m["heap_bytes"],
        "jvm_peak_through_export": m["hwm_after_export"],
        "jvm_peak_through_export_minus_heap_bytes": m["hwm_after_export"] - m["heap_bytes"],
        "max_heap": m["max_heap"], "rss_before_export": m["rss_before_export"],
        "export_extra_rss": m["hwm_after_export"] - max(m["hwm_before_export"], m["rss_before_export"]),
        "build_s": m["build_s"], "export_s": m["export_s"], "export_gb_s": m["irpa_bytes"] / m["export_s"] / 1e9,
        "jvm_total_s": jvm_s, "reference_s": m["reference_s"],
        "iree_entries": entries, "spot_checked_values": checked, "archive_max_offset": max_offset, "spot_check_s": spot_s,
        "iree_compile_s": compile_s, "iree_run_s": run_s, "iree_run_peak_rss": run_peak,
        "logits_max_abs_err": err, "logits_scale": scale, "same_argmax": same_argmax,
        "next_tokens": got.argmax(-1).tolist(),
    }
    if not a.keep:
        for f in ("gemma.irpa", "gemma.vmfb"):
            (out / f).unlink(missing_ok=True)
    if m["plain_write_rounds_s"]:
        # Rounds 2-4 alternate plain write and export (the first write of a fresh 18 GB is slow here).
        later = m["export_rounds_s"][1:]
        result["export_rounds_s"] = m["export_rounds_s"]
        result["plain_write_rounds_s"] = m["plain_write_rounds_s"]
        result["export_median_s"] = sorted(later)[len(later) // 2]
        result["plain_write_median_s"] = sorted(m["plain_write_rounds_s"])[len(later) // 2]
        result["export_vs_plain_write"] = result["plain_write_median_s"] / result["export_median_s"]
        result["jvm_peak_through_all_exports_minus_heap_bytes"] = m["hwm_after_all_exports"] - m["heap_bytes"]
    print(json.dumps(result))
    if err > 1e-3 * scale or not same_argmax:
        raise SystemExit(f"gemma_scale: IREE's logits differ from the Kotlin reference: max abs error {err:.3e} (|logit| <= {scale:.3f})")


if __name__ == "__main__":
    main()
