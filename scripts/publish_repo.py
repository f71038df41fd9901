"""Writes the Maven repository scripts/publish describes from the built jars (jvm/build/libs, jvm-iree/build/libs,
jvm-transformers/build/libs, jvm-generate/build/libs, buildSrc/build/libs).

    python3 scripts/publish_repo.py DIR

Each artifact gets its POM, `.sha1`/`.md5` checksums and a `maven-metadata.xml`; files are written to a
temporary name and renamed, so a reader never sees half a jar. Re-publishing the same version replaces it.
"""
import hashlib
import html
import io
import os
import pathlib
import re
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUP = "dev.tapeout"
# The libraries are compiled for Kotlin 2.0 (-api-version 2.0): their POMs bring the 2.0.21 stdlib from Maven Central.
STDLIB = ("org.jetbrains.kotlin", "kotlin-stdlib", "2.0.21", "compile")
# What jvm-generate/build.gradle compiles against (scripts/setup fetches the same version).
DJL_TOKENIZERS = ("ai.djl.huggingface", "tokenizers", "0.38.0", "compile")
PLUGIN_JAR = ROOT / "buildSrc/build/libs/buildSrc.jar"
PLUGINS = {"dev.tapeout": "dev.tapeout.gradle.TapeoutPlugin", "dev.tapeout.kotlin": "dev.tapeout.gradle.KotlinPlugin"}


def version() -> str:
    m = re.search(r"version\s*=\s*'([^']+)'", (ROOT / "build.gradle").read_text())
    if not m:
        sys.exit("publish: no version = '…' in build.gradle")
    return m.group(1)


def write(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    for algo in ("sha1", "md5"):
        side = path.with_name(path.name + "." + algo)
        side.with_name(side.name + ".tmp").write_text(hashlib.new(algo, data).hexdigest())
        os.replace(side.with_name(side.name + ".tmp"), side)


def pom(group, artifact, ver, packaging="jar", description="", deps=()):
    dep_xml = "".join(
        f"\n    <dependency>\n      <groupId>{g}</groupId>\n      <artifactId>{a}</artifactId>\n"
        f"      <version>{v}</version>\n      <scope>{scope}</scope>\n    </dependency>" for g, a, v, scope in deps)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>{group}</groupId>
  <artifactId>{artifact}</artifactId>
  <version>{ver}</version>
  <packaging>{packaging}</packaging>
  <description>{html.escape(description)}</description>
  <licenses>
    <license><name>Apache-2.0</name><url>https://www.apache.org/licenses/LICENSE-2.0</url></license>
  </licenses>
  <dependencies>{dep_xml}
  </dependencies>
</project>
""".encode()


def metadata(repo, group, artifact, ver):
    d = repo / group.replace(".", "/") / artifact
    versions = sorted({p.name for p in d.iterdir() if p.is_dir()} | {ver}) if d.is_dir() else [ver]
    body = "".join(f"\n      <version>{v}</version>" for v in versions)
    write(d / "maven-metadata.xml", f"""<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>{group}</groupId>
  <artifactId>{artifact}</artifactId>
  <versioning>
    <latest>{ver}</latest>
    <release>{ver}</release>
    <versions>{body}
    </versions>
  </versioning>
</metadata>
""".encode())


def publish(repo, group, artifact, ver, files, pom_bytes):
    d = repo / group.replace(".", "/") / artifact / ver
    for classifier, data in files.items():
        write(d / f"{artifact}-{ver}{'-' + classifier if classifier else ''}.jar", data)
    write(d / f"{artifact}-{ver}.pom", pom_bytes)
    metadata(repo, group, artifact, ver)


def zip_dir(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for name, data in files:
            z.writestr(name, data)
    return buf.getvalue()


DECL = re.compile(r"^\s*((?:public |open |abstract |sealed |data |enum |inline |infix |operator |const |override )*)"
                  r"(class|interface|object|fun|val|var)\b(.*)$")


def kdoc_html(sources, package="dev.tapeout"):
    """A KDoc reference of `package`: every public declaration with its doc comment, file by file."""
    parts = []
    for rel, text in sources:
        items = []
        for m in re.finditer(r"/\*\*(.*?)\*/\s*\n([^\n]*)", text, re.S):
            decl = m.group(2)
            if not DECL.match(decl) or re.search(r"\b(private|internal)\b", decl):
                continue
            doc = "\n".join(line.strip().lstrip("*").strip() for line in m.group(1).splitlines()).strip()
            items.append(f"<dt><code>{html.escape(decl.strip().rstrip('{').strip())}</code></dt>"
                         f"<dd>{html.escape(doc).replace(chr(10) + chr(10), '<p>')}</dd>")
        if items:
            parts.append(f"<h2>{html.escape(rel)}</h2>\n<dl>\n" + "\n".join(items) + "\n</dl>")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{package} API</title></head><body>\n"
            f"<h1>{package}</h1>\n" + "\n".join(parts) + "\n</body></html>\n").encode()


def library_jar(project, native):
    """The newest `<project>/build/libs/<project>-*.jar`, checked to carry its native library `native` (if any)."""
    jars = sorted((ROOT / project / "build/libs").glob(f"{project}-*.jar"))
    if not jars:
        sys.exit(f"publish: {project}/build/libs has no jar (gradle :{project}:jar failed?)")
    data = jars[-1].read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        if native is not None and f"native/linux-x86-64/{native}" not in z.namelist():
            sys.exit(f"publish: {jars[-1]} has no native/linux-x86-64/{native}")
    return data


def publish_library(repo, project, artifact, ver, native, package, description, deps=()):
    """A Kotlin library of this repository: its jar (with the native library), sources and KDoc jars, a POM with
    kotlin-stdlib and `deps`."""
    library = library_jar(project, native)
    src_root = ROOT / project / "src/main/kotlin"
    sources = [(str(p.relative_to(src_root)), p.read_text()) for p in sorted(src_root.rglob("*.kt"))]
    publish(repo, GROUP, artifact, ver, {
        "": library,
        "sources": zip_dir([(rel, text.encode()) for rel, text in sources]),
        "javadoc": zip_dir([("index.html", kdoc_html(sources, package))]),
    }, pom(GROUP, artifact, ver, description=description, deps=[STDLIB, *deps]))


def main(repo: pathlib.Path) -> None:
    ver = version()
    if not PLUGIN_JAR.is_file():
        sys.exit(f"publish: {PLUGIN_JAR} is missing (run scripts/setup, then scripts/publish)")
    publish_library(repo, "jvm", "tapeout", ver, "libtapeout_jni.so", "dev.tapeout",
                    "tapeout: export traced Kotlin models to StableHLO + IREE parameter archives (Kotlin library "
                    "with its native library)")
    publish_library(repo, "jvm-iree", "tapeout-iree", ver, "libtapeout_iree_jni.so", "dev.tapeout.iree",
                    "dev.tapeout.iree: serve IREE 3.13 modules in the JVM's process, parameters memory-mapped "
                    "(Kotlin library with IREE's runtime in its native library)")
    # The families need the exporter only (its native library comes with dev.tapeout:tapeout), not IREE.
    publish_library(repo, "jvm-transformers", "tapeout-transformers", ver, None, "dev.tapeout.transformers",
                    "dev.tapeout.transformers: causal-LM families (Llama, Mistral, Qwen2/3, Phi-3, Gemma 2/3) read "
                    "from transformers checkpoints and GGUF files, exported with tapeout",
                    deps=[(GROUP, "tapeout", ver, "compile")])
    # Pure Kotlin over tapeout-iree; the tokenizers' native library comes inside DJL's jar from Maven Central.
    publish_library(repo, "jvm-generate", "tapeout-generate", ver, None, "dev.tapeout.generate",
                    "dev.tapeout.generate: a Hugging Face tokenizer.json and generate() (greedy, sampling, stop "
                    "tokens and strings) over a served tapeout-iree module, its KV cache kept on the device",
                    deps=[(GROUP, "tapeout-iree", ver, "compile"), DJL_TOKENIZERS])
    publish(repo, GROUP, "tapeout-gradle-plugin", ver, {"": PLUGIN_JAR.read_bytes()},
            pom(GROUP, "tapeout-gradle-plugin", ver, description="Gradle plugins dev.tapeout and dev.tapeout.kotlin"))
    # Plugin markers: what `plugins { id '<id>' version '<v>' }` resolves, pointing at the plugins' jar.
    for plugin_id in PLUGINS:
        marker = f"{plugin_id}.gradle.plugin"
        d = repo / plugin_id.replace(".", "/") / marker / ver
        write(d / f"{marker}-{ver}.pom", pom(plugin_id, marker, ver, packaging="pom",
                                             description=f"Plugin marker of {plugin_id}",
                                             deps=[(GROUP, "tapeout-gradle-plugin", ver, "compile")]))
        metadata(repo, plugin_id, marker, ver)
    print(f"publish: dev.tapeout:tapeout:{ver}, dev.tapeout:tapeout-iree:{ver}, dev.tapeout:tapeout-transformers:{ver}, "
          f"dev.tapeout:tapeout-generate:{ver}, "
          f"dev.tapeout:tapeout-gradle-plugin:{ver} and the markers of {', '.join(PLUGINS)} in {repo.resolve()}")
    print(f"publish: use it with maven {{ url '{repo.resolve().as_uri()}' }} and mavenCentral() (for kotlin-stdlib; "
          f"docs/gradle.md)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: publish_repo.py DIR")
    main(pathlib.Path(sys.argv[1]))
