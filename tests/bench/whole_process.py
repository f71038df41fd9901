"""Whole-process measurements for scripts/bench, each a ratio against a baseline in the same run.

    python tests/bench/whole_process.py iree-builder BYTES   # tapeout pack vs IREE's Python builder
    python tests/bench/whole_process.py convert-memory BYTES # tapeout convert: peak anonymous memory vs file size
    python tests/bench/whole_process.py export-memory BYTES  # tapeout export from safetensors / GGUF weights: the same
    python tests/bench/whole_process.py mlir-size            # module size with 1x and 100x the weight bytes
    python tests/bench/whole_process.py vs-iree-convert BYTES # tapeout convert vs iree-convert-parameters, same file

Prints one JSON object per measurement on stdout.
"""
import json
import os
import resource
import pathlib
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAPEOUT = ROOT / "target/release/tapeout"
WORK = pathlib.Path(os.environ.get("TAPEOUT_BENCH_DIR", ROOT / "target/bench-tmp"))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def iree_builder(nbytes, rounds=5):
    """Same input file, same output bytes: `tapeout pack --iree-placement` against ParameterIndex.add_buffer(np.memmap)
    + create_archive_file, alternating, medians; both outputs are compared byte for byte."""
    import iree.runtime as rt
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "payload.bin"
    rng = np.random.default_rng(1)
    with open(src, "wb") as f:
        for _ in range(nbytes // (64 << 20)):
            f.write(rng.integers(0, 256, 64 << 20, dtype=np.uint8).tobytes())
    ours_t, iree_t = [], []
    for _ in range(rounds):
        for out in (WORK / "ours.irpa", WORK / "iree.irpa"):
            out.unlink(missing_ok=True)
        t = time.perf_counter()
        subprocess.run([TAPEOUT, "pack", "--iree-placement", "-o", WORK / "ours.irpa", f"weight={src}"], check=True,
                       capture_output=True)
        ours_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        idx = rt.ParameterIndex()
        idx.add_buffer("weight", np.memmap(src, dtype=np.uint8, mode="r"))
        idx.create_archive_file(str(WORK / "iree.irpa"))
        del idx
        iree_t.append(time.perf_counter() - t)
    same = subprocess.run(["cmp", "-s", WORK / "ours.irpa", WORK / "iree.irpa"]).returncode == 0
    for p in (src, WORK / "ours.irpa", WORK / "iree.irpa"):
        p.unlink(missing_ok=True)
    return {"figure": "irpa_vs_iree_builder", "bytes": nbytes, "tapeout_s": median(ours_t), "iree_s": median(iree_t),
            "ratio": median(iree_t) / median(ours_t), "byte_identical": same}


def fill_page_cache():
    """Fills the free memory with clean page cache (a sparse file read once: zero pages, no disk writes), so that
    every measured write afterwards reclaims clean cache. Without it a write takes its pages from memory the VM's
    balloon has handed back to the host, which costs 1.3 s or 4 s for the same 2 GiB depending on whether the
    balloon reported them yet (see docs/performance.md#how-we-measure). Returns the file to delete."""
    with open("/proc/meminfo") as f:
        free_kib = next(int(line.split()[1]) for line in f if line.startswith("MemFree:"))
    ballast = WORK / "page-cache-ballast"
    with open(ballast, "wb") as f:
        f.truncate(free_kib * 1024)
    subprocess.run(["cat", ballast], stdout=subprocess.DEVNULL, check=True)
    return ballast


def timed(cmd):
    """(wall seconds, CPU seconds of the process and its children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def pack_vs_cat(nbytes, rounds=9):
    """`tapeout pack` of one file against `cat` of the same file into the same directory (cat moves the bytes with
    copy_file_range) followed by `sync` of the copy (pack fsyncs its archive), alternating, medians. Every run
    writes a new name and the previous output is deleted first, with the page cache full of clean pages (see
    fill_page_cache). The disk of this machine is a virtual one whose speed drifts by 2-4x within a minute, so the
    figure also gives the median of the per-round ratios (each pack against the cat next to it) and the CPU time
    of each tool (the kernel's copy into the page cache; the disk's wait is not in it)."""
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "payload.bin"
    rng = np.random.default_rng(3)
    block = rng.integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()
    with open(src, "wb") as f:
        for _ in range(nbytes // len(block)):
            f.write(block)
    os.sync()
    ballast = fill_page_cache()
    times = {"ours": [], "cat": []}
    previous = None
    for r in range(rounds):
        for variant in (("ours", "cat") if r % 2 == 0 else ("cat", "ours")):
            out = WORK / f"copy-{r}-{variant}.bin"
            if previous is not None:
                previous.unlink(missing_ok=True)
            os.sync()
            if variant == "ours":
                times[variant].append(timed([TAPEOUT, "pack", "-o", out, f"w={src}"]))
            else:
                times[variant].append(timed(["sh", "-c", f"cat '{src}' > '{out}' && sync '{out}'"]))
            previous = out
    for p in (src, previous, ballast):
        p.unlink(missing_ok=True)
    ours_t, cat_t = [w for w, _ in times["ours"]], [w for w, _ in times["cat"]]
    ours_cpu, cat_cpu = [c for _, c in times["ours"]], [c for _, c in times["cat"]]
    return {"figure": "pack_vs_cat", "bytes": nbytes, "tapeout_s": median(ours_t), "cat_s": median(cat_t),
            "ratio": median(cat_t) / median(ours_t),
            "paired_ratio_median": median([c / o for c, o in zip(cat_t, ours_t)]),
            "tapeout_cpu_s": median(ours_cpu), "cat_cpu_s": median(cat_cpu),
            "cpu_ratio": median(cat_cpu) / median(ours_cpu),
            "tapeout_rounds_s": ours_t, "cat_rounds_s": cat_t}


def peak_anon_kib(cmd):
    """Runs cmd, polling /proc/<pid>/status every 5 ms; returns the peak RssAnon (anonymous memory) in KiB."""
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        try:
            for line in open(f"/proc/{p.pid}/status"):
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.005)
    assert p.wait() == 0, p.stderr.read()
    return peak


def write_safetensors(path, tensors, chunks):
    """A safetensors file: `tensors` is [(name, dtype, shape)] laid out in order, `chunks` yields their data."""
    width = {"F16": 2, "F32": 4}
    header, off = {}, 0
    for name, dtype, shape in tensors:
        size = int(np.prod(shape)) * width[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + size]}
        off += size
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for chunk in chunks:
            f.write(chunk)
    assert path.stat().st_size == 8 + len(h) + off, "chunks do not match the declared tensors"


def convert_memory(nbytes):
    """An f16 safetensors file of `nbytes`: converted as stored, and widened to f32 (--dequantize)."""
    WORK.mkdir(parents=True, exist_ok=True)
    st = WORK / "big.safetensors"
    rng = np.random.default_rng(2)
    write_safetensors(st, [("w", "F16", [nbytes // 2])],
                      (rng.standard_normal(32 << 20).astype("<f2").tobytes() for _ in range(nbytes // (64 << 20))))
    rows = []
    for extra in ([], ["--dequantize"]):
        out = WORK / "conv.irpa"
        kib = peak_anon_kib([TAPEOUT, "convert", st, "-o", out, *extra])
        rows.append({"figure": "convert_peak_anon_memory" + ("_dequantize" if extra else ""), "file_bytes": st.stat().st_size,
                     "output_bytes": out.stat().st_size, "peak_anon_mib": kib / 1024})
        out.unlink()
    st.unlink()
    return rows


def export_memory(nbytes):
    """`tapeout export` of a graph whose one weight (about `nbytes`) is in a file: an f16 safetensors tensor
    (widened to f32) and a GGUF Q8_0 tensor (dequantized to f32, and kept packed: repacked into planes tile by
    tile). Peak anonymous memory against the file size."""
    from gguf import GGUFWriter, GGMLQuantizationType
    WORK.mkdir(parents=True, exist_ok=True)
    cols = 4096
    rng = np.random.default_rng(3)
    rows_f16 = nbytes // (cols * 2)
    st = WORK / "w.safetensors"
    step = (64 << 20) // (cols * 2)
    write_safetensors(st, [("w", "F16", [rows_f16, cols])],
                      (rng.standard_normal((min(step, rows_f16 - r), cols)).astype("<f2").tobytes()
                       for r in range(0, rows_f16, step)))
    rows_q8 = nbytes // (cols // 32 * 34)
    blocks = np.empty((rows_q8 * cols // 32, 34), dtype=np.uint8)
    blocks[:, 0], blocks[:, 1] = 0x00, 0x24  # f16 scale 1/64
    blocks[:, 2:] = rng.integers(0, 256, (blocks.shape[0], 32), dtype=np.uint8)
    gg = WORK / "w.gguf"
    w = GGUFWriter(str(gg), "llama")
    w.add_tensor("blk.0.ffn_up.weight", blocks.reshape(rows_q8, cols // 32 * 34), raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    del blocks
    rows = []
    for label, weights, rows_n, dtype, tensor, extra in (
            ("safetensors_f16_widened", st, rows_f16, "f16", "w", ["--half", "widen"]),
            ("gguf_q8_0_dequantized", gg, rows_q8, "f32", "blk.0.ffn_up.weight", ["--packed", "dequantize"]),
            ("gguf_q8_0_kept_packed", gg, rows_q8, "f32", "blk.0.ffn_up.weight", ["--packed", "keep"])):
        g = {"format": "tapeout-graph/1", "name": "m",
             "tensors": [{"name": "x", "shape": [2, rows_n], "dtype": "f32"},
                         {"name": "w", "shape": [rows_n, cols], "dtype": dtype, "path": "model.w", "data": {"tensor": tensor}},
                         {"name": "y", "shape": [2, cols], "dtype": "f32"}],
             "nodes": [{"op": "matmul", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]}
        (WORK / "g.json").write_text(json.dumps(g))
        out = WORK / "export-out"
        kib = peak_anon_kib([TAPEOUT, "export", WORK / "g.json", "--weights", weights, "-o", out, "--inline-below", "0", *extra])
        rows.append({"figure": f"export_peak_anon_memory_{label}", "file_bytes": weights.stat().st_size,
                     "output_bytes": (out / "m.irpa").stat().st_size, "peak_anon_mib": kib / 1024})
        (out / "m.irpa").unlink()
    st.unlink()
    gg.unlink()
    return rows


def vs_iree_convert(nbytes, rounds=5):
    """A safetensors file of f32 tensors (8 of nbytes / 8) converted to IRPA by `tapeout convert` and by IREE's
    `iree-convert-parameters`, alternating, medians; the entries' bytes are compared."""
    import iree.runtime as rt
    WORK.mkdir(parents=True, exist_ok=True)
    st = WORK / "conv.safetensors"
    per = nbytes // 8
    rng = np.random.default_rng(4)
    write_safetensors(st, [(f"model.layers.{i}.weight", "F32", [per // 4]) for i in range(8)],
                      (rng.standard_normal(16 << 20).astype("<f4").tobytes() for _ in range(nbytes // (64 << 20))))
    iree_convert = pathlib.Path(sys.executable).parent / "iree-convert-parameters"
    ours_t, iree_t = [], []
    for _ in range(rounds):
        for out in (WORK / "ours.irpa", WORK / "iree.irpa"):
            out.unlink(missing_ok=True)
        t = time.perf_counter()
        subprocess.run([TAPEOUT, "convert", st, "-o", WORK / "ours.irpa"], check=True, capture_output=True)
        ours_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([iree_convert, f"--parameters={st}", f"--output={WORK / 'iree.irpa'}"], check=True,
                       capture_output=True)
        iree_t.append(time.perf_counter() - t)

    def entries(path):
        idx = rt.ParameterIndex()
        idx.load(str(path))
        return {k: bytes(e.file_view) for k, e in idx.items()}
    same = entries(WORK / "ours.irpa") == entries(WORK / "iree.irpa")
    for p in (st, WORK / "ours.irpa", WORK / "iree.irpa"):
        p.unlink(missing_ok=True)
    return {"figure": "convert_vs_iree_convert_parameters", "bytes": nbytes, "tapeout_s": median(ours_t),
            "iree_s": median(iree_t), "ratio": median(iree_t) / median(ours_t), "same_entries": same}


def mlir_size():
    """The same graph with 1x and 100x the weight bytes, external: the module text does not grow."""
    sizes = {}
    with tempfile.TemporaryDirectory(dir=WORK if WORK.exists() else None) as d:
        d = pathlib.Path(d)
        for scale, rows in (("1x", 1024), ("100x", 102400)):
            w = d / f"w{scale}.bin"
            with open(w, "wb") as f:
                f.truncate(rows * 1024 * 4)  # zeros; a hole on disk
            g = {"name": "m", "tensors": [{"name": "x", "shape": [2, rows], "dtype": "f32"},
                                          {"name": "w", "shape": [rows, 1024], "dtype": "f32", "path": "model.w",
                                           "data": {"file": w.name}},
                                          {"name": "y", "shape": [2, 1024], "dtype": "f32"}],
                 "nodes": [{"op": "matmul", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]}
            (d / f"g{scale}.json").write_text(json.dumps(g))
            subprocess.run([TAPEOUT, "export", d / f"g{scale}.json", "-o", d / scale, "--inline-below", "0"], check=True,
                           capture_output=True)
            sizes[scale] = ((d / scale / "m.mlir").stat().st_size, (d / scale / "m.irpa").stat().st_size)
    return {"figure": "mlir_size_external", "mlir_1x": sizes["1x"][0], "mlir_100x": sizes["100x"][0],
            "irpa_1x": sizes["1x"][1], "irpa_100x": sizes["100x"][1], "ratio": sizes["100x"][0] / sizes["1x"][0]}


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "iree-builder":
        print(json.dumps(iree_builder(int(sys.argv[2]))))
    elif what == "convert-memory":
        for row in convert_memory(int(sys.argv[2])):
            print(json.dumps(row))
    elif what == "export-memory":
        for row in export_memory(int(sys.argv[2])):
            print(json.dumps(row))
    elif what == "vs-iree-convert":
        print(json.dumps(vs_iree_convert(int(sys.argv[2]))))
    elif what == "mlir-size":
        print(json.dumps(mlir_size()))
    elif what == "pack-vs-cat":
        print(json.dumps(pack_vs_cat(int(sys.argv[2]))))
    else:
        raise SystemExit(__doc__)
