"""Smoke test of issue 30's llama.cpp side (tests/bench/llama_checkpoint.py, tests/bench/llamacpp.py) on a tiny model.

Needs the bench venv (`scripts/setup bench`); skipped without it, except the check that the tool says what to do
when run from a Python without llama-cpp-python.

    .venv/bin/python -m pytest tests/bench/test_llamacpp_smoke.py -q -p no:cacheprovider
"""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH_PY = ROOT / ".bench-venv/bin/python"
TOOL = ROOT / "tests/bench/llamacpp.py"
TOKENS = "1,300,77,4,259,260,511,3,42"

needs_bench_venv = pytest.mark.skipif(not BENCH_PY.exists() or not (ROOT / ".bench-venv/llama.cpp").is_dir(),
                                      reason="no .bench-venv: run `scripts/setup bench`")


def run(python, *args, ok=True):
    p = subprocess.run([str(python), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert (p.returncode == 0) == ok, f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr[-3000:]}"
    return json.loads(p.stdout)


def test_without_llama_cpp_the_tool_says_to_use_the_bench_venv(tmp_path):
    if subprocess.run([sys.executable, "-c", "import llama_cpp"], capture_output=True).returncode == 0:
        pytest.skip("this Python has llama_cpp")
    out = run(sys.executable, TOOL, "time", tmp_path / "missing.gguf", ok=False)
    assert out["command"] == "time"
    assert "llama_cpp is not importable" in out["error"] and "scripts/setup bench" in out["error"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("llamacpp")
    ckpt = d / "ckpt"
    made = run(BENCH_PY, ROOT / "tests/bench/llama_checkpoint.py", ckpt, "--layers", "2", "--hidden", "128",
               "--heads", "2", "--kv-heads", "1", "--ffn", "256", "--vocab", "512")
    assert made["vocab"] == 512
    conv = run(BENCH_PY, TOOL, "convert", ckpt, d / "gguf")
    return d, ckpt, conv


@needs_bench_venv
def test_tokenizer_has_exactly_vocab_pieces(tiny):
    _, ckpt, _ = tiny
    code = ("import sentencepiece as s, sys; p = s.SentencePieceProcessor(model_file=sys.argv[1]); "
            "print(p.vocab_size(), p.unk_id(), p.bos_id(), p.eos_id(), p.id_to_piece(3), p.id_to_piece(258))")
    out = subprocess.run([BENCH_PY, "-c", code, ckpt / "tokenizer.model"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["512", "0", "1", "2", "<0x00>", "<0xFF>"]


@needs_bench_venv
def test_convert_writes_pure_quantized_files_and_reuses_them(tiny):
    d, ckpt, conv = tiny
    files = conv["files"]
    assert files["f16"]["tensor_types"].keys() == {"F16", "F32"}
    for q in ("q8_0", "q4_0"):
        f = files[q]
        assert f["token_embd.weight"] == f["output.weight"] == q.upper(), f  # pure: no Q6_K output
        assert f["tensor_types"].keys() == {q.upper(), "F32"}
        assert f["bytes"] < files["f16"]["bytes"]
    again = run(BENCH_PY, TOOL, "convert", ckpt, d / "gguf")
    assert all(f["reused"] for f in again["files"].values())


@needs_bench_venv
def test_f16_logits_match_transformers_f32(tiny):
    d, ckpt, _ = tiny
    ours = run(BENCH_PY, TOOL, "logits", d / "gguf/f16.gguf", "--tokens", TOKENS, "--out", d / "l.npy")
    assert ours["finite"]
    run(BENCH_PY, TOOL, "hf-logits", ckpt, "--tokens", TOKENS, "--out", d / "hf.npy")
    a, b = np.load(d / "l.npy"), np.load(d / "hf.npy")
    assert a.shape == b.shape == (9, 512)
    # f16 weights (rounded from bf16: exact) and f16 activations in places against an f32 forward
    assert np.abs(a - b).max() < 0.05, np.abs(a - b).max()
    assert np.abs(b).max() > 0.5  # the logits are not all ~0, so the bound above means something


@needs_bench_venv
@pytest.mark.parametrize("q", ["f16", "q8_0", "q4_0"])
def test_time_reports_medians_memory_and_system_info(tiny, q):
    d, _, _ = tiny
    out = run(BENCH_PY, TOOL, "time", d / f"gguf/{q}.gguf", "--threads", "1", "--prefill", "4,16",
              "--context", "8,40", "--repeats", "3")
    assert out["kv_cache"] == "f32" and out["n_ctx"] >= 40 + 16
    assert set(out["prefill"]) == {"4", "16"} and set(out["decode"]) == {"8", "40"}
    for v in [*out["prefill"].values(), *out["decode"].values()]:
        assert v["n"] == 3 and 0 < v["min_ms"] <= v["median_ms"]
    mem = out["memory"]["after_runs"]
    assert mem["VmHWM_mib"] >= mem["VmRSS_mib"] > 0 and mem["RssFile_mib"] > 0
    assert "AVX" in out["system_info"] or "NEON" in out["system_info"]


@needs_bench_venv
def test_bandwidth_is_positive():
    out = run(BENCH_PY, TOOL, "bandwidth", "--threads", "1", "--mib", "64", "--rounds", "2")
    assert out["buffer_mib"] == 64 and out["gb_per_s"] > 0.1
    assert out["gb_per_s"] == max(out["readers"].values())
