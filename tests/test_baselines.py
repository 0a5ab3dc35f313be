"""Baselines (methods/): hand-computed advantages on hand-built groups, the methods' wiring
with scripted continuations, real continuations with the tiny policy, and one end-to-end
`train.py` smoke run per method.

    python -m pytest -q tests/test_baselines.py
"""
import json
import math
import os
import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
torch.set_num_threads(1)

import methods  # noqa: E402
from methods import common, criticsearch, gigpo, grpo_matched, spo  # noqa: E402
import rollout  # noqa: E402
from methods.criticsearch import CritiqueResult  # noqa: E402
from rollout import AgentState, Trajectory, Turn  # noqa: E402

G95 = 0.95


# --------------------------------------------------------------------------- hand-built data
def traj(obs, won, i=0, valid=None, task=7):
    valid = valid or [True] * len(obs)
    turns = []
    hist = ()
    for t, (o, v) in enumerate(zip(obs, valid)):
        st = AgentState(env_snap=("snap", task, hist, o), obs=o, info={"task": "t"}, history=hist, step=t)
        turns.append(Turn(t=t, obs=o, admissible=[], text="x", action=f"a{t}", valid=v, next_obs="n",
                          reward=0.0, done=t == len(obs) - 1, action_ids=[1, 2], logprobs=[0.0, 0.0], state=st))
        hist = hist + ((o, f"a{t}"),)
    return Trajectory(traj_id=i, group_id=0, task=task, task_text="t", task_type="x", turns=turns,
                      won=bool(won), score=float(won))


def cfg(**kw):
    base = dict(min_success=1, max_success=3, invalid_penalty=0.1, inadmissible_penalty=0.0, norm_std=False, temperature=1.0, seed=0,
                gigpo_gamma=G95, gigpo_omega=1.0, gigpo_mode="mean_norm", gigpo_similarity=0.0,
                spo_interval=2, spo_n=4, spo_tree_depths="2", spo_tree_branch=2, critic_alpha=0.25,
                matched_extra=0.25, matched_tokens=0)
    base.update(kw)
    return SimpleNamespace(**base)


def approx(a, b, tol=1e-6):
    return all(abs(x - y) < tol for x, y in zip(a, b)) and len(a) == len(b)


def grpo_adv(groups, c):
    import grpo
    return grpo.trajectory_advantages(groups, c.norm_std, c.invalid_penalty)


# --------------------------------------------------------------------------- GiGPO
def test_gigpo_exact_mean_norm():
    R = [1.0, 0.0, 1.0]
    obs = [["A", "B", "C"], ["A", "D"], ["A", "B"]]
    a, st = gigpo.gigpo_group(R, obs, G95, 1.0, "mean_norm")
    # A^E = R − 2/3; returns: τ0 [.9025, .95, 1], τ1 [0, 0], τ2 [.95, 1]
    # anchor A: {.9025, 0, .95} mean .6175 → +.285, −.6175, +.3325; B: {.95, 1} → ∓.025; C, D singletons → 0
    assert approx(a[0], [1 / 3 + 0.285, 1 / 3 - 0.025, 1 / 3])
    assert approx(a[1], [-2 / 3 - 0.6175, -2 / 3])
    assert approx(a[2], [1 / 3 + 0.3325, 1 / 3 + 0.025])
    assert st["step_groups"] == 2 and st["clusters"] == 4


def test_gigpo_exact_mean_std_norm():
    R = [1.0, 0.0, 1.0]
    obs = [["A", "B", "C"], ["A", "D"], ["A", "B"]]
    a, _ = gigpo.gigpo_group(R, obs, G95, 1.0, "mean_std_norm")
    sdE = math.sqrt((1 / 9 + 4 / 9 + 1 / 9) / 2)                     # unbiased std of [1, 0, 1]
    sdA = math.sqrt((0.285 ** 2 + 0.6175 ** 2 + 0.3325 ** 2) / 2)
    sdB = math.sqrt(2 * 0.025 ** 2)                                   # → a pair gives ±1/√2
    e = 1e-6
    assert approx(a[0], [(1 / 3) / (sdE + e) + 0.285 / (sdA + e), (1 / 3) / (sdE + e) - 0.025 / (sdB + e), (1 / 3) / (sdE + e)])
    assert approx(a[1], [(-2 / 3) / (sdE + e) - 0.6175 / (sdA + e), (-2 / 3) / (sdE + e)])
    assert abs(0.025 / (sdB + e) - 1 / math.sqrt(2)) < 1e-4


def test_gigpo_omega_and_similarity():
    R = [1.0, 0.0]
    obs = [["you are in kitchen 1", "x"], ["you are in kitchen 2", "y"]]
    exact, st0 = gigpo.gigpo_group(R, obs, G95, 1.0, "mean_norm", 0.0)
    assert approx(exact[0], [0.5, 0.5]) and approx(exact[1], [-0.5, -0.5]) and st0["step_groups"] == 0
    # ratio("…kitchen 1", "…kitchen 2") = 2·19/40 = 0.95 ≥ 0.9: one anchor group {.95, 0}, mean .475
    sim, st1 = gigpo.gigpo_group(R, obs, G95, 0.5, "mean_norm", 0.9)
    assert approx(sim[0], [0.5 + 0.5 * 0.475, 0.5]) and approx(sim[1], [-0.5 - 0.5 * 0.475, -0.5])
    assert st1["step_groups"] == 1
    assert gigpo.anchor_clusters(["ab", "ab", "cd", "ab"]) == [0, 0, 1, 0]


def test_gigpo_singleton_and_all_equal():
    # G = 1: A^E = 0 (grpo.group_advantages); no revisit → all step groups singletons → 0
    a, _ = gigpo.gigpo_group([1.0], [["A", "B"]])
    assert approx(a[0], [0.0, 0.0])
    # a revisit within one trajectory joins the same anchor group: {γ², 1} mean .95125
    a, _ = gigpo.gigpo_group([1.0], [["A", "B", "A"]])
    assert approx(a[0], [-0.04875, 0.0, 0.04875])
    # all fail: everything 0
    a, _ = gigpo.gigpo_group([0.0, 0.0], [["A", "B"], ["A", "C"]], mode="mean_std_norm")
    assert approx(a[0] + a[1], [0.0] * 4)
    # all succeed: A^E = 0 but the shorter path from A is worth more: {.95, .9025} mean .92625
    a, _ = gigpo.gigpo_group([1.0, 1.0], [["A", "B"], ["A", "C", "B"]])
    assert approx(a[0], [0.02375, 0.0]) and approx(a[1], [-0.02375, 0.0, 0.0])


def test_gigpo_credit_penalty_and_bad_mode():
    groups = [[traj(["A", "B"], 1, 0, valid=[True, False]), traj(["A", "C"], 0, 1)]]
    c = cfg()
    adv = grpo_adv(groups, c)
    m = gigpo.credit(groups, adv, SimpleNamespace(cfg=c))
    # A^E ±.5; anchor A {.95, 0} → ±.475; B, C singletons; turn 1 of τ0 invalid → −.1
    assert approx(adv[0][0], [0.975, 0.4]) and approx(adv[0][1], [-0.975, -0.5])
    assert m["gigpo/step_groups"] == 1
    with pytest.raises(ValueError):
        gigpo.credit(groups, adv, SimpleNamespace(cfg=cfg(gigpo_mode="std")))


# --------------------------------------------------------------------------- SPO-chain arithmetic
def test_chain_boundaries_and_advantages():
    assert spo.chain_boundaries(5, 2) == [2, 4]
    assert spo.chain_boundaries(4, 2) == [2]
    assert spo.chain_boundaries(2, 2) == [] and spo.chain_boundaries(1, 5) == []
    # V: b0 .25 | b2 .75 | b4 .5 | end R=1 → segments [0,2) +.5, [2,4) −.25, [4,5) +.5; sum = R − V(b0)
    a = spo.chain_advantages(5, [2, 4], [0.75, 0.5], v0=0.25, R=1.0)
    assert approx(a, [0.5, 0.5, -0.25, -0.25, 0.5])
    # no boundary: one segment = GRPO's R − mean; singleton group (v0 = R): 0
    assert approx(spo.chain_advantages(3, [], [], 0.25, 0.0), [-0.25] * 3)
    assert approx(spo.chain_advantages(3, [], [], 1.0, 1.0), [0.0] * 3)


class FakeEpisodes:
    """Stands in for rollout.run_episodes: outcome by the start state's observation; counts
    tokens/env steps like the real one; each continuation has `length` turns."""

    def __init__(self, win_by_obs, length=1):
        self.win, self.length, self.calls = win_by_obs, length, []

    def __call__(self, agent, envs, starts, temperature, seed, purpose, keep_states=True, **kw):
        assert len(envs) >= len(starts)
        self.calls.append((len(starts), purpose))
        turns, finals = [], []
        for k, s in enumerate(starts):
            won = self.win(s.obs, k)
            ts = [Turn(t=j, obs=f"{s.obs}/c{j}", admissible=[], text="x", action="c", valid=True,
                       next_obs="n", reward=0.0, done=j == self.length - 1, action_ids=[5],
                       logprobs=[0.0], state=AgentState(None, f"{s.obs}/c{j}", {}, s.history, s.step + j))
                  for j in range(self.length)]
            turns.append(ts)
            finals.append(AgentState(None, "end", {"won": won, "score": float(won), "task": "t"}, (), 0, True))
            agent.counter[f"tokens/{purpose}"] += self.length
            agent.counter[f"env_steps/{purpose}"] += self.length
        return turns, finals


def fake_run(c, tmp_path=None, judge=None):
    return SimpleNamespace(cfg=c, agent=SimpleNamespace(counter=Counter(), reward="success"), envs=lambda n: [None] * n,
                           judge=judge, out=str(tmp_path or "."), step=1)


def test_spo_chain_credit_dedup_and_values(monkeypatch):
    # τ0 (win, 5 turns) and τ1 (fail, 4 turns) share the first two observations (identical history)
    groups = [[traj(["s", "p", "q", "r", "z"], 1, 0), traj(["s", "p", "q", "w"], 0, 1)],
              [traj(["s", "t"], 0, 0), traj(["s", "u"], 0, 1)]]           # all fail: not eligible
    fe = FakeEpisodes(lambda obs, k: {"q": k % 4 < 3, "z": True}.get(obs, False))
    monkeypatch.setattr(spo, "run_episodes", fe)
    monkeypatch.setattr(rollout, "run_episodes", fe)   # continue_from's batch call
    c = cfg(spo_interval=2, spo_n=4)
    adv = grpo_adv(groups, c)
    run = fake_run(c)
    m = spo.chain_credit(groups, adv, run)
    # boundaries: τ0 at 2 ('q', shared with τ1 → one state) and 4 ('z'); V(q) = 3/4, V(z) = 1; V(b0) = .5
    assert fe.calls == [(8, "verify")] and m["spo/unique_states"] == 2 and m["spo/continuations"] == 8
    assert approx(adv[0][0], [0.25, 0.25, 0.25, 0.25, 0.0])
    assert approx(adv[0][1], [0.25, 0.25, -0.75, -0.75])
    assert approx(adv[1][0], [0.0, 0.0]) and approx(adv[1][1], [0.0, 0.0])   # GRPO kept
    assert run.agent.counter["tokens/verify"] == 8 and m["spo/eligible"] == 1


# --------------------------------------------------------------------------- SPO-tree
def test_tree_values_and_edges():
    N, E = spo.Node, spo.Edge
    n1 = N([E(None, 1.0), E(None, 0.0)])
    root = N([E(n1), E(None, 1.0)])
    assert spo.tree_value(n1) == 0.5 and spo.tree_value(root) == 0.75
    got = [a for _, a in spo.edge_advantages(root)]
    assert approx(sorted(got), sorted([-0.25, 0.25, 0.5, -0.5]))
    # singleton and all-equal: every edge 0
    assert [a for _, a in spo.edge_advantages(N([E(None, 1.0)]))] == [0.0]
    eq = N([E(N([E(None, 1.0), E(None, 1.0)])), E(None, 1.0)])
    assert all(a == 0.0 for _, a in spo.edge_advantages(eq))
    assert spo.parse_depths("6, 3,3") == [3, 6]
    with pytest.raises(ValueError):
        spo.parse_depths("0,2")


def test_spo_tree_credit(monkeypatch):
    groups = [[traj(["a", "b", "c", "d"], 1, 0), traj(["a", "e"], 0, 1, valid=[True, False])]]
    fe = FakeEpisodes(lambda obs, k: False, length=1)
    monkeypatch.setattr(spo, "run_episodes", fe)
    monkeypatch.setattr(rollout, "run_episodes", fe)   # continue_from's batch call
    c = cfg(spo_tree_depths="2", spo_tree_branch=2)
    adv = grpo_adv(groups, c)
    run = fake_run(c)
    m = spo.tree_credit(groups, adv, run)
    # τ0 runs at depth 2 → node n (own remainder R=1 + one continuation R=0): V(n) = .5
    # τ1 ended before depth 2 → leaf R=0;  V(root) = (.5 + 0)/2 = .25
    assert fe.calls == [(1, "verify")] and len(groups[0]) == 3
    assert approx(adv[0][0], [0.25, 0.25, 0.5, 0.5])
    assert approx(adv[0][1], [-0.25, -0.35])            # invalid turn: −.1
    assert approx(adv[0][2], [-0.5])                     # the new sibling edge is a training row
    new = groups[0][2]
    assert new.start_step == 2 and new.traj_id == 2 and new.turns[0].obs == "c/c0"
    assert m["spo/continuations"] == 1 and m["spo/edges"] == 4 and run.agent.counter["tokens/verify"] == 1


# --------------------------------------------------------------------------- CriticSearch
def test_critic_normalisation():
    A = criticsearch.critic_advantages([[1, -1], [1, 0, -1]], [True, True])     # mean 0, std 1
    assert approx(A[0] + A[1], [1, -1, 1, 0, -1], 1e-5)
    A = criticsearch.critic_advantages([[1, 1], [-1, -1], [0, 0]], [True, True, False])
    s = math.sqrt(4 / 3)
    assert approx(A[0] + A[1], [1 / s, 1 / s, -1 / s, -1 / s], 1e-5) and A[2] == [0.0, 0.0]   # dropped → neutral
    assert criticsearch.critic_advantages([[1, 1], [1]], [True, True]) == [[0.0, 0.0], [0.0]]  # all equal
    assert criticsearch.critic_advantages([[1]], [True]) == [[0.0]]                             # one turn


def test_criticsearch_credit(tmp_path):
    class StubJudge:
        def critique(self, tr, gold=None, group=None):
            assert gold is None and group is not None
            if tr.traj_id == 2:
                return CritiqueResult([0.0] * len(tr.turns), "dropped", "not_json: x", 10, 3)
            return CritiqueResult([1.0 if tr.won else -1.0] * len(tr.turns), "valid", None, 10, 3)

    groups = [[traj(["a", "b"], 1, 0), traj(["a", "c"], 0, 1), traj(["a", "d"], 0, 2)],
              [traj(["a"], 1, 0), traj(["b"], 1, 1)]]                           # all succeed: skipped
    c = cfg()
    adv = grpo_adv(groups, c)
    run = fake_run(c, tmp_path, StubJudge())
    m = criticsearch.credit(groups, adv, run)
    s = math.sqrt(4 / 3)
    assert approx(adv[0][0], [2 / 3 + 0.25 / s] * 2, 1e-5)
    assert approx(adv[0][1], [-1 / 3 - 0.25 / s] * 2, 1e-5)
    assert approx(adv[0][2], [-1 / 3] * 2)
    assert approx(adv[1][0] + adv[1][1], [0.0, 0.0])
    assert m["critic/eligible"] == 1 and m["critic/dropped"] == 1 and m["critic/critiques"] == 3
    assert run.agent.counter["tokens/judge"] == 9 and run.agent.counter["tokens/judge_prompt"] == 30
    assert "CriticSearch" in (tmp_path / "segments.md").read_text()
    # offline judges report 0 tokens: charged what an LLM critic would read and write (estimate)
    pt, ct = criticsearch.critique_tokens(groups[0][0], CritiqueResult([1.0, -1.0], "valid", None, 0, 0))
    assert ct == 2 and pt > 20                                                 # "[1, -1]"; the prompt


# --------------------------------------------------------------------------- grpo-matched
def test_matched_counts():
    assert grpo_matched.matched_counts(4, 32, 3200, 0.25) == [2, 2, 2, 2]       # 800 tokens / 100 per episode
    assert grpo_matched.matched_counts(3, 24, 2400, 0.3) == [3, 2, 2]           # 7.2 → 7, dealt round-robin
    assert grpo_matched.matched_counts(3, 24, 2400, 0.25, matched_tokens=260) == [1, 1, 1]
    assert grpo_matched.matched_counts(2, 8, 0, 0.25) == [0, 0]
    assert grpo_matched.matched_counts(2, 8, 800, 0.0) == [0, 0]


def test_grpo_matched_credit(monkeypatch):
    groups = [[traj(["a", "b"], 1, 0), traj(["a", "c"], 0, 1)]]               # 8 tokens, 2 episodes
    fe = FakeEpisodes(lambda obs, k: True, length=2)
    monkeypatch.setattr(grpo_matched, "run_episodes", fe)
    monkeypatch.setattr(rollout, "run_episodes", fe)   # continue_from's batch call
    monkeypatch.setattr(grpo_matched, "start_state",
                        lambda env, task: AgentState(None, f"start{task}", {"task": "t"}, (), 0))
    c = cfg(matched_extra=1.0)                                                # +100 % → 2 episodes
    adv = grpo_adv(groups, c)
    m = grpo_matched.credit(groups, adv, fake_run(c))
    assert fe.calls == [(2, "rollout")] and m["matched/extra_episodes"] == 2
    assert [t.traj_id for t in groups[0]] == [0, 1, 2, 3] and len(adv[0]) == 4
    assert approx([a[0] for a in adv[0]], [0.25, -0.75, 0.25, 0.25])        # R = [1, 0, 1, 1]


# --------------------------------------------------------------------------- real continuations
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A real Run: tiny warm-started policy, built-in ALFWorld, 6-step episodes."""
    import envs
    from infra import policy
    from infra import warmstart
    import train
    from rollout import Agent
    spec = envs.get_spec("alfworld")
    kw = {"preset": "small", "backend": "builtin", "max_steps": 6}
    model, tok, _ = warmstart.tiny_policy(
        spec, {"preset": "small", "backend": "builtin"},
        warmstart.TinyConfig(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128),
        warmstart.BCConfig(episodes=10, steps=5), seed=0, cache_dir=str(tmp_path_factory.mktemp("cache")),
        history_len=2, log=lambda *_: None)
    c = train.Config(spo_interval=2, spo_n=2, spo_tree_depths="2,4", spo_tree_branch=2, max_steps=6)
    agent = Agent(policy.HFGenerator(model, tok), tok, spec, max_new_tokens=8)
    return train.Run(c, agent, spec, kw, [], None, str(tmp_path_factory.mktemp("out")), 1)


def _mixed_groups(run):
    from rollout import rollout_groups
    groups = rollout_groups(run.agent, run.envs(2), [3], 2, 1.0, seed=0)
    groups[0][0].won, groups[0][1].won = True, False          # force a mixed (eligible) group
    return groups


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spo-chain", "spo-tree"])
def test_real_continuations(tiny_run, method):
    import grpo
    groups = _mixed_groups(tiny_run)
    adv = grpo.trajectory_advantages(groups, False, 0.1)
    before = Counter(tiny_run.agent.counter)
    m = methods.credit_fn(method)(groups, adv, tiny_run)
    spent = tiny_run.agent.counter["tokens/verify"] - before["tokens/verify"]
    assert m["spo/eligible"] == 1 and m["spo/continuations"] > 0 and spent > 0
    assert tiny_run.agent.counter["env_steps/verify"] > before["env_steps/verify"]
    assert all(len(a) == len(tr.turns) for a, tr in zip(adv[0], groups[0]))
    if method == "spo-tree":
        extra = groups[0][2:]
        assert len(extra) == m["spo/continuations"] and all(tr.start_step in (2, 4) for tr in extra)
        # a sibling continues from the restored state: the remaining budget is respected
        assert all(tr.start_step + len(tr.turns) <= 6 for tr in extra)
        rows = grpo.rows_from(groups, adv)
        assert len(rows) == sum(len(tr.turns) for tr in groups[0])


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="session")
def smoke_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("smoke-cache"))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo-matched", "gigpo", "spo-chain", "spo-tree", "criticsearch"])
def test_train_smoke(method, smoke_cache, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "train.py", "--env", "alfworld", "--method", method, "--iters", "2",
           "--eval-every", "0", "--group-size", "4", "--tasks-per-iter", "2", "--bc-episodes", "10",
           "--bc-steps", "5", "--max-steps", "8", "--out", str(out), "--cache-dir", smoke_cache,
           "--workers", "2"]   # as a 2-core laptop runs it: each worker's groups, stats merged
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1")
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for k in ("tokens/rollout", "tokens/verify", "tokens/judge", "env_steps/total"):
            assert k in r, k
        assert "credit/error" not in r, r.get("credit/error")
        assert r["env_steps/total"] >= r["env_steps/rollout"] > 0
        if r.get("spo/eligible", 0) > 0:
            assert r["tokens/verify"] > 0 and r["env_steps/total"] > r["env_steps/rollout"]
    from helpers import undocumented
    assert not undocumented(sorted({k for r in rows for k in r}))      # docs/metrics.md names every key
    if method == "grpo-matched":
        import train                          # default share of each worker's 4 episodes, summed
        assert all(r["matched/extra_episodes"] == 2 * round(train.Config().matched_extra * 4) for r in rows)


def test_baseline_sampling_seeds_differ_per_group():
    """Data-parallel ranks hold different groups; their extra rollouts/continuations must not share
    one random stream (the seed mixes in the groups' global ids), and a rerun draws the same."""
    from types import SimpleNamespace
    from rollout import Trajectory
    run = SimpleNamespace(cfg=SimpleNamespace(seed=0), step=3)
    grp = lambda gid: [Trajectory(0, gid, 0, "t", "x", [], False, 0.0)]
    a, b = common.seed_for(run, 1, [grp(0), grp(2)]), common.seed_for(run, 1, [grp(1), grp(3)])
    assert a != b and a == common.seed_for(run, 1, [grp(0), grp(2)])
    assert a != common.seed_for(run, 2, [grp(0), grp(2)])
