"""Served from the JVM vs the JVM's own LLM engines (scripts/bench; issue 63): one Llama checkpoint made by
transformers, each engine in a JVM process of its own with the same thread count, in alternating rounds:

- tapeout: the checkpoint exported by examples/hf-llama (bf16 kept; and its GGUF Q8_0 with the blocks kept packed),
  compiled by iree-compile with llama_decode.py's flags and tuning spec, served by dev.tapeout.iree
  (tests/bench/jvm-engines/TapeoutEngine.java);
- jlama (com.github.tjake:jlama-core 0.8.4, pure Java on the Vector API) on the safetensors directory, with a
  tokenizer.json that transformers writes from the checkpoint's tokenizer.model (jlama reads only tokenizer.json);
- java-llama.cpp (de.kherud:llama 4.1.0, llama.cpp through JNI) on the GGUF files llama.cpp's converter writes
  (F16 beside our bf16, Q8_0 beside our Q8_0).

    .bench-venv/bin/python tests/bench/jvm_engines.py --out DIR [--rounds 3] [--threads 2] [--small] [--steps 32]
        [--repeats 5] [--classpath-file F] [--java-home JDK] [--engines tapeout,jlama,llamacpp] [--no-q8]

Per engine: prefill of 8 and 128 tokens (a fresh cache each, the last position's logits computed), the decode step
at context 64 (the mean of `repeats` steps after one untimed), the process's peak RSS (VmHWM at its end), the greedy
tokens of `steps` steps from a fixed prompt against transformers' greedy tokens (float32, .bench-venv), and the
prompt's last-position logits against transformers' (max abs) where the engine exposes them (java-llama.cpp does
not: its API gives text, so its greedy tokens are compared as text with transformers' ids decoded by its own
detokenizer). Each figure is the median over the rounds of each round's value; ratios are theirs over ours (above
1.0: we are faster / smaller). Prints one JSON object; each round's raw results are kept in DIR/rounds.json.

The mains (tests/bench/jvm-engines/*.java) are compiled here by javac from `--java-home` (default Temurin 25:
jlama needs Java 21+ and its Vector API module) against the jars `scripts/setup bench` fetches into
.cache/maven-central, and the tapeout main against `--classpath-file` (examples/tiny-llm's runtime classpath, written
by `gradle :examples:tiny-llm:writeClasspath`: jvm-iree's jar with its native library, Kotlin's stdlib).
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import struct
import subprocess
import sys
import zipfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/bench"))
import llama_decode  # noqa: E402  (the export and iree-compile of the decode benchmark, same flags)
from harness import bench_sh  # noqa: E402

HARNESS = ROOT / "tests/bench/jvm-engines"
MAVEN = ROOT / ".cache/maven-central"
JARS = {"jlama": "com.github.tjake_jlama-core_0.8.4.classpath", "llamacpp": "de.kherud_llama_4.1.0.classpath"}
JAVA_HOME = pathlib.Path(os.environ.get("TAPEOUT_JAVA25_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64"))
CONVERTER = ROOT / ".bench-venv/llama.cpp/convert_hf_to_gguf.py"
PROMPT = llama_decode.PROMPT
SCHED = llama_decode.SCHED
JVM_FLAGS = ["--enable-native-access=ALL-UNNAMED", "-Xmx2g", "-Xss4m"]


def log(*a):
    print("jvm_engines:", *a, file=sys.stderr, flush=True)


def sh(*args, **kw):
    return bench_sh("jvm_engines", *args, **kw)


def jar_classpath(name):
    listed = MAVEN / JARS[name]
    if not listed.is_file():
        raise SystemExit(f"jvm_engines: {listed} is missing: run `scripts/setup bench` (it fetches {name}'s jars "
                         f"from Maven Central with scripts/maven_fetch.py)")
    return [str(MAVEN / line) for line in listed.read_text().split() if line]


def class_version(jar):
    """The class-file version of the first class in `jar`: (major, minor)."""
    with zipfile.ZipFile(jar) as z:
        name = next(n for n in z.namelist() if n.endswith(".class") and "module-info" not in n)
        head = z.read(name)[:8]
    minor, major = struct.unpack(">HH", head[4:8])
    return major, minor


def compile_mains(out, tapeout_cp):
    """javac per engine: Bench.java with its main, against its classpath; returns {engine: classpath}."""
    javac = JAVA_HOME / "bin/javac"
    if not javac.is_file():
        raise SystemExit(f"jvm_engines: {javac} is missing: install a JDK 21+ (Temurin 25 is what scripts/bench "
                         f"expects) or pass --java-home")
    mains = {"tapeout": ("TapeoutEngine", tapeout_cp, []),
             "jlama": ("JlamaEngine", jar_classpath("jlama"), ["--add-modules", "jdk.incubator.vector"]),
             "llamacpp": ("LlamaCppEngine", jar_classpath("llamacpp"), [])}
    cps = {}
    for engine, (main, cp, flags) in mains.items():
        classes = out / "classes" / engine
        shutil.rmtree(classes, ignore_errors=True)
        classes.mkdir(parents=True)
        sh(javac, *flags, "-nowarn", "-d", classes, "-cp", os.pathsep.join(cp),
           HARNESS / "Bench.java", HARNESS / f"{main}.java")
        cps[engine] = (main, os.pathsep.join([str(classes), *cp]), flags)
    return cps


def jlama_dir(ckpt, out, py):
    """The checkpoint as jlama reads it: its config and weights (linked) and a tokenizer.json (jlama reads no
    tokenizer.model), written by transformers from the checkpoint's sentencepiece model."""
    d = out / "jlama-model"
    d.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        link = d / f
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to((ckpt / f).resolve())
    if not (d / "tokenizer.json").is_file():
        sh(py, "-c", "import sys; from transformers import AutoTokenizer; "
                     "AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])", ckpt, d)
    if not (d / "tokenizer.json").is_file():
        raise SystemExit(f"jvm_engines: transformers wrote no tokenizer.json into {d} from {ckpt}: jlama needs one")
    return d


def gguf(ckpt, out, py, outtype):
    """llama.cpp's converter on the checkpoint (F16, or Q8_0 quantized by the converter itself: every matrix Q8_0)."""
    f = out / f"{outtype}.gguf"
    if f.is_file() and f.stat().st_mtime >= (ckpt / "model.safetensors").stat().st_mtime:
        return f
    if not CONVERTER.is_file():
        raise SystemExit(f"jvm_engines: llama.cpp's converter is not at {CONVERTER}: run `scripts/setup bench`")
    part = f.with_name(f.name + ".part")
    sh(py, CONVERTER, ckpt, "--outtype", outtype, "--outfile", part,
       env=dict(os.environ, PYTHONPATH=str(CONVERTER.parent / "gguf-py")))
    part.replace(f)
    return f


TRANSFORMERS = """
import json, sys, numpy as np, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = torch.tensor([[int(t) for t in sys.argv[3].split(',')]])
greedy = []
with torch.no_grad():
    out = m(ids, use_cache=True)
    logits = out.logits[0, -1]
    np.save(sys.argv[2], logits.float().numpy())
    # Plain argmax with the cache, as the engines' loops run (generate() would also suppress the EOS id at times).
    for _ in range(int(sys.argv[4])):
        greedy.append(int(torch.argmax(logits)))
        out = m(torch.tensor([[greedy[-1]]]), past_key_values=out.past_key_values, use_cache=True)
        logits = out.logits[0, -1]
print(json.dumps({"greedy": greedy}))
"""


def run_engine(engine, cps, model_args, common):
    main, cp, flags = cps[engine]
    cmd = [*SCHED, JAVA_HOME / "bin/java", *JVM_FLAGS, *flags, "-cp", cp, main, *model_args, *common]
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    line = next((l for l in reversed(r.stdout.splitlines()) if l.startswith("JVM_ENGINES ")), None)
    if r.returncode != 0 or line is None:
        return {"error": f"{main} failed (exit {r.returncode}): " + "\n".join((r.stderr or r.stdout).splitlines()[-25:])}
    res = json.loads(line[len("JVM_ENGINES "):])
    # java-llama.cpp's log: its llama.cpp build and the CPU features that build was compiled for (the jar's natives
    # are one generic build, not this machine's).
    native = [l.strip() for l in (r.stdout + r.stderr).splitlines() if l.startswith(("build:", "system_info:"))]
    if native:
        res["native_build"] = " / ".join(dict.fromkeys(native))
    return res


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return None


def text_match(got_pieces, expected_pieces):
    """Greedy steps that match, from text: the longest prefix of transformers' tokens (each decoded alone by the
    engine's detokenizer) whose text begins the engine's generated text (a leading space of each side ignored)."""
    got = "".join(got_pieces)
    got = got[1:] if got.startswith(" ") else got
    acc, k = "", 0
    for i, p in enumerate(expected_pieces):
        acc += p
        a = acc[1:] if acc.startswith(" ") else acc
        if not got.startswith(a):
            break
        k = i + 1
    return k


def main():
    global JAVA_HOME
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--small", action="store_true", help="a 2-layer, 128-wide checkpoint, 1 round, few repeats")
    p.add_argument("--checkpoint", help="a transformers checkpoint directory to use instead of making one")
    p.add_argument("--steps", type=int, default=32, help="greedy steps compared with transformers'")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per figure in each round")
    p.add_argument("--classpath-file", type=pathlib.Path, default=ROOT / "examples/tiny-llm/build/classpath.txt")
    p.add_argument("--java-home", type=pathlib.Path, help="a JDK 21+ (default $TAPEOUT_JAVA25_HOME or Temurin 25's)")
    p.add_argument("--engines", default="tapeout,jlama,llamacpp")
    p.add_argument("--no-q8", action="store_true", help="skip the Q8_0 pair (tapeout's GGUF export, llama.cpp's Q8_0)")
    p.add_argument("--bench-python", default=str(ROOT / ".bench-venv/bin/python"))
    p.add_argument("--reuse-rounds", action="store_true",
                   help="summarize OUT/rounds.json (written after each round) instead of exporting and running again")
    a = p.parse_args()
    if a.java_home:
        JAVA_HOME = a.java_home
    engines = a.engines.split(",")
    unknown = set(engines) - {"tapeout", "jlama", "llamacpp"}
    if unknown or "tapeout" not in engines:
        raise SystemExit(f"jvm_engines: --engines {a.engines}: give tapeout and any of jlama, llamacpp")
    out = pathlib.Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    py = a.bench_python
    if not pathlib.Path(py).exists():
        raise SystemExit(f"jvm_engines: {py} is missing: run `scripts/setup bench` (transformers, llama.cpp's converter)")
    if not a.classpath_file.is_file():
        raise SystemExit(f"jvm_engines: {a.classpath_file} is missing: run `gradle -c settings-gradle4.gradle "
                         f":examples:tiny-llm:writeClasspath` (jvm-iree's jar and its native library)")
    rounds = 1 if a.small else a.rounds
    repeats = 2 if a.small else a.repeats

    small = ["--layers", "2", "--hidden", "128", "--ffn", "256", "--vocab", "512", "--heads", "2", "--kv-heads", "1"]
    ckpt = pathlib.Path(a.checkpoint).resolve() if a.checkpoint else out / ("checkpoint-small" if a.small else "checkpoint")
    if not (ckpt / "model.safetensors").exists():
        log("making the checkpoint with transformers")
        sh(py, ROOT / "tests/bench/llama_checkpoint.py", ckpt, *(small if a.small else []))
    cfg = llama_decode.config(ckpt)
    vocab = cfg["vocab_size"]
    prefills, context = (8, 128), 64
    # Token ids every prefill and decode reads (the same for every engine): the prompt's ids, then a fixed walk.
    seq = [t % vocab for t in PROMPT] + [(3 + 37 * i) % vocab for i in range(max(prefills) + context + repeats + 2)]
    prompt = [t % vocab for t in PROMPT]

    log("transformers' greedy tokens and logits (float32)")
    want_logits = out / "transformers_logits.npy"
    want = json.loads(sh(py, "-c", TRANSFORMERS, ckpt, want_logits, ",".join(map(str, prompt)), a.steps).splitlines()[-1])
    want_logits = np.load(want_logits)

    saved = out / "rounds.json"
    if a.reuse_rounds:
        # The rounds of an earlier run into this OUT (its exports and GGUF files are read for their sizes only).
        kept = json.loads(saved.read_text())
        runs, loadavg = (kept["runs"], kept.get("loadavg_before_after")) if "runs" in kept else (kept, None)
        irpa, g_irpa = out / "tapeout-bf16/llama.irpa", out / "tapeout-q8_0/llama.irpa"
        ggufs = {k: out / f"{k}.gguf" for k in ("f16", "q8_0") if f"llamacpp_{k}" in runs or f"tapeout_{k}" in runs}
        a.no_q8 = "tapeout_q8_0" not in runs
        rounds = max(len(v) for v in runs.values())
        repeats = next(x["prefill_ms"][str(prefills[0])]["n"] for v in runs.values() for x in v if "error" not in x)
    else:
        log("exporting with tapeout (bf16 kept)")
        mlir, irpa = llama_decode.export(ckpt, out / "tapeout-bf16")
        systems = {"tapeout_bf16": ("tapeout", [f"model={llama_decode.compile_host(mlir)}", f"archive={irpa}"])}
        ggufs = {}
        if "llamacpp" in engines or not a.no_q8:
            log("converting with llama.cpp's converter")
            ggufs["f16"] = gguf(ckpt, out, py, "f16")
            if not a.no_q8:
                ggufs["q8_0"] = gguf(ckpt, out, py, "q8_0")
        if not a.no_q8:
            log("exporting the Q8_0 GGUF with tapeout, blocks kept packed")
            g_mlir, g_irpa = llama_decode.export(None, out / "tapeout-q8_0", gguf=ggufs["q8_0"])
            systems["tapeout_q8_0"] = ("tapeout", [f"model={llama_decode.compile_host(g_mlir)}", f"archive={g_irpa}"])
        if "jlama" in engines:
            systems["jlama"] = ("jlama", [f"model={jlama_dir(ckpt, out, py)}"])
        if "llamacpp" in engines:
            for k, f in ggufs.items():
                systems[f"llamacpp_{k}"] = ("llamacpp", [f"model={f}", "expect=" + ",".join(map(str, want["greedy"]))])

        log(f"compiling the mains with {JAVA_HOME / 'bin/javac'}")
        cps = compile_mains(out, a.classpath_file.read_text().strip().split(os.pathsep))
        common = [f"threads={a.threads}", "seq=" + ",".join(map(str, seq)), "prompt=" + ",".join(map(str, prompt)),
                  f"steps={a.steps}", "prefill=" + ",".join(map(str, prefills)), f"context={context}", f"repeats={repeats}"]

        runs = {s: [] for s in systems}
        load_before = os.getloadavg()
        for r in range(rounds):
            order = list(systems)
            order = order[r % len(order):] + order[:r % len(order)]
            for s in order:
                engine, model_args = systems[s]
                log(f"round {r + 1}: {s}")
                res = run_engine(engine, cps, model_args, [*common, f"logits={out / f'{s}_logits.f32'}"])
                runs[s].append(res)
                if "error" in res:
                    log(f"{s}: {res['error'].splitlines()[0]}")
            saved.write_text(json.dumps({"runs": runs, "loadavg_before_after": [load_before[0], os.getloadavg()[0]]}))
        loadavg = [load_before[0], os.getloadavg()[0]]

    result = {"figure": "jvm_engines", "small": a.small, "threads": a.threads, "rounds": rounds, "repeats": repeats,
              "steps": a.steps, "java": str(JAVA_HOME), "prompt": prompt,
              "config": {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads")},
              "compile_flags": llama_decode.COMPILE, "engines": {},
              # Other work on the machine while the rounds ran (1-minute load average before and after them).
              "loadavg_before_after": loadavg, "cpu": cpu_model()}
    for s, rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        e = {"rounds_ok": len(ok), "rounds": len(rs)}
        if not ok:
            e["error"] = rs[0]["error"]
            result["engines"][s] = e
            continue
        e["prefill_ms"] = {str(n): statistics.median(x["prefill_ms"][str(n)]["median"] for x in ok) for n in prefills}
        e[f"decode_{context}_ms"] = statistics.median(x["decode_ms"] for x in ok)
        # The best round: on a shared machine, other work only adds time.
        e["best_round"] = {f"prefill_{n}_ms": min(x["prefill_ms"][str(n)]["median"] for x in ok) for n in prefills}
        e["best_round"][f"decode_{context}_ms"] = min(x["decode_ms"] for x in ok)
        e["decode_rounds_ms"] = [x["decode_ms"] for x in ok]
        e["peak_rss_bytes"] = statistics.median(x["end"]["VmHWM"] for x in ok)
        e["rss_after_load_bytes"] = statistics.median(x["after_load"]["VmRSS"] for x in ok)
        e["jvm_start_rss_bytes"] = statistics.median(x["jvm_start"]["VmRSS"] for x in ok)
        e["load_ms"] = statistics.median(x["load_ms"] for x in ok)
        last = ok[-1]
        for k in ("working_dtype", "working_quant_dtype", "tensor_operations", "kv_cache", "batch_waits", "java",
                  "native_build"):
            if k in last:
                e[k] = last[k]
        if "greedy" in last:
            g = last["greedy"]
            e["greedy"] = g
            e["greedy_match_steps"] = next((i for i, (x, y) in enumerate(zip(g, want["greedy"])) if x != y), len(g))
        elif "greedy_text" in last:
            e["greedy_text"] = last["greedy_text"]
            e["greedy_match_steps"] = text_match(last["greedy_text"], last.get("expected_text", []))
            e["greedy_compared_as"] = "text (the engine's API gives no token ids)"
        if "logits" in last:
            got = np.fromfile(last["logits"]["path"], dtype="<f4")
            e["max_abs_vs_transformers"] = float(np.abs(got - want_logits).max())
        else:
            e["max_abs_vs_transformers"] = None
            e["logits_unavailable"] = last.get("logits_unavailable")
        result["engines"][s] = e
    result["transformers_greedy"] = want["greedy"]
    result["logits_scale"] = float(np.abs(want_logits).max())
    result["jlama_java25"] = {"class_file": "%d.%d" % class_version(jar_classpath("jlama")[0]),
                              "runs": result["engines"].get("jlama", {}).get("rounds_ok", 0) > 0}
    if "jlama" in result["engines"] and "error" in result["engines"]["jlama"]:
        result["jlama_java25"]["error"] = result["engines"]["jlama"]["error"]

    # Theirs over ours, each pair in the same rounds (above 1.0: we are faster, or smaller).
    pairs = [("jlama", "tapeout_bf16"), ("llamacpp_f16", "tapeout_bf16"), ("llamacpp_q8_0", "tapeout_q8_0")]
    ratios = {}
    for theirs, ours in pairs:
        t, o = result["engines"].get(theirs), result["engines"].get(ours)
        if not t or not o or "error" in t or "error" in o:
            continue
        key = f"{theirs}_over_{ours}"
        ratios[key] = {f"prefill_{n}": t["prefill_ms"][str(n)] / o["prefill_ms"][str(n)] for n in prefills}
        ratios[key][f"decode_{context}"] = t[f"decode_{context}_ms"] / o[f"decode_{context}_ms"]
        ratios[key]["peak_rss"] = t["peak_rss_bytes"] / o["peak_rss_bytes"]
        # The same ratios from each engine's best round, and the median of the per-round ratios (each pair of runs
        # minutes apart at most, so a slow stretch of the machine weighs on both).
        tb, ob = t["best_round"], o["best_round"]
        ratios[key]["best_round"] = {k.replace("_ms", ""): tb[k] / ob[k] for k in tb}
        rt, ro = runs[theirs], runs[ours]
        ratios[key][f"per_round_median_decode_{context}"] = statistics.median(
            x["decode_ms"] / y["decode_ms"] for x, y in zip(rt, ro) if "error" not in x and "error" not in y)
    result["ratios"] = ratios
    result["sizes_bytes"] = {"safetensors": (ckpt / "model.safetensors").stat().st_size, "tapeout_bf16_irpa": irpa.stat().st_size,
                             **{f"gguf_{k}": f.stat().st_size for k, f in ggufs.items()}}
    if not a.no_q8:
        result["sizes_bytes"]["tapeout_q8_0_irpa"] = g_irpa.stat().st_size
    print(json.dumps(result))


if __name__ == "__main__":
    main()
