"""LABS.md: every lab's command runs (at a reduced size) and yields the figures its text quotes; the
measured blocks are what bench/labs.py renders from results/labs.json and the committed studies,
and every recorded measurement is of the command LABS.md shows."""
import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import labs  # noqa: E402


def finite_numbers(x) -> list[float]:
    """Every number in a figures dict (nested dicts / lists), for the 'nothing is nan' check."""
    if isinstance(x, dict):
        return [v for y in x.values() for v in finite_numbers(y)]
    if isinstance(x, (list, tuple)):
        return [v for y in x for v in finite_numbers(y)]
    return [float(x)] if isinstance(x, (int, float)) and not isinstance(x, bool) else []


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory):
    """One output folder for the module: the ladder lab reuses the lr lab's runs there, as it does for a reader."""
    return tmp_path_factory.mktemp("labs")


@pytest.mark.slow
@pytest.mark.parametrize("key", [lab.key for lab in labs.LABS])
def test_lab_command_runs_and_gives_its_figures(key, quick_out, train_cache):
    lab = labs.BY_KEY[key]
    out = str(quick_out / "runs")
    cmd = lab.quick_command(out, str(train_cache))
    assert labs.OUT not in cmd, "the reduced run must write under the temporary folder"
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
    figs = lab.figures(out)         # `out` is absolute: os.path.join(ROOT, out) is out itself
    assert finite_numbers(figs), f"lab {key}: no figures"
    rec = labs.load_record().get(key)
    if rec is not None:             # the reduced run yields the recorded figures' fields (a subset where it is smaller)
        assert paths(figs) <= paths(rec["figures"]), (key, paths(figs) - paths(rec["figures"]))


def paths(x, pre="") -> set:
    """The key paths of a figures dict ("builtin/hit", ...), lists as one leaf."""
    if isinstance(x, dict):
        return {p for k, v in x.items() for p in paths(v, f"{pre}/{k}")}
    return {pre}


def test_labs_md_is_what_render_writes():
    text = open(labs.LABS_MD).read()
    assert labs.render(text, labs.load_record()) == text, "run `python bench/labs.py render`"


def test_render_fills_an_empty_block_and_leaves_its_neighbours():
    lab = labs.LABS[-1]
    rec = {lab.key: {"command": lab.command, "seconds": 60, "date": "d", "commit": "c", "figures": {}}}
    empty = f"<!-- lab:{lab.key}:measured -->\n<!-- /lab -->\n\ntext\n<!-- lab:{lab.key}:command -->\nold\n<!-- /lab -->\n"
    lab_text = lab.text
    lab.text = lambda f: "FIGURES"                   # the prose function reads files; here only the block matters
    try:
        out = labs.render(empty, rec)
    finally:
        lab.text = lab_text
    assert out == (f"<!-- lab:{lab.key}:measured -->\n**We measured** (d, commit `c`, 1.0 min, no other job noted; "
                   f"`results/labs.json`): FIGURES\n<!-- /lab -->\n\ntext\n<!-- lab:{lab.key}:command -->\n"
                   f"{labs.command_block(lab)}\n<!-- /lab -->\n")


def test_every_lab_has_its_blocks_and_a_measurement_of_its_command():
    text = open(labs.LABS_MD).read()
    record = labs.load_record()
    for lab in labs.LABS:
        for part in ("command", "measured"):
            assert text.count(f"<!-- lab:{lab.key}:{part} -->") == 1, (lab.key, part)
        assert lab.key in record, f"lab {lab.key} has no measurement in results/labs.json"
        assert record[lab.key]["command"] == lab.command, f"lab {lab.key} was measured with another command"
        assert all(math.isfinite(v) for v in finite_numbers(record[lab.key]["figures"])), lab.key
        assert "nan" not in labs.measured_block(lab, record[lab.key]), lab.key
        assert record[lab.key]["seconds"] <= 5 * 60, f"lab {lab.key} took {record[lab.key]['seconds']} s (target ≤ 5 min)"
    order = [text.index(f"<!-- lab:{lab.key}:command -->") for lab in labs.LABS]
    assert order == sorted(order), "LABS.md must present the labs in bench/labs.py's order"


def test_readme_links_labs_near_its_top():
    readme = open(os.path.join(ROOT, "README.md")).read()
    head = "\n".join(readme.splitlines()[:15])
    assert re.search(r"\]\(LABS\.md\)", head), "README's top must link LABS.md"


def test_quick_substitutions_apply_and_a_changed_command_is_flagged():
    for lab in labs.LABS:
        lab.quick_command("/tmp/x", "/tmp/c")         # raises when a substitution no longer matches
    lab = labs.LABS[0]
    rec = {"command": lab.command + " --seed 1", "seconds": 1, "date": "d", "commit": "c", "figures": {}}
    assert "Not measured yet" in labs.measured_block(lab, rec)


def test_verify_noise_against_its_analytic_values():
    """bench/verify_noise.py (lab 3): under CRN the neutral segment's two sides share every door draw,
    so every Δ̂ is exactly 0 (never credited); without CRN it is not; the pivotal segment's mean Δ̂
    sits near A_seg = (1 − q)(p_key − p_nokey) and its SD near the independent-sides prediction."""
    import verify_noise as vn
    import adaptive_bias
    setting = adaptive_bias.setting(0.5, pool_size=64)
    crn = vn.measure(0.5, "neutral", 8, True, 20, setting)
    assert crn["true"] == 0 and crn["sd"] == 0 and crn["credited"] == 0
    ind = vn.measure(0.5, "neutral", 8, False, 20, setting)
    assert ind["sd"] > 0
    piv = vn.measure(0.5, "pivotal", 32, False, 40, setting)
    assert piv["true"] == pytest.approx(0.5 * (adaptive_bias.P_KEY - adaptive_bias.P_NOKEY))
    assert abs(piv["mean"] - piv["true"]) < 4 * piv["mc_se"]
    assert 0.5 < piv["sd"] / piv["sd_independent"] < 1.5


def test_a_lab_on_uncommitted_code_cites_no_commit(tmp_path, monkeypatch):
    """bench/labs.py records HEAD's hash only when the tracked files are HEAD's; a measured block
    without a commit names none, and LABS.md carries no dirty stamp."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f.txt").write_text("a\n")
    subprocess.run([*git, "add", "f.txt"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(labs, "ROOT", str(tmp_path))
    assert labs.commit() == head
    (tmp_path / "f.txt").write_text("b\n")
    assert labs.commit() is None
    monkeypatch.setattr(labs, "ROOT", str(tmp_path / "nowhere"))
    (tmp_path / "nowhere").mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert labs.commit() is None
    lab = labs.LABS[0]
    rec = dict(labs.load_record()[lab.key], commit=None)
    assert "commit" not in labs.measured_block(lab, rec).split("`results/labs.json`")[0]
    assert "commit `abc1234`," in labs.measured_block(lab, dict(rec, commit="abc1234"))
    assert "-dirty" not in open(labs.LABS_MD).read()
