"""Serving from the published repository, as a user meets it: scripts/publish writes dev.tapeout:tapeout-iree; a
new project outside this repository, made of exactly docs/serving.md's "Serving from the JVM" files (settings.gradle,
build.gradle, Serve.kt), resolves it by coordinates (and kotlin-stdlib from Maven Central), and `gradle run` serves
the tiny LLM's export with IREE in process. Neither cargo nor CMake is on its PATH: the native library comes from the
jar. The printed next tokens and logits are checked against the model's own float64 Kotlin reference."""
import ast
import os
import re
import shutil

import numpy as np
import pytest

from harness import ROOT, VENV_BIN, gradle_run
from test_publish import GRADLE, KOTLIN_24, version

pytestmark = pytest.mark.skipif(GRADLE is None, reason="gradle is installed by scripts/setup")
TOKENS = [3, 14, 15, 9]
# What building the native library takes, and what this test's consumer must therefore do without.
BUILD_TOOLS = {"cargo", "rustc", "rustup", "cmake", "ctest", "cpack", "ninja"}


def guide_blocks():
    """settings.gradle, build.gradle and Serve.kt, as docs/serving.md's "Serving from the JVM" section shows them."""
    section = (ROOT / "docs/serving.md").read_text().split("## Serving from the JVM", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:groovy|kotlin)\n(.*?)```", section, re.S)
    by_first_line = {b.splitlines()[0]: b for b in blocks}
    return (by_first_line["// settings.gradle"], by_first_line["// build.gradle"],
            by_first_line["// src/main/kotlin/Serve.kt"])


def path_without_build_tools(farm):
    """A directory of links to every program on PATH except the ones that build native code, IREE's compiler (what
    the guide asks a user to pip-install) first. PATH cannot merely drop directories: /usr/bin holds cmake too."""
    farm.mkdir()
    (farm / "iree-compile").symlink_to(VENV_BIN / "iree-compile")
    for d in os.environ["PATH"].split(os.pathsep):
        if not d or not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            link = farm / entry.name
            if entry.name in BUILD_TOOLS or link.exists() or link.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(farm)


def export_and_reference(tmp_path):
    """The tiny LLM exported by this repository's Gradle build into tmp_path/export, and its float64 reference
    logits for TOKENS (TinyLlm.referenceLogits, run on the example's classpath), [len(TOKENS), vocab]."""
    out = tmp_path / "export"
    r = gradle_run([GRADLE, "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--console=plain", "--quiet",
                    ":examples:tiny-llm:exportIrpa", ":examples:tiny-llm:writeClasspath", f"-PtapeoutOut={out}"],
                   cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    oracle = tmp_path / "Reference.java"
    oracle.write_text("public class Reference { public static void main(String[] a) { for (double x : new "
                      "dev.tapeout.examples.TinyLlm().referenceLogits(new int[] {"
                      + ", ".join(map(str, TOKENS)) + "})) System.out.println(x); } }\n")
    classpath = (ROOT / "examples/tiny-llm/build/classpath.txt").read_text().strip()
    # Under Gradle's lock: the classpath names this repository's jars, which another test's Gradle run may rewrite.
    r = gradle_run(["java", "-cp", classpath, str(oracle)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    logits = np.array([float(x) for x in r.stdout.split()])
    return out, logits.reshape(len(TOKENS), -1)


def test_the_serving_guides_project_runs_from_the_published_repository(tmp_path):
    repo = tmp_path / "repo"
    r = gradle_run([ROOT / "scripts/publish", repo], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v = version()
    assert (repo / f"dev/tapeout/tapeout-iree/{v}/tapeout-iree-{v}.jar").is_file()
    export, want = export_and_reference(tmp_path)

    settings, build, serve = guide_blocks()
    placeholder = "maven { url 'file:///path/to/repo' }"
    assert placeholder in settings and placeholder in build and "mavenCentral()" in build
    assert f"'dev.tapeout:tapeout-iree:{v}'" in build
    project = tmp_path / "consumer"
    (project / "src/main/kotlin").mkdir(parents=True)
    (project / "settings.gradle").write_text(settings.replace(placeholder, f"maven {{ url '{repo.as_uri()}' }}"))
    (project / "build.gradle").write_text(build.replace(placeholder, f"maven {{ url '{repo.as_uri()}' }}"))
    (project / "src/main/kotlin/Serve.kt").write_text(serve)
    (project / "build/tapeout").mkdir(parents=True)
    for name in ("tiny_llm.mlir", "tiny_llm.irpa"):
        shutil.copy(export / name, project / "build/tapeout" / name)

    # No variable that points the loader or the compiler elsewhere: the library can only come from the jar.
    env = {k: v for k, v in os.environ.items()
           if k not in ("KOTLIN_HOME", "GRADLE_OPTS", "TAPEOUT_IREE_NATIVE_PATH", "TAPEOUT_IREE_COMPILE",
                        "LD_LIBRARY_PATH", "CMAKE")}
    env["KOTLIN_HOME"] = str(KOTLIN_24)
    env["PATH"] = path_without_build_tools(tmp_path / "bin")
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in BUILD_TOOLS)
    r = gradle_run([GRADLE, "--no-daemon", "--console=plain", "run"], cwd=project, env=env,
                   capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^next tokens (\[[\d, ]+\]), logits (\[[-\d.eE, ]+\])$", r.stdout, re.M)
    assert m, r.stdout
    next_tokens, first_logits = ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))
    assert next_tokens == [int(i) for i in want.argmax(axis=1)]
    np.testing.assert_allclose(first_logits, want[0, :3], rtol=1e-5, atol=1e-5)
