"""The real ALFWorld engine (alfworld 0.4.x on TextWorld's PDDL engine) behind our `Env` protocol.

What it implements
------------------
(a) `RealAlfworld` — plays `game.tw-pddl` files with the engine ALFWorld itself uses
    (`textworld.envs.PddlEnv` + alfworld's `AlfredDemangler`/`AlfredInfos` wrappers, as in
    `AlfredTWEnv.init_env`), one game per `reset(task)` index:
      * official games under `$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/…` (the
        same filter as `AlfredTWEnv.collect_game_files`: six task types, no movable/Sliced,
        `"solvable": true`), sorted by path so index -> game is stable;
      * or any explicit list of game files (our exported households, for the equivalence test).
    Same info keys as the built-in simulator. The step limit is applied here exactly as TextWorld's
    `Limit` wrapper does (done once steps >= max_steps). The engine has no cheap state copy, so
    `snapshot()` records (game, actions so far) and `restore()` resets the game and replays them —
    deterministic because the PDDL engine is.
(b) `export_game(game)` — writes a generated household (`household.Game`) as an ALFRED PDDL
    problem plus the package's grammar (task sentence substituted for `UNKNOWN GOAL`, as
    `alfworld-generate` does) into the `game.tw-pddl` json the engine loads:
    {pddl_domain, grammar, pddl_problem, solvable, walkthrough}. Object ids follow
    `household.pddl_id`, so the Demangler gives every entity the name the simulator uses.
    Two deliberate choices, both to match the official 0.4.x games:
      * the package's alfred.pddl (0.4.2) also lets you `examine` an object lying in a visible
        receptacle at your location; real 0.4.x admissible lists do not show that, so the exported
        domain restricts `examineObject` to the held object (one precondition, patched below);
      * no `sliceable` facts are emitted (no task needs slicing; the simulator omits it too).
(c) `official_data_status` / `resolve_backend` — the one-line start-up message and the clear error
    when the real backend is forced without data. `SPEC`: ALFWorld's entry in envs.ENVS (either engine).

How to run: the equivalence test plays exported games here against the simulator:
    .venv/bin/python -m pytest -q tests/test_alfworld_equivalence.py
Official data (not downloadable in our sandbox): `alfworld-download`, then `backend="real"`.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import zlib
from typing import Any

import envs
from sims import household

SUBDIR = "json_2.1.1"


# ---------------------------------------------------------------------------------------------
# Data discovery and backend resolution
# ---------------------------------------------------------------------------------------------
def data_root(data_dir: str | None = None) -> str:
    """data_dir, else $ALFWORLD_DATA, else alfworld's default ~/.cache/alfworld."""
    return os.path.expanduser(data_dir or os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld")


def official_data_status(data_dir: str | None = None) -> tuple[bool, str]:
    """(ok, message): are official games present for all three splits under data_dir?"""
    root = data_root(data_dir)
    for split in household.SPLITS:
        d = os.path.join(root, SUBDIR, split)
        if not os.path.isdir(d):
            return False, f"no official games under {root} (missing {d}; run `alfworld-download`)"
        if next(glob.iglob(os.path.join(d, "*", "*", "game.tw-pddl")), None) is None:
            return False, f"no official games under {root} (no game.tw-pddl in {d}; run `alfworld-download`)"
    if importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None:
        return False, f"official games under {root} but the engine is missing (pip install alfworld)"
    return True, f"official games under {root}"


def resolve_backend(backend: str, data_dir: str | None = None) -> tuple[str, str]:
    """backend in {"auto", "builtin", "real"} -> (resolved, one-line message). Forcing "real"
    without usable data raises FileNotFoundError naming the path and the download step."""
    if backend not in ("auto", "builtin", "real"):
        raise ValueError(f"unknown ALFWorld backend {backend!r}; choose auto, builtin or real")
    if backend == "builtin":
        return "builtin", "ALFWorld: using the built-in simulator"
    ok, msg = official_data_status(data_dir)
    root = data_root(data_dir)
    if ok:
        return "real", f"ALFWorld: using official games from {root}"
    if backend == "real":
        raise FileNotFoundError(f"ALFWorld backend 'real': {msg}. Install with `pip install alfworld`, "
                                f"then run `alfworld-download` (or set ALFWORLD_DATA / data_dir to where the "
                                f"{SUBDIR} folder is).")
    return "builtin", f"ALFWorld: {msg}; using the built-in simulator"


def make_alfworld(split: str = "train", seed: int = 0, preset: str = "small", backend: str = "builtin",
                  data_dir: str | None = None, max_steps: int = 50, expert: str = "search"):
    """ALFWorld env for envs.py — the one place the backend is chosen. backend: "builtin" (this simulator), "real" (the alfworld engine on
    official games under data_dir/$ALFWORLD_DATA; a clear error if missing) or "auto" (real when
    the official games are there, else builtin). The chosen backend and a one-line message are on
    `env.backend` / `env.backend_line` (the trainer prints and records them). expert: the built-in
    simulator's `expert_action` ("search" | "oracle", see Household.search_action)."""
    backend, line = resolve_backend(backend, data_dir)
    if backend == "real":
        env = RealAlfworld(split=split, seed=seed, data_dir=data_dir, max_steps=max_steps)
        env.backend, env.backend_line = backend, line
        return env
    env = household.Household(split=split, seed=seed, preset=preset, max_steps=max_steps, expert=expert)
    env.backend, env.backend_line = "builtin", line
    return env


def backend_kwargs(backend: str) -> tuple[dict, str]:
    """--env-backend → (make_alfworld keywords, the one-line start-up message), resolved once."""
    resolved, line = resolve_backend(backend)
    return {"backend": resolved}, line


def official_game_files(split: str, data_dir: str | None = None) -> list[str]:
    """The split's playable games, filtered like AlfredTWEnv.collect_game_files, sorted by path."""
    root = os.path.join(data_root(data_dir), SUBDIR, split)
    files = []
    for path in sorted(glob.glob(os.path.join(root, "*", "*", "game.tw-pddl"))):
        task_dir = os.path.dirname(path)
        if "movable" in task_dir or "Sliced" in task_dir or _task_type_of_path(path) not in household.TASK_TYPES:
            continue
        with open(path) as f:
            if json.load(f).get("solvable"):
                files.append(path)
    if not files:
        raise FileNotFoundError(f"no solvable ALFWorld games under {root}; run `alfworld-download`")
    return files


def _task_type_of_path(path: str) -> str:
    # .../<task_type>-<Obj>-<MRecep>-<Recep>-<scene>/trial_*/game.tw-pddl
    return os.path.basename(os.path.dirname(os.path.dirname(path))).split("-")[0]


# ---------------------------------------------------------------------------------------------
# The engine behind the Env protocol
# ---------------------------------------------------------------------------------------------
class RealAlfworld:
    """alfworld's TextWorld PDDL engine, one game per reset(task) index."""
    name = "alfworld"

    def __init__(self, split: str = "train", seed: int = 0, data_dir: str | None = None, max_steps: int = 50,
                 game_files: list[str] | None = None):
        import textworld
        from textworld.envs import PddlEnv
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        self.split, self.seed, self.max_steps = split, seed, max_steps
        self.game_files = game_files if game_files is not None else official_game_files(split, data_dir)
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self._env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
        self._loaded: str | None = None

    def _path(self, task: int) -> str:
        n = len(self.game_files)
        if self.split == "train" and n > 1:               # seeded order over the training games
            import random
            perm = list(range(n))
            random.Random(self.seed).shuffle(perm)
            return self.game_files[perm[task % n]]
        return self.game_files[task % n]

    def reset(self, task: int) -> tuple[str, dict]:
        return self._start(self._path(task))

    def _start(self, path: str) -> tuple[str, dict]:
        if path != self._loaded:
            self._env.load(path)
            self._loaded = path
        state = self._env.reset()
        obs = state.feedback
        self.task = obs.split("Your task is to: ", 1)[1].strip() if "Your task is to: " in obs else ""
        self.task_type = _task_type_of_path(path)
        self.actions: list[str] = []
        self.steps, self.done = 0, False
        self._state = state
        self._last = (obs, 0.0, False)
        return obs, self._info()

    def _info(self) -> dict:
        won = bool(self._state["won"])
        return {"task": self.task, "task_type": self.task_type,
                "admissible": list(self._state["admissible_commands"]), "won": won, "score": float(won)}

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.done:
            obs, r, d = self._last
            return obs, r, d, self._info()
        self.steps += 1
        action = action if isinstance(action, str) else ""
        self.actions.append(action)
        self._state, score, won_done = self._env.step(action)
        won = bool(self._state["won"])
        self.done = won or self.steps >= self.max_steps
        self._last = (self._state.feedback, float(score) if won else 0.0, self.done)
        return self._state.feedback, self._last[1], self.done, self._info()

    def snapshot(self) -> Any:
        return (self._loaded, tuple(self.actions))

    def restore(self, snap: Any) -> None:
        path, actions = snap
        self._start(path)
        for a in actions:                      # deterministic replay; rewards/done recomputed
            self.step(a)


# ---------------------------------------------------------------------------------------------
# Export a generated household as a game.tw-pddl
# ---------------------------------------------------------------------------------------------
def _logic_files() -> tuple[str, str]:
    """alfred.pddl and alfred.twl2 as shipped inside the installed alfworld package."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("exporting ALFWorld games needs the alfworld package (pip install alfworld)")
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    with open(os.path.join(data, "alfred.pddl")) as f:
        domain = f.read()
    with open(os.path.join(data, "alfred.twl2")) as f:
        grammar = f.read()
    return domain, grammar


_EXAMINE_RE = re.compile(r"\(:action examineObject.*?:effect", re.DOTALL)
_EXAMINE_HELD = """(:action examineObject
    :parameters (?a - agent ?o - object)
    :precondition
        (holds ?a ?o)
    :effect"""


def exported_domain() -> str:
    domain, _ = _logic_files()
    patched, n = _EXAMINE_RE.subn(_EXAMINE_HELD, domain)
    assert n == 1, "alfred.pddl changed: examineObject not found exactly once"
    return patched


_GOALS = {  # goal_library.py, with `#` written as `-` (ALFRED's fix_pddl_str_chars)
    "simple": "(exists (?r - receptacle) (exists (?o - object) (and {extra}(objectType ?o {obj}type) "
              "(receptacleType ?r {recep}type) (inReceptacle ?o ?r))))",
    "two": "(exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {obj}type) "
           "(receptacleType ?r {recep}type) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and (not (= ?o1 ?o2)) "
           "(objectType ?o2 {obj}type) (receptacleType ?r {recep}type) (inReceptacle ?o2 ?r))))))",
    "look": "(exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot {toggle}type) "
            "(toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r))) "
            "(exists (?o - object ?a - agent) (and (objectType ?o {obj}type) (holds ?a ?o)))",
}
_EXTRA = {"pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o) ",
          "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o) ",
          "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o) "}


def problem_pddl(game: household.Game) -> str:
    """The ALFRED PDDL problem of a generated household (one location per receptacle, loc_bar_0 =
    the start with no receptacle). Every ALFRED type constant is declared because the domain names
    some (SinkBasinType, KnifeType, ...)."""
    otypes = sorted({o for objs in household.CAN_CONTAIN.values() for o in objs}
                    | {o for r in household.ROOMS.values() for o in r["objects"]} | set(household.LAMPS)
                    | {"knife", "butterknife"})
    rtypes = sorted(household.CAN_CONTAIN)
    locs = [f"loc_bar_{i}" for i in range(len(game.recs) + 1)]
    objects = (["agent1 - agent"] + [f"{l} - location" for l in locs]
               + [f"{r} - receptacle" for r in game.rec_ids] + [f"{o} - object" for o in game.obj_ids]
               + [f"{t}type - otype" for t in otypes] + [f"{t}type - rtype" for t in rtypes])
    init = ["(= (total-cost) 0)", f"(atLocation agent1 {locs[0]})"]
    for i, (rid, (_, rt)) in enumerate(zip(game.rec_ids, game.recs)):
        init += [f"(receptacleAtLocation {rid} {locs[i + 1]})", f"(receptacleType {rid} {rt}type)"]
        if rt in household.OPENABLE:
            init.append(f"(openable {rid})")
    for j, (oid, (_, ot)) in enumerate(zip(game.obj_ids, game.objs)):
        r = game.obj_start[j]
        init += [f"(objectType {oid} {ot}type)", f"(inReceptacle {oid} {game.rec_ids[r]})",
                 f"(objectAtLocation {oid} {locs[r + 1]})"]
        if ot in household.LAMPS:
            init.append(f"(toggleable {oid})")
        else:
            init.append(f"(pickupable {oid})")
        for fact, group in (("heatable", household.HEATABLE), ("coolable", household.COOLABLE),
                            ("cleanable", household.CLEANABLE)):
            if ot in group:
                init.append(f"({fact} {oid})")
        if game.start_cool[j]:
            init.append(f"(isCool {oid})")
    present_o = {t for _, t in game.objs}
    for rt in sorted({t for _, t in game.recs}):
        init += [f"(canContain {rt}type {ot}type)" for ot in sorted(present_o & household.CAN_CONTAIN[rt])]
    tt = game.task_type
    kind = {"look_at_obj_in_light": "look", "pick_two_obj_and_place": "two"}.get(tt, "simple")
    goal = _GOALS[kind].format(obj=game.goal_obj, recep=game.goal_recep, toggle=game.goal_lamp,
                               extra=_EXTRA.get(tt, ""))
    nl = "\n        "
    return (f"(define (problem plan_generated)\n    (:domain alfred)\n    (:objects{nl}{nl.join(objects)}\n    )\n"
            f"    (:init{nl}{nl.join(init)}\n    )\n    (:goal (and {goal}))\n)\n")


def export_game(game: household.Game, walkthrough: list[str] | None = None) -> dict:
    """game.tw-pddl content for a generated household."""
    _, grammar = _logic_files()
    return {"pddl_domain": exported_domain(),
            "grammar": grammar.replace("UNKNOWN GOAL", game.task.rstrip(".")),
            "pddl_problem": problem_pddl(game), "solvable": True, "walkthrough": walkthrough}


def write_game(game: household.Game, out_dir: str, walkthrough: list[str] | None = None) -> str:
    """Write `game` under out_dir in ALFWorld's layout; returns the game.tw-pddl path."""
    name = f"{game.task_type}-{game.goal_obj}-None-{game.goal_recep or game.goal_lamp}-gen"
    d = os.path.join(out_dir, name, "trial_" + format(zlib.crc32(game.key.encode()), "010d"))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "game.tw-pddl")
    with open(path, "w") as f:
        json.dump(export_game(game, walkthrough), f)
    return path


# ---------------------------------------------------------------------------------------------
# The registration (envs.ENVS): the built-in simulator (sims/household.py) or this engine
# ---------------------------------------------------------------------------------------------
SPEC = envs.EnvSpec(
    name="alfworld", make=make_alfworld, splits=household.SPLITS,
    num_tasks=household.num_tasks, vocabulary=household.vocabulary,
    chat_prompt=envs.alfworld_chat_prompt, compact_prompt=envs.compact_prompt, parse=envs.parse_action_tag,
    task_types=household.TASK_TYPES, backend=backend_kwargs,
    config_kwargs={"preset": "preset"}, demo_kwargs={"bc_expert": "expert"})
