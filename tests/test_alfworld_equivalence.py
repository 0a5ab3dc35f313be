"""Fast path vs slow reference: the built-in simulator against the real ALFWorld engine.

Each generated household is exported as a `game.tw-pddl` (alfworld_tw.export_game) and played on
alfworld's own TextWorld PDDL engine with the same command sequence as on `household.Household`:
a random-admissible prefix sprinkled with inadmissible strings (wrong case, extra words, padding,
empty, non-ASCII), then the expert until the end. At every step the observation, the admissible
list, the reward, done and won must be identical. 54 small games (9 per task type) + 6 full ones,
a couple with a short step limit so `done` by limit is compared too. Real engine: ~1 s per game
load + ~70 steps/s, so the file runs in about a minute.

Run:  .venv/bin/python -m pytest -q tests/test_alfworld_equivalence.py
"""
import os
import random
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("ALFWORLD_DATA", tempfile.mkdtemp(prefix="alfworld_data_"))  # importing alfworld mkdirs it
pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from sims import alfworld_tw  # noqa: E402
from sims import household  # noqa: E402

BAD = ["", "   ", "Go to fridge 1", "look around", "take", "nothing", "x" * 10_000, "ouvrir le frigo é 冰箱",
       "<action>look</action>", "help me"]


def _cases():
    cases = []
    for i, tt in enumerate(household.TASK_TYPES):
        for k in range(9):
            cases.append(("small", tt, 1000 + 10 * i + k, 50 if k != 8 else 6))
        cases.append(("full", tt, 2000 + i, 50))
    return cases


def _commands(rng: random.Random, sim: household.Household, n_random: int):
    """Yields the next command given the simulator's current state (same list goes to the engine)."""
    t = 0
    while not sim.done:
        t += 1
        if t <= n_random:
            if rng.random() < 0.15:
                yield rng.choice(BAD + ["  " + rng.choice(sim.admissible) + " "])  # padded = still valid
            else:
                yield rng.choice(sim.admissible)
        else:
            yield sim.expert_action()


@pytest.fixture(scope="module")
def game_dir():
    with tempfile.TemporaryDirectory(prefix="alfworld_gen_") as d:
        yield d


@pytest.mark.slow
@pytest.mark.parametrize("preset,task_type,task,max_steps", _cases())
def test_simulator_matches_real_engine(game_dir, preset, task_type, task, max_steps):
    game = household.generate_game("train", preset, 0, task, task_type=task_type)
    path = alfworld_tw.write_game(game, game_dir)
    sim = household.Household(preset=preset, max_steps=max_steps)
    real = alfworld_tw.RealAlfworld(game_files=[path], max_steps=max_steps)
    o_s, i_s = sim.reset_game(game)
    o_r, i_r = real.reset(0)
    assert o_s == o_r and i_s == {**i_r, "task_type": i_s["task_type"]}
    assert i_r["task_type"] == task_type
    rng = random.Random(task)
    for t, cmd in enumerate(_commands(rng, sim, n_random=rng.randint(0, 25))):
        s = sim.step(cmd)
        r = real.step(cmd)
        where = f"{game.key} step {t + 1} cmd {cmd[:40]!r}"
        assert s[0] == r[0], where
        assert s[1:3] == r[1:3], where
        assert s[3]["admissible"] == r[3]["admissible"], where
        assert s[3]["won"] == r[3]["won"], where
    assert sim.won or max_steps < 50, "expert must finish within the limit"


def test_real_backend_snapshot_replay(game_dir):
    """restore() on the engine (reset + replay) lands in the same state as the simulator."""
    game = household.generate_game("train", "small", 0, 7, task_type="pick_two_obj_and_place")
    real = alfworld_tw.RealAlfworld(game_files=[alfworld_tw.write_game(game, game_dir)])
    sim = household.Household()
    sim.reset_game(game), real.reset(0)
    for _ in range(3):
        a = sim.expert_action()
        sim.step(a), real.step(a)
    snap_s, snap_r = sim.snapshot(), real.snapshot()
    first = [sim.step(sim.expert_action()) for _ in range(2)]
    sim.restore(snap_s), real.restore(snap_r)
    for s_before in first:
        a = sim.expert_action()
        s, r = sim.step(a), real.step(a)
        assert s[0] == r[0] == s_before[0] and s[3]["admissible"] == r[3]["admissible"]
