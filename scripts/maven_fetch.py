#!/usr/bin/env python3
"""Fetches Maven artifacts and their runtime dependencies from Maven Central into a folder laid out as a Maven
repository, and writes the jars' paths (relative to DEST) as a classpath file: how scripts/setup gets the Gradle 8.10 harness
(tests/gradle/gradle8) without a Maven or a Gradle that can resolve it.

    maven_fetch.py [--gradle-api VERSION] DEST CLASSPATH_FILE group:artifact:version ...

It reads POMs the way Gradle does for a consumer: compile and runtime dependencies (not test, provided, system or
optional ones), exclusions, properties, parent POMs, dependencyManagement (with imported BOMs) for versions a
dependency leaves out, and the highest version where several are asked for. Files already in DEST are not
downloaded again, so a second run only checks; a file is written under a temporary name and renamed, so an
interrupted run leaves no half file behind.

With --gradle-api, a Gradle plugin published with a jar per Gradle version (the Kotlin Gradle plugin: variants with
the attribute org.gradle.plugin.api-version in its Gradle module metadata) contributes the jar Gradle VERSION would
pick, the variant of the highest API version not above it; its POM's default jar is for the oldest Gradle it
supports, which Gradle 8 would flag for deprecated APIs.
"""
import json
import re
import sys
import pathlib
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

CENTRAL = "https://repo1.maven.org/maven2"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}
SCOPES = {None, "compile", "runtime"}


def fetch(dest, group, artifact, version, ext, classifier=None):
    """The path of group:artifact:version's file with extension `ext` in DEST, downloaded when absent."""
    name = f"{artifact}-{version}" + (f"-{classifier}" if classifier else "") + f".{ext}"
    rel = f"{group.replace('.', '/')}/{artifact}/{version}/{name}"
    path = dest / rel
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        print(f"maven_fetch: {rel}", file=sys.stderr)
        with urllib.request.urlopen(f"{CENTRAL}/{rel}", timeout=120) as r, open(tmp, "wb") as f:
            while chunk := r.read(1 << 20):
                f.write(chunk)
        tmp.rename(path)
    return path


def text(el, tag):
    found = el.find(f"m:{tag}", NS)
    return found.text.strip() if found is not None and found.text else None


class Pom:
    """One POM with its parents' properties and dependencyManagement merged in."""

    def __init__(self, dest, group, artifact, version):
        root = ET.parse(fetch(dest, group, artifact, version, "pom")).getroot()
        parent = root.find("m:parent", NS)
        self.parent = None
        if parent is not None:
            self.parent = Pom(dest, text(parent, "groupId"), text(parent, "artifactId"), text(parent, "version"))
        self.props = dict(self.parent.props) if self.parent else {}
        self.group = text(root, "groupId") or (self.parent.group if self.parent else group)
        self.version = text(root, "version") or (self.parent.version if self.parent else version)
        self.packaging = text(root, "packaging") or "jar"
        self.props.update({"project.groupId": self.group, "project.version": self.version, "pom.version": self.version,
                           "project.artifactId": artifact})
        if self.parent:
            self.props.update({"project.parent.version": self.parent.version, "project.parent.groupId": self.parent.group})
        props = root.find("m:properties", NS)
        for p in props if props is not None else []:
            self.props[p.tag.split("}")[1]] = (p.text or "").strip()
        self.managed = dict(self.parent.managed) if self.parent else {}
        for d in root.findall("m:dependencyManagement/m:dependencies/m:dependency", NS):
            g, a, v = self.sub(text(d, "groupId")), self.sub(text(d, "artifactId")), self.sub(text(d, "version"))
            if text(d, "scope") == "import":
                self.managed.update(Pom(dest, g, a, v).managed)
            else:
                self.managed[(g, a)] = v
        self.deps = []
        for d in root.findall("m:dependencies/m:dependency", NS):
            if text(d, "scope") not in SCOPES or text(d, "optional") == "true":
                continue
            g, a = self.sub(text(d, "groupId")), self.sub(text(d, "artifactId"))
            v = self.sub(text(d, "version")) or self.managed.get((g, a))
            if v is None:
                raise SystemExit(f"maven_fetch: {group}:{artifact}:{version} names {g}:{a} without a version")
            excl = {(text(e, "groupId"), text(e, "artifactId")) for e in d.findall("m:exclusions/m:exclusion", NS)}
            self.deps.append((g, a, v, text(d, "type") or "jar", self.sub(text(d, "classifier")), excl))

    def sub(self, s):
        """`s` with its ${property} references replaced (repeatedly: a property may name another)."""
        for _ in range(10):
            if s is None or "${" not in s:
                return s
            s = re.sub(r"\$\{([^}]+)\}", lambda m: self.props.get(m.group(1), m.group(0)), s)
        return s


def plugin_variant(dest, group, artifact, version, gradle_api):
    """The classifier of the runtime jar Gradle `gradle_api` picks among the plugin's per-Gradle variants, or None
    (no module metadata, or no such variants)."""
    absent = dest / f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.module.absent"
    if absent.is_file():
        return None
    try:
        module = json.loads(fetch(dest, group, artifact, version, "module").read_text())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            absent.touch()   # so that a run with everything fetched asks Maven Central nothing
            return None
        raise
    best = None
    for v in module.get("variants", []):
        attrs = v.get("attributes", {})
        api = attrs.get("org.gradle.plugin.api-version")
        if api and attrs.get("org.gradle.usage") == "java-runtime" and attrs.get("org.gradle.category", "library") == "library" \
                and version_key(api) <= version_key(gradle_api) and (best is None or version_key(api) > version_key(best[0])):
            [f] = [f for f in v["files"] if f["name"].endswith(".jar")]
            best = (api, f["name"][len(f"{artifact}-{version}-"):-len(".jar")])
    return best[1] if best else None


def version_key(v):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.-]", v)]


def excluded(ga, exclusions):
    return any(g in (ga[0], "*") and a in (ga[1], "*") for g, a in exclusions)


def resolve(dest, roots, gradle_api=None):
    """The jars of `roots` and their runtime closure, one version per group:artifact (the highest asked for)."""
    chosen = {}
    while True:
        asked, order, seen = {}, [], set()
        queue = [(g, a, v, "jar", None, frozenset()) for g, a, v in roots]
        while queue:
            g, a, v, kind, classifier, excl = queue.pop(0)
            asked.setdefault((g, a), set()).add(v)
            v = chosen.get((g, a), v)
            if (g, a, v, classifier) in seen:
                continue
            seen.add((g, a, v, classifier))
            pom = Pom(dest, g, a, v)
            if kind != "pom" and pom.packaging != "pom":
                order.append((g, a, v, classifier))
            for dg, da, dv, dkind, dcls, dexcl in pom.deps:
                if not excluded((dg, da), excl):
                    queue.append((dg, da, dv, dkind, dcls, excl | dexcl))
        highest = {ga: max(vs, key=version_key) for ga, vs in asked.items()}
        if highest == chosen:
            break
        chosen = highest
    jars = {}
    for g, a, v, classifier in order:
        if v == chosen[(g, a)]:
            if classifier is None and gradle_api:
                classifier = plugin_variant(dest, g, a, v, gradle_api)
            jars.setdefault((g, a), fetch(dest, g, a, v, "jar", classifier))
    return list(jars.values())


def main():
    argv = sys.argv[1:]
    gradle_api = None
    if argv[:1] == ["--gradle-api"]:
        gradle_api, argv = argv[1], argv[2:]
    if len(argv) < 3:
        raise SystemExit(__doc__)
    dest, out = pathlib.Path(argv[0]).resolve(), pathlib.Path(argv[1])
    roots = [tuple(c.split(":")) for c in argv[2:]]
    jars = resolve(dest, roots, gradle_api)
    tmp = out.with_name(out.name + ".part")
    tmp.write_text("".join(f"{j.relative_to(dest)}\n" for j in jars))
    tmp.rename(out)
    print(f"maven_fetch: {len(jars)} jars listed in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
