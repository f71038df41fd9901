"""Checkpoint to text from the published repository, as a new user meets it: scripts/publish writes the libraries
and plugins; a new project outside this repository, made of the README's "Checkpoint to text" files (settings.gradle,
build.gradle, Generate.kt) with a jvm-transformers testdata checkpoint in checkpoint/ and a tokenizer.json beside
them, exports it with the published plugin and families library (exportIrpa of AutoModelForCausalLM), compiles it
(compileIree) and generates (`gradle run`), every library resolved by coordinates from that repository and Maven
Central, with neither cargo nor CMake on PATH. The streamed text and the tokens must be transformers' generate()
(jvm-transformers/testdata/mistral-window-f32/generate_text.json, written by make_generate_golden.py)."""
import json
import os
import re
import shutil

import pytest

from harness import ROOT, gradle_run
from test_publish import GRADLE, KOTLIN_24, version
from test_publish_serving import BUILD_TOOLS, path_without_build_tools

pytestmark = pytest.mark.skipif(GRADLE is None, reason="gradle is installed by scripts/setup")
GOLDEN = ROOT / "jvm-transformers/testdata/mistral-window-f32/generate_text.json"
TOKENIZER = ROOT / "jvm-generate/src/test/resources/generate/tiny97/tokenizer.json"


def checkpoint_text_blocks():
    """settings.gradle, build.gradle and Generate.kt as the README's "Checkpoint to text" section shows them."""
    section = (ROOT / "README.md").read_text().split("## Checkpoint to text", 1)[1].split("\n## ", 1)[0]
    blocks = {b.splitlines()[0]: b for b in re.findall(r"```(?:groovy|kotlin)\n(.*?)```", section, re.S)}
    return (blocks["// settings.gradle (checkpoint to text)"], blocks["// build.gradle (checkpoint to text)"],
            blocks["// src/main/kotlin/Generate.kt (checkpoint to text)"])


def test_the_readme_checkpoint_becomes_text_from_the_published_repository(tmp_path):
    repo = tmp_path / "repo"
    r = gradle_run([ROOT / "scripts/publish", repo], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v = version()
    for artifact in ("tapeout-transformers", "tapeout-generate"):
        assert (repo / f"dev/tapeout/{artifact}/{v}/{artifact}-{v}.jar").is_file()

    settings, build, generate = checkpoint_text_blocks()
    placeholder = "maven { url 'file:///path/to/repo' }"
    assert placeholder in settings and placeholder in build
    assert f"'dev.tapeout:tapeout-transformers:{v}'" in build and f"'dev.tapeout:tapeout-generate:{v}'" in build
    project = tmp_path / "consumer"
    (project / "src/main/kotlin").mkdir(parents=True)
    (project / "settings.gradle").write_text(settings.replace(placeholder, f"maven {{ url '{repo.as_uri()}' }}"))
    (project / "build.gradle").write_text(build.replace(placeholder, f"maven {{ url '{repo.as_uri()}' }}"))
    (project / "src/main/kotlin/Generate.kt").write_text(generate)
    shutil.copytree(ROOT / "jvm-transformers/testdata/mistral-window-f32", project / "checkpoint",
                    ignore=shutil.ignore_patterns("golden.safetensors", "generate*.json"))
    shutil.copy(TOKENIZER, project / "tokenizer.json")

    env = {k: v for k, v in os.environ.items()
           if k not in ("KOTLIN_HOME", "GRADLE_OPTS", "TAPEOUT_IREE_NATIVE_PATH", "TAPEOUT_NATIVE_PATH",
                        "TAPEOUT_IREE_COMPILE", "LD_LIBRARY_PATH", "CMAKE")}
    env["KOTLIN_HOME"] = str(KOTLIN_24)
    env["PATH"] = path_without_build_tools(tmp_path / "bin")   # iree-compile on PATH, as pip installs it
    env["DJL_CACHE_DIR"] = str(tmp_path / "djl")
    r = gradle_run([GRADLE, "--no-daemon", "--console=plain", "--quiet", "run"], cwd=project, env=env,
                   capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("model.mlir", "model.irpa", "model.vmfb"):
        assert (project / "build/tapeout" / name).is_file(), name
    want = json.loads(GOLDEN.read_text())
    assert want["prompt"] in generate and f"maxNewTokens = {want['max_new_tokens']}" in generate
    m = re.search(r"^(.*)\ntokens (\[[\d, ]+\]), MAX_NEW_TOKENS$", r.stdout, re.M)
    assert m, r.stdout
    assert m.group(1) == want["text"]
    assert json.loads(m.group(2)) == want["tokens"]
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in BUILD_TOOLS)
