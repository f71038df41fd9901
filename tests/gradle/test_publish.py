"""The published route, as a user meets it: scripts/publish writes a Maven repository; a new project outside
this repository, made of exactly docs/gradle.md's "From Gradle" files (settings.gradle, build.gradle, the model),
applies the plugins by id and version from it (kotlin-stdlib comes from Maven Central), exports with real Gradle,
and IREE runs the result with the numbers checked. Once with Kotlin 2.4, once with Kotlin 2.0.21 (the oldest the
library targets), once through mavenLocal()."""
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

from harness import ROOT, compile_and_run_iree, gradle_run

GRADLE = shutil.which("gradle")
pytestmark = pytest.mark.skipif(GRADLE is None, reason="gradle is installed by scripts/setup")
KOTLIN_24 = ROOT / "jvm/tools/node_modules/kotlin-compiler"
KOTLIN_20 = ROOT / "jvm/tools-compat/node_modules/kotlin-compiler"


def guide_blocks():
    """docs/gradle.md's "From Gradle" code blocks by their first lines (`// settings.gradle`, `// build.gradle`, the model
    source `// src/main/kotlin/acme/Mlp.kt`, ...)."""
    section = (ROOT / "docs/gradle.md").read_text().split("## From Gradle", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:groovy|kotlin)\n(.*?)```", section, re.S)
    return {b.splitlines()[0]: b for b in blocks}


def mlp_reference(x):
    """What the Gradle guide's acme.Mlp computes for `x` ([2, 4]), in float64."""
    w1 = np.sin(np.arange(32, dtype=np.float32).astype(np.float64)).reshape(8, 4)
    b1 = 0.1 * np.arange(8)
    w2 = np.cos(np.arange(24, dtype=np.float32).astype(np.float64)).reshape(3, 8)
    b2 = -0.2 * np.arange(3)
    return np.maximum(x @ w1.T + b1, 0) @ w2.T + b2


def version():
    return re.search(r"version\s*=\s*'([^']+)'", (ROOT / "build.gradle").read_text()).group(1)


def consumer(path, repo_line):
    blocks = guide_blocks()
    settings, build, model = (blocks["// settings.gradle"], blocks["// build.gradle"],
                              blocks["// src/main/kotlin/acme/Mlp.kt"])
    assert "file:///path/to/repo" in settings and "file:///path/to/repo" in build
    path.mkdir(parents=True)
    (path / "settings.gradle").write_text(settings.replace("maven { url 'file:///path/to/repo' }", repo_line))
    (path / "build.gradle").write_text(build.replace("maven { url 'file:///path/to/repo' }", repo_line))
    src = path / "src/main/kotlin/acme"
    src.mkdir(parents=True)
    (src / "Mlp.kt").write_text(model)
    return path


def export_and_check(project, kotlin_home, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("KOTLIN_HOME", "GRADLE_OPTS")}
    env.update(env_extra or {})
    env["KOTLIN_HOME"] = str(kotlin_home)
    r = gradle_run([GRADLE, "--no-daemon", "--console=plain", "exportIrpa"], cwd=project, env=env,
                   capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = project / "build/tapeout"
    x = np.arange(8, dtype=np.float32).reshape(2, 4) * 0.25 - 1
    [y] = compile_and_run_iree(project / "build", out / "mlp.mlir", [out / "mlp.irpa"], [x])
    np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5, atol=1e-5)
    return r.stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    d = tmp_path_factory.mktemp("published") / "repo"
    r = gradle_run([ROOT / "scripts/publish", d], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v = version()
    for artifact in ("tapeout", "tapeout-iree", "tapeout-transformers", "tapeout-generate"):
        for suffix in (".jar", "-sources.jar", "-javadoc.jar", ".pom"):
            assert (d / f"dev/tapeout/{artifact}/{v}/{artifact}-{v}{suffix}").is_file(), (artifact, suffix)
        # The stdlib is Maven Central's: a dependency of the POM, no copy of it in this repository.
        pom = (d / f"dev/tapeout/{artifact}/{v}/{artifact}-{v}.pom").read_text()
        assert re.search(r"<groupId>org.jetbrains.kotlin</groupId>\s*<artifactId>kotlin-stdlib</artifactId>\s*"
                         r"<version>2.0.21</version>", pom), pom
    for f in [f"dev/tapeout/dev.tapeout.gradle.plugin/{v}/dev.tapeout.gradle.plugin-{v}.pom",
              f"dev/tapeout/kotlin/dev.tapeout.kotlin.gradle.plugin/{v}/dev.tapeout.kotlin.gradle.plugin-{v}.pom"]:
        assert (d / f).is_file(), f
    assert not (d / "org/jetbrains").exists()
    # tapeout-generate's tokenizers are DJL's from Maven Central, named by its POM, not copied here.
    pom = (d / f"dev/tapeout/tapeout-generate/{v}/tapeout-generate-{v}.pom").read_text()
    assert re.search(r"<groupId>ai.djl.huggingface</groupId>\s*<artifactId>tokenizers</artifactId>", pom), pom
    assert re.search(r"<artifactId>tapeout-iree</artifactId>\s*<version>" + re.escape(v), pom), pom
    assert not (d / "ai/djl").exists()
    # tapeout-transformers exports with the core library alone: its POM names tapeout, not IREE.
    pom = (d / f"dev/tapeout/tapeout-transformers/{v}/tapeout-transformers-{v}.pom").read_text()
    assert re.search(r"<artifactId>tapeout</artifactId>\s*<version>" + re.escape(v), pom), pom
    assert "tapeout-iree" not in pom, pom
    return d


def test_a_new_project_from_the_gradle_guide_exports_with_the_published_plugins(repo, tmp_path):
    p = consumer(tmp_path / "consumer", f"maven {{ url '{repo.as_uri()}' }}")
    out = export_and_check(p, KOTLIN_24)
    assert "tapeout: wrote" in out and "mlp.irpa" in out


def test_a_kotlin_2_0_consumer_reads_the_library(repo, tmp_path):
    assert (KOTLIN_20 / "build.txt").read_text().startswith("2.0."), "scripts/setup installs kotlin-compiler 2.0.21"
    export_and_check(consumer(tmp_path / "consumer20", f"maven {{ url '{repo.as_uri()}' }}"), KOTLIN_20)


def test_maven_local_works_the_same(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    r = gradle_run([ROOT / "scripts/publish", "--maven-local"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (home / ".m2/repository/dev/tapeout/tapeout").is_dir()
    # Gradle's mavenLocal() follows the JVM's user.home (not $HOME), or maven.repo.local when set.
    local = home / ".m2/repository"
    export_and_check(consumer(tmp_path / "consumer-local", "mavenLocal()"), KOTLIN_24,
                     {"GRADLE_OPTS": f"-Dmaven.repo.local={local}"})
