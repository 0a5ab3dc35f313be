"""The env conformance test: every env registered in envs.ENVS passes it (a new env too, with no edit here).

    python -m pytest -q tests/test_envs.py

Per env, what the trainer relies on (envs.py's `Env` protocol and `EnvSpec`):
* the spec: its name, a training split and a held-out one, its defaults name Config fields;
* `info` carries task, task_type, admissible, won and score (types and range), after reset and step;
* the step limit: any action text (nonsense included) ends the episode at `max_steps` at the
  latest, and a `max_steps=` keyword (--max-steps) sets it;
* snapshot/restore: a restored env replays exactly, in the same object and in another one built
  alike (verification and SPO continue on spare envs);
* the expert the tiny policy's warm start clones (`expert_action`): its actions parse back from the
  policy's response format, end every episode and win some;
* SPO's first cut falls inside an episode that uses half the step limit, at the env's defaults.
Each failure names the env and the rule it broke.
"""
import os
import sys
from dataclasses import fields

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import config  # noqa: E402
import envs  # noqa: E402

INFO = {"task": str, "task_type": str, "admissible": list, "won": bool, "score": float}


def check_info(name, info, where):
    for k, typ in INFO.items():
        assert k in info, f"env {name}: info after {where} lacks {k!r} (envs.Env: {sorted(INFO)})"
        assert isinstance(info[k], typ) or (typ is float and isinstance(info[k], int)), \
            f"env {name}: info[{k!r}] after {where} is {type(info[k]).__name__}, not {typ.__name__}"
    assert 0.0 <= info["score"] <= 1.0, f"env {name}: score {info['score']} after {where} is not in [0, 1]"


def make(name, **kw):
    spec = envs.get_spec(name)
    return spec, spec.make(split=spec.splits[0], seed=0, **kw)


@pytest.mark.parametrize("name", list(envs.ENVS))
def test_spec(name):
    spec = envs.get_spec(name)
    assert spec.name == name, f"env {name}: its spec is named {spec.name!r}"
    assert len(spec.splits) >= 2, f"env {name}: needs a training split and a held-out one, has {spec.splits}"
    known = {f.name: f for f in fields(config.Config)}
    for k, v in spec.defaults.items():
        assert k in known, f"env {name}: EnvSpec.defaults names {k!r}, which is no train.py flag"
        assert type(v).__name__ == known[k].type, f"env {name}: default {k}={v!r} is not a {known[k].type}"
    for split in spec.splits[:2]:
        n = spec.num_tasks(split)
        assert n is None or isinstance(n, int), f"env {name}: num_tasks({split!r}) = {n!r}"


@pytest.mark.parametrize("name", list(envs.ENVS))
def test_info_and_step_limit(name):
    _, env = make(name)
    assert env.max_steps >= 1, f"env {name}: max_steps {env.max_steps}"
    obs, info = env.reset(3)
    assert isinstance(obs, str)
    check_info(name, info, "reset")
    for k in range(env.max_steps):
        obs, r, done, info = env.step("zzz qqq")                        # bad text never raises
        check_info(name, info, f"step {k + 1}")
        assert isinstance(obs, str) and isinstance(r, (int, float))
        if done:
            break
    assert done, f"env {name}: not done after max_steps = {env.max_steps} steps"
    n = env.max_steps - 1
    _, short = make(name, max_steps=n)
    short.reset(3)
    ends = [short.step("zzz qqq")[2] for _ in range(n)]
    assert short.max_steps == n and ends[-1], f"env {name}: make(max_steps={n}) does not end the episode at step {n}"


def play(env, actions):
    return [env.step(a) for a in actions]


@pytest.mark.parametrize("name", list(envs.ENVS))
def test_snapshot_restore_replays_exactly(name):
    _, env = make(name)
    _, other = make(name)
    _, info = env.reset(5)

    def next_action():                        # the expert's, else the first admissible action
        return env.expert_action() if hasattr(env, "expert_action") else (info["admissible"] or ["look"])[0]
    _, _, _, info = env.step(next_action())
    snap, actions = env.snapshot(), []
    for _ in range(3):
        actions.append(next_action())
        _, _, done, info = env.step(actions[-1])
        if done:
            break
    env.restore(snap)
    first = play(env, actions)
    env.restore(snap)
    assert play(env, actions) == first, f"env {name}: restore() in the same env does not replay exactly"
    other.reset(0)
    other.restore(snap)
    assert play(other, actions) == first, f"env {name}: restore() into another env built alike does not replay exactly"


@pytest.mark.parametrize("name", list(envs.ENVS))
def test_the_expert_the_warm_start_clones(name):
    spec, env = make(name)
    assert callable(getattr(env, "expert_action", None)), \
        f"env {name}: no expert_action(): the tiny policy's warm start clones it (or run with --bc-episodes 0)"
    wins = 0
    for task in range(10):
        env.reset(task)
        for _ in range(env.max_steps):
            a = env.expert_action()
            assert spec.parse(spec.response(a)) == (a, True), \
                f"env {name}: the expert's action {a!r} does not parse back from the response {spec.response(a)!r}"
            obs, r, done, info = env.step(a)
            if done:
                break
        assert done, f"env {name}: the expert's episode on task {task} did not end within max_steps"
        wins += info["won"]
    assert wins > 0, f"env {name}: the expert won none of 10 tasks: there is nothing to clone"


@pytest.mark.parametrize("name", list(envs.ENVS))
def test_spo_cuts_fall_inside_episodes(name):
    """At the env's defaults SPO-chain's first boundary and SPO-tree's first branching depth lie
    inside an episode that uses half its step limit; otherwise SPO would rarely cut a trajectory
    and train as GRPO (set spo_interval / spo_tree_depths in the env's EnvSpec.defaults)."""
    cfg = config.parse_args(["--env", name])
    limit = make(name)[1].max_steps
    half = (limit + 1) // 2                 # turns 0 .. half-1; a cut at b needs b < half
    first_depth = min(int(d) for d in cfg.spo_tree_depths.split(","))
    assert cfg.spo_interval < half, (f"env {name}: step limit {limit}: --spo-interval {cfg.spo_interval} cuts no episode "
                                     f"shorter than {cfg.spo_interval + 1} turns; set spo_interval in EnvSpec.defaults")
    assert first_depth < half, (f"env {name}: step limit {limit}: --spo-tree-depths {cfg.spo_tree_depths} branches no "
                                f"episode of half the limit; set spo_tree_depths in EnvSpec.defaults")
