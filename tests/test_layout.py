"""The layout a reader relies on: a small core at the root, short module docstrings, no pointers
outside the project, no import circles (registries name their entries' modules as strings), and
README's walk through the code naming functions that exist.

    python -m pytest -q tests/test_layout.py
"""
import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = ["train.py", "config.py", "rollout.py", "grpo.py", "prover.py", "judge.py", "verify.py", "envs.py"]
FOLDERS = ["methods", "sims", "lab", "infra", "bench", "tests"]


def project_files(ext=".py"):
    out = []
    for d in ["."] + FOLDERS:
        base = os.path.join(ROOT, d)
        for f in sorted(os.listdir(base)):
            if f.endswith(ext) and os.path.isfile(os.path.join(base, f)):
                out.append(os.path.normpath(os.path.join(d, f)))
    return out


def test_root_holds_the_core_and_at_most_two_more():
    root = sorted(f for f in os.listdir(ROOT) if f.endswith(".py"))
    assert set(CORE) <= set(root) and len(root) <= 10, root


def test_module_sizes_and_docstrings():
    for f in project_files():
        if f.startswith("tests"):
            continue
        src = open(os.path.join(ROOT, f)).read()
        n = src.count("\n")
        if not f.startswith("sims"):            # the simulators are whole games; everything else is short
            assert n <= 500, f"{f}: {n} lines"
        doc = ast.get_docstring(ast.parse(src), clean=False)
        if f.endswith("__init__.py") and not src.strip():
            continue
        assert doc, f"{f}: no module docstring"
        assert doc.count("\n") + 1 <= 40, f"{f}: module docstring of {doc.count(chr(10)) + 1} lines"
    assert open(os.path.join(ROOT, "train.py")).read().count("\n") <= 250


def test_the_papers_procedure_fits_on_one_screen():
    tree = ast.parse(open(os.path.join(ROOT, "prover.py")).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "credit")
    assert fn.end_lineno - fn.lineno + 1 <= 60


def test_nothing_points_outside_the_project():
    """No DESIGN file, reference notes, shared folder or issue number: a fork has none of them."""
    bad = re.compile(r"DESIGN|\breference/|\bshared/|\bissues? ?-?#\d+|\(#\d+\)")
    hits = []
    for f in project_files() + project_files(".md") + [".ci/run", ".ci/vllm_env.sh", "requirements.txt"]:
        if f.endswith("test_layout.py"):
            continue
        for k, line in enumerate(open(os.path.join(ROOT, f)), 1):
            if bad.search(line):
                hits.append(f"{f}:{k}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def imports_of(path):
    """Project modules a file imports at module level or inside functions ('pkg.mod' or 'mod')."""
    names = set()
    for node in ast.walk(ast.parse(open(os.path.join(ROOT, path)).read())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_no_import_circles():
    mods = {}
    for f in project_files():
        if f.startswith(("tests", "bench")):
            continue
        mods[f[:-3].replace(os.sep, ".").removesuffix(".__init__")] = f
    graph = {m: {n for n in imports_of(f) if n in mods and n != m} for m, f in mods.items()}
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()
    for m in sorted(graph):
        visit(m)
    assert not cycles, cycles
    for leaf in ("infra.policy", "infra.chat", "infra.jsonscan"):     # leaves: usable alone in any script
        assert graph[leaf] <= {"infra.jsonscan"}, (leaf, graph[leaf])


def test_help_parses_without_torch(tmp_path):
    """`python train.py --help` before anything heavy: it works where torch cannot be imported."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch is not installed here')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    p = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr[-500:]
    assert "--method" in p.stdout and "prover-plus" in p.stdout
    p = subprocess.run([sys.executable, "train.py", "--method", "nope"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "invalid choice: 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_readme_walk_names_functions_that_exist():
    """README's "Read the code" section: every `file.py` → `function` it names exists there."""
    text = open(os.path.join(ROOT, "README.md")).read()
    sec = text[text.index("## Read the code"):]
    sec = sec[:sec.index("\n## ", 3)]
    pairs = re.findall(r"`([\w/]+\.py)` → `(\w+)`", sec)
    assert len(pairs) >= 6, pairs
    for path, name in pairs:
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        defs = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert name in defs, f"README names {path} → {name}, which {path} does not define"


def test_method_table_in_readme_is_the_registry():
    """README's method table is the registry's own rendering (methods.markdown_table)."""
    import methods
    assert methods.markdown_table() in open(os.path.join(ROOT, "README.md")).read()


def test_the_guides_stay_short():
    """README is a guide (≤ 12 KB) and results/README.md an index of headline figures (≤ 8 KB)."""
    assert os.path.getsize(os.path.join(ROOT, "README.md")) <= 12 * 1024
    assert os.path.getsize(os.path.join(ROOT, "results", "README.md")) <= 8 * 1024
