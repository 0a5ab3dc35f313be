"""The layout a reader relies on: a small core at the root, short module docstrings, no pointers
outside the project, no file or function named in a comment or guide that does not exist (bench/
and tests/ included), no import circles (registries name their entries' modules as strings), and
README's walk through the code naming functions that exist.

    python -m pytest -q tests/test_layout.py
"""
import ast
import io
import os
import re
import subprocess
import sys
import tokenize

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
    bad = re.compile(r"DESIGN|\breference/|\bshared/|\bissues? ?-?#?\d+|\(#\d+\)")
    hits = []
    for f in prose_files() + [".ci/run", ".ci/vllm_env.sh", "requirements.txt"]:
        if f.endswith("test_layout.py"):
            continue
        for k, line in enumerate(open(os.path.join(ROOT, f)), 1):
            if bad.search(line):
                hits.append(f"{f}:{k}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


# Files of other projects that comments name for where a rule comes from (upstream code)
UPSTREAM = {"goal.py", "qa_em.py", "generation.py", "goal_library.py", "constants.py", "core_gigpo.py",
            "sampler.py", "retrieval_server.py"}


def cited_text(path):
    """(line, text) of what a reader reads as prose: a .md file whole; a .py file's comments and
    strings (docstrings, help texts)."""
    src = open(os.path.join(ROOT, path)).read()
    if path.endswith(".md"):
        yield from enumerate(src.splitlines(), 1)
        return
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.string.endswith('"""')):
            for k, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + k, line


def prose_files():
    docs = [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]
    return project_files() + project_files(".md") + docs


def test_every_file_a_comment_names_exists():
    """A .py file named in a docstring, comment or guide is a file of the project (by its path, or
    by its name alone when the folder is clear from the context) or an upstream file named as a source."""
    names = {os.path.basename(f) for f in project_files()}
    pat = re.compile(r"(?<![\w./\\-])((?:[\w.-]+/)*[\w-]+\.py)\b")
    hits = []
    for f in prose_files():
        for k, line in cited_text(f):
            for m in pat.finditer(line):
                p = m.group(1)
                if (os.path.exists(os.path.join(ROOT, p)) or os.path.exists(os.path.join(ROOT, os.path.dirname(f), p))
                        or ("/" not in p and p in names) or os.path.basename(p) in UPSTREAM):
                    continue
                hits.append(f"{f}:{k}: {p}")
    assert not hits, "names of files that do not exist:\n" + "\n".join(hits)


def test_every_function_a_comment_names_exists():
    """`module.name` in a docstring or comment (module: a project module) is defined in that module."""
    defs = {}
    for f in project_files():
        if f.startswith(("tests", "bench")):
            continue
        tree = ast.parse(open(os.path.join(ROOT, f)).read())
        names = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                names.add(n.target.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        defs[f[:-3].replace(os.sep, ".").removesuffix(".__init__")] = names
    mod = "|".join(re.escape(m) for m in sorted(defs, key=len, reverse=True))
    pat = re.compile(rf"(?<![\w./\\-])({mod})\.([A-Za-z_]\w*)\b")
    ext = {"py", "md", "json", "jsonl", "csv", "png", "html", "log", "txt", "js", "css"}
    hits = []
    for f in prose_files():
        for k, line in cited_text(f):
            for m in pat.finditer(line):
                module, name = m.groups()
                if name in ext or name in defs[module] or f"{module}.{name}" in defs:
                    continue
                hits.append(f"{f}:{k}: {module}.{name}")
    assert not hits, "names of functions that do not exist:\n" + "\n".join(hits)


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
    """README's "Read the code" section: every file → function pair it names exists there."""
    pairs = walk_pairs()
    assert len(pairs) >= 6, pairs
    for path, name in pairs:
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        defs = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert name in defs, f"README names {path} → {name}, which {path} does not define"


def walk_pairs():
    """README's "Read the code" walk: the (module path, name) pairs it names, in order."""
    text = open(os.path.join(ROOT, "README.md")).read()
    sec = text[text.index("## Read the code"):]
    return re.findall(r"`([\w/]+\.py)` → `(\w+)`", sec[:sec.index("\n## ", 3)])


def walk_reading():
    """(files, lines) a reader of README's walk reads: the .py files it names before "Second read";
    in them, the functions and classes the walk names plus every def they call there, transitively
    (an attribute call only where one def has that name), by their line spans, and the module
    docstring of each file read."""
    text = open(os.path.join(ROOT, "README.md")).read()
    sec = text[text.index("## Read the code"):]
    first = sec[:sec.index("Second read")]
    files = sorted(p for p in set(re.findall(r"`([\w/]+\.py)`", first)) if os.path.exists(os.path.join(ROOT, p)))
    defs, docs = {}, {}
    for f in files:
        tree = ast.parse(open(os.path.join(ROOT, f)).read())
        docs[f] = tree.body[0].end_lineno if ast.get_docstring(tree, clean=False) else 0
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                defs.setdefault(n.name, []).append((f, n))
    todo = [(n, f) for f, name in walk_pairs() for ff, n in defs.get(name, []) if ff == f]
    seen, lines = set(), {}
    while todo:
        node, f = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        lines.setdefault(f, set()).update(range(node.lineno, node.end_lineno + 1))
        for c in ast.walk(node):
            if isinstance(c, ast.Call):
                name = getattr(c.func, "id", None) or getattr(c.func, "attr", None)
                if isinstance(c.func, ast.Attribute) and len(defs.get(name, [])) != 1:
                    continue
                todo += [(n, ff) for ff, n in defs.get(name, [])]
    return files, sum(len(v) + docs[f] for f, v in lines.items())


def test_the_walk_reads_in_an_hour():
    """README's walk for --method prover: at most 10 files and 1,500 lines of code to read."""
    files, n = walk_reading()
    assert len(files) <= 10 and n <= 1500, (files, n)


def test_the_walk_names_the_credit_that_runs_for_method_prover(monkeypatch):
    """The registry's `prover` entry is the walk's credit step, and it is what `--method prover`
    runs without an option flag; with one, methods/prover_options.py runs (left to a second read:
    the walk names nothing in methods/ but the registry's `credit_fn`)."""
    import config
    import methods
    import prover
    from methods import prover_options
    from train import Run
    pairs = walk_pairs()
    module, name = methods.METHODS["prover"].credit.split(":")
    assert (module.replace(".", "/") + ".py", name) in pairs, (module, name, pairs)
    assert [p for p in pairs if p[0].startswith("methods/")] == [("methods/__init__.py", "credit_fn")]
    ran = []
    for mod in (prover, prover_options):      # the real functions, each noting that it ran
        monkeypatch.setattr(mod, "credit", lambda *a, _real=mod.credit, _name=mod.__name__, **kw:
                            ran.append(_name) or _real(*a, **kw))
    for cfg in (config.Config(), config.Config(focus=0.5), config.Config(judge_max=2)):
        methods.credit_fn("prover")([], [], Run(cfg, None, None, {}, [], None, "", step=1))
    assert ran == ["prover", "methods.prover_options", "methods.prover_options"]


def test_method_table_in_readme_is_the_registry():
    """README's method table is the registry's own rendering (methods.markdown_table)."""
    import methods
    assert methods.markdown_table() in open(os.path.join(ROOT, "README.md")).read()


def test_the_guides_stay_short():
    """README is a guide (≤ 10 KB, its Results ≤ 10 lines) and results/README.md an index of headline
    figures (≤ 14 KB: the full figures README's Results rest on)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    assert len(text.encode()) <= 10 * 1024
    res = text[text.index("## Results\n"):]
    res = res[:res.index("\n## ", 3)].strip().split("\n")
    assert len(res) - 2 <= 10, len(res)          # the heading and its blank line aside
    assert os.path.getsize(os.path.join(ROOT, "results", "README.md")) <= 14 * 1024
