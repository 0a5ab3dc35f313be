"""Built-in ALFWorld 0.4.x-compatible household simulator: generator, fast text game, expert.

What it implements: a pure-Python re-implementation of the *text* ALFWorld game (alfworld 0.4.x,
TextWorld PDDL engine, `json_2.1.2` game data) on procedurally generated households, so the whole
ProVer pipeline runs offline on a CPU. Everything an agent can observe is meant to be
string-identical to what the real engine prints for the same household:
tests/test_alfworld_equivalence.py exports our games as `game.tw-pddl` files (sims/alfworld_tw.py)
and plays them on the real engine step by step.

    env = Household("train", seed=0, preset="small")   # or alfworld_tw.make_alfworld (backend choice)
    obs, info = env.reset(task=3)          # info: task, task_type, admissible, won, score
    obs, r, done, info = env.step("go to fridge 1")
    env.expert_action()                    # next action of a replanning expert (BC / tests only):
                                           # "search" (default; sees what the agent sees) or "oracle"

Rules (ALFWorld 0.4.x's `alfred.pddl`/`alfred.twl2` are the ground truth; every rule, the win
conditions per task type and the text format in full: docs/simulators.md, "Household"):
* A command acts only if, after `strip()`, it equals one of the previous step's admissible commands
  exactly; anything else answers `Nothing happens.`, changes nothing, still counts as a step.
* Admissible = `sorted(set(...))` of help/inventory/look, `go to R`, and the examine / open /
  close / take / move / heat / cool / clean / use commands the PDDL preconditions allow.
* Win is checked after every step; reward 1.0 on the winning step, done = won or
  steps >= max_steps (50); after done the last result is repeated.
* Lists print in the engine's PDDL-id order: by type, instance numbers descending (`pddl_id`).

Generator: a game is a pure function of (split, preset, seed, task index) (`generate_game`).
Presets: `small` (4-7 receptacles, the CPU default) and `full` (ALFWorld-like rooms). Splits:
train (unbounded), valid_seen 140, valid_unseen 134 (fixed, independent of `seed`); valid_unseen
asks only (object, receptacle) type pairs never asked in training (`is_unseen_pair`), and train
re-draws any game equal to a valid_seen one (`game_for`).

What it leaves out (deliberately): slicing, movable receptacles, shared locations, human goal
annotations, THOR visuals; `examine O` for an object lying in a receptacle is not admissible (as
in real 0.4.x; the exported domain patches that precondition, see sims/alfworld_tw.py).

Run the tests / benchmark:
    .venv/bin/python -m pytest -q tests/test_household.py tests/test_alfworld_equivalence.py
    .venv/bin/python bench/env_speed.py
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "valid_seen", "valid_unseen")
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
PRESETS = ("small", "full")
EXPERTS = ("search", "oracle")    # see Household.search_action / oracle_action
# Per-type task counts of the fixed eval splits, in TASK_TYPES order: the counts reported for
# ALFWorld (from the literature, not verified from data; docs/simulators.md, "Household").
EVAL_COUNTS = {"valid_seen": (35, 13, 27, 16, 25, 24), "valid_unseen": (24, 18, 31, 23, 21, 17)}

# goal_library.py templates; one of the two is picked per game, then fixed.
TEMPLATES = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

# ---------------------------------------------------------------------------------------------
# Object / receptacle facts (ALFWorld's alfworld/gen/constants.py)
# ---------------------------------------------------------------------------------------------
_CAN_CONTAIN_TXT = """
armchair : basketball, book, box, cellphone, cloth, creditcard, keychain, laptop, newspaper, pillow, remotecontrol
bathtubbasin : cloth, dishsponge, handtowel, soapbar
bed : baseballbat, basketball, book, cellphone, laptop, newspaper, pillow, tennisracket
cabinet : book, bowl, box, candle, cd, cloth, cup, dishsponge, glassbottle, handtowel, kettle, ladle, mug, newspaper, pan, peppershaker, plate, plunger, pot, saltshaker, soapbar, soapbottle, spraybottle, tissuebox, toiletpaper, toiletpaperroll, vase, wateringcan, winebottle
cart : candle, cloth, dishsponge, handtowel, mug, papertowel, plunger, soapbar, soapbottle, spraybottle, statue, tissuebox, toiletpaper, toiletpaperroll, vase
coffeemachine : mug
coffeetable : alarmclock, apple, baseballbat, basketball, book, bowl, box, bread, butterknife, candle, cd, cellphone, cloth, creditcard, cup, dishsponge, egg, fork, glassbottle, handtowel, kettle, keychain, knife, ladle, laptop, lettuce, mug, newspaper, pan, papertowel, pen, pencil, peppershaker, plate, pot, potato, remotecontrol, saltshaker, soapbar, soapbottle, spatula, spoon, spraybottle, statue, tennisracket, tissuebox, toiletpaper, toiletpaperroll, tomato, vase, watch, wateringcan, winebottle
countertop : alarmclock, apple, baseballbat, basketball, book, bowl, box, bread, butterknife, candle, cd, cellphone, cloth, creditcard, cup, dishsponge, egg, fork, glassbottle, handtowel, kettle, keychain, knife, ladle, laptop, lettuce, mug, newspaper, pan, papertowel, pen, pencil, peppershaker, plate, pot, potato, remotecontrol, saltshaker, soapbar, soapbottle, spatula, spoon, spraybottle, statue, tennisracket, tissuebox, toiletpaper, toiletpaperroll, tomato, vase, watch, wateringcan, winebottle
desk : alarmclock, basketball, book, bowl, box, candle, cd, cellphone, cloth, creditcard, cup, glassbottle, keychain, laptop, mug, newspaper, pen, pencil, plate, remotecontrol, soapbottle, spraybottle, statue, tennisracket, tissuebox, toiletpaper, toiletpaperroll, vase, watch, wateringcan, winebottle
diningtable : alarmclock, apple, baseballbat, basketball, book, bowl, box, bread, butterknife, candle, cd, cellphone, cloth, creditcard, cup, dishsponge, egg, fork, glassbottle, handtowel, kettle, keychain, knife, ladle, laptop, lettuce, mug, newspaper, pan, papertowel, pen, pencil, peppershaker, plate, pot, potato, remotecontrol, saltshaker, soapbar, soapbottle, spatula, spoon, spraybottle, statue, tennisracket, tissuebox, toiletpaper, toiletpaperroll, tomato, vase, watch, wateringcan, winebottle
drawer : book, butterknife, candle, cd, cellphone, cloth, creditcard, dishsponge, fork, handtowel, keychain, knife, ladle, newspaper, pen, pencil, peppershaker, remotecontrol, saltshaker, soapbar, soapbottle, spatula, spoon, spraybottle, tissuebox, toiletpaper, toiletpaperroll, watch, wateringcan
dresser : alarmclock, basketball, book, bowl, box, candle, cd, cellphone, cloth, creditcard, cup, glassbottle, keychain, laptop, mug, newspaper, pen, pencil, plate, remotecontrol, spraybottle, statue, tennisracket, tissuebox, toiletpaper, toiletpaperroll, vase, watch, wateringcan, winebottle
fridge : apple, bowl, bread, cup, egg, glassbottle, lettuce, mug, pan, plate, pot, potato, tomato, winebottle
garbagecan : apple, bread, cd, cloth, dishsponge, egg, handtowel, lettuce, newspaper, papertowel, pen, pencil, potato, soapbar, soapbottle, spraybottle, tissuebox, toiletpaper, toiletpaperroll, tomato, winebottle
handtowelholder : handtowel
laundryhamper : cloth
microwave : apple, bowl, bread, cup, egg, glassbottle, mug, plate, potato, tomato
ottoman : basketball, book, box, cellphone, cloth, creditcard, keychain, laptop, newspaper, pillow, remotecontrol
safe : cd, cellphone, creditcard, keychain, statue, vase, watch
shelf : alarmclock, book, bowl, box, candle, cd, cellphone, cloth, creditcard, cup, dishsponge, glassbottle, handtowel, kettle, keychain, mug, newspaper, papertowel, pen, pencil, peppershaker, plate, pot, remotecontrol, saltshaker, soapbar, soapbottle, spraybottle, statue, tissuebox, toiletpaper, toiletpaperroll, vase, watch, wateringcan, winebottle
sidetable : alarmclock, apple, baseballbat, basketball, book, bowl, box, bread, butterknife, candle, cd, cellphone, cloth, creditcard, cup, dishsponge, egg, fork, glassbottle, handtowel, kettle, keychain, knife, ladle, laptop, lettuce, mug, newspaper, pan, papertowel, pen, pencil, peppershaker, plate, pot, potato, remotecontrol, saltshaker, soapbar, soapbottle, spatula, spoon, spraybottle, statue, tennisracket, tissuebox, toiletpaper, toiletpaperroll, tomato, vase, watch, wateringcan, winebottle
sinkbasin : apple, bowl, butterknife, cloth, cup, dishsponge, egg, fork, glassbottle, handtowel, kettle, knife, ladle, lettuce, mug, pan, plate, pot, potato, soapbar, spatula, spoon, tomato
sofa : basketball, book, box, cellphone, cloth, creditcard, keychain, laptop, newspaper, pillow, remotecontrol
stoveburner : kettle, pan, pot
tvstand : tissuebox
toaster :
toilet : candle, cloth, dishsponge, handtowel, newspaper, papertowel, soapbar, soapbottle, spraybottle, tissuebox, toiletpaper, toiletpaperroll
toiletpaperhanger : toiletpaper, toiletpaperroll
towelholder : towel
"""
CAN_CONTAIN: dict[str, frozenset] = {}
for _line in _CAN_CONTAIN_TXT.strip().splitlines():
    _r, _objs = _line.split(":")
    CAN_CONTAIN[_r.strip()] = frozenset(o.strip() for o in _objs.split(",") if o.strip())

OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
HEATABLE = frozenset("apple bread cup egg mug plate potato tomato".split())
COOLABLE = frozenset("apple bowl bread cup egg lettuce mug pan plate pot potato tomato winebottle".split())
CLEANABLE = frozenset(("apple bowl butterknife cloth cup dishsponge egg fork kettle knife ladle lettuce mug pan "
                       "plate pot potato soapbar spatula spoon tomato").split())
LAMPS = ("desklamp", "floorlamp")                      # toggleable, not pickupable, live in a receptacle
LAMP_HOSTS = ("desk", "sidetable", "dresser", "coffeetable", "shelf")   # never openable: lamp visible
LOOK_OBJECTS = frozenset(("alarmclock book bowl cd cellphone creditcard keychain laptop mug newspaper pen "
                          "pencil pillow remotecontrol statue vase watch").split())

# Room inventories: receptacle type -> (min, max) instance counts of the `full` preset. Singletons
# with min 1 always exist. Object pools: which object types a room of that type holds.
ROOMS = {
    "kitchen": {
        "receptacles": {"cabinet": (3, 10), "coffeemachine": (1, 1), "countertop": (1, 3), "diningtable": (1, 1),
                        "drawer": (1, 9), "fridge": (1, 1), "garbagecan": (1, 1), "microwave": (1, 1),
                        "shelf": (0, 3), "sinkbasin": (1, 1), "stoveburner": (4, 4), "toaster": (1, 1)},
        "objects": ("apple bowl bread butterknife cup dishsponge egg fork glassbottle kettle knife ladle lettuce mug "
                    "pan papertowel peppershaker plate pot potato saltshaker soapbottle spatula spoon tomato "
                    "winebottle").split()},
    "bathroom": {
        "receptacles": {"bathtubbasin": (1, 1), "cabinet": (1, 4), "countertop": (1, 1), "garbagecan": (1, 1),
                        "handtowelholder": (1, 1), "sinkbasin": (1, 2), "toilet": (1, 1),
                        "toiletpaperhanger": (1, 1), "towelholder": (1, 1)},
        "objects": ("candle cloth dishsponge handtowel papertowel plunger soapbar soapbottle spraybottle tissuebox "
                    "toiletpaper towel").split()},
    "bedroom": {
        "receptacles": {"bed": (1, 1), "desk": (1, 1), "drawer": (2, 10), "dresser": (0, 1), "shelf": (0, 6),
                        "sidetable": (1, 2), "safe": (0, 1), "garbagecan": (1, 1), "laundryhamper": (0, 1)},
        "objects": ("alarmclock baseballbat basketball book bowl box cd cellphone cloth creditcard keychain laptop "
                    "mug pen pencil pillow tennisracket vase watch").split()},
    "livingroom": {
        "receptacles": {"sofa": (1, 1), "armchair": (0, 2), "coffeetable": (1, 1), "tvstand": (0, 1),
                        "ottoman": (0, 1), "drawer": (0, 6), "shelf": (1, 4), "sidetable": (1, 2),
                        "garbagecan": (1, 1), "safe": (0, 1), "dresser": (0, 1), "diningtable": (0, 1)},
        "objects": ("book box candle cellphone creditcard keychain laptop newspaper pillow remotecontrol statue "
                    "tissuebox vase watch wateringcan").split()},
}
TASK_ROOMS = {"pick_and_place_simple": ("kitchen", "bathroom", "bedroom", "livingroom"),
              "look_at_obj_in_light": ("bedroom", "livingroom"),
              "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
              "pick_heat_then_place_in_recep": ("kitchen",),
              "pick_cool_then_place_in_recep": ("kitchen",),
              "pick_two_obj_and_place": ("kitchen", "bathroom", "bedroom", "livingroom")}
# appliance a task needs (and which therefore is never its goal receptacle)
_APPLIANCE = {"pick_clean_then_place_in_recep": "sinkbasin", "pick_heat_then_place_in_recep": "microwave",
              "pick_cool_then_place_in_recep": "fridge"}
_AFFORD = {"pick_clean_then_place_in_recep": CLEANABLE, "pick_heat_then_place_in_recep": HEATABLE,
           "pick_cool_then_place_in_recep": COOLABLE}

# alfred.twl2 help text, verbatim (including its odd alignment on the `move` line), as the engine
# prints it: the grammar's leading "\n" is dropped by TextWorld's grammar parser (checked on the
# real engine by tests/test_alfworld_equivalence.py), the trailing one is kept.
HELP_TEXT = ("Available commands:\n"
             "  look:                             look around your current location\n"
             "  inventory:                        check your current inventory\n"
             "  go to (receptacle):               move to a receptacle\n"
             "  open (receptacle):                open a receptacle\n"
             "  close (receptacle):               close a receptacle\n"
             "  take (object) from (receptacle):  take an object from a receptacle\n"
             "  move (object) to (receptacle):  place an object in or on a receptacle\n"
             "  examine (something):              examine a receptacle or an object\n"
             "  use (object):                     use an object\n"
             "  heat (object) with (receptacle):  heat an object using a receptacle\n"
             "  clean (object) with (receptacle): clean an object using a receptacle\n"
             "  cool (object) with (receptacle):  cool an object using a receptacle\n"
             "  slice (object) with (object):     slice an object using a sharp object\n")
BANNER = "-= Welcome to TextWorld, ALFRED! =-\n\n"
NOTHING = "Nothing happens."


def is_unseen_pair(obj: str, recep: str) -> bool:
    """The split rule: (goal object type, goal receptacle/lamp type) pairs held out for valid_unseen."""
    # ALFWorld's unseen split holds out rooms; we hold out task combinations instead, which is what
    # a memorising policy would exploit in our generated rooms
    return zlib.crc32(f"{obj}|{recep}".encode()) % 5 == 0


def pddl_id(typ: str, n: int, count: int) -> str:
    """PDDL id of instance n (1-based) of `count` instances of `typ` in an exported game.

    The engine's Demangler sorts all ids and hands out numbers count, count-1, ... in that order,
    and lists are emitted in id order; so k = count - n makes `typ n` the name of this id, and
    sorting by id gives "type ascending, number descending" — the 0.4.x list order. Basins are
    special-cased by the Demangler (`"basin" in id` appends "basin" to the prefix), so they get
    ALFRED-like ids `sink_bar_<k>_bar_basin`."""
    k = f"{count - n:03d}"
    if typ.endswith("basin"):
        return f"{typ[:-5]}_bar_{k}_bar_basin"
    return f"{typ}_bar_{k}"


# ---------------------------------------------------------------------------------------------
# Game description (static) and generator
# ---------------------------------------------------------------------------------------------
@dataclass
class Game:
    """One generated household + task. Receptacles and objects are listed in display order
    (sorted by `pddl_id`), so "sort a list of indices" is "sort as the engine prints"."""
    key: str                                  # generator key, for provenance
    room: str
    task_type: str
    goal_obj: str
    goal_recep: str                           # receptacle type ("" for look_at_obj_in_light)
    goal_lamp: str                            # lamp type ("" unless look_at_obj_in_light)
    task: str                                 # task sentence incl. trailing period
    recs: list[tuple[str, str]]               # (name "drawer 2", type "drawer")
    objs: list[tuple[str, str]]               # (name "apple 1", type "apple")
    obj_start: list[int]                      # receptacle index each object starts in
    start_cool: list[bool]                    # fridge caveat: goal-type objects starting in a fridge
    rec_ids: list[str] = field(default_factory=list)
    obj_ids: list[str] = field(default_factory=list)

    def fingerprint(self) -> tuple:
        return (self.room, self.task_type, self.goal_obj, self.goal_recep, self.goal_lamp, self.task,
                tuple(self.recs), tuple(self.objs), tuple(self.obj_start))


def _name_instances(types: list[str]) -> tuple[list[tuple[str, str]], list[str], list[int]]:
    """Number instances per type and sort into display order. Returns (names, ids, order) where
    order[j] = index into `types` of the j-th sorted entry. Instance numbers are drawn in the
    order types were added, so sorting (descending numbers) is a real permutation."""
    count: dict[str, int] = {}
    for t in types:
        count[t] = count.get(t, 0) + 1
    seen: dict[str, int] = {}
    ids = []
    for t in types:
        seen[t] = seen.get(t, 0) + 1
        ids.append((pddl_id(t, seen[t], count[t]), f"{t} {seen[t]}", t))
    order = sorted(range(len(types)), key=lambda i: ids[i][0])
    return [(ids[i][1], ids[i][2]) for i in order], [ids[i][0] for i in order], order


def _pick_goal(rng: random.Random, task_type: str, room: str, unseen: bool) -> tuple[str, str]:
    """(goal object type, goal receptacle or lamp type) allowed for this split."""
    pool = ROOMS[room]["objects"]
    rtypes = [r for r in ROOMS[room]["receptacles"] if r != _APPLIANCE.get(task_type)]
    if task_type == "look_at_obj_in_light":
        cands = [(o, lamp) for o in pool if o in LOOK_OBJECTS for lamp in LAMPS]
    else:
        afford = _AFFORD.get(task_type)
        cands = [(o, r) for o in pool if afford is None or o in afford
                 for r in rtypes if o in CAN_CONTAIN[r]
                 # the object must also fit somewhere that is not a goal receptacle (its start)
                 and any(o in CAN_CONTAIN[s] for s in ROOMS[room]["receptacles"] if s != r)]
    cands = [c for c in cands if is_unseen_pair(*c) == unseen]
    assert cands, (task_type, room, unseen)
    return rng.choice(cands)


def _receptacle_types(rng: random.Random, room: str, preset: str, must: list[str]) -> list[str]:
    """Receptacle type per instance. `must` types appear at least once."""
    spec = ROOMS[room]["receptacles"]
    if preset == "full":
        types = []
        for r, (lo, hi) in spec.items():
            types += [r] * rng.randint(max(lo, 1 if r in must else 0), hi)
        return types
    n = rng.randint(4, 7)
    types = list(dict.fromkeys(must))
    others = [r for r in spec if r not in types]
    rng.shuffle(others)
    while len(types) < n and others:
        types.append(others.pop())
    # sometimes a second drawer/cabinet/shelf/countertop, so instance numbers above 1 show up
    multi = [r for r in types if r in ("drawer", "cabinet", "shelf", "countertop", "sidetable")]
    if multi and len(types) < 7 and rng.random() < 0.5:
        types.append(rng.choice(multi))
    return types


def generate_game(split: str, preset: str, seed: int, task: int, task_type: str | None = None,
                  attempt: int = 0) -> Game:
    """The game for (split, preset, seed, task): a pure function of its key."""
    if split not in SPLITS or preset not in PRESETS:
        raise ValueError(f"unknown split/preset {split!r}/{preset!r}; choose from {SPLITS} / {PRESETS}")
    key = f"{split}|{preset}|{seed if split == 'train' else 0}|{task}|{attempt}"
    rng = random.Random(key)
    if task_type is None:
        task_type = task_type_of(split, task)
    room = rng.choice(TASK_ROOMS[task_type])
    goal_obj, goal_target = _pick_goal(rng, task_type, room, unseen=(split == "valid_unseen"))
    look = task_type == "look_at_obj_in_light"
    goal_recep, goal_lamp = ("", goal_target) if look else (goal_target, "")
    # receptacles that must exist: goal receptacle, the appliance, a lamp host, a start for the goal object
    must = [] if look else [goal_recep]
    if task_type in _APPLIANCE:
        must.append(_APPLIANCE[task_type])
    hosts = [h for h in LAMP_HOSTS if h in ROOMS[room]["receptacles"]]
    if look:
        must.append(rng.choice(hosts))
    starts = [r for r in ROOMS[room]["receptacles"] if goal_obj in CAN_CONTAIN[r] and r != goal_recep]
    if not any(r in must for r in starts):
        must.append(rng.choice(starts))
    rtypes = _receptacle_types(rng, room, preset, must)
    # objects: goal instances, lamp(s), distractors (types that fit some present receptacle)
    n_goal = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    if preset == "full":
        n_goal += rng.randint(0, 1)
    otypes = [goal_obj] * n_goal
    present = set(rtypes)
    pool = [o for o in ROOMS[room]["objects"] if o != goal_obj and any(o in CAN_CONTAIN[r] for r in present)]
    n_dis = rng.randint(1, 3) if preset == "small" else rng.randint(8, 25)
    otypes += [rng.choice(pool) for _ in range(n_dis)]
    lamps = []
    if look:
        lamps.append(goal_lamp)
    if preset == "full" and room in ("bedroom", "livingroom") and rng.random() < 0.5:
        lamps.append(rng.choice(LAMPS))
    otypes += lamps
    # placement (indices into rtypes, before sorting)
    place = []
    for i, o in enumerate(otypes):
        if o in LAMPS:
            ok = [j for j, r in enumerate(rtypes) if r in LAMP_HOSTS]
        else:
            ok = [j for j, r in enumerate(rtypes) if o in CAN_CONTAIN[r] and not (o == goal_obj and r == goal_recep)]
        place.append(rng.choice(ok))
    recs, rec_ids, rorder = _name_instances(rtypes)
    objs, obj_ids, oorder = _name_instances(otypes)
    rpos = {old: new for new, old in enumerate(rorder)}
    obj_start = [rpos[place[old]] for old in oorder]
    start_cool = [t == goal_obj and recs[obj_start[j]][1] == "fridge" for j, (_, t) in enumerate(objs)]
    tmpl = rng.choice(TEMPLATES[task_type])
    task_s = tmpl.format(obj=goal_obj, recep=goal_recep, toggle=goal_lamp) + "."
    return Game(key, room, task_type, goal_obj, goal_recep, goal_lamp, task_s, recs, objs, obj_start,
                start_cool, rec_ids, obj_ids)


def task_type_of(split: str, task: int) -> str:
    if split == "train":
        return TASK_TYPES[task % len(TASK_TYPES)]
    counts = EVAL_COUNTS[split]
    if not 0 <= task < sum(counts):
        raise ValueError(f"{split} has {sum(counts)} tasks, got index {task}")
    for tt, c in zip(TASK_TYPES, counts):
        if task < c:
            return tt
        task -= c
    raise AssertionError


_SEEN_FINGERPRINTS: dict[str, set] = {}


def game_for(split: str, preset: str, seed: int, task: int) -> Game:
    """generate_game plus the disjointness rule: train re-draws games that are in valid_seen."""
    if split != "train":
        return generate_game(split, preset, seed, task)
    if preset not in _SEEN_FINGERPRINTS:
        _SEEN_FINGERPRINTS[preset] = {generate_game("valid_seen", preset, 0, i).fingerprint()
                                      for i in range(num_tasks("valid_seen"))}
    for attempt in range(100):
        g = generate_game(split, preset, seed, task, attempt=attempt)
        if g.fingerprint() not in _SEEN_FINGERPRINTS[preset]:
            return g
    raise RuntimeError("could not draw a train game disjoint from valid_seen")   # never observed


def num_tasks(split: str) -> int | None:
    if split == "train":
        return None
    return sum(EVAL_COUNTS[split])


# ---------------------------------------------------------------------------------------------
# The text game
# ---------------------------------------------------------------------------------------------
# Action kinds (tuples (kind, args...) are the values of the admissible-command dict).
GOTO, OPEN, CLOSE, TAKE, MOVE, HEAT, COOL, CLEAN, USE, EXREC, EXOBJ, INV, LOOK, HELP = range(14)
# Per-object state bits.
HOT, COLD, CLEANED, TOGGLED = 1, 2, 4, 8


def fmt_list(names: list[str]) -> str:
    """0.4.x list: `a X`, `nothing`, `, ` and `, and ` before the last (also for two items)."""
    if not names:
        return "nothing"
    items = ["a " + n for n in names]
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


class Household:
    """One ALFWorld-style text game on generated households (the `Env` protocol of envs.py).

    State is a handful of small lists (agent location, open flags, where each object is, object
    state bits), so `snapshot()` is a tuple copy and `restore()` is O(#objects). The admissible
    list and the command->action map depend only on (location, held object, open flag of the
    location, contents of the location), so they are cached per game under that key: a step is a
    dict lookup, a small state update and (for go to/open/examine) one cached list format."""
    name = "alfworld"

    def __init__(self, split: str = "train", seed: int = 0, preset: str = "small", max_steps: int = 50,
                 expert: str = "search"):
        # ValueError, not assert: these are user input (flags) and asserts vanish under `python -O`.
        for what, v, ok in (("split", split, SPLITS), ("preset", preset, PRESETS), ("expert", expert, EXPERTS)):
            if v not in ok:
                raise ValueError(f"unknown {what} {v!r}; choose one of {ok}")
        self.split, self.seed, self.preset, self.max_steps = split, seed, preset, max_steps
        self.expert = expert
        self.game: Game | None = None

    # -- loading ---------------------------------------------------------------------------------
    def load(self, game: Game) -> None:
        """Precompute everything static about `game` (names, affordances, go-to commands)."""
        self.game = g = game
        self.rname = [n for n, _ in g.recs]
        self.rtype = [t for _, t in g.recs]
        self.ropen = [t in OPENABLE for t in self.rtype]
        self.oname = [n for n, _ in g.objs]
        self.otype = [t for _, t in g.objs]
        self.is_lamp = [t in LAMPS for t in self.otype]
        self._goto = [("go to " + n, (GOTO, r)) for r, n in enumerate(self.rname)]
        self._adm_cache: dict[tuple, tuple[list[str], dict]] = {}
        self._list_cache: dict[tuple, str] = {}
        self._intro = (BANNER + "You are in the middle of a room. Looking quickly around you, you see "
                       + fmt_list(self.rname) + ".\n\nYour task is to: " + g.task)

    def reset(self, task: int) -> tuple[str, dict]:
        self.task_index = task
        self.load(game_for(self.split, self.preset, self.seed, task))
        return self.reset_game()

    def reset_game(self, game: Game | None = None) -> tuple[str, dict]:
        """Start `game` (or replay the loaded one) from its initial state."""
        if game is not None:
            self.load(game)
        g = self.game
        self.loc, self.held = -1, -1
        self.opened = [False] * len(g.recs)
        self.where = list(g.obj_start)
        self.flags = [COLD if c else 0 for c in g.start_cool]
        self.steps, self.won, self.done = 0, False, False
        self._refresh()
        self._last = (self._intro, 0.0, False)
        return self._intro, self._info()

    # -- views -----------------------------------------------------------------------------------
    def contents(self, r: int) -> tuple[int, ...]:
        return tuple(o for o, w in enumerate(self.where) if w == r)

    def _fmt(self, objs: tuple[int, ...]) -> str:
        s = self._list_cache.get(objs)
        if s is None:
            s = self._list_cache[objs] = fmt_list([self.oname[o] for o in objs])
        return s

    def describe(self, r: int) -> str:
        """examineReceptacle.feedback (on the state after the action)."""
        n = self.rname[r]
        if self.ropen[r]:
            if self.opened[r]:
                return f"The {n} is open. In it, you see {self._fmt(self.contents(r))}."
            return f"The {n} is closed."
        return f"On the {n}, you see {self._fmt(self.contents(r))}."

    def _refresh(self) -> None:
        """Admissible list + command map for the current state (cached by what it depends on)."""
        loc, held = self.loc, self.held
        inside = self.contents(loc) if loc >= 0 else ()
        key = (loc, held, loc >= 0 and self.opened[loc], inside)
        hit = self._adm_cache.get(key)
        if hit is None:
            hit = self._adm_cache[key] = self._build_admissible(loc, held, key[2], inside)
        self.admissible, self._cmds = hit

    def _build_admissible(self, loc: int, held: int, is_open: bool, inside: tuple) -> tuple[list[str], dict]:
        cmds = {"help": (HELP,), "inventory": (INV,), "look": (LOOK,)}
        cmds.update(c for c in self._goto if c[1][1] != loc)
        if held >= 0:
            cmds["examine " + self.oname[held]] = (EXOBJ, held)
        if loc >= 0:
            rn, rt = self.rname[loc], self.rtype[loc]
            cmds["examine " + rn] = (EXREC, loc)
            if self.ropen[loc]:
                cmds[("close " if is_open else "open ") + rn] = (CLOSE if is_open else OPEN, loc)
            visible = is_open or not self.ropen[loc]
            for o in inside:
                if self.is_lamp[o]:                   # ToggleObject: no open/closed precondition
                    cmds["use " + self.oname[o]] = (USE, o)
                elif held < 0 and visible:
                    cmds[f"take {self.oname[o]} from {rn}"] = (TAKE, o, loc)
            if held >= 0:
                hn, ht = self.oname[held], self.otype[held]
                if visible and ht in CAN_CONTAIN[rt]:
                    cmds[f"move {hn} to {rn}"] = (MOVE, held, loc)
                if rt == "microwave" and ht in HEATABLE:
                    cmds[f"heat {hn} with {rn}"] = (HEAT, held, loc)
                if rt == "fridge" and ht in COOLABLE:
                    cmds[f"cool {hn} with {rn}"] = (COOL, held, loc)
                if rt == "sinkbasin" and ht in CLEANABLE:
                    cmds[f"clean {hn} with {rn}"] = (CLEAN, held, loc)
        return sorted(cmds), cmds

    def _look(self) -> str:
        if self.loc < 0:
            # Not the intro's list: the intro derives #look.feedback# with no bound location, so
            # it lists every receptacle; the `look` action binds ?l to the agent's (empty) start
            # location, so the engine answers "nothing" (checked against the real engine).
            return "You are in the middle of a room. Looking quickly around you, you see nothing."
        return f"You are facing the {self.rname[self.loc]}. Next to it, you see nothing."

    def _examine_obj(self, o: int) -> str:
        f, n = self.flags[o], self.oname[o]
        if f & CLEANED and f & HOT:
            return f"This is a hot and clean {n}."
        if f & CLEANED and f & COLD:
            return f"This is a cool and clean {n}."
        if f & HOT:
            return f"This is a hot {n}."
        if f & CLEANED:
            return f"This is a clean {n}."
        if f & COLD:
            return f"This is a cold {n}."
        if self.is_lamp[o]:
            return f"This {n} is {'on' if f & TOGGLED else 'off'}."
        return f"There's nothing special about {n}."

    def _info(self) -> dict:
        return {"task": self.game.task, "task_type": self.game.task_type, "admissible": list(self.admissible),
                "won": self.won, "score": float(self.won)}

    # -- dynamics --------------------------------------------------------------------------------
    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.done:                                  # no auto-reset: repeat the last result
            obs, r, d = self._last
            return obs, r, d, self._info()
        self.steps += 1
        act = self._cmds.get(action.strip()) if isinstance(action, str) else None
        reward = 0.0
        if act is None:
            obs = NOTHING
        else:
            obs = self._apply(act)
            if act[0] in (MOVE, TAKE, GOTO, USE) and not self.won and self._check_win():
                self.won, reward = True, 1.0
        self.done = self.won or self.steps >= self.max_steps
        self._last = (obs, reward, self.done)
        return obs, reward, self.done, self._info()

    def _apply(self, act: tuple) -> str:
        k = act[0]
        if k == GOTO:
            self.loc = r = act[1]
            obs = f"You arrive at {self.rname[r]}. " + self.describe(r)
        elif k == OPEN:
            self.opened[act[1]] = True
            obs = f"You open the {self.rname[act[1]]}. " + self.describe(act[1])
        elif k == CLOSE:
            self.opened[act[1]] = False
            obs = f"You close the {self.rname[act[1]]}."
        elif k == TAKE:
            o, r = act[1], act[2]
            self.where[o], self.held = -1, o
            obs = f"You pick up the {self.oname[o]} from the {self.rname[r]}."
        elif k == MOVE:
            o, r = act[1], act[2]
            self.where[o], self.held = r, -1
            obs = f"You move the {self.oname[o]} to the {self.rname[r]}."
        elif k == HEAT:
            self.flags[act[1]] = (self.flags[act[1]] | HOT) & ~COLD
            obs = f"You heat the {self.oname[act[1]]} using the {self.rname[act[2]]}."
        elif k == COOL:
            self.flags[act[1]] = (self.flags[act[1]] | COLD) & ~HOT
            obs = f"You cool the {self.oname[act[1]]} using the {self.rname[act[2]]}."
        elif k == CLEAN:
            self.flags[act[1]] |= CLEANED
            obs = f"You clean the {self.oname[act[1]]} using the {self.rname[act[2]]}."
        elif k == USE:
            self.flags[act[1]] |= TOGGLED
            return f"You turn on the {self.oname[act[1]]}."     # state of the admissible list unchanged
        elif k == EXREC:
            return self.describe(act[1])
        elif k == EXOBJ:
            return self._examine_obj(act[1])
        elif k == INV:
            return ("You are carrying: a " + self.oname[self.held] + ".") if self.held >= 0 \
                else "You are not carrying anything."
        elif k == LOOK:
            return self._look()
        else:
            return HELP_TEXT
        self._refresh()
        return obs

    def _check_win(self) -> bool:
        g, tt = self.game, self.game.task_type
        if tt == "look_at_obj_in_light":
            if self.held < 0 or self.otype[self.held] != g.goal_obj or self.loc < 0:
                return False
            return any(self.is_lamp[o] and self.otype[o] == g.goal_lamp and self.flags[o] & TOGGLED
                       for o in self.contents(self.loc))
        need = {"pick_clean_then_place_in_recep": CLEANED, "pick_heat_then_place_in_recep": HOT,
                "pick_cool_then_place_in_recep": COLD}.get(tt, 0)
        per_rec: dict[int, int] = {}
        for o, w in enumerate(self.where):
            if w >= 0 and self.otype[o] == g.goal_obj and self.rtype[w] == g.goal_recep \
                    and (self.flags[o] & need) == need:
                per_rec[w] = per_rec.get(w, 0) + 1
        want = 2 if tt == "pick_two_obj_and_place" else 1
        return any(c >= want for c in per_rec.values())

    # -- snapshot --------------------------------------------------------------------------------
    def snapshot(self) -> Any:
        return (self.game, self.loc, self.held, tuple(self.opened), tuple(self.where), tuple(self.flags),
                self.steps, self.won, self.done, self._last)

    def restore(self, snap: Any) -> None:
        game, self.loc, self.held, opened, where, flags, self.steps, self.won, self.done, self._last = snap
        if game is not self.game:
            self.load(game)
        self.opened, self.where, self.flags = list(opened), list(where), list(flags)
        self._refresh()

    # -- experts --------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """Next command of the expert this env was built with (`expert=`): "search" (default) or
        "oracle". Both replan from the current state every call, so they recover after detours;
        use them only for behaviour cloning and tests, never inside a judge."""
        return self.search_action() if self.expert == "search" else self.oracle_action()

    def search_action(self) -> str:
        """An expert that only uses what the agent can see, so a policy can imitate it exactly.

        Why: the oracle below walks straight to a hidden object. A policy cloned from it can only
        learn where objects *usually* are; when the object is elsewhere it has never seen a search,
        so it fails before it finds anything to pick up (see results/LOG.md, "The warm start's
        expert: searching vs oracle").
        This expert is a function of the prompt the policy sees (task, current observation,
        admissible list), with no memory beyond the current location:
          * a needed object (goal object; for look tasks, after that, the goal lamp) visible here
            -> take it (use the lamp);
          * here is a closed openable receptacle that might hold it -> open it;
          * otherwise -> go to the next *candidate* receptacle after this one in the admissible
            list's order (alphabetical names; wraps around; from the start: the first candidate).
        Candidates: receptacles whose type can contain the goal object, minus the goal
        receptacle's type (a goal object never starts there); for the lamp: lamp hosts. Once the
        object is in hand the rest is the oracle's plan (appliance, goal receptacle), which needs
        nothing hidden: those receptacles are named in every admissible list. Plans are longer
        than the oracle's (it may walk past the object and search on): one search is at most a
        lap of the candidates, pick-two needs two searches, and a search after a detour starts
        from wherever the detour ended (bench/env_speed.py: on `full`, 2 pick-two games in 1,000
        need more than 50 steps)."""
        if self.done:
            return "look"
        g, held, loc = self.game, self.held, self.loc
        look = g.task_type == "look_at_obj_in_light"
        if held >= 0 and self.otype[held] == g.goal_obj and look:
            lamps = [o for o in self.contents(loc) if self.otype[o] == g.goal_lamp] if loc >= 0 else []
            if lamps:
                return "use " + self.oname[lamps[0]]
            return self._search_next(lambda r: self.rtype[r] in LAMP_HOSTS)
        if held >= 0:                                    # deliver / drop: nothing hidden involved
            return self.oracle_action()
        t = self._target_instance() if g.task_type == "pick_two_obj_and_place" else -2
        if loc >= 0 and loc != t:
            visible = not self.ropen[loc] or self.opened[loc]
            here = [o for o in self.contents(loc) if self.otype[o] == g.goal_obj]
            if here and visible:
                return f"take {self.oname[here[0]]} from {self.rname[loc]}"
            if not visible and self._may_hold(loc):
                return "open " + self.rname[loc]
        return self._search_next(self._may_hold)

    def _may_hold(self, r: int) -> bool:
        g = self.game
        return g.goal_obj in CAN_CONTAIN[self.rtype[r]] and self.rtype[r] != g.goal_recep

    def _search_next(self, candidate) -> str:
        """`go to` the first candidate whose name sorts after the current location's (wrapping)."""
        order = sorted((n, r) for r, n in enumerate(self.rname) if candidate(r) and r != self.loc)
        if not order:       # the only candidate is here and holds nothing (a detour moved it away)
            return "look"
        here = self.rname[self.loc] if self.loc >= 0 else ""
        nxt = next((r for n, r in order if n > here), order[0][1])
        return "go to " + self.rname[nxt]

    def oracle_action(self) -> str:
        """Next command of a short plan that reads hidden state (where objects are). Plan: [drop
        a wrong object] -> go to a goal object (visible/open places first) -> open -> take ->
        [go to appliance -> heat/cool/clean] -> go to the goal receptacle (pick-two: the instance
        already holding the most) -> open -> move; look tasks: take the object, go to the lamp,
        use it."""
        if self.done:
            return "look"
        g, held = self.game, self.held
        if held >= 0 and self.otype[held] == g.goal_obj:
            if g.task_type == "look_at_obj_in_light":
                lamp = next(o for o, t in enumerate(self.otype) if t == g.goal_lamp)
                return self._reach(self.where[lamp], "use " + self.oname[lamp], need_open=False)
            app = _APPLIANCE.get(g.task_type)
            bit = {"sinkbasin": CLEANED, "microwave": HOT, "fridge": COLD}.get(app, 0)
            if app and not self.flags[held] & bit:
                r = self._nearest(lambda r: self.rtype[r] == app)
                verb = {"sinkbasin": "clean", "microwave": "heat", "fridge": "cool"}[app]
                return self._reach(r, f"{verb} {self.oname[held]} with {self.rname[r]}", need_open=False)
            t = self._target_instance()
            return self._reach(t, f"move {self.oname[held]} to {self.rname[t]}")
        if held >= 0:                                     # holding something useless: put it down
            r = self._nearest(lambda r: self.otype[held] in CAN_CONTAIN[self.rtype[r]])
            return self._reach(r, f"move {self.oname[held]} to {self.rname[r]}")
        t = self._target_instance() if g.task_type == "pick_two_obj_and_place" else -2
        cands = [o for o, w in enumerate(self.where) if w >= 0 and w != t and self.otype[o] == g.goal_obj]
        o = min(cands, key=lambda o: self._cost(self.where[o]))
        r = self.where[o]
        return self._reach(r, f"take {self.oname[o]} from {self.rname[r]}")

    def _cost(self, r: int) -> int:
        """Steps to be able to act inside r: go to (unless there) + open (if closed)."""
        return (r != self.loc) + (self.ropen[r] and not self.opened[r])

    def _nearest(self, ok) -> int:
        return min((r for r in range(len(self.rname)) if ok(r)), key=self._cost)

    def _reach(self, r: int, final: str, need_open: bool = True) -> str:
        if self.loc != r:
            return "go to " + self.rname[r]
        if need_open and self.ropen[r] and not self.opened[r]:
            return "open " + self.rname[r]
        return final

    def _target_instance(self) -> int:
        """Goal receptacle instance: the one already holding most finished goal objects, then nearest."""
        g = self.game
        cnt = [sum(1 for o, w in enumerate(self.where) if w == r and self.otype[o] == g.goal_obj)
               for r in range(len(self.rname))]
        return min((r for r in range(len(self.rname)) if self.rtype[r] == g.goal_recep),
                   key=lambda r: (-cnt[r], self._cost(r)))


# ---------------------------------------------------------------------------------------------
# Vocabulary and the factory used by envs.py
# ---------------------------------------------------------------------------------------------
def vocabulary() -> list[str]:
    """Strings whose tokens (regex `[A-Za-z]+|[0-9]|[^A-Za-z0-9\\s]`) cover every observation,
    task, admissible command and help text of every preset/split (tested by random play)."""
    phrases = [BANNER, HELP_TEXT, NOTHING,
               "You are in the middle of a room. Looking quickly around you, you see nothing.",
               "Your task is to: ", "You arrive at . On the , you see a , and nothing.",
               "The is open. In it, you see", "The is closed.", "You open the", "You close the",
               "You pick up the from the", "You move the to the", "You heat the using the",
               "You cool the using the", "You clean the using the", "You turn on the",
               "This is a hot and clean cool cold", "This is on off", "There's nothing special about",
               "You are carrying: a .", "You are not carrying anything.",
               "You are facing the . Next to it, you see nothing.",
               "go to open close take from move to heat with cool with clean with use examine inventory look help"]
    for tmpls in TEMPLATES.values():
        phrases += [t.format(obj="", recep="", toggle="") for t in tmpls]
    phrases += sorted(CAN_CONTAIN) + sorted({o for objs in CAN_CONTAIN.values() for o in objs})
    phrases += sorted({o for room in ROOMS.values() for o in room["objects"]}) + list(LAMPS)
    phrases += [str(d) for d in range(10)]
    # ALFRED class names our generator never places (constants.OBJECTS): official games can show
    # them (real backend), and `sliced` for their sliced variants; cheap insurance for the tokenizer.
    phrases += _ALFRED_EXTRA_NAMES
    return phrases


_ALFRED_EXTRA_NAMES = ("bathtub blinds boots chair curtains footstool houseplant laundryhamperlid lightswitch mirror "
                       "painting papertowelroll poster scrubbrush showerdoor showerglass sink stoveknob teddybear "
                       "television window faucet sliced").split()
