"""The guides a reader follows: every relative link resolves on a fresh clone, and docs/metrics.md
names the keys the code writes (a real run's keys: tests/test_report.py, tests/test_baselines.py).

    python -m pytest -q tests/test_docs.py
"""
import glob
import os
import re
import subprocess

import pytest

from helpers import ROOT, documented_keys

GUIDES = ["README.md", "LABS.md", os.path.join("results", "README.md")] + \
    sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def tracked() -> set[str] | None:
    """Paths git tracks (what a fresh clone holds), or None outside a git checkout."""
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return set(r.stdout.splitlines()) if r.returncode == 0 and r.stdout else None


def relative_links(doc: str) -> list[str]:
    text = re.sub(r"```.*?```", "", open(os.path.join(ROOT, doc)).read(), flags=re.S)   # code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_every_relative_link_in_the_guides_resolves():
    files = tracked()
    bad, n = [], 0
    for doc in GUIDES:
        for target in relative_links(doc):
            n += 1
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path)) if path else os.path.join(ROOT, doc)
            rel = os.path.relpath(full, ROOT)
            if not os.path.exists(full):
                bad.append(f"{doc}: {target} (no such file)")
            elif files is not None and rel not in files and not any(f.startswith(rel + os.sep) for f in files):
                bad.append(f"{doc}: {target} (not tracked by git: a fresh clone lacks it)")
            elif anchor and full.endswith(".md"):
                heads = {slug(h) for h in re.findall(r"^#+ (.*)$", open(full).read(), flags=re.M)}
                if anchor not in heads:
                    bad.append(f"{doc}: {target} (no heading with that anchor)")
    assert n >= 20, f"only {n} links found: the link pattern no longer matches the guides"
    assert not bad, "\n".join(bad)


def test_the_link_check_sees_a_broken_link(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("[a](a.md) [b](https://x.org/b.md) [c](#top)\n```\n[d](d.md)\n```\n")
    assert relative_links(str(doc)) == ["a.md", "#top"]
    assert slug("The lab's metrics (`lab/metrics.py`)") == "the-labs-metrics-labmetricspy"


def test_every_metric_key_in_the_doc_is_written_by_the_code():
    """A renamed or removed key leaves the doc: each documented key is a string in the code that
    writes the rows — whole, or its name within the namespace (a counted key: "credited"; a
    per-name key: "dropped/{...}"; an averaged list: "bonus" → prover/bonus_mean)."""
    keys = documented_keys()
    assert len(keys) >= 60, len(keys)
    src = ""
    for d in (".", "methods", "lab", "infra"):
        for f in glob.glob(os.path.join(ROOT, d, "*.py")):
            src += open(f).read()
    missing = []
    for k in keys:
        fixed, _, rest = k.partition("/<")
        name = fixed.split("/", 1)[-1]
        names = {name, name.removesuffix("_mean")}
        if not (f'"{fixed}' in src or any(f"{q}{n}{q if not rest else '/'}" in src for n in names for q in "\"'")):
            missing.append(k)
    assert not missing, f"docs/metrics.md names keys no code writes: {missing}"


@pytest.mark.parametrize("key, ok", [("train/success", True), ("eval/success/keydoor", True),
                                     ("prover/dropped/bounds", True), ("train/nope", False), ("eval/success", True)])
def test_documented_key_patterns(key, ok):
    from helpers import undocumented
    assert (undocumented([key]) == []) == ok
