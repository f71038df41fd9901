"""examples/hf-llama's model options as a user passes them, through Gradle properties (`-PhfLlama.staticCache=N`,
`-PhfLlama.logitsToKeep=1`): an accepted option changes the exported functions' signatures, a wrong value fails the
export with a message that names it and says what is accepted. The values are checked against transformers by
scripts/test's verifyGguf run (StaticCache and logits_to_keep=1) and verifyWithIree."""
import re
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


def signature(mlir, fn):
    """(argument names, the logits result's type) of `fn` in the module text."""
    m = re.search(rf"func\.func @{fn}\((.*?)\) -> \((.*?)\) \{{", mlir.read_text(), re.S)
    assert m, f"no function {fn} in {mlir}"
    args = re.findall(r'tapeout\.name = "([^"]+)"', m.group(1))
    logits = re.search(r'tensor<([^>]*)> \{tapeout\.name = "logits"\}', m.group(2)).group(1)
    return args, logits


@pytest.mark.parametrize("props, prefill_logits, static_rows", [
    ((), "1x?x97xf32", None),
    (("-PhfLlama.logitsToKeep=1", "-PhfLlama.staticCache=12"), "1x1x97xf32", 12),
], ids=["defaults", "last-position-static-cache"])
def test_options_shape_the_exported_functions(tmp_path, props, prefill_logits, static_rows):
    r, mlir = export(tmp_path, *props)
    assert r.returncode == 0, r.stdout + r.stderr
    assert signature(mlir, "prefill") == (["input_ids"], prefill_logits)
    args, logits = signature(mlir, "decode")
    assert logits == "1x1x97xf32"
    assert ("cache_position" in args) == (static_rows is not None)
    cache = re.search(r'tensor<([^>]*)> \{tapeout\.name = "past_key_0"\}', mlir.read_text()).group(1)
    assert cache.split("x")[2] == (str(static_rows) if static_rows else "?")


@pytest.mark.parametrize("prop, message", [
    ("-PhfLlama.logitsToKeep=2", "logits_to_keep is 1 (the last position, what generate() asks for) or 0 (every "
                                 "position, the default), not 'logits_to_keep=2'"),
    ("-PhfLlama.staticCache=0", "static=<cache length> needs a positive number, not 'static=0'"),
], ids=["logits-to-keep-2", "static-0"])
def test_a_wrong_option_fails_the_export_and_names_it(tmp_path, prop, message):
    r, mlir = export(tmp_path, prop)
    assert r.returncode != 0
    assert f"GgufLlama: {message}" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not mlir.exists()
