"""bench/premise.py: the progress measure on hand-built ALFWorld states (the planner's remaining plan
length before and after a turn) and the acceptance bookkeeping of its three arms on a scripted group."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import premise  # noqa: E402
from rollout import AgentState, Trajectory, Turn  # noqa: E402
from sims import household as H  # noqa: E402


def _turn(t, env, action):
    """A Turn of `action` from env's current state (its restore handle = that state), then step it."""
    st = AgentState(env.snapshot(), "", {"won": env.won, "admissible": list(env.admissible)}, (), t)
    env.step(action)
    return Turn(t=t, obs="", admissible=[], text=action, action=action, valid=True, next_obs="", reward=0.0,
                done=env.done, state=st)


def test_progress_is_the_planners_remaining_plan_getting_shorter():
    """Oracle steps shorten the plan by one each (progress); `look` and `inventory` leave it as it
    was (no progress); the winning turn is progress; the step limit does not end the plan."""
    env = H.Household("train", seed=0, preset="small", max_steps=50)
    env.reset(3)
    d0 = premise.steps_to_go(env, env.snapshot())
    env.reset(3)
    assert 2 <= d0 <= 20
    turns = [_turn(0, env, "look"), _turn(1, env, env.oracle_action()), _turn(2, env, "inventory")]
    while not env.won:
        turns.append(_turn(len(turns), env, env.oracle_action()))
    traj = Trajectory(traj_id=0, group_id=0, task=3, task_text="", task_type="", turns=turns, won=True, score=1.0)
    probe = H.Household("train", seed=0, preset="small", max_steps=50)
    prog = premise.progress_turns(probe, traj)
    assert prog[0] is False and prog[1] is True and prog[2] is False and all(prog[3:])
    assert sum(prog) == d0                      # every oracle step, and only those, made progress
    assert premise.steps_to_go(probe, turns[2].state.env_snap) == d0 - 1
    # near the step limit the distance is still the plan's: the limit is lifted while planning
    tight = H.Household("train", seed=0, preset="small", max_steps=2)
    tight.reset(3)
    assert premise.steps_to_go(tight, tight.snapshot()) == d0 and tight.max_steps == 2


def test_three_arms_are_scored_on_the_held_out_half():
    """A scripted τ* of 5 turns (valid segments: every ℓ ≤ r ≤ 3, r − ℓ < 4) and K = 2 per half: half A's
    values make (2, 2) the best segment (+1.0); half B gives every boundary its own value. The judge's
    (2, 3) and random's (0, 0) are accepted iff half B's Δ̂ > margin, their value is half B's Δ̂, their hit
    is overlap with best's, and progress reads the progress turns."""
    turns = [Turn(t=t, obs="", admissible=[], text="a", action="a", valid=True, next_obs="", reward=0.0, done=t == 4)
             for t in range(5)]
    traj = Trajectory(traj_id=0, group_id=0, task=0, task_text="", task_type="", turns=turns, won=True, score=1.0)
    va = [0.0, 0.0, 0.0, 1.0, 1.0]                 # A: all the value is in turn 2
    vb = [0.5, 0.5, 0.0, 1.0, 1.0]                 # B: turn 1 loses 0.5, turn 2 gains 1.0
    outs = [[a, a, b, b] for a, b in zip(va, vb)]
    rows = {r["arm"]: r for r in premise.group_rows([traj], 0, outs, {"judge": (2, 3), "random": (0, 0)}, 2, 0.0,
                                                    [False, False, True, False, True])}
    assert (rows["best"]["start"], rows["best"]["end"]) == (2, 2) and rows["best"]["accept"] == 1
    assert rows["best"]["segment_value"] == pytest.approx(1.0) and rows["best"]["hit"] == ""
    assert rows["judge"]["accept"] == 1 and rows["judge"]["segment_value"] == pytest.approx(1.0)   # vb[4] − vb[2]
    assert rows["judge"]["hit"] == 1 and rows["judge"]["progress"] == 1
    assert rows["random"]["accept"] == 0 and rows["random"]["segment_value"] == pytest.approx(0.0)  # vb[1] − vb[0]: a tie
    assert rows["random"]["hit"] == 0 and rows["random"]["progress"] == 0
    rows = {r["arm"]: r for r in premise.group_rows([traj], 0, outs, {"judge": None, "random": (1, 1)}, 2, 0.6, [False] * 5)}
    assert rows["judge"]["accept"] == "" and rows["random"]["accept"] == 0 and rows["best"]["accept"] == 1   # margin 0.6


def test_summary_counts_acceptance_per_arm_and_the_progress_shares():
    rows = [{"kind": "trajectory", "turns": "10", "progress_turns": "3", "won": "1"},
            {"kind": "trajectory", "turns": "20", "progress_turns": "5", "won": "0"},
            {"kind": "trajectory", "turns": "10", "progress_turns": "5", "won": "1"}]
    for arm, acc in (("judge", [1, 1, 0, 1]), ("random", [0, 1, 0, 0]), ("best", [1, 1, 1, 1])):
        rows += [{"kind": "proposal", "arm": arm, "accept": str(a), "segment_value": "0.25" if a else "0.0", "progress": "1",
                  "hit": "" if arm == "best" else "1"} for a in acc]
    s = premise.summarize(rows)
    assert s["success"] == pytest.approx(2 / 3) and s["idle_success"] == pytest.approx(1 - 8 / 20)
    assert s["progress_failure"] == pytest.approx(5 / 20) and s["judge"]["accept"] == 0.75
    assert s["random"]["accept"] == 0.25 and s["ratio"] == pytest.approx(3.0) and s["best"]["n"] == 4
    assert premise.summarize(rows, margin=0.25)["judge"]["accept"] == 0.0      # Δ̂ = 0.25 does not clear 0.25


def test_a_regime_is_train_flags_and_a_bad_one_is_one_error_line():
    assert premise.train_argv("webshop", None, "max_steps=8,env.world=1") == [
        "--env", "webshop", "--max-steps", "8", "--env-opt", "world=1"]
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        premise.train_argv("alfworld", None, "max_steps")
    with pytest.raises(SystemExit, match="premise: --regime"):
        premise.main(["--env", "alfworld", "--regime", "max_steps=-3", "--out", "/nonexistent"])


def test_the_brief_choice_names_the_same_pick_and_misses_as_the_full_one():
    """choose(brief=True), the index's form, names the pick of the full rule (env, regime, margin) and
    exactly the targets the full line says it fails, on the committed studies."""
    st = premise.load_studies()
    full, brief = premise.choose(st), premise.choose(st, brief=True)
    assert len(full) == len(brief) == 3
    for f, b in zip(full, brief):
        env, regime, margin = f.split("**")[1].split(": ")[0], f.split("`")[1], f.split("margin ")[1].split("*")[0]
        assert b.startswith(f"{env} `{regime}`, margin {margin}")
        fails = f.split("failing: ")[1].split(" (warm start")[0] if "failing: " in f else ""
        assert (b.endswith(f"misses {fails}") if fails else "meets every target" in b), (f, b)
