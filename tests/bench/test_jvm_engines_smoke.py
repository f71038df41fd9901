"""Smoke test of tests/bench/jvm_engines.py (issue 63: tapeout served from the JVM beside jlama and java-llama.cpp) on
a tiny checkpoint (`--small`: 2 layers, 128 wide, 512 tokens), so that the harness cannot rot.

Needs the bench venv (`scripts/setup bench`: transformers, llama.cpp's converter), the engines' jars (fetched by the
same command into .cache/maven-central) and a JDK 21+ (Temurin 25 at /usr/lib/jvm/temurin-25-jdk-amd64, or
$TAPEOUT_JAVA25_HOME); skipped without them, except the check that the script says what to do when a prerequisite
is missing.

    .venv/bin/python -m pytest tests/bench/test_jvm_engines_smoke.py -q -p no:cacheprovider
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from harness import gradle_run  # noqa: E402

BENCH_PY = ROOT / ".bench-venv/bin/python"
SCRIPT = ROOT / "tests/bench/jvm_engines.py"
JAVA_HOME = pathlib.Path(os.environ.get("TAPEOUT_JAVA25_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64"))
JARS = [ROOT / ".cache/maven-central" / f for f in
        ("com.github.tjake_jlama-core_0.8.4.classpath", "de.kherud_llama_4.1.0.classpath")]
GRADLE = ["gradle", "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--console=plain", "--quiet"]

missing = [str(p) for p in (BENCH_PY, ROOT / ".bench-venv/llama.cpp/convert_hf_to_gguf.py", JAVA_HOME / "bin/javac", *JARS)
           if not p.exists()]
needs_everything = pytest.mark.skipif(bool(missing), reason=f"missing {', '.join(missing)}: run `scripts/setup bench` "
                                                             f"(and install Temurin 25)")


def test_a_missing_classpath_file_names_the_task_that_writes_it(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, "--out", tmp_path, "--small", "--bench-python", sys.executable,
                        "--classpath-file", tmp_path / "missing.txt"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "missing.txt is missing" in r.stderr and ":examples:tiny-llm:writeClasspath" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("jvm-engines")
    # The whole run under the Gradle lock: it exports with Gradle, as the classpath task does.
    cp = ROOT / "examples/tiny-llm/build/classpath.txt"
    r = gradle_run([*GRADLE, ":examples:tiny-llm:writeClasspath"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = gradle_run([str(BENCH_PY), SCRIPT, "--out", out, "--small", "--steps", "8", "--classpath-file", cp],
                   cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-4000:]}"
    return json.loads(r.stdout.splitlines()[-1])


@needs_everything
def test_every_engine_runs_a_round(small):
    engines = small["engines"]
    assert set(engines) == {"tapeout_bf16", "tapeout_q8_0", "jlama", "llamacpp_f16", "llamacpp_q8_0"}
    for name, e in engines.items():
        assert "error" not in e, (name, e.get("error"))
        assert e["rounds_ok"] == 1
        assert 0 < e["prefill_ms"]["8"] and 0 < e["prefill_ms"]["128"] and 0 < e["decode_64_ms"], (name, e)
        assert e["peak_rss_bytes"] >= e["rss_after_load_bytes"] > e["jvm_start_rss_bytes"] > 0, (name, e)
    assert small["jlama_java25"]["runs"] and small["jlama_java25"]["class_file"].startswith("64.")


@needs_everything
def test_the_16_bit_engines_agree_with_transformers(small):
    e = small["engines"]
    # bf16 weights served exactly (f32 activations): transformers' f32 forward to rounding, every greedy token.
    assert e["tapeout_bf16"]["max_abs_vs_transformers"] < 1e-3
    assert e["tapeout_bf16"]["greedy_match_steps"] == small["steps"] == 8
    # F16 holds these bf16 weights exactly; llama.cpp's API gives text only: its greedy tokens are compared as text.
    assert e["llamacpp_f16"]["greedy_match_steps"] == 8
    assert e["llamacpp_f16"]["max_abs_vs_transformers"] is None and e["llamacpp_f16"]["logits_unavailable"]
    # jlama quantizes activations to I8 by default: close, not exact.
    assert e["jlama"]["max_abs_vs_transformers"] < 0.5 * small["logits_scale"]
    assert len(e["jlama"]["greedy"]) == 8


@needs_everything
def test_ratios_are_theirs_over_ours_of_the_same_run(small):
    e, ratios = small["engines"], small["ratios"]
    assert set(ratios) == {"jlama_over_tapeout_bf16", "llamacpp_f16_over_tapeout_bf16", "llamacpp_q8_0_over_tapeout_q8_0"}
    r = ratios["llamacpp_f16_over_tapeout_bf16"]
    assert r["decode_64"] == pytest.approx(e["llamacpp_f16"]["decode_64_ms"] / e["tapeout_bf16"]["decode_64_ms"])
    assert r["peak_rss"] == pytest.approx(e["llamacpp_f16"]["peak_rss_bytes"] / e["tapeout_bf16"]["peak_rss_bytes"])
