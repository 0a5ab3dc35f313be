"""One registry per kind, read by `--help`, validation and set-up alike.

    python -m pytest -q tests/test_registry.py

The kinds and their one list of names: env `envs.ENVS`, method `methods.METHODS`, judge
`judge.JUDGES`, loss `grpo.LOSS_AGGS`, reward `rollout.REWARDS`. Checked here: the flags' choices
are those registries; `--help` names every entry and imports no torch; adding an env or a judge is
one registry line (plus its module), and a method that is ProVer with preset flags is one line; an
env's defaults live with its spec and an explicit flag wins; the config's named groups.
"""
import os
import re
import subprocess
import sys
from dataclasses import fields

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import config  # noqa: E402
import envs  # noqa: E402
import judge  # noqa: E402
import methods  # noqa: E402
import rollout  # noqa: E402
from sims import household  # noqa: E402


def test_each_kinds_choices_are_its_registry():
    import grpo
    assert config.CHOICES["env"] is envs.ENVS
    assert config.CHOICES["method"] is methods.METHODS
    assert config.CHOICES["judge"] is judge.JUDGES and "truth" in judge.JUDGES     # the lab's judge too
    assert config.CHOICES["reward"] is rollout.REWARDS
    assert config.CHOICES["loss_agg"] == list(grpo.LOSS_AGGS)                        # read from grpo.py's source
    assert config.CHOICES["preset"] is household.PRESETS and config.CHOICES["bc_expert"] is household.EXPERTS


def test_help_names_every_entry_and_imports_no_torch():
    p = subprocess.run([sys.executable, "-X", "importtime", "train.py", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-500:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}, "train.py --help imported torch"
    import grpo
    for name in [*envs.ENVS, *methods.METHODS, *judge.JUDGES, *grpo.LOSS_AGGS, *rollout.REWARDS]:
        assert re.search(rf"[{{,]{re.escape(name)}[,}}]", p.stdout), f"--help does not list {name!r}"


TOY = '''"""A 3-cell line (a test's env): walk right to the last cell."""
import envs


class Line:
    name = "line"

    def __init__(self, split="train", seed=0, max_steps=6):
        self.max_steps = max_steps

    def _info(self):
        return {"task": "reach the end", "task_type": "line", "admissible": ["go left", "go right"],
                "won": self.pos == 2, "score": float(self.pos == 2)}

    def reset(self, task):
        self.pos, self.steps = 0, 0
        return "cell 0", self._info()

    def step(self, action):
        self.steps += 1
        self.pos = max(0, min(2, self.pos + {"go right": 1, "go left": -1}.get(action, 0)))
        done = self.pos == 2 or self.steps >= self.max_steps
        return f"cell {self.pos}", float(self.pos == 2), done, self._info()

    def snapshot(self):
        return self.pos, self.steps

    def restore(self, snap):
        self.pos, self.steps = snap

    def expert_action(self):
        return "go right"


SPEC = envs.EnvSpec(name="line", make=lambda split, seed=0, **kw: Line(split, seed, **kw), splits=("train", "test"),
                    num_tasks=lambda split: None, vocabulary=lambda: "cell reach the end go left right".split(),
                    chat_prompt=envs.compact_prompt, compact_prompt=envs.compact_prompt, parse=envs.parse_action_tag,
                    defaults={"iters": 3, "spo_interval": 1, "spo_tree_depths": "1,2"})
'''


def test_an_env_is_one_registry_line_plus_its_module(tmp_path, monkeypatch):
    (tmp_path / "toy_line.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(envs.ENVS, "line", "toy_line:SPEC")                    # the one edit
    cfg = config.parse_args(["--env", "line"])
    assert cfg.iters == 3 and cfg.spo_interval == 1                             # its defaults, from its spec
    assert config.parse_args(["--env", "line", "--iters", "9"]).iters == 9
    config.validate(cfg)
    text = " ".join(config.build_parser().format_help().split())
    assert "line" in text and "line: --iters 3" in text                         # a choice; its defaults listed
    import test_envs                                                            # the conformance test passes
    for check in (test_envs.test_spec, test_envs.test_info_and_step_limit, test_envs.test_snapshot_restore_replays_exactly,
                  test_envs.test_the_expert_the_warm_start_clones, test_envs.test_spo_cuts_fall_inside_episodes):
        check("line")


class FirstTurn:
    """A judge that proposes the success's first turn."""
    name = "first-turn"

    def propose(self, group, success_id, choose_success=False):
        prop, err = judge.validate_proposal({"failure_mode": "x", "start_turn": 0, "end_turn": 0}, group, success_id)
        return judge.JudgeResult(prop, "valid" if prop else "dropped", err, 0, 0, 0, 0)


def test_a_judge_is_one_registry_line(monkeypatch):
    monkeypatch.setitem(judge.JUDGES, "first-turn", lambda **kw: FirstTurn())   # the one edit
    cfg = config.parse_args(["--judge", "first-turn"])
    config.validate(cfg)
    from infra import build
    assert isinstance(build.judge_setup(cfg, None, None), FirstTurn)


def test_the_truth_judge_is_a_lab_entry_of_the_registry():
    from infra import build
    from lab.truth_judge import TruthJudge
    with pytest.raises(ValueError, match="only --env keydoor has"):
        config.validate(config.parse_args(["--judge", "truth"]))
    with pytest.raises(ValueError, match="has no segment judge"):
        config.validate(config.parse_args(["--env", "keydoor", "--judge", "truth", "--method", "grpo"]))
    cfg = config.parse_args(["--env", "keydoor", "--judge", "truth"])
    config.validate(cfg)
    assert isinstance(build.judge_setup(cfg, None, None), TruthJudge)


def test_a_prover_variant_is_one_registry_line(monkeypatch):
    monkeypatch.setitem(methods.METHODS, "prover-focus",                        # the one edit
                        methods.variant("prover", "ProVer, the success's other turns at half their GRPO advantage", focus=0.5))
    cfg = config.parse_args(["--method", "prover-focus"])
    assert cfg.focus == 0.5 and config.parse_args(["--method", "prover-focus", "--focus", "0.7"]).focus == 0.7
    config.validate(cfg)
    v, base = methods.METHODS["prover-focus"], methods.METHODS["prover"]
    assert (v.credit, v.options) == (base.credit, base.options)              # ProVer's credit, with its options
    from methods.prover_options import beyond_paper
    assert beyond_paper(cfg) and not beyond_paper(config.parse_args(["--method", "prover"]))   # focus runs the options' path
    assert methods.METHODS["prover-focus"].judge == "judge"
    assert "prover-focus" in config.build_parser().format_help()
    assert config.preset_flags(cfg) == {"focus": 0.5}                           # said at the start of the run


def test_env_defaults_live_with_the_spec_and_yield_to_flags():
    ws = config.parse_args(["--env", "webshop"])
    d = envs.get_spec("webshop").defaults
    assert (ws.history_len, ws.reward, ws.iters) == (d["history_len"], d["reward"], d["iters"]) == (0, "score", 250)
    mine = config.parse_args(["--env", "webshop", "--history-len", "3", "--reward", "success"])
    assert (mine.history_len, mine.reward) == (3, "success")
    al = config.parse_args([])
    assert (al.history_len, al.reward) == (config.Config.history_len, "success")
    kd = config.preset_flags(config.parse_args(["--env", "keydoor", "--iters", "5"]))
    assert "iters" not in kd and kd["history_len"] == 2                          # the line printed at start
    known = {f.name for f in fields(config.Config)}
    for name, m in methods.METHODS.items():
        assert set(m.flags) <= known, (name, m.flags)


def test_readme_flag_table_shows_each_envs_iters():
    text = open(os.path.join(ROOT, "README.md")).read()
    row = next(line for line in text.splitlines() if line.startswith("| `--iters`"))
    for name in envs.ENVS:
        it = envs.get_spec(name).defaults.get("iters")
        if it is not None:
            assert f"{name} {it}" in row, f"README's --iters row does not say {name}'s default {it}"


def test_config_groups_in_reading_order():
    groups = config.field_groups(config.Config)
    titles = [t.split(" ")[0].rstrip(":") for t in groups]
    assert titles == ["the", "GRPO", "ProVer", "baselines", "lab", "backends", "scale"], list(groups)
    assert sorted(f for fs in groups.values() for f in fs) == sorted(f.name for f in fields(config.Config))
