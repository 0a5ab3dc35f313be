"""records.jsonl and report.html: what the credit step saw and did, and the page that shows it.

    python -m pytest -q tests/test_report.py

One real short run (keydoor, 4 rooms, ProVer, 2 updates, --strict) is shared by the tests: its
records are complete, bounded and consistent with the credit (F − A = λ·Δ̂ on the judged segment);
they survive a torn line and --resume; report.html renders in headless Chromium with networking
off (a screenshot with many colours; the DOM holds the highlighted segment with its Δ̂, one
advantage strip per trajectory, the curves); report.py puts several runs side by side; --log is
validated at start-up; bench/premise_confirm.py's credit figures read the run's metrics and records. Without Chromium the browser test is skipped with the reason.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYDOOR = ["--env", "keydoor", "--env-opt", "rooms=4", "--iters", "2", "--eval-every", "1", "--workers", "1", "--strict"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"]     # networking off


def train(args, timeout=600):
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def lines(path):
    return [json.loads(x) for x in open(path) if x.strip()]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    out = base / "keydoor-prover-s0"
    r = train([*KEYDOOR, "--out", str(out), "--cache-dir", str(base / "cache")])
    assert r.returncode == 0, r.stderr[-3000:]
    return out, base / "cache"


def chromium():
    for c in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser")):
        if c and os.path.exists(c):
            return c
    return None


# ---------------------------------------------------------------------------------------------
# records.jsonl
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_records_are_complete_bounded_and_match_the_credit(run_dir):
    from infra import records
    out, _ = run_dir
    raw = (out / "records.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in raw]
    assert [r["step"] for r in recs] == [1, 2]
    cfg = json.load(open(out / "config.json"))
    judged = 0
    for line, rec in zip(raw, recs):
        assert len(line) <= records.MAX_RECORD_BYTES and line == records.dumps(rec)
        assert rec["method"] == "prover" and 1 <= len(rec["groups"]) <= records.MAX_GROUPS
        assert "prover/eligible" in rec["stats"]
        order = [records.STATUS_ORDER.index(g["status"]) for g in rec["groups"]]
        assert order == sorted(order)                                   # credited first
        for g in rec["groups"]:
            assert len(g["trajs"]) == g["G"] == cfg["group_size"]
            for tr in g["trajs"]:
                assert len(tr["A"]) == len(tr["F"]) == len(tr["ok"]) == tr["n"] <= records.MAX_TURNS
                assert all(len(x[1]) <= records.CAP["action"] and len(x[2]) <= records.CAP["obs"] for x in tr["txt"])
            j = g["judge"]
            if j is None or j.get("start") is None:
                continue
            judged += 1
            K = cfg["verify_k"]
            assert len(j["pre"]) == len(j["post"]) == j["k"] == K and j["tools"] >= 0
            assert j["delta"] == pytest.approx(sum(j["post"]) / K - sum(j["pre"]) / K, abs=1e-3)
            assert j["applied"] == (j["delta"] > cfg["margin"]) and g["status"] == ("credited" if j["applied"] else "not credited")
            # the final advantage differs from GRPO's by λ·Δ̂ on the segment's turns, nowhere else
            for i, tr in enumerate(g["trajs"]):
                for t, (a, f) in enumerate(zip(tr["A"], tr["F"])):
                    on = j["applied"] and i == j["sid"] and j["start"] <= t <= j["end"]
                    assert f - a == pytest.approx(cfg["lam"] * j["delta"] if on else 0.0, abs=1e-3)
    assert judged >= 1
    # the credit lab's ground truth is in the record (the key turn)
    assert any("key" in tr["truth"].values() for r in recs for g in r["groups"] for tr in g["trajs"])


def test_record_size_bound_holds_in_the_worst_case_and_is_enforced(monkeypatch):
    from infra import records
    assert records.worst_case_bytes() <= records.MAX_RECORD_BYTES
    assert len(records.clip("é" * 500, 60)) < 60 and len(records.dumps({"s": records.clip("é" * 500, 60)})) <= 60 + 8
    big = [((0, 0, k), {"gid": k, "blob": "x" * 5000}) for k in range(4)]
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 12000)
    rec = records.make_record(1, "prover", [big], {"prover/eligible": 4, "other": 1})
    assert len(records.dumps(rec)) <= 12000 and rec["trimmed"] == 2 and rec["stats"] == {"prover/eligible": 4}


@pytest.mark.slow
def test_torn_record_is_skipped_and_resume_drops_records_past_the_checkpoint(run_dir, tmp_path):
    """A kill can leave a record past the checkpoint and a cut last line: reading skips the cut
    line; --resume drops both and re-does the update, keeping the earlier lines byte for byte."""
    from infra import records
    src, cache = run_dir
    out = tmp_path / "run"
    shutil.copytree(src, out)
    before = (out / "records.jsonl").read_text()
    with open(out / "records.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "fake": True, "groups": []}) + "\n" + '{"v": 1, "step": 4, "groups": [{"gid"')
    assert [r["step"] for r in records.read_records(str(out))] == [1, 2, 3]         # the cut line is skipped
    args = [("3" if a == "2" and KEYDOOR[k - 1] == "--iters" else a) for k, a in enumerate(KEYDOOR)]   # --iters 3
    r = train([*args, "--out", str(out), "--cache-dir", str(cache), "--resume"])
    assert r.returncode == 0, r.stderr[-3000:]
    text = (out / "records.jsonl").read_text()
    assert text.startswith(before)
    recs = lines(out / "records.jsonl")
    assert [x["step"] for x in recs] == [1, 2, 3] and "fake" not in recs[2] and recs[2]["groups"]
    assert [x["step"] for x in lines(out / "metrics.jsonl")] == [0, 1, 2, 3]
    assert '"step":3' in (out / "report.html").read_text()                         # redrawn at the end


def test_retried_credit_keeps_each_groups_own_records(tmp_path, monkeypatch):
    """infra/guard.py's group-by-group retry: a method's entries say group 0 of its one-group batch;
    they are renumbered to the batch's group, a failed group's entries are removed, and the failed
    whole-batch attempt leaves none."""
    from collections import Counter
    from types import SimpleNamespace
    import train

    def method(groups, adv, run):
        for g, grp in enumerate(groups):
            run.proposals.append((g, 0, 0, 0, 0.5, True))
            run.records.append({"g": g, "gid": grp[0].group_id})
            if grp[0].group_id == 1:
                raise RuntimeError("bad group")
        return {}
    groups = [[SimpleNamespace(group_id=k)] for k in range(3)]
    from infra.guard import guarded_credit
    run = train.Run(train.Config(method="grpo"), SimpleNamespace(counter=Counter()), None, {}, [], None, str(tmp_path))
    guarded_credit(method, run, groups, [[[0.0]] for _ in range(3)], 1, lambda *_: None, strict=False)
    assert [p[0] for p in run.proposals] == [0, 2]
    assert run.records == [{"g": 0, "gid": 0}, {"g": 2, "gid": 2}]


def test_premise_confirms_credit_figures_read_the_run(run_dir):
    """bench/premise_confirm.why_row on a real run: counts and acceptance as the metrics say (the
    acceptance pooled as bench/runs.py pools it for the summaries), the bonus λ·Δ̂ of the records'
    credited segments, and its size against the success's GRPO advantage A (F − A = bonus there)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import premise_confirm
    import runs
    out, _ = run_dir
    row = premise_confirm.why_row(str(out))
    tr = [r for r in lines(out / "metrics.jsonl") if r.get("step", 0) > 0 and "train/mixed_groups" in r]
    assert row["updates"] == len(tr) == 2
    assert row["credited"] == pytest.approx(sum(r["prover/credited"] for r in tr) / 2)
    assert row["accept"] == pytest.approx(runs.pooled_rate(tr, "prover/accept_rate", ("prover/valid", "prover/repaired")))
    credited = [(g, g["judge"]) for rec in lines(out / "records.jsonl") for g in rec["groups"]
                if g["judge"] and g["judge"].get("applied")]
    assert credited and row["bonus_mean"] == pytest.approx(sum(j["delta"] for _, j in credited) / len(credited), abs=1e-3)
    ratios = []
    for g, j in credited:
        tr_ = g["trajs"][j["sid"]]
        on = range(j["start"], j["end"] + 1)
        assert all(tr_["F"][t] - tr_["A"][t] == pytest.approx(j["bonus"], abs=1e-3) for t in on)
        ratios.append(j["bonus"] * len(on) / sum(tr_["A"][t] for t in on))
    assert row["bonus_over_adv"] == pytest.approx(sum(ratios) / len(ratios))


def test_every_metrics_key_of_the_run_is_documented(run_dir):
    """docs/metrics.md names every key the run wrote (train, eval, prover/*, lab/*)."""
    from helpers import undocumented
    keys = {k for row in lines(run_dir[0] / "metrics.jsonl") for k in row}
    assert {"step", "eval/success", "train/success", "prover/eligible", "lab/q_key"} <= keys
    assert not undocumented(sorted(keys)), undocumented(sorted(keys))


# ---------------------------------------------------------------------------------------------
# report.html
# ---------------------------------------------------------------------------------------------
def test_report_is_self_contained(run_dir):
    page = (run_dir[0] / "report.html").read_text()
    assert page.startswith("<!doctype html>") and 'id="report-data"' in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)   # no network reference
    assert not re.search(r"<(?:link|img|iframe)\b", page, re.I) and "@import" not in page
    assert page.count('<svg class="curves"') == 2


def test_report_renders_in_headless_chromium(run_dir, tmp_path):
    exe = chromium()
    if exe is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium; .ci/run installs it): report.html not rendered")
    page = run_dir[0] / "report.html"
    url = "file://" + str(page)
    common = [exe, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    r = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert '<pre class="err">' not in dom                                 # the script ran without error
    # ProVer's judged segment, highlighted, with its Δ̂ ± SE; the continuation outcomes
    assert re.search(r'<td class="cell seg[^"]*"><div class="seg-label">judged segment \d+–\d+ · Δ̂ = [+−]\d\.\d{3} ± \d\.\d{3}', dom)
    assert 'class="dots"' in dom and "from s_post" in dom
    # one advantage strip (GRPO and final rows) per trajectory column
    n_traj = len(re.findall(r'<th class="(?:win|lose)">', dom))
    assert n_traj >= 8 and dom.count('<div class="strip">') == n_traj
    assert dom.count('<div class="srow"') == 2 * n_traj
    assert dom.count('<svg class="curves"') == 2 and "<polyline" in dom
    assert 'class="pv pv-key"' in dom                                           # credit lab: pivotal turn marked
    assert '<table class="upd">' in dom and 'class="cfg"' in dom
    # the screenshot of the group view: a real picture, not a blank page
    png = tmp_path / "shot.png"
    r = subprocess.run([*common, f"--screenshot={png}", "--window-size=1400,1000", url + "#groups"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    import numpy as np
    from matplotlib import image
    img = image.imread(str(png))
    assert img.shape[:2] == (1000, 1400)
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 100, len(colours)


def test_report_cli_puts_runs_side_by_side(run_dir, tmp_path):
    a = tmp_path / "keydoor-prover-a"
    b = tmp_path / "keydoor-prover-b"
    shutil.copytree(run_dir[0], a)
    shutil.copytree(run_dir[0], b)
    r = subprocess.run([sys.executable, "-m", "infra.report", str(a), str(b)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "report.html").read_text()                 # the runs' common parent
    assert r.stdout.strip() == str(tmp_path / "report.html")
    assert page.count('<section class="run"') == 2 and 'id="compare"' in page and page.count("<nav class=tabs>") == 1
    assert page.count('<svg class="curves"') == 6                # 2 per run + the 2 overlays
    r = subprocess.run([sys.executable, "-m", "infra.report", str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "not a directory" in r.stderr


# ---------------------------------------------------------------------------------------------
# --log
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_log_flag_is_validated_at_start_up(monkeypatch, tmp_path):
    import importlib.util
    import config
    with pytest.raises(ValueError, match="unknown logger 'nope'"):
        config.validate(config.Config(log="tensorboard,nope"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in ("wandb", "tensorboard") else real(n, *a))
    for name in ("wandb", "tensorboard"):
        with pytest.raises(ValueError, match=f"--log {name}: the {name} package is not installed"):
            config.validate(config.Config(log=name))
    monkeypatch.undo()
    if importlib.util.find_spec("wandb") is None:     # as a user sees it: one line, exit 2, before anything is built
        r = train(["--log", "wandb", "--out", str(tmp_path / "o")], timeout=120)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "pip install wandb" in r.stderr


def test_tensorboard_logger_writes_the_metrics_keys(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (optional: pip install tensorboard)")
    from infra import records
    lg = records.Loggers("tensorboard", str(tmp_path), {}, 0)
    lg.log({"step": 1, "train/success": 0.5, "prover/eligible": 3, "note": "x"})
    lg.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(str(tmp_path / "tensorboard"))
    ea.Reload()
    assert set(ea.Tags()["scalars"]) == {"train/success", "prover/eligible"}
    assert ea.Scalars("train/success")[0].step == 1 and ea.Scalars("train/success")[0].value == 0.5
