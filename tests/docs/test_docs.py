"""The documentation as a reader meets it: every relative link in README.md and docs/ reaches a file and, with an
anchor, a heading of that file (GitHub's slugs); the README stays short; dated work-log references stay in the
history (docs/benchmarks/) and out of the README, the guides and the code."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    text = FENCE.sub("", path.read_text())
    seen, out = {}, set()
    for line in text.splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return out


def documents():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading '{anchor}' in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_readme_is_read_in_two_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to a guide in docs/"


def test_work_log_references_live_only_in_the_history():
    """'session N' and links into dated headings belong to docs/benchmarks/, not to the README, the guides or code."""
    paths = ["README.md", *[str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")],
             "rust", "jvm", "jvm-iree", "jvm-generate", "jvm-transformers", "gradle", "examples"]
    found = subprocess.run(["grep", "-rnE", r"[Ss]ession [0-9]|\.md#[a-z0-9-]*20[0-9]{2}-[0-9]{2}-[0-9]{2}", *paths],
                           cwd=ROOT, capture_output=True, text=True).stdout
    assert found == "", found
