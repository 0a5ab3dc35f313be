"""sims/keydoor.py: the rules, ground-truth labels, exact restore, independent door draws, options.

    python -m pytest -q tests/test_keydoor.py
"""
import math
import random
import re

import pytest

import envs
from sims import keydoor
from sims.keydoor import KEY, NOTHING, TRAP


def make(**kw):
    return keydoor.make(split="train", seed=0, **kw)


def walk(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
    return out


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------
def test_reset_text_and_info():
    env = make(rooms=5, pivot=2, distractors=1)
    obs, info = env.reset(0)
    assert obs.startswith("You are in room 1 of 5.") and obs.endswith("\n\nYour task is to: " + keydoor.TASK)
    assert set(info) >= {"task", "task_type", "admissible", "won", "score", "pivotal"}
    assert info["task"] == keydoor.TASK and info["task_type"] == "keydoor"
    assert info["won"] is False and info["score"] == 0.0 and info["pivotal"] == ""
    assert env.max_steps == 3 * 5 + 2
    assert keydoor.make(max_steps=0).max_steps == keydoor.make(max_steps=None).max_steps == 26


def test_admissible_per_room():
    env = make(rooms=4, pivot=1, distractors=2)
    env.reset(7)
    lay = env.layout(7)
    assert all(len(items) == 2 + (r == 1) for r, items in enumerate(lay))
    assert [r for r, items in enumerate(lay) if KEY in items] == [1]        # the key only in the pivot room
    assert not any(TRAP in items for items in lay)                          # trap off: no coin
    for r in range(4):
        adm = env.admissible()
        move = "open door" if r == 3 else "go forward"
        assert adm == [move] + [f"take {x}" for x in lay[r]] + [f"examine {x}" for x in lay[r]]
        assert ("open door" in adm) == (r == 3) and ("go forward" in adm) == (r < 3)
        if r < 3:
            obs, _, done, info = env.step("go forward")
            assert not done and obs.startswith(f"You are in room {r + 2} of 4.")
            assert info["admissible"] == env.admissible()
    assert keydoor.DOOR_HERE in keydoor.room_text(3, 4, lay[3])


def test_room_text():
    assert keydoor.room_text(2, 8, ["candle", KEY]) == "You are in room 3 of 8. You see a candle and a key."
    assert keydoor.room_text(0, 8, ["acorn", "shell", TRAP]) == \
        "You are in room 1 of 8. You see an acorn, a shell and a cursed coin."
    assert keydoor.room_text(7, 8, []) == "You are in room 8 of 8. There is a door here."


def test_take_drop_examine_and_bad_text():
    env = make(rooms=3, pivot=0, distractors=1, max_steps=40)
    env.reset(1)
    d = next(x for x in env.layout(1)[0] if x != KEY)                      # the room's distractor
    assert d in keydoor.OBJECTS
    obs, r, done, info = env.step(f"take {d}")
    assert obs == f"You take the {d}." and info["pivotal"] == "" and f"drop {d}" in info["admissible"]
    assert f"take {d}" not in info["admissible"] and f"examine {d}" in info["admissible"]
    assert env.step(f"examine {d}")[0] == keydoor.DESCRIPTIONS[d]
    assert env.step(f"examine {KEY}")[0] == keydoor.DESCRIPTIONS[KEY]
    obs, _, _, info = env.step(f"drop {d}")
    assert obs == f"You drop the {d}." and f"take {d}" in info["admissible"]
    for bad in ["", "fly", "take door", "take coin", "drop key", "open door", "go back", "examine moon",
                "take", "<action>go forward</action>", "\x00\x01", "take " + "x" * 500]:
        obs, r, done, info = env.step(bad)
        assert obs == NOTHING and r == 0.0 and not done and info["pivotal"] == ""
    obs, _, _, info = env.step("  TAKE   Key ")                 # case and spacing are normalised
    assert obs == "You take the key." and info["pivotal"] == "key" and info["key_held"]
    assert "drop key" not in info["admissible"] and env.step("drop key")[0] == NOTHING
    assert env.step("take key")[0] == NOTHING                    # only once


def test_distractor_actions_do_not_change_the_door_chance():
    """Same door seed, with and without distractor fiddling: the same outcomes, task by task."""
    def outcome(task, fiddle, key):
        env = make(rooms=4, pivot=1, distractors=3, p_key=0.6, p_nokey=0.3, max_steps=100)
        env.reset(task)
        env.reseed(1234 + task)
        for _ in range(4):
            if fiddle:
                for a in [a for a in env.admissible() if a.startswith(("take", "examine")) and "key" not in a]:
                    env.step(a)
                for a in [a for a in env.admissible() if a.startswith("drop")]:
                    env.step(a)
            if key and "take key" in env.admissible():
                env.step("take key")
            if "open door" in env.admissible():
                return env.step("open door")[3]["won"]
            env.step("go forward")

    for key in (False, True):
        a = [outcome(t, False, key) for t in range(60)]
        b = [outcome(t, True, key) for t in range(60)]
        assert a == b
    # and the key matters: same draws, the key can only help (p_key > p_nokey)
    wk, wo = [outcome(t, False, True) for t in range(60)], [outcome(t, False, False) for t in range(60)]
    assert all(k or not o for k, o in zip(wk, wo)) and sum(wk) > sum(wo)


def test_door_ends_episode_with_reward_and_nothing_after():
    env = make(rooms=2, pivot=0, p_key=1.0, p_nokey=0.0, distractors=0)
    env.reset(0)
    walk(env, ["take key", "go forward"])
    obs, r, done, info = env.step("open door")
    assert obs == keydoor.DOOR_OPENS and r == 1.0 and done and info["won"] and info["score"] == 1.0
    assert info["admissible"] == []
    assert env.step("open door") == (NOTHING, 0.0, True, info)
    env.reset(0)
    walk(env, ["go forward"])
    obs, r, done, info = env.step("open door")
    assert obs == keydoor.DOOR_SHUT and r == 0.0 and done and not info["won"] and info["score"] == 0.0


def test_step_limit_counts_every_call():
    env = make(rooms=3, max_steps=5, distractors=0)
    env.reset(0)
    for i in range(4):
        assert not env.step("dance" if i % 2 else "examine key")[2]
    obs, r, done, info = env.step("go forward")
    assert done and not info["won"] and r == 0.0
    assert env.step("go forward")[0] == NOTHING
    with pytest.raises(ValueError, match="max_steps"):
        make(rooms=3, max_steps=3)


def test_pivotal_labels_and_trap():
    env = make(rooms=6, pivot=0, distractors=1, trap=0.5)
    seen_rooms = set()
    for task in range(40):
        env.reset(task)
        tr = env.trap_room(task)
        assert tr is not None and tr != 0
        seen_rooms.add(tr)
        assert [r for r, it in enumerate(env.layout(task)) if TRAP in it] == [tr]
        labels = []
        for r in range(6):
            for a in list(env.admissible()):
                if a.startswith("take"):
                    labels.append((a, env.step(a)[3]["pivotal"]))
            if r < 5:
                env.step("go forward")
        assert ("take key", "key") in labels and ("take cursed coin", "trap") in labels
        assert all(lab == "" for a, lab in labels if a not in ("take key", "take cursed coin"))
        assert env.s.trap_taken and env.s.key
    assert len(seen_rooms) >= 3                                  # drawn per task
    # the coin halves the chance: p_key·(1 − trap) exactly
    assert keydoor.door_chance(True, True, 0.8, 0.2, 0.5) == pytest.approx(0.4)
    assert keydoor.analytic_value(0.5, 0.8, 0.2) == pytest.approx(0.5)
    assert keydoor.analytic_value(1.0, 0.8, 0.2, trap=0.5, q_trap=1.0) == pytest.approx(0.4)


def test_trap_rate():
    """Taking the coin multiplies the door's chance by (1 − trap): 400 episodes, within 4 SE."""
    env = make(rooms=3, pivot=0, distractors=0, trap=0.5, p_key=0.8)
    wins = 0
    for ep in range(400):
        env.reset(ep)
        env.reseed(ep)
        for r in range(3):
            for a in list(env.admissible()):
                if a.startswith("take"):
                    env.step(a)
            if r < 2:
                env.step("go forward")
        wins += env.step("open door")[3]["won"]
    p = 0.8 * 0.5
    assert abs(wins / 400 - p) < 4 * math.sqrt(p * (1 - p) / 400)


def test_layout_is_per_task_split_and_seed():
    a, b = make(distractors=2), make(distractors=2)
    assert a.layout(3) == b.layout(3) and a.layout(3) != a.layout(4)
    test = keydoor.make(split="test", distractors=2)
    train_layouts = {a.layout(t) for t in range(2000)}
    assert not train_layouts & {test.layout(t) for t in range(keydoor.TEST_TASKS)}
    assert keydoor.make(seed=1, distractors=2).layout(3) != a.layout(3)
    # the trap does not move the distractors
    assert [tuple(x for x in it if x != TRAP) for it in make(distractors=2, trap=0.3).layout(3)] == list(a.layout(3))
    assert keydoor.num_tasks("train") is None and keydoor.num_tasks("test") == 128
    with pytest.raises(ValueError):
        test.reset(128)
    test.reset(127)


def test_expert():
    env = make(rooms=5, pivot=2, distractors=1, expert_key=0.5)
    took = []
    for task in range(200):
        env.reset(task)
        acts = []
        while not env.s.done:
            a = env.expert_action()
            assert a in env.admissible()
            acts.append(a)
            env.step(a)
        took.append("take key" in acts)
        assert acts[-1] == "open door" and not any("cursed" in a or a.startswith(("drop", "examine")) for a in acts)
        assert len(acts) == 5 + took[-1]
    assert 70 < sum(took) < 130
    # decided at reset from the task, not from the door's RNG
    env.reset(5)
    first = env.s.expert_takes_key
    env.reseed(99)
    env.reset(5)
    assert env.s.expert_takes_key == first
    e1 = make(expert_key=1.0, trap=0.9)
    e1.reset(0)
    assert e1.s.expert_takes_key and "cursed" not in e1.expert_action()


# ---------------------------------------------------------------------------------------------
# Snapshot / restore / reseed
# ---------------------------------------------------------------------------------------------
def random_episode(env, rng, task, prefix_len):
    """Random admissible actions (+ some bad text): a snapshot after `prefix_len` steps."""
    obs, info = env.reset(task)
    env.reseed(rng.getrandbits(40))
    actions, snap, outs = [], None, []
    while True:
        if len(actions) == prefix_len:
            snap = env.snapshot()
        adm = env.admissible()
        if not adm:
            break
        a = rng.choice(adm) if rng.random() > 0.1 else "look around"
        actions.append(a)
        outs.append(env.step(a))
    return actions, snap, outs


def test_restore_is_exact():
    rng = random.Random(0)
    env = make(rooms=4, distractors=2, trap=0.3, p_key=0.5, p_nokey=0.5)
    other = make(rooms=4, distractors=2, trap=0.3, p_key=0.5, p_nokey=0.5)
    doors = set()
    for task in range(60):
        k = rng.randrange(0, 6)
        actions, snap, outs = random_episode(env, rng, task, k)
        if snap is None:
            continue
        other.reset(task + 1)                       # any state: restore overwrites everything
        other.reseed(5)
        other.restore(snap)
        replay = [other.step(a) for a in actions[k:]]
        assert replay == outs[k:]                   # same observations, rewards, dones, infos, door
        doors.add(outs[-1][3]["won"])
        env.restore(snap)                           # restoring twice is the same again
        assert [env.step(a) for a in actions[k:]] == outs[k:]
    assert doors == {True, False}


def test_snapshot_is_a_copy():
    env = make(rooms=3, distractors=1)
    env.reset(0)
    snap = env.snapshot()
    walk(env, ["take key", "go forward", "go forward", "open door"])
    env.restore(snap)
    assert env.s.room == 0 and not env.s.key and env.s.steps == 0 and not env.s.done
    assert "take key" in env.admissible()


def test_reseed_gives_independent_door_draws():
    """G envs on one task, the same actions, different reseeds (as rollout.run_episodes does per
    episode id): the success rate is p_key within 4 SE and groups are not all identical."""
    G, groups, p = 8, 50, 0.8
    env = make(rooms=3, pivot=0, distractors=1, p_key=p)
    wins, mixed = 0, 0
    for task in range(groups):
        res = []
        for eid in range(G):
            env.reset(task)
            env.reseed(hash((0, task * G + eid, 0xD00)) & 0x7FFFFFFFFFFFFFFF)
            res.append(walk(env, ["take key", "go forward", "go forward", "open door"])[-1][3]["won"])
        wins += sum(res)
        mixed += 0 < sum(res) < G
    n = G * groups
    assert abs(wins / n - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert mixed >= 25                       # P(a group all alike) = 0.8^8 + 0.2^8 ≈ 0.17
    # without a reseed, reset(task) alone is deterministic
    def plain(t):
        env.reset(t)
        return walk(env, ["go forward", "go forward", "open door"])[-1][3]["won"]
    assert [plain(t) for t in range(20)] == [plain(t) for t in range(20)]


class ScriptedGen:
    """Generation backend that always takes the key, else goes forward / opens the door."""

    def __init__(self, tok):
        self.tok = tok

    def sync(self, model):
        pass

    def generate(self, prompts, max_new_tokens, temperature, seed=None, row_seeds=None):
        from infra.policy import Sample
        out = []
        for p in prompts:
            acts = self.tok.decode(p).rsplit("actions:", 1)[-1]
            a = "take key" if "take key" in acts else "open door" if "open door" in acts else "go forward"
            ids = self.tok(f"<action>{a}</action><|im_end|>", add_special_tokens=False)["input_ids"]
            out.append(Sample(ids, [0.0] * len(ids)))
        return out


def test_rollout_groups_and_continuations_draw_independently():
    """Through the real rollout: the G episodes of a group and the K continuations from one
    snapshot see independent door draws."""
    from infra import warmstart
    from rollout import Agent, continue_from, rollout_groups
    spec = envs.get_spec("keydoor")
    tok = warmstart.env_tokenizer(spec)
    agent = Agent(ScriptedGen(tok), tok, spec)
    p, G = 0.5, 8
    pool = [spec.make(split="train", seed=0, rooms=3, distractors=1, p_key=p, p_nokey=0.0) for _ in range(G * 10)]
    groups = rollout_groups(agent, pool, list(range(10)), G, 1.0, seed=0)
    won = [tr.won for g in groups for tr in g]
    assert all(tr.turns[0].truth == "key" and all(t.truth == "" for t in tr.turns[1:]) for g in groups for tr in g)
    assert abs(sum(won) / len(won) - p) < 4 * math.sqrt(p * (1 - p) / len(won))
    assert sum(0 < sum(tr.won for tr in g) < G for g in groups) >= 6   # P(all alike) = 2/256
    # the same call again: the same draws (per episode id), so runs are reproducible
    again = rollout_groups(agent, pool, list(range(10)), G, 1.0, seed=0)
    assert [tr.won for g in again for tr in g] == won
    finals = continue_from(agent, pool, [groups[0][0].turns[1].state], 40, 1.0, seed=3)
    k = sum(f.info["won"] for f in finals)
    assert 0 < k < 40 and abs(k / 40 - p) < 4 * math.sqrt(p * (1 - p) / 40)


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------
def test_parse_env_opts():
    spec = envs.get_spec("keydoor")
    assert set(spec.options) == {"rooms", "pivot", "p_key", "p_nokey", "distractors", "trap", "expert_key", "keys",
                                 "apples", "expert_neutral"}
    assert {k: o.default for k, o in spec.options.items()} == dict(
        rooms=8, pivot=0, p_key=0.8, p_nokey=0.2, distractors=1, trap=0.0, expert_key=0.5, keys=1, apples=0.0,
        expert_neutral=0.0)
    got = envs.parse_env_opts(spec, ["rooms=12", "p_key=0.9", "trap=0.25", "pivot=3"])
    assert got == {"rooms": 12, "p_key": 0.9, "trap": 0.25, "pivot": 3}
    env = spec.make(split="train", seed=0, **got)
    assert (env.rooms, env.p_key, env.trap, env.pivot) == (12, 0.9, 0.25, 3)
    for item, key in [("colour=red", "colour"), ("rooms=abc", "rooms"), ("p_key=1.5", "p_key"),
                      ("p_nokey=nan", "p_nokey"), ("rooms=1", "rooms"), ("rooms=65", "rooms"),
                      ("distractors=5", "distractors"), ("pivot=-1", "pivot"), ("trap=-0.1", "trap"),
                      ("expert_key=2", "expert_key"), ("rooms=8.5", "rooms"), ("keys=0", "keys"),
                      ("keys=5", "keys"), ("keys=1.5", "keys"), ("apples=1.5", "apples"),
                      ("apples=-0.1", "apples"), ("apples=many", "apples")]:
        with pytest.raises(ValueError) as e:
            envs.parse_env_opts(spec, [item])
        msg = str(e.value)
        assert "\n" not in msg and key in msg, msg


def test_make_checks_cross_option_rules():
    for kw, key in [(dict(rooms=8, pivot=8), "pivot"), (dict(rooms=4, pivot=9), "pivot"),
                    (dict(p_key=1.5), "p_key"), (dict(p_nokey=float("nan")), "p_nokey"),
                    (dict(rooms="8"), "rooms"), (dict(distractors=9), "distractors"),
                    (dict(colour=1), "colour"), (dict(rooms=4, max_steps=2), "max_steps"),
                    (dict(rooms=4, pivot=2, keys=3), "keys")]:
        with pytest.raises(ValueError) as e:
            keydoor.make(**kw)
        msg = str(e.value)
        assert "\n" not in msg and key in msg, msg
    with pytest.raises(ValueError, match="split"):
        keydoor.make(split="valid")
    spec = envs.get_spec("keydoor")
    with pytest.raises(ValueError, match="pivot"):
        spec.make(split="train", seed=0, **envs.parse_env_opts(spec, ["rooms=4", "pivot=4"]))


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------
WORD = re.compile(r"[A-Za-z]+|[0-9]|[^A-Za-z0-9\s]")   # warmstart.build_tokenizer's word split


def test_vocabulary_covers_every_text():
    vocab = {w for t in keydoor.vocabulary() for w in WORD.findall(t)}
    rng = random.Random(1)
    texts = set()
    for ep in range(300):
        rooms = rng.randint(2, 12)
        env = make(rooms=rooms, pivot=rng.randrange(rooms), distractors=rng.randint(0, 4), trap=rng.choice([0.0, 0.5]))
        obs, info = env.reset(ep)
        texts |= {obs, info["task"], *info["admissible"]}
        while not env.s.done:
            a = rng.choice(env.admissible())
            obs, _, _, info = env.step(a)
            texts |= {obs, info["task"], *info["admissible"]}
    texts |= {keydoor.room_text(r, 64, []) for r in range(64)}
    missing = {w for t in texts for w in WORD.findall(t)} - vocab
    assert not missing, missing
    # the tiny tokenizer built from the spec has no <unk> on any of it
    from infra import warmstart
    spec = envs.get_spec("keydoor")
    tok = warmstart.env_tokenizer(spec)
    ids = tok("\n".join(sorted(texts)), add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids


def test_prompts():
    spec = envs.get_spec("keydoor")
    env = make(rooms=3)
    obs, info = env.reset(0)
    v = envs.PromptInput(task=info["task"], obs=obs, admissible=info["admissible"], history=[], step=0)
    chat = spec.chat_prompt(v, 2)
    assert keydoor.TASK in chat and "<action>" in chat and all(f"'{a}'" in chat for a in info["admissible"])
    obs2, _, _, info2 = env.step("go forward")
    v2 = envs.PromptInput(task=info["task"], obs=obs2, admissible=info2["admissible"], history=[(obs, "go forward")], step=1)
    chat2 = spec.chat_prompt(v2, 2)
    assert "go forward" in chat2 and obs2 in chat2 and "1 step(s)" in chat2
    assert spec.parse("<action>take key</action>") == ("take key", True)
    assert spec.response("go forward") == "<action>go forward</action>"


def test_several_keys_lie_in_consecutive_rooms_and_raise_the_door_chance_with_each_held():
    """keys=3 from pivot 1 in 6 rooms: a key in rooms 2, 3, 4 (1-based), each take labelled "key",
    each one walked past "nokey"; the door opens with p_nokey + (p_key − p_nokey)·k/3 (exactly
    p_key / p_nokey at all / none; keys=1 is the single-key game); the layout's other draws are
    those of the single-key game."""
    env = keydoor.make(split="test", seed=0, rooms=6, pivot=1, keys=3, distractors=1, p_key=0.9, p_nokey=0.3)
    one = keydoor.make(split="test", seed=0, rooms=6, pivot=1, keys=1, distractors=1, p_key=0.9, p_nokey=0.3)
    lay, lay1 = env.layout(5), one.layout(5)
    assert [KEY in r for r in lay] == [False, True, True, True, False, False]
    assert [tuple(x for x in r if x != KEY) for r in lay] == [tuple(x for x in r if x != KEY) for r in lay1]
    assert keydoor.door_chance(0, False, 0.9, 0.3, 0.0, 3) == 0.3 and keydoor.door_chance(3, False, 0.9, 0.3, 0.0, 3) == 0.9
    assert keydoor.door_chance(1, False, 0.9, 0.3, 0.0, 3) == pytest.approx(0.5)
    assert keydoor.door_chance(2, True, 0.9, 0.3, 0.5, 3) == pytest.approx(0.35)
    assert keydoor.door_chance(True, False, 0.9, 0.3, 0.0) == 0.9                 # one key, a bool as before
    env.reset(5)
    labels = []
    for a in ["go forward", "take key", "go forward", "go forward", "take key", "go forward"]:
        obs, r, done, info = env.step(a)
        labels.append(info["pivotal"])
    assert labels == ["", "key", "", "nokey", "key", ""]
    assert (info["keys_held"], info["key_held"]) == (2, True)                    # the pivot room's key is held
    # the door's draw uses that chance: with p_key 1, p_nokey 0 and one key of two held it opens on
    # about half of the reseeded draws, with both always, with none never
    def opens(takes, n=60):
        e = keydoor.make(split="test", seed=0, rooms=3, keys=2, distractors=0, p_key=1.0, p_nokey=0.0)
        won = 0
        for i in range(n):
            e.reset(0)
            e.reseed(1000 + i)
            for room in range(2):
                if room in takes:
                    e.step("take key")
                e.step("go forward")
            won += e.step("open door")[1]
        return won
    assert opens({0, 1}) == 60 and opens(set()) == 0 and 15 < opens({1}) < 45


def test_apples_are_hidden_random_rewards_in_the_middle_rooms_only():
    """apples=0.25, rooms 6, keys 2 from pivot 0: the middle rooms are 2..4 (0-based); entering one
    pays 0.25 with chance 1/2 (drawn from the env's RNG), nothing else does, the text is that of the
    apple-free game, the score is won + the apples, and a snapshot replays the same apples."""
    assert list(keydoor.middle_rooms(6, 0, 2)) == [2, 3, 4] and keydoor.apples_ahead(2, 6, 0, 2) == 2
    kw = dict(split="test", seed=0, rooms=6, keys=2, distractors=1, p_key=1.0, p_nokey=1.0)
    env, plain = keydoor.make(apples=0.25, **kw), keydoor.make(**kw)
    plan = ["take key", "go forward", "take key"] + ["go forward"] * 4 + ["open door"]
    per_room, scores = {r: 0 for r in range(6)}, []
    for ep in range(400):
        env.reset(ep % 128), plain.reset(ep % 128)
        env.reseed(ep), plain.reseed(ep)
        total = 0.0
        for a in plan:
            room = env.s.room
            obs, r, done, info = env.step(a)
            obs0, r0, _, info0 = plain.step(a)
            assert obs == obs0 and info["pivotal"] == info0["pivotal"]      # the apples leave no trace in the text
            if r and a == "go forward":
                assert r == 0.25 and env.s.room in (2, 3, 4) and env.s.room == room + 1
                per_room[env.s.room] += 1
            total += r
        assert info["won"] and info["score"] == pytest.approx(total) == pytest.approx(1.0 + env.s.apple_score)
        scores.append(info["score"])
    assert per_room[0] == per_room[1] == per_room[5] == 0
    assert all(140 < per_room[r] < 260 for r in (2, 3, 4)), per_room           # chance 1/2 each (400 entries)
    assert plain.s.apple_score == 0.0 and keydoor.make(**kw).apples == 0.0
    # a snapshot holds the RNG: restoring it replays the same apples
    env.reset(3), env.reseed(7)
    env.step("take key"), env.step("go forward"), env.step("take key")
    snap = env.snapshot()
    first = [env.step("go forward")[1] for _ in range(3)]
    env.restore(snap)
    assert [env.step("go forward")[1] for _ in range(3)] == first


def test_apples_need_the_score_reward():
    """--env-opt apples=... under --reward success would train on nothing the apples change: one clear
    error before set-up; with --reward score the config passes."""
    import config
    cfg = config.parse_args(["--env", "keydoor", "--env-opt", "apples=0.2"])
    with pytest.raises(ValueError) as e:
        config.validate(cfg)
    assert "apples" in str(e.value) and "--reward score" in str(e.value) and "\n" not in str(e.value)
    cfg = config.parse_args(["--env", "keydoor", "--env-opt", "apples=0.2", "--reward", "score"])
    assert config.validate(cfg)["apples"] == 0.2
