"""The plugins on Gradle 8.10 beside the Kotlin Gradle plugin (KGP 2.0.21), as a 2026 user applies them: Gradle 8.10's
runtime (Maven Central's dev.gradleplugins:gradle-api:8.10) and KGP, which scripts/setup fetches into .cache/gradle810
(scripts/maven_fetch.py), run tests/gradle/gradle8/Gradle8Harness.java, which evaluates a consumer's Groovy
build.gradle with ProjectBuilder, reports every task, input and output the plugins registered, and runs exportIrpa and
compileIree for real. The consumer is the Gradle guide's (docs/gradle.md) Gradle 8 build.gradle, its library dev.tapeout:tapeout resolved by
coordinates from a repository written by scripts/publish, the plugins' jar the one published there. IREE runs the
compiled module with the exported archive and numpy checks the numbers. Deprecation warnings fail the run (the
harness sets Gradle's warning mode to fail).

What ProjectBuilder cannot do, the test does around it: a `plugins { }` block does not see the harness's classpath,
so the guide's plugin ids become `apply plugin:` lines; KGP's compileKotlin needs Gradle's executor, so kotlinc 2.0.21
(KGP's own version) compiles the model into the folder KGP's task reports; Gradle's task graph is not built, so the
harness runs the tasks named, dependencies first."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import time
import zipfile

import numpy as np
import pytest

from harness import ROOT, gradle_run, iree_tool, run_iree
from test_publish import mlp_reference, guide_blocks, version

CACHE = ROOT / ".cache/gradle810"
KOTLIN_20 = ROOT / "jvm/tools-compat/node_modules/kotlin-compiler"
ADD_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in ("java.lang", "java.util", "java.lang.invoke")]


def gradle_api_jar(classpath):
    [api] = [p for p in classpath if p.name.startswith("gradle-api-")]
    return api


def module_links(classpath, folder):
    """A folder of links to the one gradle-api jar under the names Gradle's DefaultModuleRegistry looks for: it finds
    module `m` by a jar named `m-<version>.jar` holding `m-classpath.properties`, and each runtime jar a manifest lists
    (`runtime=`) by its file name. The one jar holds every module's classes and manifest, so every name points at it."""
    api = gradle_api_jar(classpath)
    have = {p.name for p in classpath}
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(api) as z:
        manifests = [n for n in z.namelist() if n.endswith("-classpath.properties") and "/" not in n]
        names = set()
        for m in manifests:
            names.add(m[: -len("-classpath.properties")] + "-8.10.jar")
            for line in z.read(m).decode().splitlines():
                if line.startswith("runtime="):
                    names.update(n for n in line[len("runtime="):].split(",") if n)
    for n in sorted(names - have):
        (folder / n).symlink_to(api)
    return folder


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """`java … Gradle8Harness`: the command prefix, with Gradle 8.10, KGP and the published plugins' jar on its
    classpath, and the published repository."""
    listing = CACHE / "classpath.txt"
    assert listing.is_file(), "scripts/setup fetches Gradle 8.10 and KGP into .cache/gradle810"
    classpath = [CACHE / "repo" / p for p in listing.read_text().split()]
    assert all(p.is_file() for p in classpath), "run scripts/setup: .cache/gradle810 is incomplete"
    tmp = tmp_path_factory.mktemp("gradle8")
    repo = tmp / "repo"
    r = gradle_run([ROOT / "scripts/publish", repo], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v = version()
    plugin_jar = repo / f"dev/tapeout/tapeout-gradle-plugin/{v}/tapeout-gradle-plugin-{v}.jar"
    assert plugin_jar.is_file(), sorted(repo.rglob("*.jar"))
    links = module_links(classpath, tmp / "modules")
    classes = tmp / "classes"
    subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", os.pathsep.join(map(str, classpath)),
                    ROOT / "tests/gradle/gradle8/Gradle8Harness.java"], check=True)
    cp = [classes, *classpath, *sorted(links.iterdir()), plugin_jar]
    cmd = ["java", "-Xmx2g", "-XX:+UseSerialGC", *ADD_OPENS, "-cp", os.pathsep.join(map(str, cp)), "Gradle8Harness"]
    return cmd, repo, tmp / "user-home"


def gradle8_build_gradle():
    """docs/gradle.md's Gradle 8 build.gradle."""
    return guide_blocks()["// build.gradle (Gradle 8 or 9, with the Kotlin Gradle plugin)"]


def for_harness(build, repo):
    """`build` as the harness can evaluate it: its `plugins { }` ids as `apply plugin:` lines (ProjectBuilder's
    plugins block does not see the harness's classpath, where the same plugin jars are), the published repository
    for the guide's placeholder, and .cache/gradle810 (a Maven Central subset) for mavenCentral(), or besides it."""
    block = re.search(r"^plugins \{(.*?)\}\n", build, re.S | re.M)
    ids = re.findall(r"id[ (]'([^']+)'", block.group(1))
    applied = "".join(f"apply plugin: '{i}'\n" for i in ids)
    build = build[: block.start()] + applied + build[block.end():]
    assert "file:///path/to/repo" in build
    central = f"maven {{ url '{(CACHE / 'repo').as_uri()}' }}"
    if "mavenCentral()" not in build:
        build = build.replace("repositories { ", "repositories { mavenCentral(); ", 1)
    return build.replace("file:///path/to/repo", repo.as_uri()).replace("mavenCentral()", central)


def run_harness(harness, project, *tasks, env=None, status=0):
    """The harness on `project` running `tasks`: its report and its output, once it exited with `status`."""
    cmd, _, home = harness
    report = project / "report.json"
    r = subprocess.run([*cmd, project, home, report, *tasks], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "TAPEOUT_IREE_COMPILE": iree_tool("iree-compile"), **(env or {})})
    assert r.returncode == status, f"exit {r.returncode}\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    return json.loads(report.read_text()), r.stdout + r.stderr


def consumer(path, build):
    path.mkdir(parents=True)
    (path / "build.gradle").write_text(build)
    src = path / "src/main/kotlin/acme"
    src.mkdir(parents=True)
    (src / "Mlp.kt").write_text(guide_blocks()["// src/main/kotlin/acme/Mlp.kt"])
    return path


def compile_model(project, report):
    """The model compiled by kotlinc 2.0.21 into KGP's compileKotlin folder, on the classpath Gradle resolved."""
    out = pathlib.Path(report["kotlinOutput"])
    assert out.is_relative_to(project / "build"), out
    cp = [p for p in report["runtimeClasspath"] if p.endswith(".jar")]
    r = subprocess.run([KOTLIN_20 / "bin/kotlinc", "-d", out, "-no-stdlib", "-no-reflect", "-cp", os.pathsep.join(cp),
                        *sorted((project / "src/main/kotlin").rglob("*.kt"))],
                       capture_output=True, text=True, env={**os.environ, "JAVA_OPTS": "-Xmx1g -XX:+UseSerialGC"})
    assert r.returncode == 0, r.stdout + r.stderr


def check_tasks(report, project, classes, compiler):
    """Every task dev.tapeout registers, with its type, dependencies, inputs and outputs as Gradle 8.10 sees them;
    `classes` is the folder the model's classes go to, `compiler` the task that compiles them."""
    v = version()
    tasks = report["tasks"]
    assert report["gradleVersion"] == "8.10"
    export, compile_ = tasks["exportIrpa"], tasks["compileIree"]
    assert export["type"] == "dev.tapeout.gradle.ExportIrpaTask" and compile_["type"] == "dev.tapeout.gradle.CompileIreeTask"
    assert export["group"] == compile_["group"] == "tapeout"
    # The runtime classpath's builders (the Kotlin compile among them) come before the export, the export before
    # the compile.
    assert compiler in export["dependsOn"] and "classes" in export["dependsOn"], export["dependsOn"]
    assert "exportIrpa" in compile_["dependsOn"], compile_["dependsOn"]
    # The library by coordinates, from the published repository; the model's classes folder.
    jars = [pathlib.Path(p).name for p in report["runtimeClasspath"]]
    assert f"tapeout-{v}.jar" in jars and any(j.startswith("kotlin-stdlib-") for j in jars), jars
    assert str(classes) in report["runtimeClasspath"], report["runtimeClasspath"]
    out = project / "build/tapeout"
    assert export["inputs"] == {
        "args": "[]", "exportTarget": "llvm-cpu", "halfConstants": "KEEP", "inlineBelowBytes": "4096",
        "jvmArgs": "[]", "maxArchiveBytes": "0", "maxHeapSize": "2g", "model": "acme.Mlp", "moduleName": "mlp",
        "packedConstants": "FAIL", "scope": "model", "systemProperties": "{}", "tuning": "true"}, export["inputs"]
    assert set(report["runtimeClasspath"]) <= set(export["inputFiles"]), "the classpath is an input"
    # Exact outputs: the files the export writes under names its settings fix (a set's shards are named by the
    # export itself and tracked by its own record), and the compile's vmfb beside them, in nothing the export declares.
    assert sorted(export["outputFiles"]) == sorted(str(out / f"mlp{s}") for s in (
        ".mlir", ".irpa", ".signature.json", ".tuning.mlir", ".inputs")), export["outputFiles"]
    # The compiler's version is no input (its getter would start iree-compile whenever Gradle fingerprints): the
    # task's upToDateWhen compares it with the last compile's.
    assert compile_["inputs"] == {"flags": "[--iree-input-type=stablehlo, --iree-hal-target-device=local, "
                                           "--iree-hal-local-target-device-backends=llvm-cpu, "
                                           "--iree-llvmcpu-target-cpu=host]"}, compile_["inputs"]
    assert compile_["inputFiles"] == [str(out / "mlp.mlir")], compile_["inputFiles"]
    assert compile_["outputFiles"] == [str(out / "mlp.vmfb")], compile_["outputFiles"]
    for o in compile_["outputFiles"]:
        assert not any(pathlib.Path(o).is_relative_to(e) for e in export["outputFiles"]), (o, export["outputFiles"])


def export_compile_and_check(harness, project):
    """With KGP: its compile task's folder checked, the model compiled into it, then exportIrpa and compileIree run,
    and IREE's numbers checked."""
    report, _ = run_harness(harness, project)
    assert sorted(report["tasks"]) == ["compileIree", "exportIrpa"], sorted(report["tasks"])
    check_tasks(report, project, report["kotlinOutput"], "compileKotlin")
    compile_model(project, report)
    return run_and_check(harness, project, ["exportIrpa", "compileIree"])


def run_and_check(harness, project, tasks, env=None):
    """`tasks` run, the last two exportIrpa and compileIree; IREE runs the vmfb with the archive against numpy."""
    report, log = run_harness(harness, project, *tasks, env=env)
    for t in tasks:
        assert f"> Task :{t}\n" in log, log
    out = project / "build/tapeout"
    assert "tapeout: wrote" in log and (out / "mlp.irpa").is_file(), log
    x = np.arange(8, dtype=np.float32).reshape(2, 4) * 0.25 - 1
    [y] = run_iree(project / "build", out / "mlp.vmfb", [out / "mlp.irpa"], [x])
    np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5, atol=1e-5)
    return report


def test_the_gradle_guides_gradle8_build_exports_and_compiles_with_kgp(harness, tmp_path):
    build = for_harness(gradle8_build_gradle(), harness[1])
    assert "apply plugin: 'org.jetbrains.kotlin.jvm'" in build and "dev.tapeout.kotlin" not in build
    report = export_compile_and_check(harness, consumer(tmp_path / "consumer", build))
    assert report["plugins"] == {"dev.tapeout": True, "dev.tapeout.kotlin": False,
                                 "org.jetbrains.kotlin.jvm": True, "java": True}


def test_both_tapeout_plugins_beside_kgp_leave_kotlin_to_kgp(harness, tmp_path):
    """dev.tapeout.kotlin in a build that applies KGP too: KGP compiles src/main/kotlin, our kotlinc task stands
    aside (two compilers of one source folder would put every class twice on the classpath)."""
    build = for_harness(gradle8_build_gradle(), harness[1]).replace(
        "apply plugin: 'dev.tapeout'\n", "apply plugin: 'dev.tapeout.kotlin'\napply plugin: 'dev.tapeout'\n")
    report = export_compile_and_check(harness, consumer(tmp_path / "both", build))
    assert report["plugins"] == {"dev.tapeout": True, "dev.tapeout.kotlin": True,
                                 "org.jetbrains.kotlin.jvm": True, "java": True}
    assert not any("kotlinc" in p for p in report["runtimeClasspath"]), report["runtimeClasspath"]


def test_both_tapeout_plugins_without_kgp_compile_with_kotlinc(harness, tmp_path):
    """The old builds' build.gradle from docs/gradle.md (dev.tapeout.kotlin and dev.tapeout, no KGP) on Gradle 8.10:
    compileKotlinc and compileTestKotlinc registered with their inputs and outputs, compileKotlinc's kotlinc run for
    real, then the export and the compile."""
    build = for_harness(guide_blocks()["// build.gradle"], harness[1])
    assert "apply plugin: 'dev.tapeout.kotlin'" in build and "kotlin.jvm" not in build
    p = consumer(tmp_path / "kotlinc", build)
    env = {"KOTLIN_HOME": str(KOTLIN_20)}
    report, _ = run_harness(harness, p, env=env)
    tasks = report["tasks"]
    assert sorted(tasks) == ["compileIree", "compileKotlinc", "compileTestKotlinc", "exportIrpa"], sorted(tasks)
    main, test = tasks["compileKotlinc"], tasks["compileTestKotlinc"]
    classes = p / "build/kotlinc/main"
    assert main["outputFiles"] == [str(classes)] and test["outputFiles"] == [str(p / "build/kotlinc/test")]
    assert main["inputs"]["freeArgs"] == "[]" and main["inputs"]["jvmTarget"] == "1.8", main["inputs"]
    assert main["inputs"]["compilerVersion"] == (KOTLIN_20 / "build.txt").read_text().strip(), main["inputs"]
    assert test["inputs"]["freeArgs"] == f"[-Xfriend-paths={classes}]", test["inputs"]
    assert str(p / "src/main/kotlin/acme/Mlp.kt") in main["inputFiles"], main["inputFiles"]
    check_tasks(report, p, classes, "compileKotlinc")
    run_and_check(harness, p, ["compileKotlinc", "exportIrpa", "compileIree"], env=env)
    assert (classes / "acme/Mlp.class").is_file()


# A block with named models, and the inputs of exportIrpaTiny it gives (test_plugin.py checks 4.4.1 gives the same).
NAMED_MODELS = """tapeout {
    packedConstants = 'DEQUANTIZE'
    tuning = false
    systemProperty 'a', 1
    jvmArgs '-XX:+UseSerialGC'
    args 'block'
    ireeFlags = ['--block-flag']
    models {
        tiny {
            model = 'acme.Mlp'
            systemProperty 'b', 'two'
            jvmArgs '-Xss2m'
            ireeTargets = ['vmvx']
            ireeFlags = ['--own-flag']
        }
        big { model = 'acme.Big'; args 'own'; tuning = true; halfConstants = 'WIDEN' }
    }
}"""
TINY_INPUTS = {
    "args": "[block]", "exportTarget": "portable", "halfConstants": "KEEP", "inlineBelowBytes": "4096",
    "jvmArgs": "[-XX:+UseSerialGC, -Xss2m]", "maxArchiveBytes": "0", "maxHeapSize": "2g", "model": "acme.Mlp",
    "moduleName": "tiny", "packedConstants": "DEQUANTIZE", "scope": "model", "systemProperties": "{a=1, b=two}",
    "tuning": "false"}


def test_named_models_register_their_tasks_and_inherit_the_blocks_settings(harness, tmp_path):
    """tapeout { models { } } on Gradle 8.10: a task pair per model, registered lazily and run by exportIrpa and
    compileIree; a model's unset settings are the block's, its lists and maps added to the block's or in place of
    them as on 4.4.1 (MapProperty and ListProperty here, where 4.4.1 has Property<Map> and its own ListProperty)."""
    build = for_harness(gradle8_build_gradle(), harness[1]).replace("""tapeout {
    model = 'acme.Mlp'
    moduleName = 'mlp'
}""", NAMED_MODELS)
    p = consumer(tmp_path / "named", build)
    # The block has no model of its own: its tasks only run the named models' (their onlyIf skips them).
    report, log = run_harness(harness, p, "exportIrpa", "compileIree")
    assert "> Task :exportIrpa SKIPPED\n" in log and "> Task :compileIree SKIPPED\n" in log, log
    tasks = report["tasks"]
    assert "tapeout { model = '…' } is not set" in tasks["exportIrpa"]["inputsError"], tasks["exportIrpa"]
    assert sorted(tasks) == ["compileIree", "compileIreeBig", "compileIreeTiny", "exportIrpa", "exportIrpaBig",
                             "exportIrpaTiny"], sorted(tasks)
    assert {"exportIrpaTiny", "exportIrpaBig"} <= set(tasks["exportIrpa"]["dependsOn"])
    assert {"compileIreeTiny", "compileIreeBig", "exportIrpa"} <= set(tasks["compileIree"]["dependsOn"])
    assert "exportIrpaTiny" in tasks["compileIreeTiny"]["dependsOn"]
    tiny, big = tasks["exportIrpaTiny"]["inputs"], tasks["exportIrpaBig"]["inputs"]
    assert tiny == TINY_INPUTS, tiny
    assert (big["args"], big["tuning"], big["halfConstants"], big["exportTarget"], big["systemProperties"]) == \
        ("[own]", "true", "WIDEN", "llvm-cpu", "{a=1}"), big
    assert tasks["compileIreeTiny"]["inputs"]["flags"] == (
        "[--iree-input-type=stablehlo, --iree-hal-target-device=local, --iree-hal-local-target-device-backends=vmvx, "
        "--block-flag, --own-flag]"), tasks["compileIreeTiny"]["inputs"]
    out = p / "build/tapeout-tiny"
    assert sorted(tasks["exportIrpaTiny"]["outputFiles"]) == sorted(str(out / f"tiny{s}") for s in (
        ".mlir", ".irpa", ".signature.json", ".tuning.mlir", ".inputs"))
    assert tasks["compileIreeTiny"]["outputFiles"] == [str(out / "tiny.vmfb")]


SLEEPER = """
package acme

import dev.tapeout.*
import java.io.File

class Sleeper : ModelProvider {
    override fun buildTape(): ExecutionTape {
        File(System.getProperty("pidFile")).writeText(ProcessHandle.current().pid().toString())
        Thread.sleep(600_000)
        return ExecutionTape()
    }
}
"""


def test_a_cancelled_export_destroys_its_jvm(harness, tmp_path):
    """Gradle interrupts a task's thread when the build is cancelled: the export JVM (here a model that sleeps ten
    minutes) is destroyed then, not left running after the build."""
    build = for_harness(gradle8_build_gradle(), harness[1]).replace(
        "model = 'acme.Mlp'", f"model = 'acme.Sleeper'\n    systemProperty 'pidFile', '{tmp_path / 'export.pid'}'")
    p = consumer(tmp_path / "cancel", build)
    (p / "src/main/kotlin/acme/Sleeper.kt").write_text(SLEEPER)
    report, _ = run_harness(harness, p)
    compile_model(p, report)
    _, log = run_harness(harness, p, "exportIrpa", env={"GRADLE8_HARNESS_INTERRUPT_WHEN": str(tmp_path / "export.pid")},
                         status=1)
    assert "InterruptedException" in log, log
    pid = int((tmp_path / "export.pid").read_text())
    for _ in range(50):   # the kill is sent before the harness exits; the kernel may take a moment
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    pytest.fail(f"the export JVM {pid} outlived the cancelled build")


def test_a_deprecated_api_in_the_build_fails_the_suite(harness, tmp_path):
    """The harness's own check: a build script that uses an API Gradle 8.10 deprecates (JavaExec.main, gone in
    Gradle 9) fails with Gradle's deprecation message, so a plugin that did the same would fail the tests above."""
    p = tmp_path / "deprecated"
    p.mkdir()
    (p / "build.gradle").write_text("apply plugin: 'java'\ntasks.register('run', JavaExec) { main = 'acme.Main' }\n"
                                    "tasks.named('run').get()\n")
    cmd, _, home = harness
    r = subprocess.run([*cmd, p, home, p / "report.json"], capture_output=True, text=True)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Deprecated Gradle features were used" in r.stderr and "main" in r.stdout + r.stderr, r.stdout + r.stderr


def test_the_repositorys_java_exec_tasks_set_main_class_on_gradle8(harness, tmp_path):
    """jvm/ and jvm-iree/'s JavaExec tasks name their main class with `mainClass` where Gradle has it (6.4+; `main`
    is deprecated in 8 and gone in 9) and with `main` on 4.4.1: their lines, evaluated on 8.10, set mainClass with no
    deprecation warning."""
    lines = [line.strip() for f in ("jvm/build.gradle", "jvm-iree/build.gradle")
             for line in (ROOT / f).read_text().splitlines() if "mainClass" in line]
    assert len(lines) == 3, lines
    p = tmp_path / "javaexec"
    p.mkdir()
    (p / "build.gradle").write_text("apply plugin: 'java'\n" + "".join(
        f"task run{i}(type: JavaExec) {{\n    {line}\n}}\nprintln \"run{i}: ${{run{i}.mainClass.get()}}\"\n"
        for i, line in enumerate(lines)))
    _, log = run_harness(harness, p)
    for i, line in enumerate(lines):
        name = re.search(r"mainClass = '([^']+)'", line).group(1)
        assert f"run{i}: {name}\n" in log, log


def test_the_serving_library_resolves_by_coordinates_beside_kgp(harness, tmp_path):
    """dev.tapeout:tapeout-iree by coordinates on Gradle 8.10 beside KGP: the published jar, with its native library
    inside, and Maven Central's kotlin-stdlib on the runtime classpath (tests/gradle/test_publish_serving.py runs the
    serving guide's project from the same repository)."""
    v = version()
    build = for_harness(gradle8_build_gradle(), harness[1]).replace(
        f"implementation 'dev.tapeout:tapeout:{v}'",
        f"implementation 'dev.tapeout:tapeout:{v}'\n    implementation 'dev.tapeout:tapeout-iree:{v}'")
    assert "tapeout-iree" in build
    report, _ = run_harness(harness, consumer(tmp_path / "consumer", build))
    jars = {pathlib.Path(p).name: p for p in report["runtimeClasspath"]}
    for want in (f"tapeout-iree-{v}.jar", f"tapeout-{v}.jar", "kotlin-stdlib-2.0.21.jar"):
        assert want in jars, sorted(jars)
    with zipfile.ZipFile(jars[f"tapeout-iree-{v}.jar"]) as z:
        assert "native/linux-x86-64/libtapeout_iree_jni.so" in z.namelist()
        assert "dev/tapeout/iree/IreeModule.class" in z.namelist()
