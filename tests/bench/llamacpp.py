"""The llama.cpp side of issue 30's decode benchmark, through llama-cpp-python's low-level bindings.

Run with the bench venv (`scripts/setup bench` makes .bench-venv); each call is one process and prints one JSON
object on stdout (llama.cpp's own log goes to stderr, errors only unless --verbose):

    .bench-venv/bin/python tests/bench/llamacpp.py convert CKPT OUTDIR
    .bench-venv/bin/python tests/bench/llamacpp.py time GGUF [--threads 2] [--prefill 8,128] [--context 64,1024]
        [--repeats 20] [--flash-attn auto|on|off] [--weights no-amx|all|none] [--omp-wait default|passive|active]
    .bench-venv/bin/python tests/bench/llamacpp.py logits GGUF --tokens 3,14,15 --out FILE.npy
    .bench-venv/bin/python tests/bench/llamacpp.py hf-logits CKPT --tokens 3,14,15 --out FILE.npy
    .bench-venv/bin/python tests/bench/llamacpp.py bandwidth [--threads 2] [--mib N]

`convert`: llama.cpp's convert_hf_to_gguf.py (from the llama-cpp-python sdist, with that sdist's gguf-py, unmodified)
  `--outtype f16` -> OUTDIR/f16.gguf, then llama.cpp's quantizer (llama_model_quantize) with pure=True, so every 2-D
  tensor, token_embd and output included, is in the target type (1-D norms stay f32) -> OUTDIR/q8_0.gguf,
  OUTDIR/q4_0.gguf. An output newer than its inputs is kept (reused: true). Reports the seconds each step took, the
  file sizes and the tensor types found in each file.
`time`: F32 KV cache (type_k = type_v = GGML_TYPE_F32), n_threads = n_threads_batch = --threads, the model mmapped
  (no mlock), n_ctx >= max context + max prefill. Median (and min) wall ms over --repeats of: a prefill of P tokens
  into an empty cache (logits of the last position only), and ONE decode step at context C (the cache filled with C
  tokens once; then repeatedly: decode one token at position C, only that call timed, llama_synchronize included,
  and remove it again with llama_memory_seq_rm). One untimed warm-up of each first. Also: the process's peak RSS
  (VmHWM) and RssFile/RssAnon after the runs (and at start, before the model), llama.cpp's system info, every
  sample, and the load average before and after (llama.cpp's OpenMP threads spin at each of the graph's barriers:
  when other processes share the 2 cores, a 2-thread step waits for a descheduled thread hundreds of times, and
  medians grow 10x; `--omp-wait passive` makes them sleep instead). flash_attn auto resolves to on for CPU.
  Weights (`--weights`, see weight_buffers): by default kept out of llama.cpp's AMX buffer, whose kernel faults on
  this VM for any batch of more than one token; Q4_0 matrices are still repacked (CPU_REPACK) as without AMX.
`logits`: logits [S, vocab] f32 of every position of one prefill of --tokens (F32 KV cache), saved with numpy.
`hf-logits`: the oracle: transformers' LlamaForCausalLM on CKPT in f32 (eager attention), the same [S, vocab].
`bandwidth`: this machine's read-bandwidth floor, measured in the run: best-of-N GB/s of reading a buffer >= 4x the
  last-level cache (default: the larger of 1024 MiB and 4x the LLC) with --threads threads, each reading its share.
  Readers: two numpy reductions (uint64 bitwise_or, float64 sum; they release the GIL) and, where `cc` exists, a
  64-byte-vector OR loop built for this CPU and called through ctypes, in case numpy's loop were the limit (on this
  machine it is not: quiet, 2 threads, 1920 MiB: numpy 33-34 GB/s, the C loop 30); gb_per_s is the best reader's
  best round, so the floor is the fastest read seen.
"""
import argparse
import ctypes
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONVERTER = ROOT / ".bench-venv/llama.cpp/convert_hf_to_gguf.py"
QUANTS = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}


class BenchError(Exception):
    """What failed and what to do; printed as {"error": ...} with exit status 1."""


def need(module):
    try:
        return __import__(module)
    except ImportError as e:
        raise BenchError(f"{e.name} is not importable from {sys.executable}: run this with .bench-venv/bin/python "
                         f"(`scripts/setup bench` makes it)") from e


def llama(verbose=False):
    """llama_cpp with llama.cpp's log quiet (errors only) unless verbose, the backend initialized."""
    need("llama_cpp")
    import llama_cpp
    import llama_cpp._logger as log
    log.set_verbose(verbose)
    llama_cpp.llama_backend_init()
    return llama_cpp


def proc_status():
    """Memory of this process from /proc/self/status, in MiB."""
    out = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key + "_mib"] = round(int(value.split()[0]) / 1024, 1)
    return out


def tokens_arg(text):
    try:
        toks = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--tokens wants comma-separated token ids, got {text!r}") from e
    if not toks:
        raise argparse.ArgumentTypeError("--tokens is empty: give at least one token id")
    return toks


def sizes_arg(text):
    try:
        xs = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"wants comma-separated positive integers, got {text!r}") from e
    if not xs or min(xs) < 1:
        raise argparse.ArgumentTypeError(f"wants comma-separated positive integers, got {text!r}")
    return xs


# ---------------------------------------------------------------- convert

def newer(out, inputs):
    return out.is_file() and all(out.stat().st_mtime > p.stat().st_mtime for p in inputs)


def gguf_tensor_types(path):
    """{ggml type name: number of tensors}, plus the types of token_embd.weight and output.weight."""
    sys.path.insert(0, str(CONVERTER.parent / "gguf-py"))
    from gguf import GGUFReader
    reader = GGUFReader(str(path))
    counts, named = {}, {}
    for t in reader.tensors:
        name = t.tensor_type.name
        counts[name] = counts.get(name, 0) + 1
        if t.name in ("token_embd.weight", "output.weight"):
            named[t.name] = name
    return {"tensor_types": counts, **named}


def convert(args):
    ckpt, outdir = args.ckpt, args.outdir
    if not (ckpt / "config.json").is_file():
        raise BenchError(f"{ckpt} has no config.json: give a transformers checkpoint directory "
                         f"(tests/bench/llama_checkpoint.py makes one)")
    if not (ckpt / "tokenizer.model").is_file():
        raise BenchError(f"{ckpt} has no tokenizer.model: llama.cpp's converter needs a tokenizer; "
                         f"tests/bench/llama_checkpoint.py writes one beside the weights")
    if not CONVERTER.is_file():
        raise BenchError(f"llama.cpp's converter is not at {CONVERTER}: run `scripts/setup bench`")
    llama_cpp = llama(args.verbose)
    outdir.mkdir(parents=True, exist_ok=True)
    inputs = [p for p in ckpt.iterdir() if p.is_file()]
    f16 = outdir / "f16.gguf"
    result = {"checkpoint": str(ckpt), "files": {}}
    if newer(f16, inputs):
        result["files"]["f16"] = {"reused": True}
    else:
        env = dict(os.environ, PYTHONPATH=str(CONVERTER.parent / "gguf-py"))
        part = outdir / "f16.gguf.part"  # renamed when whole, so a killed run is never reused
        cmd = [sys.executable, str(CONVERTER), str(ckpt), "--outtype", "f16", "--outfile", str(part)]
        t = time.perf_counter()
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            part.unlink(missing_ok=True)
            raise BenchError(f"convert_hf_to_gguf.py failed on {ckpt} (exit {run.returncode}); its last output:\n"
                             + "\n".join((run.stderr or run.stdout).splitlines()[-15:]))
        part.replace(f16)
        result["files"]["f16"] = {"reused": False, "seconds": round(time.perf_counter() - t, 2)}
    for name, ftype in QUANTS.items():
        out = outdir / f"{name}.gguf"
        if newer(out, [f16]):
            result["files"][name] = {"reused": True}
            continue
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, ftype)
        params.pure = True
        params.nthread = args.threads
        part = outdir / f"{name}.gguf.part"
        t = time.perf_counter()
        rc = llama_cpp.llama_model_quantize(str(f16).encode(), str(part).encode(), ctypes.byref(params))
        if rc != 0:
            part.unlink(missing_ok=True)
            raise BenchError(f"llama_model_quantize {f16} -> {out} ({name}) returned {rc}: rerun with --verbose "
                             f"for llama.cpp's log")
        part.replace(out)
        result["files"][name] = {"reused": False, "seconds": round(time.perf_counter() - t, 2)}
    for name in ("f16", *QUANTS):
        path = outdir / f"{name}.gguf"
        result["files"][name].update(path=str(path), bytes=path.stat().st_size, **gguf_tensor_types(path))
    return result


# ---------------------------------------------------------------- a llama.cpp context

class BuftOverride(ctypes.Structure):
    """llama.h's llama_model_tensor_buft_override (the bindings type the field as a void pointer)."""
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


# The matrices a CPU_REPACK buffer can take (MUL_MAT weights; token_embd is gathered, so it stays mapped).
MATMUL_WEIGHTS = rb"^(blk\.[0-9]+\.(attn_(q|k|v|output)|ffn_(gate|up|down))|output)\.weight$"
_KEEP = []  # ctypes objects the loaded model's params point at


def cpu_extra_bufts(L):
    """{name: handle} of the CPU device's extra buffer types (here AMX and CPU_REPACK), through ggml's registry."""
    lib = ctypes.CDLL(str(pathlib.Path(L.__file__).parent / "lib/libggml.so"))
    base = ctypes.CDLL(str(pathlib.Path(L.__file__).parent / "lib/libggml-base.so"))
    lib.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    base.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    base.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    base.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    base.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    base.ggml_backend_buft_name.restype = ctypes.c_char_p
    base.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    dev = lib.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    fn = base.ggml_backend_reg_get_proc_address(base.ggml_backend_dev_backend_reg(dev),
                                                b"ggml_backend_dev_get_extra_bufts") if dev else None
    if not fn:
        return {}
    arr = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(fn)(dev)
    out, i = {}, 0
    while arr and arr[i]:
        out[base.ggml_backend_buft_name(arr[i]).decode()] = arr[i]
        i += 1
    return out


def matrix_type(gguf):
    """The ggml type of the file's attention/FFN matrices (blk.0.attn_q.weight)."""
    sys.path.insert(0, str(CONVERTER.parent / "gguf-py"))
    from gguf import GGUFReader
    for t in GGUFReader(str(gguf)).tensors:
        if t.name == "blk.0.attn_q.weight":
            return t.tensor_type.name
    return None


def weight_buffers(L, gguf, mp, policy):
    """Where llama.cpp keeps the weights (sets mp); returns a description for the report.

    `all`: llama.cpp's default, every extra CPU buffer type: on this machine AMX (Q4_0/Q8_0 matrices repacked for
    AMX tiles), whose kernel faults (SIGSEGV at ldtilecfg) on any batch of more than one token here.
    `no-amx` (default): what llama.cpp does on an x86 CPU without AMX: Q4_0 matrices repacked by CPU_REPACK (the
    8x8 interleaved layout for its AVX2 kernels), everything else mapped from the file (x86 has no Q8_0 or F16
    repack), by tensor overrides.
    `none`: no extra buffer types: every weight mapped from the file as stored.
    """
    if policy == "all":
        mp.use_extra_bufts = True
        return "all extra CPU buffer types (llama.cpp's default)"
    mp.use_extra_bufts = False
    if policy == "none":
        return "mapped as stored (no extra buffer types)"
    kind = matrix_type(gguf)
    if kind != "Q4_0":
        return f"mapped as stored ({kind} matrices: no repack for them on x86 but AMX's, which is left out)"
    repack = cpu_extra_bufts(L).get("CPU_REPACK")
    if not repack:
        return "mapped as stored (this build has no CPU_REPACK buffer type)"
    overrides = (BuftOverride * 2)(BuftOverride(MATMUL_WEIGHTS, repack), BuftOverride(None, None))
    _KEEP.append(overrides)
    # use_extra_bufts stays off: the override names CPU_REPACK itself, so nothing else can land in AMX
    mp.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
    return "Q4_0 matrices in CPU_REPACK (q4_0_8x8), the rest mapped (AMX left out)"


class Model:
    """A GGUF model and one context over it (F32 KV cache, one sequence)."""

    def __init__(self, llama_cpp, gguf, n_ctx, threads, n_batch, outputs_all=False, flash_attn="auto",
                 weights="no-amx"):
        if not gguf.is_file():
            raise BenchError(f"{gguf} does not exist: `llamacpp.py convert CKPT OUTDIR` makes OUTDIR/f16.gguf, "
                             f"q8_0.gguf and q4_0.gguf")
        self.L = L = llama_cpp
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.load_mode = L.LLAMA_LOAD_MODE_MMAP  # mapped, not locked
        self.weights = weight_buffers(L, gguf, mp, weights)
        self.model = L.llama_model_load_from_file(str(gguf).encode(), mp)
        if not self.model:
            raise BenchError(f"llama.cpp could not load {gguf}: rerun with --verbose for its log")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = min(n_batch, 512)
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = threads
        cp.type_k = cp.type_v = L.GGML_TYPE_F32
        cp.flash_attn_type = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                              "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attn]
        if outputs_all:
            cp.n_outputs_max = 0  # = n_batch
            cp.n_outputs_max_per_seq = 0  # = n_outputs_max
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise BenchError(f"llama.cpp could not make a context (n_ctx {n_ctx}, n_batch {n_batch}) for {gguf}: "
                             f"rerun with --verbose for its log")
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(n_batch, 0, 1)

    def fill(self, tokens, start, logits="last"):
        """Put tokens at positions start.. into the batch; logits for the last one, or for all."""
        b = self.batch
        b.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = logits == "all" or i == len(tokens) - 1

    def decode(self, what):
        """llama_decode of the batch, waited for; returns the seconds it took."""
        t = time.perf_counter()
        rc = self.L.llama_decode(self.ctx, self.batch)
        self.L.llama_synchronize(self.ctx)
        dt = time.perf_counter() - t
        if rc != 0:
            raise BenchError(f"llama_decode of {what} returned {rc} (1: no KV slot, <0: error): rerun with --verbose")
        return dt

    def clear(self):
        self.L.llama_memory_clear(self.mem, True)

    def remove_from(self, pos):
        if not self.L.llama_memory_seq_rm(self.mem, 0, pos, -1):
            raise BenchError(f"llama_memory_seq_rm from position {pos} failed: this cache cannot drop the last "
                             f"token, so a decode step at a fixed context cannot be repeated")

    def close(self):
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)


def random_tokens(n, vocab, seed):
    import numpy as np
    return [int(t) for t in np.random.default_rng(seed).integers(3, vocab, n)]


def stats(seconds):
    ms = [s * 1e3 for s in seconds]
    return {"median_ms": round(statistics.median(ms), 3), "min_ms": round(min(ms), 3), "n": len(ms),
            "samples_ms": [round(x, 3) for x in ms]}


def loadavg():
    """The 1-minute load average: on a shared machine, the other processes competing for the cores."""
    return float(pathlib.Path("/proc/loadavg").read_text().split()[0])


def time_cmd(args):
    start = proc_status()
    load_before = loadavg()
    if args.omp_wait != "default":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait  # read by libgomp when llama_cpp loads it, just below
    L = llama(args.verbose)
    n_ctx = -(-(max(args.context) + max(args.prefill)) // 256) * 256
    t = time.perf_counter()
    m = Model(L, args.gguf, n_ctx, args.threads, n_batch=max(max(args.prefill), max(args.context)),
              flash_attn=args.flash_attn, weights=args.weights)
    load_s = time.perf_counter() - t
    loaded = proc_status()
    out = {"gguf": str(args.gguf), "bytes": args.gguf.stat().st_size, "threads": args.threads,
           "n_ctx": m.n_ctx, "kv_cache": "f32", "flash_attn": args.flash_attn, "weights": m.weights,
           "repeats": args.repeats, "load_s": round(load_s, 3), "prefill": {}, "decode": {}}
    for p in args.prefill:
        toks = random_tokens(p, m.n_vocab, seed=p)
        runs = []
        for r in range(args.repeats + 1):  # the first is the warm-up
            m.clear()
            m.fill(toks, 0)
            dt = m.decode(f"a prefill of {p} tokens")
            if r:
                runs.append(dt)
        out["prefill"][str(p)] = stats(runs)
    for c in args.context:
        m.clear()
        ctx_toks = random_tokens(c + 1, m.n_vocab, seed=100000 + c)
        m.fill(ctx_toks[:c], 0)
        m.decode(f"the {c} context tokens")
        runs = []
        for r in range(args.repeats + 1):
            m.fill(ctx_toks[c:], c)
            dt = m.decode(f"one token at position {c}")
            m.remove_from(c)
            if r:
                runs.append(dt)
        out["decode"][str(c)] = stats(runs)
    m.clear()
    out["memory"] = {"at_start": start, "after_load": loaded, "after_runs": proc_status()}
    out["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "default (libgomp spins, then sleeps)")
    out["loadavg_1m"] = {"before": load_before, "after": loadavg()}
    out["system_info"] = L.llama_print_system_info().decode().strip()
    m.close()
    return out


def logits_cmd(args):
    np = need("numpy")
    L = llama(args.verbose)
    s = len(args.tokens)
    m = Model(L, args.gguf, n_ctx=-(-s // 256) * 256, threads=args.threads, n_batch=s, outputs_all=True,
              weights=args.weights)
    if max(args.tokens) >= m.n_vocab:
        raise BenchError(f"token {max(args.tokens)} is outside the vocabulary of {args.gguf} ({m.n_vocab} tokens)")
    m.fill(args.tokens, 0, logits="all")
    m.decode(f"the {s} tokens")
    ptr = L.llama_get_logits(m.ctx)
    logits = np.ctypeslib.as_array(ptr, shape=(s, m.n_vocab)).astype(np.float32, copy=True)
    m.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, logits)
    return {"gguf": str(args.gguf), "tokens": s, "vocab": int(logits.shape[1]), "out": str(args.out),
            "finite": bool(np.isfinite(logits).all())}


def hf_logits_cmd(args):
    np = need("numpy")
    torch = need("torch")
    need("transformers")
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([args.tokens]), use_cache=False).logits[0].float().numpy()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, logits)
    return {"checkpoint": str(args.ckpt), "tokens": len(args.tokens), "vocab": int(logits.shape[1]),
            "out": str(args.out), "dtype": "f32 (weights widened from the checkpoint's)"}


# ---------------------------------------------------------------- bandwidth

def last_level_cache_bytes():
    best = 0
    for d in pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (d / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        best = max(best, int(text.rstrip("KMG")) * mult)
    return best


READER_C = r"""
#include <stdint.h>
#include <stddef.h>
typedef uint64_t v8 __attribute__((vector_size(64), aligned(8)));
uint64_t tapeout_read(const uint64_t *p, size_t n) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    const v8 *v = (const v8 *)p;
    size_t m = n / 8, i = 0;
    for (; i + 4 <= m; i += 4) { a0 |= v[i]; a1 |= v[i + 1]; a2 |= v[i + 2]; a3 |= v[i + 3]; }
    for (; i < m; i++) a0 |= v[i];
    v8 a = a0 | a1 | a2 | a3;
    uint64_t r = 0;
    for (int k = 0; k < 8; k++) r |= a[k];
    for (size_t j = m * 8; j < n; j++) r |= p[j];
    return r;
}
"""


def c_reader(tmp):
    """A vector OR over the buffer (4 independent 64-byte accumulators), built with the system C compiler for this
    CPU; None when there is no compiler. ctypes releases the GIL for the call, so threads read in parallel."""
    src, lib = pathlib.Path(tmp) / "read.c", pathlib.Path(tmp) / "read.so"
    src.write_text(READER_C)
    try:
        subprocess.run(["cc", "-O2", "-march=native", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    so = ctypes.CDLL(str(lib))
    so.tapeout_read.restype = ctypes.c_uint64
    so.tapeout_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return lambda p: so.tapeout_read(p.ctypes.data, p.size)


def bandwidth(args):
    import tempfile
    np = need("numpy")
    llc = last_level_cache_bytes()
    mib = args.mib or max(1024, -(-4 * llc // (1 << 20)))
    nbytes = mib << 20
    buf = np.empty(nbytes // 8, dtype=np.uint64)
    buf[:] = 1  # every page touched before timing
    parts = np.array_split(buf, args.threads)
    readers = {"bitwise_or_u64": lambda p: np.bitwise_or.reduce(p),
               "sum_f64": lambda p: p.view(np.float64).sum()}
    with tempfile.TemporaryDirectory() as tmp:
        c = c_reader(tmp)
        if c is not None:
            readers["c_vector_or"] = c
        result = {"threads": args.threads, "buffer_mib": mib, "llc_mib": round(llc / (1 << 20), 1),
                  "buffer_over_llc": round(nbytes / llc, 2) if llc else None, "rounds": args.rounds,
                  "readers": {}}
        for name, fn in readers.items():
            best = float("inf")
            for _ in range(args.rounds):
                ts = [threading.Thread(target=fn, args=(p,)) for p in parts]
                t = time.perf_counter()
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
                best = min(best, time.perf_counter() - t)
            result["readers"][name] = round(buf.nbytes / best / 1e9, 2)
    result["gb_per_s"] = max(result["readers"].values())
    result["best_reader"] = max(result["readers"], key=result["readers"].get)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's whole log on stderr")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("ckpt", type=pathlib.Path)
    c.add_argument("outdir", type=pathlib.Path)
    c.add_argument("--threads", type=int, default=2)
    t = sub.add_parser("time")
    t.add_argument("gguf", type=pathlib.Path)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--prefill", type=sizes_arg, default=[8, 128])
    t.add_argument("--context", type=sizes_arg, default=[64, 1024])
    t.add_argument("--repeats", type=int, default=20)
    t.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    t.add_argument("--omp-wait", choices=["default", "passive", "active"], default="default",
                   help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads; with other processes on the cores, the "
                        "default spinning barriers make 2-thread steps many times slower (passive avoids that)")
    t.add_argument("--weights", choices=["no-amx", "all", "none"], default="no-amx",
                   help="extra CPU buffer types for the weights (see weight_buffers): no-amx (default), all "
                        "(llama.cpp's default; AMX crashes prefill here), none")
    lg = sub.add_parser("logits")
    lg.add_argument("gguf", type=pathlib.Path)
    lg.add_argument("--tokens", type=tokens_arg, required=True)
    lg.add_argument("--out", type=pathlib.Path, required=True)
    lg.add_argument("--threads", type=int, default=2)
    lg.add_argument("--weights", choices=["no-amx", "all", "none"], default="no-amx")
    h = sub.add_parser("hf-logits")
    h.add_argument("ckpt", type=pathlib.Path)
    h.add_argument("--tokens", type=tokens_arg, required=True)
    h.add_argument("--out", type=pathlib.Path, required=True)
    h.add_argument("--threads", type=int, default=2)
    b = sub.add_parser("bandwidth")
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--mib", type=int, default=0, help="buffer size (default: max(1024, 4x the last-level cache))")
    b.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    for key in ("threads", "repeats", "rounds"):
        if getattr(args, key, 1) < 1:
            ap.error(f"--{key} must be at least 1")
    run = {"convert": convert, "time": time_cmd, "logits": logits_cmd, "hf-logits": hf_logits_cmd,
           "bandwidth": bandwidth}[args.cmd]
    try:
        result = run(args)
    except BenchError as e:
        print(json.dumps({"command": args.cmd, "error": str(e)}))
        sys.exit(1)
    print(json.dumps({"command": args.cmd, **result}))


if __name__ == "__main__":
    main()
