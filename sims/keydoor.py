"""Key-to-door: a text corridor whose pivotal decisions are known (the "credit lab").

What this implements: a small text game for measuring credit assignment where the ground truth is
known, after the key-to-door design (an early decision that pays off only at the end, a long delay
and distractors in between), in the `envs.Env` protocol, so every trainer, judge and verifier in
the project runs on it unchanged.

Rules (in full, with the randomness rules and every analytic value: docs/simulators.md, "Key-to-door"):
* A corridor of `rooms` rooms (1..rooms in the text, 0-based in the code); the agent starts in
  room 1 and can only `go forward`. Each room holds `distractors` harmless objects (take / drop /
  examine them: no effect on the outcome).
* N = `keys` keys lie in rooms pivot .. pivot + N − 1 (`pivot` default 0): `take key` is the
  pivotal decision. Optional trap (`trap` > 0): a "cursed coin" in a room other than the
  pivot's; taking it multiplies the door's chance by (1 − trap). Keys and coin cannot be dropped.
* In the last room `open door` ends the episode; the door opens (won, reward 1.0) with
        p = (p_nokey + (p_key − p_nokey) · k / N) · ((1 − trap) if the coin was taken else 1)
  for k keys held, drawn from the env's own RNG (`self.rng`; `reseed` replaces it per episode).
* Optional distractor rewards (`apples` = a, after TVT): each middle room hides an apple with
  chance APPLE_CHANCE, collected silently (reward a); score = won + a · apples (`--reward score`).
* Ground truth in `info["pivotal"]` (kept in `Turn.truth`, never shown to the policy): "key" (a
  key taken), "trap" (the coin taken), "nokey" (a `go forward` that leaves a key behind).
* Every step counts against `max_steps` (default 3·rooms + 2; reaching it is a failure); text that
  is not admissible answers "Nothing happens."; nothing raises. `snapshot()` includes the RNG.

Analytic values (`analytic_value`; what the verification tests compare Δ̂ against): under a
policy that takes the key with probability q, then goes forward and opens the door in time,
        V(s_pre) = q·p_key + (1 − q)·p_nokey,   V(s_post) = p_key,
        A(take key) = V(s_post) − V(s_pre) = (1 − q)·(p_key − p_nokey),
and every other decision has advantage 0 (the trap, N keys and apples: docs/simulators.md).

What it leaves out: visible or optional apples (here automatic, pure noise), a way back along the
corridor, partial credit (score = won, plus the apples when on), visual observations; the test
split is 128 fixed tasks, the training split is generated (unbounded).

Run: `python -c "from sims import keydoor; e = keydoor.make(); print(e.reset(0)[0])"`;
tests: `python -m pytest -q tests/test_keydoor.py`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import envs

# ---------------------------------------------------------------------------------------------
# Fixed text: object names and descriptions, messages (the vocabulary is built from these)
# ---------------------------------------------------------------------------------------------
KEY = "key"
TRAP = "cursed coin"
# harmless objects; single words, none of them is "key", "coin" or "door"
OBJECTS = ["pebble", "feather", "candle", "spoon", "button", "ribbon", "acorn", "shell",
           "thimble", "marble", "twig", "leaf", "cup", "brush", "sock"]
DESCRIPTIONS = {
    "pebble": "It is a smooth grey pebble.",
    "feather": "It is a light white feather.",
    "candle": "It is a short wax candle.",
    "spoon": "It is a plain metal spoon.",
    "button": "It is a round wooden button.",
    "ribbon": "It is a long red ribbon.",
    "acorn": "It is a small brown acorn.",
    "shell": "It is a pale sea shell.",
    "thimble": "It is a tiny brass thimble.",
    "marble": "It is a glass marble.",
    "twig": "It is a thin dry twig.",
    "leaf": "It is a dry green leaf.",
    "cup": "It is an empty tin cup.",
    "brush": "It is an old paint brush.",
    "sock": "It is a single wool sock.",
    KEY: "It is a small iron key.",          # plain: no hint that it matters
    TRAP: "It is a dull old coin.",
}
TASK = "find the door at the end of the corridor and open it."
NOTHING = "Nothing happens."
DOOR_OPENS = "The door opens."
DOOR_SHUT = "The door stays shut."
DOOR_HERE = "There is a door here."
SPLITS = ("train", "test")
TEST_TASKS = 128
_SPLIT_CODE = {"train": 0, "test": 1}     # in every RNG seed: train and test tasks never coincide


# ---------------------------------------------------------------------------------------------
# Options (`--env-opt KEY=VALUE`); `max_steps` is train.py's own flag, passed as a keyword
# ---------------------------------------------------------------------------------------------
OPTIONS: dict[str, envs.EnvOption] = {
    "rooms": envs.EnvOption(int, 8, envs.in_range(2, 64), "rooms in the corridor"),
    "pivot": envs.EnvOption(int, 0, lambda v: None if v >= 0 else "must be >= 0",
                            "0-based room holding the key (must be < rooms)"),
    "p_key": envs.EnvOption(float, 0.8, envs.in_range(0.0, 1.0), "door's chance with the key"),
    "p_nokey": envs.EnvOption(float, 0.2, envs.in_range(0.0, 1.0), "door's chance without the key"),
    "distractors": envs.EnvOption(int, 1, envs.in_range(0, 4), "harmless objects per room"),
    "trap": envs.EnvOption(float, 0.0, envs.in_range(0.0, 1.0),
                           "taking the cursed coin multiplies the door's chance by 1 - trap (0 = no coin)"),
    "expert_key": envs.EnvOption(float, 0.5, envs.in_range(0.0, 1.0),
                                 "warm-start expert: chance it takes the key in an episode"),
    "expert_neutral": envs.EnvOption(float, 0.0, envs.in_range(0.0, 1.0),
                                     "warm-start expert: chance it examines a distractor in each room before "
                                     "moving on (neutral actions the warm start copies; 0 = it ignores them)"),
    "keys": envs.EnvOption(int, 1, envs.in_range(1, 4),
                           "keys, one in each room from pivot on; the door's chance rises linearly with the keys held"),
    "apples": envs.EnvOption(float, 0.0, envs.in_range(0.0, 1.0),
                             "distractor reward: each middle room hides an apple (chance 1/2) worth this much "
                             "(score = won + apples; needs --reward score; 0 = off)"),
}
APPLE_CHANCE = 0.5     # a middle room's chance to hide an apple, drawn from self.rng on entering it


def check_params(rooms: int, pivot: int, p_key: float, p_nokey: float, distractors: int,
                 trap: float, expert_key: float, max_steps: int | None = None, keys: int = 1,
                 apples: float = 0.0, expert_neutral: float = 0.0) -> None:
    """Each option's own check plus the rules across options; ValueError with one line naming
    the option. (parse_env_opts already checks each option alone; this also covers direct calls.)"""
    vals = dict(rooms=rooms, pivot=pivot, p_key=p_key, p_nokey=p_nokey, distractors=distractors,
                trap=trap, expert_key=expert_key, keys=keys, apples=apples, expert_neutral=expert_neutral)
    for k, v in vals.items():
        opt = OPTIONS[k]
        ok_type = (isinstance(v, int) and not isinstance(v, bool)) if opt.type is int else \
            (isinstance(v, (int, float)) and not isinstance(v, bool))
        if not ok_type:
            raise ValueError(f"keydoor: {k}={v!r}: not a valid {opt.type.__name__}")
        if isinstance(v, float) and math.isnan(v):
            raise ValueError(f"keydoor: {k}={v!r}: not a number")
        err = opt.check(v)
        if err:
            raise ValueError(f"keydoor: {k}={v!r}: {err}")
    if pivot >= rooms:
        raise ValueError(f"keydoor: pivot={pivot}: must be < rooms ({rooms})")
    if pivot + keys > rooms:
        raise ValueError(f"keydoor: keys={keys}: the keys lie in rooms pivot..pivot+keys-1, so pivot + keys "
                         f"must be <= rooms ({pivot} + {keys} > {rooms})")
    if distractors > len(OBJECTS):       # per room names are distinct; in_range already caps at 4
        raise ValueError(f"keydoor: distractors={distractors}: at most {len(OBJECTS)}")
    if max_steps is not None and (not isinstance(max_steps, int) or isinstance(max_steps, bool)
                                  or max_steps < rooms + 1):
        raise ValueError(f"keydoor: max_steps={max_steps!r}: must be an int >= rooms + 1 ({rooms + 1}): "
                         f"enough to take the key and open the door")


# ---------------------------------------------------------------------------------------------
# Analytic values
# ---------------------------------------------------------------------------------------------
def middle_rooms(rooms: int, pivot: int = 0, keys: int = 1) -> range:
    """The 0-based rooms that may hide an apple: after the last key room, before the door room."""
    return range(pivot + keys, rooms - 1)


def apples_ahead(room: int, rooms: int, pivot: int = 0, keys: int = 1) -> int:
    """Middle rooms still to enter from `room` (each worth apples · APPLE_CHANCE in expectation)."""
    return sum(1 for r in middle_rooms(rooms, pivot, keys) if r > room)


def door_chance(key: int, trap_taken: bool, p_key: float, p_nokey: float, trap: float, keys: int = 1) -> float:
    """The door's chance to open given what is held: `key` = keys held (a bool for one key) of
    `keys`; p_nokey + (p_key − p_nokey)·key/keys, exactly p_key / p_nokey at all / none."""
    k = min(int(key), keys)
    base = p_key if k == keys else p_nokey if k == 0 else p_nokey + (p_key - p_nokey) * k / keys
    return base * ((1.0 - trap) if trap_taken else 1.0)


def analytic_value(q_key: float, p_key: float = 0.8, p_nokey: float = 0.2, trap: float = 0.0,
                   q_trap: float = 0.0) -> float:
    """V = P(win) under a policy that takes the key with probability q_key and the coin with
    probability q_trap (independently), and always opens the door within the step limit.
    A decision already made is probability 1 or 0: V(after taking the key) = analytic_value(1.0),
    V(after passing the key room without it) = analytic_value(0.0), and so on."""
    return (q_key * p_key + (1.0 - q_key) * p_nokey) * (1.0 - q_trap * trap)


# ---------------------------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------------------------
def _article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def _listing(items) -> str:
    """["candle", "key"] -> "a candle and a key"; three or more: "a, b and c"."""
    parts = [_article(x) for x in items]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def room_text(room: int, rooms: int, items) -> str:
    """"You are in room 3 of 8. You see a candle and a key." (+ the door in the last room)."""
    s = f"You are in room {room + 1} of {rooms}."
    if items:
        s += f" You see {_listing(items)}."
    if room == rooms - 1:
        s += " " + DOOR_HERE
    return s


def _unique(xs) -> list[str]:
    return list(dict.fromkeys(xs))


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------
@dataclass
class State:
    """The whole game state except the door RNG. Every field is immutable (tuples), so a shallow
    copy is a deep copy: snapshots are cheap."""
    task: int = -1
    room: int = 0                          # 0-based
    items: tuple = ()                      # items[r]: objects lying in room r (tuple of names)
    held: tuple = ()                       # objects held, in the order taken
    key: bool = False                      # the pivot room's key is held (lab/p_key_held's event)
    keys: int = 0                          # keys held (of --env-opt keys; = key with one key)
    trap_taken: bool = False               # the coin was taken at some point
    steps: int = 0
    done: bool = False
    won: bool = False
    expert_takes_key: bool = False         # the imperfect expert's decision for this episode
    expert_neutral: tuple = ()             # rooms where the expert examines a distractor first (expert_neutral)
    examined: tuple = ()                   # rooms where something was examined (the expert does it once)
    apple_score: float = 0.0               # apples collected × their worth (no effect on what follows)


class KeyDoor:
    """One corridor; the rules: the module docstring, in full docs/simulators.md ("Key-to-door")."""
    name = "keydoor"

    def __init__(self, split: str = "train", seed: int = 0, rooms: int = 8, pivot: int = 0,
                 p_key: float = 0.8, p_nokey: float = 0.2, distractors: int = 1, trap: float = 0.0,
                 expert_key: float = 0.5, max_steps: int | None = None, keys: int = 1, apples: float = 0.0,
                 expert_neutral: float = 0.0):
        if split not in SPLITS:
            raise ValueError(f"keydoor: no split {split!r}; choose one of {list(SPLITS)}")
        check_params(rooms, pivot, p_key, p_nokey, distractors, trap, expert_key, max_steps or None, keys, apples,
                     expert_neutral)
        self.expert_neutral = float(expert_neutral)
        self.keys, self.apples = int(keys), float(apples)
        self.middle = frozenset(middle_rooms(rooms, pivot, keys)) if apples > 0 else frozenset()
        max_steps = max_steps or 3 * rooms + 2          # 0 / None: the default
        self.split, self.seed = split, int(seed)
        self.rooms, self.pivot, self.distractors = rooms, pivot, distractors
        self.p_key, self.p_nokey, self.trap, self.expert_key = float(p_key), float(p_nokey), float(trap), float(expert_key)
        self.max_steps = max_steps
        self.s = State()
        self.rng = np.random.default_rng(self._seed_seq(-1, 0xD00))

    # ---- seeding ------------------------------------------------------------------------------
    def _seed_seq(self, task: int, purpose: int) -> list[int]:
        # SeedSequence entropy: non-negative ints; the split code keeps train and test apart
        return [self.seed % (1 << 63), _SPLIT_CODE[self.split], task + 1, purpose]

    def layout(self, task: int) -> tuple[tuple[str, ...], ...]:
        """Objects lying in each room at the start of `task`. All draws are made whatever the
        options' values (p, trap), so one task has the same distractors with the trap on or off."""
        g = np.random.default_rng(self._seed_seq(task, 0x1A7))
        trap_room = int(g.choice([r for r in range(self.rooms) if r != self.pivot]))
        out = []
        for r in range(self.rooms):
            names = [OBJECTS[i] for i in g.choice(len(OBJECTS), size=self.distractors, replace=False)]
            kpos, cpos = int(g.integers(0, self.distractors + 1)), int(g.integers(0, self.distractors + 2))
            if self.pivot <= r < self.pivot + self.keys:
                names.insert(kpos, KEY)
            if self.trap > 0 and r == trap_room:
                names.insert(min(cpos, len(names)), TRAP)
            out.append(tuple(names))
        return tuple(out)

    def trap_room(self, task: int) -> int | None:
        """0-based room holding the coin in `task` (None with the trap off)."""
        return next((r for r, it in enumerate(self.layout(task)) if TRAP in it), None)

    # ---- protocol -----------------------------------------------------------------------------
    def reset(self, task: int) -> tuple[str, dict]:
        task = int(task)
        if task < 0 or (self.split == "test" and task >= TEST_TASKS):
            raise ValueError(f"keydoor: task {task} out of range for split {self.split!r}")
        self.rng = np.random.default_rng(self._seed_seq(task, 0xD00))     # the door's draw
        expert = np.random.default_rng(self._seed_seq(task, 0xE4)).random() < self.expert_key
        # the expert's neutral detours: one draw per room, from its own stream (the other draws are
        # unchanged by this option, so a task is the same game with it on or off)
        g = np.random.default_rng(self._seed_seq(task, 0xE5))
        neutral = tuple(r for r, u in enumerate(g.random(self.rooms)) if u < self.expert_neutral and self.distractors)
        self.s = State(task=task, items=self.layout(task), expert_takes_key=bool(expert), expert_neutral=neutral)
        return self._room() + f"\n\nYour task is to: {TASK}", self._info("")

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        s = self.s
        if s.done:
            return NOTHING, 0.0, True, self._info("")
        s.steps += 1
        a = " ".join(str(action).lower().split())
        verb, _, obj = a.partition(" ")
        here, last = s.items[s.room], self.rooms - 1
        pivotal, reward = "", 0.0
        if a == "go forward" and s.room < last:
            if KEY in here:
                pivotal = "nokey"                        # left a key behind: the failures' decision
            s.room += 1
            obs = self._room()
            if s.room in self.middle and self.rng.random() < APPLE_CHANCE:   # a hidden apple: no text
                reward = self.apples
                s.apple_score += self.apples
        elif a == "open door" and s.room == last:
            p = door_chance(s.keys, s.trap_taken, self.p_key, self.p_nokey, self.trap, self.keys)
            s.won = bool(self.rng.random() < p)          # the only use of self.rng (but the apples')
            s.done = True
            reward = float(s.won)
            obs = DOOR_OPENS if s.won else DOOR_SHUT
        elif verb == "take" and obj in here:
            self._set_items(s.room, _without(here, obj))
            s.held = s.held + (obj,)
            if obj == KEY:
                s.keys, pivotal = s.keys + 1, "key"
                s.key = s.key or s.room == self.pivot
            elif obj == TRAP:
                s.trap_taken, pivotal = True, "trap"
            obs = f"You take the {obj}."
        elif verb == "drop" and obj in s.held and obj not in (KEY, TRAP):
            s.held = _without(s.held, obj)
            self._set_items(s.room, here + (obj,))
            obs = f"You drop the {obj}."
        elif verb == "examine" and (obj in here or obj in s.held):
            obs = DESCRIPTIONS[obj]
            if s.room not in s.examined:
                s.examined = s.examined + (s.room,)
        else:
            obs = NOTHING
        if s.steps >= self.max_steps:
            s.done = True                                # out of steps: a failure unless just won
        return obs, reward, s.done, self._info(pivotal)

    def reseed(self, seed: int) -> None:
        """Replace the door's RNG (fresh randomness for a new episode or a continuation)."""
        self.rng = np.random.default_rng(int(seed) % (1 << 63))

    def snapshot(self) -> Any:
        return replace(self.s), self.rng.bit_generator.state   # the state getter returns a new dict

    def restore(self, snap: Any) -> None:
        st, rng_state = snap
        self.s = replace(st)
        self.rng = np.random.default_rng(0)
        self.rng.bit_generator.state = rng_state

    def expert_action(self) -> str:
        """The imperfect expert: takes the key if it decided so at reset, never the coin, goes
        forward and opens the door; it ignores distractors, but for `expert_neutral` > 0 it first
        examines the room's first distractor in the rooms drawn at reset (once per room)."""
        s = self.s
        if KEY in s.items[s.room] and s.expert_takes_key:
            return f"take {KEY}"
        if s.room in s.expert_neutral:
            objs = [x for x in s.items[s.room] if x not in (KEY, TRAP)]
            if objs and s.room not in s.examined:
                return f"examine {objs[0]}"
        return "open door" if s.room == self.rooms - 1 else "go forward"

    # ---- helpers ------------------------------------------------------------------------------
    def admissible(self) -> list[str]:
        s = self.s
        if s.done:
            return []
        here = s.items[s.room]
        move = ["open door"] if s.room == self.rooms - 1 else ["go forward"]
        return (move + [f"take {x}" for x in _unique(here)]
                + [f"drop {x}" for x in _unique(s.held) if x not in (KEY, TRAP)]
                + [f"examine {x}" for x in _unique(here + s.held)])

    def _room(self) -> str:
        return room_text(self.s.room, self.rooms, self.s.items[self.s.room])

    def _set_items(self, room: int, items: tuple) -> None:
        its = list(self.s.items)
        its[room] = items
        self.s.items = tuple(its)

    def _info(self, pivotal: str) -> dict:
        s = self.s
        return {"task": TASK, "task_type": "keydoor", "admissible": self.admissible(),
                "won": s.won, "score": float(s.won) + s.apple_score,      # = won unless apples are on
                # ground truth ("key" / "trap" / "nokey" / ""): copied to Turn.truth, never shown to the policy or the judge
                "pivotal": pivotal, "key_held": s.key, "keys_held": s.keys, "trap_taken": s.trap_taken}


def _without(xs: tuple, x: str) -> tuple:
    """`xs` less its first `x`."""
    i = xs.index(x)
    return xs[:i] + xs[i + 1:]


# ---------------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------------
def make(split: str = "train", seed: int = 0, **kw) -> KeyDoor:
    """One env. Keywords: the `OPTIONS` (typed and range-checked) and `max_steps`."""
    unknown = sorted(set(kw) - set(OPTIONS) - {"max_steps"})
    if unknown:
        raise ValueError(f"keydoor: unknown option {unknown[0]} (it has: {', '.join(sorted(OPTIONS))}, max_steps)")
    return KeyDoor(split=split, seed=seed, **kw)


def num_tasks(split: str) -> int | None:
    return None if split == "train" else TEST_TASKS


def vocabulary() -> list[str]:
    """Every word env text can contain (numbers are tokenised digit by digit)."""
    texts = [TASK, f"Your task is to: {TASK}", NOTHING, DOOR_OPENS, DOOR_SHUT, DOOR_HERE,
             room_text(0, 2, ["acorn", "key", TRAP]), room_text(1, 2, []), "0 1 2 3 4 5 6 7 8 9",
             "go forward", "open door", "take drop examine", "You take the . You drop the ."]
    texts += OBJECTS + [KEY, TRAP] + list(DESCRIPTIONS.values())
    return texts


def chat_prompt(v: envs.PromptInput, history_len: int = 2) -> str:
    """For real LLMs: the task, the last `history_len` steps, the current observation and the
    admissible actions; the answer goes inside <action></action>."""
    lines = ["You are playing a text game. You walk along a corridor of rooms.",
             f"Your task is to: {v.task}"]
    recent = v.history[max(0, len(v.history) - history_len):] if history_len else []
    if recent:
        lines.append(f"You have taken {v.step} step(s). Your most recent steps, oldest first:")
        k0 = len(v.history) - len(recent)
        for k, (o, a) in enumerate(recent):
            lines.append(f"Step {k0 + k + 1}: you saw \"{o}\" and chose \"{a}\".")
    lines.append(f"Current observation: {v.obs}")
    lines.append("Admissible actions: " + ", ".join(f"'{a}'" for a in v.admissible) + ".")
    lines.append("Think about which action helps you finish the task, then answer with exactly one "
                 "admissible action inside <action></action> tags, e.g. <action>go forward</action>.")
    return "\n".join(lines)


SPEC = envs.EnvSpec(
    name="keydoor", make=make, splits=SPLITS, num_tasks=num_tasks, vocabulary=vocabulary,
    chat_prompt=chat_prompt, compact_prompt=envs.compact_prompt, parse=envs.parse_action_tag,
    task_types=("keydoor",), options=OPTIONS, lab=True,
    # the corridor is learned in few BC steps (stopped at a fixed step) and a run is meant to be
    # cheap (many seeds)
    defaults={"bc_episodes": 100, "bc_steps": 150, "bc_target": 0.0, "iters": 40, "history_len": 2,
              "eval_every": 10, "max_new_tokens": 12},
    # for lab/metrics.py: the pivotal action, and the action that walks toward it (probe prompts are the
    # states in the pivot room reached by walking there on held-out tasks)
    extra={"pivot_action": "take key", "walk_action": "go forward"})
