"""examples/hf-llama's model options as a user passes them, through Gradle properties (`-PhfLlama.staticCache=N`,
`-PhfLlama.logitsToKeep=1`): an accepted option changes the exported functions' signatures, a wrong value fails the
export with a message that names it and says what is accepted. The values are checked against transformers by
scripts/test's verifyGguf run (StaticCache and logits_to_keep=1) and verifyWithIree."""
import json
import shutil

import pytest

from harness import ROOT, gradle_run

GRADLE = shutil.which("gradle")
pytestmark = pytest.mark.skipif(GRADLE is None, reason="gradle is installed by scripts/setup")
GGUF = ROOT / "examples/hf-llama/testdata/gguf-q8_0/model.gguf"


def export(tmp_path, *props):
    out = tmp_path / "out"
    r = gradle_run([GRADLE, "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--console=plain", "--quiet",
                    ":examples:hf-llama:exportIrpaGguf", f"-PhfLlama.gguf={GGUF}", f"-PtapeoutOut={out}", *props],
                   cwd=ROOT, capture_output=True, text=True)
    return r, out / "llama.mlir"


def shapes(mlir, fn):
    """`{argument or result name: shape}` of `fn`, from the signature file beside the module
    (`llama.signature.json`, docs/signature-format.md)."""
    doc = json.loads(mlir.with_name("llama.signature.json").read_text())
    [f] = [f for f in doc["functions"] if f["name"] == fn]
    return {v["name"]: v["shape"] for v in f["arguments"] + f["results"]}


@pytest.mark.parametrize("props, prefill_logits, static_rows", [
    ((), [1, "?", 97], None),
    (("-PhfLlama.logitsToKeep=1", "-PhfLlama.staticCache=12"), [1, 1, 97], 12),
], ids=["defaults", "last-position-static-cache"])
def test_options_shape_the_exported_functions(tmp_path, props, prefill_logits, static_rows):
    r, mlir = export(tmp_path, *props)
    assert r.returncode == 0, r.stdout + r.stderr
    prefill, decode = shapes(mlir, "prefill"), shapes(mlir, "decode")
    assert prefill["input_ids"] == [1, "?"] and prefill["logits"] == prefill_logits
    assert decode["logits"] == [1, 1, 97]
    assert ("cache_position" in decode) == (static_rows is not None)
    assert decode["past_key_0"][2] == (static_rows or "?")


@pytest.mark.parametrize("prop, message", [
    ("-PhfLlama.logitsToKeep=2", "logits_to_keep is 1 (the last position, what generate() asks for) or 0 (every "
                                 "position, the default), not 'logits_to_keep=2'"),
    ("-PhfLlama.staticCache=0", "static=<cache length> needs a positive number, not 'static=0'"),
], ids=["logits-to-keep-2", "static-0"])
def test_a_wrong_option_fails_the_export_and_names_it(tmp_path, prop, message):
    r, mlir = export(tmp_path, prop)
    assert r.returncode != 0
    assert f"AutoModelForCausalLM: {message}" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not mlir.exists()
