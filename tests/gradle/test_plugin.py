"""Functional tests of the Gradle plugin dev.tapeout: real Gradle (Debian's 4.4.1) on temporary projects that
apply the plugin from its built jar, with a small Kotlin model. Covers configuration, export, UP-TO-DATE,
FAIL vs DEQUANTIZE and the error message."""
import pathlib
import shutil

import pytest

from harness import ROOT, gradle_run

GRADLE = shutil.which("gradle")
pytestmark = pytest.mark.skipif(GRADLE is None, reason="gradle is installed by scripts/setup")

MODEL = '''
package demo

import dev.tapeout.*

class Model : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(2, 32))
        val w = t.weight("model.fc.weight", FloatArray(32 * 4) { it * 0.01f }, 32, 4)
        // one packed Q8_0 weight: [4, 32], scale 1/64 (f16 0x2400), codes 0..31
        val block = ByteArray(34) { if (it == 1) 0x24 else if (it >= 2) (it - 2).toByte() else 0 }
        val q = t.packedWeight("model.q.weight", ByteArray(34 * 4) { block[it % 34] }, "Q8_0", 4, 32)
        t.output(t.add(t.matmul(x, w), t.matmul(x, t.transpose(q))))
        return t
    }
}
'''


def build_file(extra):
    return f"""
buildscript {{
    dependencies {{ classpath files('{ROOT}/buildSrc/build/libs/buildSrc.jar') }}
}}
apply plugin: 'dev.tapeout.kotlin'
apply plugin: 'dev.tapeout'
dependencies {{
    implementation files('{ROOT}/jvm/build/libs/jvm-0.1.0.jar', "${{kotlinHomeDir}}/lib/kotlin-stdlib.jar")
}}
{extra}
"""


@pytest.fixture(scope="module")
def built_jars():
    gradle_run([GRADLE, "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--quiet", ":jvm:jar", ":jvm-iree:jar"],
               cwd=ROOT, check=True, capture_output=True)
    assert (ROOT / "buildSrc/build/libs/buildSrc.jar").is_file()


def project(tmp_path, tapeout_block):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "settings.gradle").write_text("rootProject.name = 'demo'\n")
    (tmp_path / "gradle.properties").write_text(
        "systemProp.gradle-debian-helper.hook.enabled=false\n"
        f"kotlinHome={ROOT}/jvm/tools/node_modules/kotlin-compiler\n")
    (tmp_path / "build.gradle").write_text(build_file(tapeout_block))
    src = tmp_path / "src/main/kotlin/demo"
    src.mkdir(parents=True, exist_ok=True)
    (src / "Model.kt").write_text(MODEL)
    return tmp_path


def gradle(path, *args):
    return gradle_run([GRADLE, "--offline", "--no-daemon", "--console=plain", *args], cwd=path,
                      capture_output=True, text=True)


def test_missing_model_is_a_clear_configuration_error(built_jars, tmp_path):
    r = gradle(project(tmp_path, ""), "exportIrpa")
    assert r.returncode != 0
    assert "tapeout { model = '…' } is not set" in r.stdout + r.stderr


def test_export_up_to_date_and_rerun_on_change(built_jars, tmp_path):
    block = "tapeout { model = 'demo.Model'; moduleName = 'demo_model'; packedConstants = 'DEQUANTIZE'; inlineBelowBytes = %d }"
    p = project(tmp_path, block % 64)
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout"
    assert (out / "demo_model.mlir").is_file() and (out / "demo_model.irpa").is_file()
    assert "wrote" in r.stdout and "demo_model.irpa" in r.stdout
    r = gradle(p, "exportIrpa")
    assert ":exportIrpa UP-TO-DATE" in r.stdout, r.stdout
    (p / "build.gradle").write_text(build_file(block % 1_000_000))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0 and ":exportIrpa UP-TO-DATE" not in r.stdout, r.stdout
    assert "#flow.parameter.named" not in (out / "demo_model.mlir").read_text(), "everything inline now"


def test_packed_weight_fails_with_the_remedy_not_a_stack_trace(built_jars, tmp_path):
    p = project(tmp_path, "tapeout { model = 'demo.Model' }")
    r = gradle(p, "exportIrpa")
    assert r.returncode != 0
    text = r.stdout + r.stderr
    assert "model.q.weight" in text and "Q8_0" in text, text
    # The remedy in the Gradle extension's own terms, not the Kotlin API's or the CLI's.
    assert "tapeout { packedConstants = 'DEQUANTIZE' }" in text, text
    assert "PackedConstantHandling" not in text and "--packed" not in text, text
    assert "\tat dev.tapeout" not in text and "Exception in thread" not in text


HALF_MODEL = '''
package demo

import dev.tapeout.*

class Half : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(2, 32))
        val w = t.halfWeight("model.fc.weight", ShortArray(32 * 64) { 0x3F80.toShort() }, DType.BF16, 32, 64)
        t.output(t.matmul(x, w))
        return t
    }
}
'''


def test_half_constants_keep_by_default_widen_on_request_and_validated(built_jars, tmp_path):
    block = "tapeout { model = 'demo.Half'; moduleName = 'half'%s }"
    p = project(tmp_path, block % "")
    (p / "src/main/kotlin/demo/Half.kt").write_text(HALF_MODEL)
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout"
    assert ": tensor<32x64xbf16>" in (out / "half.mlir").read_text()
    kept = (out / "half.irpa").stat().st_size
    (p / "build.gradle").write_text(build_file(block % "; halfConstants = 'WIDEN'"))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0 and ":exportIrpa UP-TO-DATE" not in r.stdout, r.stdout + r.stderr
    assert ": tensor<32x64xf32>" in (out / "half.mlir").read_text()
    assert (out / "half.irpa").stat().st_size > kept
    (p / "build.gradle").write_text(build_file(block % "; halfConstants = 'NOPE'"))
    r = gradle(p, "exportIrpa")
    assert r.returncode != 0 and "tapeout { halfConstants = 'NOPE' }: use KEEP or WIDEN" in r.stdout + r.stderr


def test_max_archive_bytes_writes_a_set_and_prints_the_iree_flags(built_jars, tmp_path):
    block = ("tapeout { model = 'demo.Model'; moduleName = 'set'; packedConstants = 'DEQUANTIZE'; "
             "inlineBelowBytes = 64%s }")
    p = project(tmp_path, block % "; maxArchiveBytes = 1024")  # each archive is at least 4 KiB: one entry in each
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout"
    files = [out / f"set-0000{k}-of-00002.irpa" for k in (1, 2)]
    assert all(f.is_file() for f in files) and (out / "set.irpa.index.json").is_file(), sorted(out.iterdir())
    flags = " ".join(f"--parameters=model={f}" for f in files)
    assert f"tapeout: IREE loads the parameters with: {flags}" in r.stdout, r.stdout
    (p / "build.gradle").write_text(build_file(block % "; maxArchiveBytes = -1"))
    r = gradle(p, "exportIrpa")
    assert r.returncode != 0 and "tapeout { maxArchiveBytes = -1 }: use 0 (one archive)" in r.stdout + r.stderr


WIDE_MODEL = '''
package demo

import dev.tapeout.*

class Wide : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        // a packed Q8_0 weight [32, 32]: scale 1/64 (f16 0x2400), codes 0..31
        val block = ByteArray(34) { if (it == 1) 0x24 else if (it >= 2) (it - 2).toByte() else 0 }
        val w = t.packedWeight("model.w.weight", ByteArray(34 * 32) { block[it % 34] }, "Q8_0", 32, 32)
        t.output(t.matmul(t.input("x", longArrayOf(1, 32)), t.transpose(w)))
        return t
    }
}
'''


MIX_MODEL = '''
package demo

import dev.tapeout.*

/** A tied Q8_0 table [32, 32]: `embed` gathers its rows, `head` only multiplies by it. */
class Mix : ModuleProvider {
    override fun buildTapes(args: List<String>): Map<String, ExecutionTape> {
        val block = ByteArray(34).also { it[1] = 0x38; for (i in 0 until 32) it[2 + i] = (i - 16).toByte() }
        val table = ByteArray(34 * 32) { block[it % 34] }
        fun w(t: ExecutionTape) = t.packedWeight("model.embed.weight", table, "Q8_0", 32, 32)
        val embed = ExecutionTape().also { t -> t.output("h", t.embedding(w(t), t.input("ids", 3, dtype = DType.I32))) }
        val head = ExecutionTape().also { t -> t.output("logits", t.linear(t.input("h", 1, 32), w(t))) }
        return mapOf("embed" to embed, "head" to head)
    }
}
'''


def test_packed_constants_keep_writes_planes_and_the_setting_is_validated(built_jars, tmp_path):
    block = "tapeout { model = 'demo.Model'; moduleName = 'kept'; inlineBelowBytes = 64; packedConstants = '%s' }"
    p = project(tmp_path, block % "KEEP")
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    text = (p / "build/tapeout/kept.mlir").read_text()
    assert '"model"::"model.q.weight.qs"> : tensor<1x32x4xi8>' in text, text
    # Row bands take weights of a multiple of 32 rows: this one's 4 rows keep their block rows, the same module.
    (p / "build.gradle").write_text(build_file(block % "KEEP_ROW_BANDS"))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (p / "build/tapeout/kept.mlir").read_text() == text
    # A weight of 32 rows: block rows [Kb, 32, N] with KEEP, one band [N / 32, Kb, 32, 32] with KEEP_ROW_BANDS.
    (p / "src/main/kotlin/demo/Wide.kt").write_text(WIDE_MODEL)
    wide = "tapeout { model = 'demo.Wide'; moduleName = 'wide'; inlineBelowBytes = 64; packedConstants = '%s' }"
    for setting, stored in (("KEEP", "tensor<1x32x32xi8>"), ("KEEP_ROW_BANDS", "tensor<1x1x32x32xi8>")):
        (p / "build.gradle").write_text(build_file(wide % setting))
        r = gradle(p, "exportIrpa")
        assert r.returncode == 0, r.stdout + r.stderr
        text = (p / "build/tapeout/wide.mlir").read_text()
        assert f'"model"::"model.w.weight.qs"> : {stored}' in text, (setting, text)
    (p / "build.gradle").write_text(build_file(block % "NOPE"))
    r = gradle(p, "exportIrpa")
    assert r.returncode != 0 and "tapeout { packedConstants = 'NOPE' }: use FAIL, DEQUANTIZE, KEEP or KEEP_ROW_BANDS" \
        in r.stdout + r.stderr
    # A weight one function gathers and another multiplies cannot be in row bands: refused with the remedy in the
    # extension's terms (not the Kotlin API's or the CLI's); KEEP exports it.
    (p / "src/main/kotlin/demo/Mix.kt").write_text(MIX_MODEL)
    mix = "tapeout { model = 'demo.Mix'; moduleName = 'mix'; inlineBelowBytes = 64; packedConstants = '%s' }"
    (p / "build.gradle").write_text(build_file(mix % "KEEP_ROW_BANDS"))
    r = gradle(p, "exportIrpa")
    text = r.stdout + r.stderr
    assert r.returncode != 0 and "the codes 'model.embed.weight.qs' are in row bands in function 'head'" in text, text
    assert "set tapeout { packedConstants = 'KEEP' }, not 'KEEP_ROW_BANDS'" in text, text
    assert "PackedConstantHandling" not in text and "--packed-codes" not in text, text
    (p / "build.gradle").write_text(build_file(mix % "KEEP"))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr


def kotlin_guide_snippet():
    """docs/kotlin.md's "From Kotlin" code block, as a Kotlin file: its imports and classes, then its statements as
    the body of `main`."""
    text = (ROOT / "docs/kotlin.md").read_text()
    block = text.split("## From Kotlin", 1)[1].split("```kotlin\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("val tape"))
    body = "\n".join("    " + line for line in lines[first:])
    return "\n".join(lines[:first]) + "\nfun main() {\n" + body + "\n}\n"


def test_the_kotlin_guides_snippet_exports_a_checkpoint_that_iree_runs(built_jars, tmp_path):
    """docs/kotlin.md's Kotlin snippet, verbatim, in a new project: it opens a checkpoint written by PyPI safetensors
    (as PyTorch names the modules), exports it, and IREE's logits match a numpy forward pass."""
    import numpy as np
    from safetensors.numpy import save_file
    from harness import compile_and_run_iree

    p = project(tmp_path, "apply plugin: 'application'\nmainClassName = 'SnippetKt'\n")
    (p / "src/main/kotlin/demo/Model.kt").unlink()
    (p / "src/main/kotlin/Snippet.kt").write_text(kotlin_guide_snippet())
    vocab, dim, hidden = 1000, 64, 256
    rng = np.random.default_rng(3)
    w = {"embed_tokens.weight": rng.standard_normal((vocab, dim)).astype(np.float32)}
    for i in range(2):
        w[f"layers.{i}.norm.weight"] = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        w[f"layers.{i}.fc1.weight"] = (0.2 * rng.standard_normal((hidden, dim))).astype(np.float32)
        w[f"layers.{i}.fc1.bias"] = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
        w[f"layers.{i}.fc2.weight"] = (0.2 * rng.standard_normal((dim, hidden))).astype(np.float32)
        w[f"layers.{i}.fc2.bias"] = (0.1 * rng.standard_normal(dim)).astype(np.float32)
    save_file(w, str(p / "model.safetensors"))
    r = gradle(p, "run")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout"
    text = (out / "model.mlir").read_text()
    assert 'tapeout.name = "logits"' in text and "stablehlo.transpose %v" not in text.split("gather")[0]
    ids = rng.integers(0, vocab, 8).astype(np.int32)
    [got] = compile_and_run_iree(tmp_path, out / "model.mlir", [out / "model.irpa"], [ids])

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    h = w["embed_tokens.weight"].astype(np.float64)[ids]
    for i in range(2):
        n = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * w[f"layers.{i}.norm.weight"]
        f = gelu(n @ w[f"layers.{i}.fc1.weight"].T + w[f"layers.{i}.fc1.bias"])
        h = h + (f @ w[f"layers.{i}.fc2.weight"].T + w[f"layers.{i}.fc2.bias"]) * 0.5
    want = h @ w["embed_tokens.weight"].T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


USER_MODELS = '''
package demo

import dev.tapeout.*
import java.io.File

class Broken : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val weights: FloatArray? = System.getProperty("demo.none")?.let { FloatArray(1) }
        return helper(weights)
    }

    private fun helper(w: FloatArray?): ExecutionTape {
        val t = ExecutionTape()
        t.output(t.add(t.input("x", 2), t.weight("w", w!!, 2)))  // line 15: the NullPointerException
        return t
    }
}

class Hungry : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val keep = ArrayList<FloatArray>()
        while (true) keep.add(FloatArray(1 shl 20))
    }
}

object Singleton : ModelProvider {
    override fun buildTape() = ExecutionTape()
}

class NeedsArgs(val n: Int) : ModelProvider {
    override fun buildTape() = ExecutionTape()
}

class Colliding : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", 2)
        t.output(t.add(t.add(x, t.weight("layer.bias", FloatArray(2), 2)), t.weight("layer.bias", FloatArray(2) { 1f }, 2)))
        return t
    }
}

/** Two functions over one weight: `prefill` for a sequence, `decode` for one token. */
class Served : ModuleProvider {
    override fun buildTapes(args: List<String>): Map<String, ExecutionTape> {
        val w = FloatArray(3 * 2) { it.toFloat() }
        fun tape(seq: Int) = ExecutionTape().also { t ->
            t.output("y", t.linear(t.input("x", seq, 2), t.weight("model.fc.weight", w, 3, 2)))
        }
        return mapOf("prefill" to tape(4), "decode" to tape(1))
    }
}

/** Its size from args, its scale from a system property, its weights from a checkpoint and a raw file. */
class Configured : ModelProvider {
    override fun buildTape() = buildTape(emptyList())

    override fun buildTape(args: List<String>): ExecutionTape {
        val n = args.single().toInt()
        val scale = System.getProperty("demo.scale")!!.toFloat()
        val t = ExecutionTape()
        val ckpt = SafeTensors.open(File(System.getProperty("demo.checkpoint")))
        val raw = File(System.getProperty("demo.raw")).readBytes()
        val b = FloatArray(n) { java.nio.ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN).getFloat(4 * it) }
        val x = t.input("x", n)
        t.output("y", (x + t.weight("model.w", ckpt["w"]) + t.weight("model.b", b, n)) * scale)
        return t
    }
}

/** Its size checked when the class is initialised, as the tiny LLM example checks its system properties. */
class BadSize : ModelProvider {
    companion object {
        val N: Int = Integer.getInteger("demo.n", 0).also { require(it > 0) { "demo.n must be positive, not $it" } }
    }
    override fun buildTape() = ExecutionTape().also { t -> t.output("y", t.input("x", N)) }
}
'''


def user_project(tmp_path, block):
    p = project(tmp_path, block)
    (p / "src/main/kotlin/demo/User.kt").write_text(USER_MODELS)
    return p


def test_failures_in_the_model_point_at_the_model(built_jars, tmp_path):
    """An exception shows the model's own frames; OutOfMemoryError names maxHeapSize and its value; an object or a
    class without a no-argument constructor says what is required."""
    cases = [
        ("tapeout { model = 'demo.Broken' }",
         ["the model threw java.lang.NullPointerException", "at demo.Broken.helper(User.kt:15)",
          "at demo.Broken.buildTape(User.kt:10)"]),
        ("tapeout { model = 'demo.Hungry'; maxHeapSize = '48m' }",
         ["the export JVM ran out of heap (tapeout { maxHeapSize = '48m' }", "raise maxHeapSize", "at demo.Hungry.buildTape"]),
        ("tapeout { model = 'demo.Singleton' }",
         ["demo.Singleton is a Kotlin object", "needs a class with a public no-argument constructor"]),
        ("tapeout { model = 'demo.NeedsArgs' }", ["demo.NeedsArgs has no public no-argument constructor"]),
        ("tapeout { model = 'demo.BadSize' }",
         ["the model threw java.lang.IllegalArgumentException: demo.n must be positive, not 0 (initializing "
          "demo.BadSize)", "at demo.BadSize.<clinit>(User.kt:"]),
    ]
    for i, (block, needles) in enumerate(cases):
        r = gradle(user_project(tmp_path / str(i), block), "exportIrpa")
        text = r.stdout + r.stderr
        assert r.returncode != 0, text
        for needle in needles:
            assert needle in text, f"{needle!r} missing from:\n{text}"
        assert "Exception in thread" not in text and "\tat org.gradle" not in text, text


def test_key_collisions_are_a_build_warning_and_progress_is_reported(built_jars, tmp_path):
    r = gradle(user_project(tmp_path, "tapeout { model = 'demo.Colliding' }"), "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tapeout: warning: two weights have the key 'layer.bias'; the second" in r.stdout + r.stderr
    assert "renamed 'layer.bias.1'" in r.stdout + r.stderr
    for line in ["tapeout: building the model (demo.Colliding)", "tapeout: exporting to "]:
        assert line in r.stdout, r.stdout


def test_several_models_get_a_task_each_and_exportIrpa_runs_them_all(built_jars, tmp_path):
    block = """tapeout {
    packedConstants = 'DEQUANTIZE'
    models {
        tiny { model = 'demo.Model' }
        half { model = 'demo.Half'; halfConstants = 'WIDEN' }
    }
}"""
    p = user_project(tmp_path, block)
    (p / "src/main/kotlin/demo/Half.kt").write_text(HALF_MODEL)
    r = gradle(p, "exportIrpaTiny")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (p / "build/tapeout-tiny/tiny.mlir").is_file() and not (p / "build/tapeout-half").exists()
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ":exportIrpaTiny UP-TO-DATE" in r.stdout and ":exportIrpaHalf" in r.stdout, r.stdout
    assert ": tensor<32x64xf32>" in (p / "build/tapeout-half/half.mlir").read_text(), "its own setting, WIDEN"
    assert not (p / "build/tapeout").exists(), "no model of its own: the block's task exports nothing"


def test_named_models_inherit_the_blocks_settings_as_on_gradle8(built_jars, tmp_path):
    """test_gradle8.py's named models on Gradle 4.4.1, where the settings are a Property<Map> and 4.4.1's own
    ListProperty: exportIrpaTiny's inputs are the same as there."""
    from test_gradle8 import NAMED_MODELS, TINY_INPUTS
    # String.valueOf: Java's {k=v} form, which the Gradle 8 harness reports (Groovy's own toString writes [k:v]).
    p = project(tmp_path, NAMED_MODELS + "\nafterEvaluate { println 'INPUTS ' + String.valueOf(new TreeMap(exportIrpaTiny.inputs.properties)) }\n")
    r = gradle(p, "help")
    assert r.returncode == 0, r.stdout + r.stderr
    want = "INPUTS {" + ", ".join(f"{k}={v}" for k, v in sorted(TINY_INPUTS.items())) + "}"
    assert want in r.stdout.splitlines(), r.stdout


def test_args_system_properties_and_read_files_reach_the_model_and_rerun_the_export(built_jars, tmp_path):
    """The model gets args and system properties; a checkpoint it opens reruns the export when it changes (no
    setting needed), and so does a file it reads itself once declared in inputFiles."""
    import numpy as np
    from safetensors.numpy import save_file
    p = tmp_path / "p"
    ckpt, raw = tmp_path / "w.safetensors", tmp_path / "b.bin"
    save_file({"w": np.arange(3, dtype=np.float32)}, str(ckpt))
    raw.write_bytes(np.full(3, 0.5, np.float32).tobytes())
    block = f"""tapeout {{
    model = 'demo.Configured'; moduleName = 'conf'; inlineBelowBytes = 0
    args '3'
    systemProperty 'demo.scale', '2.0'
    systemProperty 'demo.checkpoint', '{ckpt}'
    systemProperty 'demo.raw', '{raw}'
    jvmArgs '-XX:+UseSerialGC'
    inputFiles.from('{raw}')
}}"""
    user_project(p, block)
    out = p / "build/tapeout"

    def exported():
        from harness import compile_and_run_iree
        [y] = compile_and_run_iree(tmp_path, out / "conf.mlir", [out / "conf.irpa"], [np.ones(3, np.float32)])
        return y

    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    np.testing.assert_allclose(exported(), (1 + np.arange(3) + 0.5) * 2)
    assert ":exportIrpa UP-TO-DATE" in gradle(p, "exportIrpa").stdout
    save_file({"w": np.arange(3, dtype=np.float32) * 2}, str(ckpt))   # doubled, same size
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0 and ":exportIrpa UP-TO-DATE" not in r.stdout, r.stdout
    np.testing.assert_allclose(exported(), (1 + 2 * np.arange(3) + 0.5) * 2)
    raw.write_bytes(np.full(3, 1.5, np.float32).tobytes())
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0 and ":exportIrpa UP-TO-DATE" not in r.stdout, r.stdout
    np.testing.assert_allclose(exported(), (1 + 2 * np.arange(3) + 1.5) * 2)


def test_a_module_provider_exports_one_module_with_a_function_per_tape(built_jars, tmp_path):
    import numpy as np
    from harness import compile_and_run_iree
    p = user_project(tmp_path / "p", "tapeout { model = 'demo.Served'; moduleName = 'served'; inlineBelowBytes = 0 }")
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tapeout: functions prefill, decode" in r.stdout, r.stdout
    out = p / "build/tapeout"
    text = (out / "served.mlir").read_text()
    assert text.count("util.global private") == 1, text
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    for fn, seq in (("prefill", 4), ("decode", 1)):
        x = np.arange(seq * 2, dtype=np.float32).reshape(seq, 2)
        (tmp_path / fn).mkdir()
        [y] = compile_and_run_iree(tmp_path / fn, out / "served.mlir", [out / "served.irpa"], [x], function=fn)
        np.testing.assert_allclose(y, x @ w.T)


def test_renaming_module_name_removes_the_old_outputs_and_nothing_else(built_jars, tmp_path):
    import json
    block = "tapeout { model = 'demo.Model'; moduleName = '%s'; packedConstants = 'DEQUANTIZE' }"
    p = project(tmp_path, block % "first")
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout"
    first = ["first.mlir", "first.irpa", "first.signature.json", "first.inputs"]
    assert all((out / f).is_file() for f in first), sorted(x.name for x in out.iterdir())
    assert "and first.signature.json" in r.stdout, r.stdout
    sig = json.loads((out / "first.signature.json").read_text())
    assert sig["format"] == "tapeout-signature/1" and sig["module"] == "first"
    [main] = sig["functions"]
    assert main["name"] == "main" and main["arguments"] == [{"name": "x", "dtype": "f32", "shape": [2, 32]}], main
    (out / "notes.txt").write_text("mine")          # a file of the user's in the output directory
    (out / "first.extra").write_text("also mine")    # named like an output, but tapeout never wrote it
    (p / "build.gradle").write_text(build_file(block % "second"))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    left = sorted(x.name for x in out.iterdir())
    assert left == ["first.extra", "notes.txt", "second.inputs", "second.irpa", "second.mlir", "second.signature.json"], left
    # An export into another output directory (as scripts/test does with -PtapeoutOut) keeps the first one's files.
    other = tmp_path / "elsewhere"
    (p / "build.gradle").write_text(build_file(block % "second" + "\ntapeout { outputDir = file('%s') }" % other))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(x.name for x in out.iterdir()) == left, "the outputs in build/tapeout were removed"
    assert (other / "second.mlir").is_file() and (other / "second.irpa").is_file()


CHECKPOINT_MODEL = '''
package demo

import dev.tapeout.*
import java.io.File

class Ckpt : ModelProvider {
    class Net : Module() {
        val fc = child("fc", Linear(4, 3, bias = false))
        val spare = child("spare", Linear(4, 4, bias = false))
        operator fun invoke(x: Tensor) = fc(x)
    }

    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        t.load(SafeTensors.open(File(System.getProperty("demo.checkpoint"))))
        t.output("y", Net()(t.input("x", 2, 4)))
        return t
    }
}
'''


def test_checkpoint_tensors_never_read_and_parameters_never_bound_are_build_warnings(built_jars, tmp_path):
    import numpy as np
    from safetensors.numpy import save_file
    ckpt = tmp_path / "model.safetensors"
    tmp_path.mkdir(parents=True, exist_ok=True)
    save_file({"fc.weight": np.ones((3, 4), np.float32), "head.weight": np.ones((2, 4), np.float32)}, str(ckpt))
    p = project(tmp_path / "p", f"tapeout {{ model = 'demo.Ckpt'; systemProperty 'demo.checkpoint', '{ckpt}' }}")
    (p / "src/main/kotlin/demo/Ckpt.kt").write_text(CHECKPOINT_MODEL)
    r = gradle(p, "exportIrpa")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert "tapeout: warning: 1 checkpoint tensor(s) of model.safetensors were never read by the model: head.weight" in text, text
    assert "tapeout: warning: 1 parameter(s) the model declares have no values (nothing bound them): spare.weight" in text, text


def test_an_unset_kotlin_home_says_how_to_set_it_and_that_a_daemon_may_not_see_it(built_jars, tmp_path):
    import os
    p = project(tmp_path, "tapeout { model = 'demo.Model' }")
    (p / "gradle.properties").write_text("systemProp.gradle-debian-helper.hook.enabled=false\n")
    env = {k: v for k, v in os.environ.items() if k != "KOTLIN_HOME"}
    r = gradle_run([GRADLE, "--offline", "--no-daemon", "--console=plain", "exportIrpa"], cwd=p,
                   capture_output=True, text=True, env=env)
    text = r.stdout + r.stderr
    assert r.returncode != 0, text
    assert "set -PkotlinHome=<kotlinc distribution>" in text and "KOTLIN_HOME" in text, text
    assert "A Gradle daemon started before KOTLIN_HOME was exported may not see it: stop it (gradle --stop)" in text, text


def load_compiled(out, name):
    """`out/<name>.vmfb` loaded in IREE's Python runtime (local-sync) with `out/<name>.irpa` as scope `model`."""
    import iree.runtime as rt
    config = rt.Config("local-sync")
    index = rt.ParameterIndex()
    index.load(str(out / f"{name}.irpa"))
    return rt.load_vm_modules(
        rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model")),
        rt.create_hal_module(config.vm_instance, config.device),
        rt.VmModule.copy_buffer(config.vm_instance, (out / f"{name}.vmfb").read_bytes()), config=config)[-1]


def test_compile_iree_writes_a_vmfb_beside_the_archive_that_runs_and_is_up_to_date(built_jars, tmp_path, monkeypatch):
    """compileIree<Name> per model: a vmfb beside the archive that IREE's runtime runs with it (numbers against
    numpy), UP-TO-DATE on a second run, rerun when a flag changes; a bad target and a missing compiler are build
    errors that say what to set."""
    import numpy as np

    block = """tapeout {
    packedConstants = 'DEQUANTIZE'
    ireeCpu = 'generic'
    models {
        tiny { model = 'demo.Model' }
        half { model = 'demo.Half'; ireeCpuFeatures = '+sse4.2' }
    }
}"""
    p = user_project(tmp_path, block)
    (p / "src/main/kotlin/demo/Half.kt").write_text(HALF_MODEL)
    # A user's project has no .venv: with no iree-compile on PATH either, the error says what to set.
    import os
    path = os.environ.get("PATH", "")
    monkeypatch.setenv("PATH", os.pathsep.join(d for d in path.split(os.pathsep)
                                               if d and not (pathlib.Path(d) / "iree-compile").exists()))
    monkeypatch.delenv("TAPEOUT_IREE_COMPILE", raising=False)
    r = gradle(p, "compileIreeTiny")
    assert r.returncode != 0 and "iree-compile not found" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "TAPEOUT_IREE_COMPILE" in r.stdout + r.stderr
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("TAPEOUT_IREE_COMPILE", str(ROOT / ".venv/bin/iree-compile"))
    r = gradle(p, "compileIreeTiny")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout-tiny"
    vmfb = out / "tiny.vmfb"
    assert vmfb.is_file() and (out / "tiny.irpa").is_file(), sorted(out.iterdir())
    assert not (p / "build/tapeout-half/half.vmfb").exists()

    # The vmfb runs with its archive: x @ w + x @ q^T with q's dequantized codes (scale 1/64, codes 0..31).
    x = np.arange(64, dtype=np.float32).reshape(2, 32) * 0.125
    w = (np.arange(32 * 4, dtype=np.float32) * 0.01).reshape(32, 4)
    q = np.tile(np.arange(32, dtype=np.float32) / 64.0, (4, 1))
    got = np.asarray(load_compiled(out, "tiny").main(x).to_host())
    np.testing.assert_allclose(got, x @ w + x @ q.T, rtol=1e-5)

    r = gradle(p, "compileIree")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ":compileIreeTiny UP-TO-DATE" in r.stdout and ":compileIreeHalf" in r.stdout, r.stdout
    assert (p / "build/tapeout-half/half.vmfb").is_file()
    # A changed flag reruns only that model's compile.
    (p / "build.gradle").write_text(build_file(block.replace("'+sse4.2'", "'+sse4.2,+popcnt'")))
    r = gradle(p, "compileIree")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ":compileIreeTiny UP-TO-DATE" in r.stdout and ":compileIreeHalf UP-TO-DATE" not in r.stdout, r.stdout

    (p / "build.gradle").write_text(build_file(block.replace("ireeCpu = 'generic'", "ireeTargets = ['tpu']")))
    r = gradle(p, "compileIreeTiny")
    assert r.returncode != 0 and "ireeTargets has 'tpu'" in r.stdout + r.stderr, r.stdout + r.stderr
    (p / "build.gradle").write_text(build_file(block.replace("ireeCpu = 'generic'", "ireeCompiler = '/nope/iree-compile'")))
    r = gradle(p, "compileIreeTiny")
    assert r.returncode != 0 and "ireeCompiler = '/nope/iree-compile'" in r.stdout + r.stderr, r.stdout + r.stderr


Q8_LINEAR_MODEL = '''
package demo

import dev.tapeout.*

class Q8Linear : ModelProvider {
    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(1, 32))
        // 96 rows of one Q8_0 block each: an f16 scale (0.5, 1, 0.25, 2), then 32 signed codes.
        val scales = intArrayOf(0x3800, 0x3C00, 0x3400, 0x4000)
        val bytes = ByteArray(96 * 34)
        for (o in 0 until 96) {
            bytes[o * 34] = (scales[o % 4] and 0xFF).toByte()
            bytes[o * 34 + 1] = (scales[o % 4] shr 8).toByte()
            for (i in 0 until 32) bytes[o * 34 + 2 + i] = ((o * 7 + i) % 17 - 8).toByte()
        }
        t.output(t.linear(x, t.packedWeight("model.fc.weight", bytes, "Q8_0", 96, 32)))
        return t
    }
}
'''


def test_compile_iree_passes_the_exports_tuning_spec_to_a_cpu_compile_unless_the_user_names_one(built_jars, tmp_path, monkeypatch):
    """A Q8_0 linear of 96 outputs kept packed at one row: the export writes `<name>.tuning.mlir` and compileIree
    passes it to iree-compile (the flag in the logged command); a spec named in ireeFlags wins; the vmfb runs with
    the archive and equals numpy. With `tuning = false`, or a non-CPU target, the export writes no spec."""
    import numpy as np

    monkeypatch.setenv("TAPEOUT_IREE_COMPILE", str(ROOT / ".venv/bin/iree-compile"))
    block = "tapeout { model = 'demo.Q8Linear'; moduleName = 'lin'; packedConstants = 'KEEP'%s }"
    p = project(tmp_path, block % "")
    (p / "src/main/kotlin/demo/Q8Linear.kt").write_text(Q8_LINEAR_MODEL)
    r = gradle(p, "compileIree", "--info")
    assert r.returncode == 0, r.stdout + r.stderr
    out = p / "build/tapeout"
    spec = out / "lin.tuning.mlir"
    assert spec.is_file(), sorted(out.iterdir())
    assert f"--iree-codegen-tuning-spec-path={spec}, --mlir-disable-threading" in r.stdout, r.stdout
    module = load_compiled(out, "lin")
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 32)
    o, i = np.arange(96)[:, None], np.arange(32)[None, :]
    w = np.array([0.5, 1.0, 0.25, 2.0])[o % 4] * ((o * 7 + i) % 17 - 8)
    np.testing.assert_allclose(np.asarray(module.main(x).to_host()), x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)

    own = tmp_path / "own.mlir"
    own.write_text(spec.read_text())
    (p / "build.gradle").write_text(build_file(block % f"; ireeFlags = ['--iree-codegen-tuning-spec-path={own}', '--mlir-disable-threading']"))
    r = gradle(p, "compileIree", "--info")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"--iree-codegen-tuning-spec-path={own}" in r.stdout and f"tuning-spec-path={spec}" not in r.stdout, r.stdout

    # tuning = false: the portable lowering, no spec (the stale one removed), compiled with IREE's defaults, the same
    # numbers. ireeTargets naming Vulkan writes Vulkan's forms (the codes as 32-bit words), and with tuning = false the
    # portable lowering, byte for byte.
    (p / "build.gradle").write_text(build_file(block % "; tuning = false"))
    r = gradle(p, "compileIree", "--info")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not spec.exists() and "tuning-spec-path" not in r.stdout, r.stdout
    np.testing.assert_allclose(np.asarray(load_compiled(out, "lin").main(x).to_host()), x.astype(np.float64) @ w.T,
                               rtol=1e-5, atol=1e-5)
    portable = (out / "lin.mlir").read_bytes()
    (p / "build.gradle").write_text(build_file(block % "; ireeTargets = ['vulkan']"))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    vulkan = (out / "lin.mlir").read_text()
    assert not spec.exists() and "stablehlo.shift_left" in vulkan and vulkan.encode() != portable, vulkan
    (p / "build.gradle").write_text(build_file(block % "; ireeTargets = ['vulkan']; tuning = false"))
    r = gradle(p, "exportIrpa")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not spec.exists() and (out / "lin.mlir").read_bytes() == portable


def test_the_serving_guides_snippet_serves_the_tiny_llm_from_kotlin(built_jars, tmp_path, monkeypatch):
    """docs/serving.md's "Serving from the JVM" block, verbatim, in a new project that depends only on the jvm-iree jar:
    it compiles examples/tiny-llm's export (found through TAPEOUT_IREE_COMPILE, as a user outside this repository
    would set it) and serves prefill from Kotlin; its next tokens and logits equal IREE's Python runtime's on the
    same vmfb and archive."""
    import re
    import numpy as np
    import iree.runtime as rt

    text = (ROOT / "docs/serving.md").read_text()
    # The serving guide's Serve.kt, verbatim (test_publish_serving.py runs it from the published repository instead).
    snippet = text.split("## Serving from the JVM", 1)[1].split("```kotlin\n", 1)[1].split("```", 1)[0]
    assert snippet.startswith("// src/main/kotlin/Serve.kt") and "fun main()" in snippet, snippet
    p = tmp_path / "serve"
    p.mkdir()
    (p / "settings.gradle").write_text("rootProject.name = 'serve'\n")
    (p / "gradle.properties").write_text("systemProp.gradle-debian-helper.hook.enabled=false\n"
                                         f"kotlinHome={ROOT}/jvm/tools/node_modules/kotlin-compiler\n")
    (p / "build.gradle").write_text(f"""
buildscript {{
    dependencies {{ classpath files('{ROOT}/buildSrc/build/libs/buildSrc.jar') }}
}}
apply plugin: 'dev.tapeout.kotlin'
apply plugin: 'application'
mainClassName = 'ServeKt'
dependencies {{
    implementation files('{ROOT}/jvm-iree/build/libs/jvm-iree-0.1.0.jar', "${{kotlinHomeDir}}/lib/kotlin-stdlib.jar")
}}
""")
    (p / "src/main/kotlin").mkdir(parents=True)
    (p / "src/main/kotlin/Serve.kt").write_text(snippet)
    out = p / "build/tapeout"
    r = gradle_run([GRADLE, "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--quiet",
                    ":examples:tiny-llm:exportIrpa", f"-PtapeoutOut={out}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    monkeypatch.setenv("TAPEOUT_IREE_COMPILE", str(ROOT / ".venv/bin/iree-compile"))
    r = gradle(p, "run")
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"next tokens \[([-0-9, ]+)\], logits \[([-0-9.eE, ]+)\]", r.stdout)
    assert m, r.stdout
    kotlin_next = [int(t) for t in m.group(1).split(",")]
    kotlin_logits = [float(x) for x in m.group(2).split(",")]
    assert (out / "tiny_llm.vmfb").is_file(), "compiled beside the archive"

    config = rt.Config("local-sync")
    index = rt.ParameterIndex()
    index.load(str(out / "tiny_llm.irpa"))
    mod = rt.load_vm_modules(rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model")),
                             rt.create_hal_module(config.vm_instance, config.device),
                             rt.VmModule.copy_buffer(config.vm_instance, (out / "tiny_llm.vmfb").read_bytes()),
                             config=config)[-1]
    res = mod.prefill(np.array([3, 14, 15, 9], np.int32), np.arange(4, dtype=np.int32))
    assert kotlin_next == np.asarray(res[1].to_host()).tolist()
    np.testing.assert_allclose(kotlin_logits, np.asarray(res[0].to_host()).reshape(-1)[:3], rtol=1e-6, atol=1e-6)
