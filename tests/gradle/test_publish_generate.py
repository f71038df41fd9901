"""Text in, text out from the published repository, as a user meets it: scripts/publish writes
dev.tapeout:tapeout-generate; a new project outside this repository, made of docs/serving.md's "Text in, text out" files
(build.gradle, Generate.kt) and the serving section's settings.gradle, resolves it by coordinates (tapeout-iree from the
same repository, DJL's tokenizers and kotlin-stdlib from Maven Central), and `gradle run` generates from
examples/hf-llama's f32 Llama with the 97-token tokenizer. The streamed text and the tokens must be transformers'
(jvm-generate/src/test/resources/generate/text.json, written by make_generate_golden.py)."""
import json
import os
import re
import shutil

import pytest

from harness import ROOT, gradle_run
from test_publish import GRADLE, KOTLIN_24, version
from test_publish_serving import BUILD_TOOLS, path_without_build_tools, guide_blocks

pytestmark = pytest.mark.skipif(GRADLE is None, reason="gradle is installed by scripts/setup")
GOLDEN = ROOT / "jvm-generate/src/test/resources/generate"


def generate_blocks():
    """build.gradle and Generate.kt as docs/serving.md's "Text in, text out" section shows them."""
    section = (ROOT / "docs/serving.md").read_text().split("## Text in, text out", 1)[1].split("\n## ", 1)[0]
    blocks = {b.splitlines()[0]: b for b in re.findall(r"```(?:groovy|kotlin)\n(.*?)```", section, re.S)}
    return blocks["// build.gradle"], blocks["// src/main/kotlin/Generate.kt"]


def test_the_serving_guides_generate_project_runs_from_the_published_repository(tmp_path):
    repo = tmp_path / "repo"
    r = gradle_run([ROOT / "scripts/publish", repo], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v = version()
    assert (repo / f"dev/tapeout/tapeout-generate/{v}/tapeout-generate-{v}.jar").is_file()
    r = gradle_run([GRADLE, "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--console=plain", "--quiet",
                    ":examples:hf-llama:compileIreeLlamaF32"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

    settings = guide_blocks()[0]
    build, generate = generate_blocks()
    placeholder = "maven { url 'file:///path/to/repo' }"
    assert placeholder in settings and placeholder in build and f"'dev.tapeout:tapeout-generate:{v}'" in build
    project = tmp_path / "consumer"
    (project / "src/main/kotlin").mkdir(parents=True)
    (project / "settings.gradle").write_text(settings.replace(placeholder, f"maven {{ url '{repo.as_uri()}' }}"))
    (project / "build.gradle").write_text(build.replace(placeholder, f"maven {{ url '{repo.as_uri()}' }}"))
    (project / "src/main/kotlin/Generate.kt").write_text(generate)
    (project / "build/tapeout").mkdir(parents=True)
    for name in ("llama_f32.vmfb", "llama_f32.irpa"):
        shutil.copy(ROOT / "examples/hf-llama/build/tapeout-llamaF32" / name, project / "build/tapeout" / name)
    shutil.copy(GOLDEN / "tiny97/tokenizer.json", project / "tokenizer.json")

    env = {k: v for k, v in os.environ.items()
           if k not in ("KOTLIN_HOME", "GRADLE_OPTS", "TAPEOUT_IREE_NATIVE_PATH", "LD_LIBRARY_PATH", "CMAKE")}
    env["KOTLIN_HOME"] = str(KOTLIN_24)
    env["PATH"] = path_without_build_tools(tmp_path / "bin")
    env["DJL_CACHE_DIR"] = str(tmp_path / "djl")
    r = gradle_run([GRADLE, "--no-daemon", "--console=plain", "--quiet", "run"], cwd=project, env=env,
                   capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    want = next(c for c in json.loads((GOLDEN / "text.json").read_text())["cases"]
                if c["prompt"] == "the cat sat on the mat" and c["max_new_tokens"] == 12)
    m = re.search(r"^(.*)\ntokens (\[[\d, ]+\]), MAX_NEW_TOKENS$", r.stdout, re.M)
    assert m, r.stdout
    assert m.group(1) == want["text"]
    assert json.loads(m.group(2)) == want["tokens"]
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in BUILD_TOOLS)
