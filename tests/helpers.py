"""What a test of a new method, judge or env needs, in one place (`from helpers import ...`; pytest
puts tests/ on the path).

* A hand-built ProVer group in a four-state corridor (`hand_group`): every advantage a credit step
  gives it is exact arithmetic, with the judge fixed (`FixedJudge`: proposes the turns you name)
  and the verification replaced by fixed continuation outcomes (`Outcomes`: combined by the real
  `verify.compare`). `run_credit` runs ProVer's credit on it and returns the advantages before and
  after; `make_run` is the `train.Run` any credit function takes; `diff` lists the changed turns.
* A hand-built judge group (`pivot_group`): the successes take the key from a drawer, the failures
  never do — the fixture of the judge's tools, validation and proposals.
* docs/metrics.md's keys (`documented_keys`, `undocumented`): a run's metrics rows are held to it.

Leaves out: models and envs (tests build the real tiny ones: conftest.py's fixtures, warmstart).
"""
import os
import re
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------------------------
# The corridor group: room 1 (a lever) → room 2 (a key) → the door, which opens iff the key is held
# ---------------------------------------------------------------------------------------------
LEVER_ROOM = "You are in room 1. You see a lever."
KEY_ROOM = "You are in room 2. You see a key."
KEY_HELD = "You are in room 2. You hold a key."
DOOR = "You are at the door."
DOOR_OPENS, DOOR_SHUT = "The door opens.", "The door stays shut."
CORRIDOR_ADM = {LEVER_ROOM: ["pull lever", "go east", "wait"], KEY_ROOM: ["take key", "go east", "wait"],
                KEY_HELD: ["go east", "wait"], DOOR: ["open door", "wait"]}
CORRIDOR_NEXT = {("go east", LEVER_ROOM): KEY_ROOM, ("wait", LEVER_ROOM): LEVER_ROOM,
                 ("pull lever", LEVER_ROOM): LEVER_ROOM, ("take key", KEY_ROOM): KEY_HELD,
                 ("go east", KEY_ROOM): DOOR, ("wait", KEY_ROOM): KEY_ROOM, ("go east", KEY_HELD): DOOR,
                 ("wait", KEY_HELD): KEY_HELD}


def corridor_traj(tid, acts, won, states=True):
    """acts: the actions from room 1 on (observations follow CORRIDOR_NEXT; the last one ends the
    episode). `states`: give every turn a restore handle (history as the rollout records it)."""
    from rollout import AgentState, Trajectory, Turn
    turns, obs, hist = [], LEVER_ROOM, ()
    for k, a in enumerate(acts):
        last = k == len(acts) - 1
        nxt = (DOOR_OPENS if won else DOOR_SHUT) if (last and a == "open door") else CORRIDOR_NEXT.get((a, obs), obs)
        st = AgentState(None, obs, {"admissible": CORRIDOR_ADM[obs]}, hist, k) if states else None
        turns.append(Turn(t=k, obs=obs, admissible=list(CORRIDOR_ADM[obs]), text=f"<action>{a}</action>", action=a,
                          valid=True, next_obs=nxt, reward=float(won and last), done=last,
                          action_ids=[1, 2, 3], state=st))
        hist, obs = hist + ((obs, a),), nxt
    return Trajectory(traj_id=tid, group_id=0, task=0, task_text="open the door.", task_type="hand",
                      turns=turns, won=won, score=float(won))


def hand_group(states=True, lever=False):
    """S0 (shortest success), F1 (goes east past the key), F2 (takes the key, then waits), S3 (a
    longer success), F4 (waits at the key, then goes east); `lever`: S5, a success whose `pull
    lever` no failure ever takes."""
    g = [corridor_traj(0, ["go east", "take key", "go east", "open door"], True, states),
         corridor_traj(1, ["go east", "go east", "open door"], False, states),
         corridor_traj(2, ["go east", "take key", "wait", "wait"], False, states),
         corridor_traj(3, ["wait", "go east", "take key", "go east", "open door"], True, states),
         corridor_traj(4, ["go east", "wait", "go east", "open door"], False, states)]
    if lever:
        g.append(corridor_traj(5, ["pull lever", "go east", "take key", "wait", "go east", "open door"], True, states))
    return g


class FixedJudge:
    """Proposes turns start..end of the success it is given (choose_success: of `pick`)."""

    def __init__(self, start=1, end=1, pick=None):
        self.start, self.end, self.pick, self.calls = start, end, pick, []

    def propose(self, group, success_id, choose_success=False):
        from judge import JudgeResult, Proposal
        self.calls.append((success_id, choose_success))
        sid = self.pick if choose_success and self.pick is not None else success_id
        prop = Proposal(group[sid].traj_id, self.start, self.end, "mode", "why")
        return JudgeResult(prop, "valid", None, 0, 2, 11, 5, [], 0, sid if choose_success else None)


class Outcomes:
    """Stand-in for the verifier (the credit functions' `estimate`) and verify_options.alternatives:
    fixed continuation outcomes, combined by verify_options.compare (the real formulas); records the
    options each call got."""

    def __init__(self, pre, post, alts=None):
        self.pre, self.post, self.alts, self.calls = pre, post, alts or {}, []

    def estimate(self, agent, envs_, traj_, start, end, K, temperature, seed, crn=False, k_max=0, z=1.0, fresh=False):
        from methods import verify_options
        self.calls.append(dict(K=K, crn=crn, k_max=k_max, z=z, seed=seed))
        return verify_options.compare(self.pre, self.post, paired=crn)

    def alternatives(self, agent, envs_, base, states, temperature, seed):
        from methods import verify_options
        # which alternative a state belongs to: the action its history ends with
        return [verify_options.compare(base.pre, self.alts[s.history[-1][1]], paired=base.paired) for s in states]


def make_run(tmp_path, cfg, jd, history_len=1):
    """The train.Run a credit function takes: no model, no env (the verification is `Outcomes`)."""
    from rollout import Agent
    from train import Run
    agent = Agent(gen=None, tok=None, spec=None, history_len=history_len, counter=Counter())
    return Run(cfg, agent, None, {}, [None] * 256, jd, str(tmp_path), step=1)


def run_credit(tmp_path, monkeypatch, out, jd=None, history_len=1, group=None, plus=False, **flags):
    """The credit of --method prover (prover-plus's with `plus`) as train.py runs it, on one group
    (default `hand_group()`) with the verification `out` and the judge `jd`; flags are config fields.
    (groups, GRPO's advantages, the credited ones, the metrics, the run)."""
    import config
    import grpo
    import methods
    from methods import verify_options
    monkeypatch.setattr(verify_options, "alternatives", out.alternatives)
    groups = [group or hand_group()]
    cfg = config.Config(env="keydoor", verify_k=len(out.pre), **flags)
    adv = grpo.trajectory_advantages(groups)
    base = [[list(t) for t in g] for g in adv]
    run = make_run(tmp_path, cfg, jd or FixedJudge(), history_len)
    st = methods.credit_fn("prover-plus" if plus else "prover")(groups, adv, run, estimate=out.estimate)
    return groups, base, adv, st, run


def diff(base, adv):
    """{(traj, turn): change} of the one group."""
    return {(i, t): adv[0][i][t] - base[0][i][t] for i in range(len(adv[0])) for t in range(len(adv[0][i]))
            if adv[0][i][t] != base[0][i][t]}


# ---------------------------------------------------------------------------------------------
# The judge's pivot group: the successes take the key, the failures never do
# ---------------------------------------------------------------------------------------------
HALL = "You are in the hall. You see a drawer 1 and a door 1."
AT_DRAWER = "You arrive at drawer 1. The drawer 1 is closed."
OPEN_DRAWER = "You open the drawer 1. In it, you see a key 1."
GOT_KEY = "You pick up the key 1 from the drawer 1."
AT_DOOR = "You arrive at door 1. The door 1 is locked."
NOTHING = "Nothing happens."
UNLOCKED = "You unlock the door 1. The door opens. You won!"
PIVOT_ADM = {HALL: ["go to drawer 1", "go to door 1"],
             AT_DRAWER: ["open drawer 1", "go to door 1"],
             OPEN_DRAWER: ["take key 1 from drawer 1", "close drawer 1", "go to door 1"],
             GOT_KEY: ["close drawer 1", "go to door 1"],
             AT_DOOR: ["open door 1", "unlock door 1 with key 1", "go to drawer 1"],
             "You close the drawer 1.": ["open drawer 1", "go to door 1"]}


def pivot_traj(tid, steps, won, valid=None):
    """steps: [(obs, action, next_obs)]; the last turn ends the episode."""
    from rollout import Trajectory, Turn
    turns = []
    for k, (obs, act, nxt) in enumerate(steps):
        ok = True if valid is None else valid[k]
        turns.append(Turn(t=k, obs=obs, admissible=list(PIVOT_ADM.get(obs, [])),
                          text=f"<think>hmm</think><action>{act}</action>" if ok else act,
                          action=act, valid=ok, next_obs=nxt,
                          reward=1.0 if (won and k == len(steps) - 1) else 0.0,
                          done=k == len(steps) - 1))
    return Trajectory(traj_id=tid, group_id=0, task=0, task_text="open the door.",
                      task_type="pivot", turns=turns, won=won, score=float(won))


def pivot_group():
    success = [(HALL, "go to drawer 1", AT_DRAWER), (AT_DRAWER, "open drawer 1", OPEN_DRAWER),
               (OPEN_DRAWER, "take key 1 from drawer 1", GOT_KEY), (GOT_KEY, "go to door 1", AT_DOOR),
               (AT_DOOR, "unlock door 1 with key 1", UNLOCKED)]
    fail_a = [(HALL, "go to drawer 1", AT_DRAWER), (AT_DRAWER, "open drawer 1", OPEN_DRAWER),
              (OPEN_DRAWER, "close drawer 1", "You close the drawer 1."),
              ("You close the drawer 1.", "go to door 1", AT_DOOR),
              (AT_DOOR, "open door 1", NOTHING), (AT_DOOR, "open door 1", NOTHING)]
    fail_b = [(HALL, "go to door 1", AT_DOOR), (AT_DOOR, "open door 1", NOTHING),
              (AT_DOOR, "go to drawer 1", AT_DRAWER), (AT_DRAWER, "open drawer 1", OPEN_DRAWER),
              (OPEN_DRAWER, "go to door 1", AT_DOOR), (AT_DOOR, "open door 1", NOTHING)]
    # a longer success whose turn 0 is format-invalid and turn 2 is a wasted "Nothing happens."
    success_long = [(HALL, "i am not sure", NOTHING)] + success[:1] + \
        [(AT_DRAWER, "open door 1", NOTHING)] + success[1:]
    return [pivot_traj(0, fail_a, False), pivot_traj(1, success, True), pivot_traj(2, fail_b, False),
            pivot_traj(3, success_long, True, valid=[False] + [True] * 6)]


# ---------------------------------------------------------------------------------------------
# docs/metrics.md
# ---------------------------------------------------------------------------------------------
def documented_keys() -> list[str]:
    """Every metrics key docs/metrics.md names in a table's first column (`<x>`: a run-time name)."""
    keys = []
    for line in open(os.path.join(ROOT, "docs", "metrics.md")):
        if line.startswith("| `"):
            keys += re.findall(r"`([a-z_]+(?:/[A-Za-z_<>]+)*)`", line.split(" | ")[0])
    return keys


def undocumented(keys) -> list[str]:
    """The keys of a metrics row that docs/metrics.md does not name (the lab's keys are in
    docs/credit_lab.md; docs/metrics.md lists their names too)."""
    text = open(os.path.join(ROOT, "docs", "metrics.md")).read()
    pats = [re.compile("[^/]+".join(re.escape(p) for p in re.split(r"<[a-z_]+>", k)) + "$") for k in documented_keys()]
    lab = set(re.findall(r"`(lab/[a-z_]+)`", text))
    return [k for k in keys if k not in lab and not any(p.match(k) for p in pats)]


# ---------------------------------------------------------------------------------------------
# The paper's model family, tiny
# ---------------------------------------------------------------------------------------------
def tiny_qwen3_5(tok, seed: int = 0, init_std: float = 0.02):
    """A random `Qwen3_5ForCausalLM` for the tokenizer `tok`: the hybrid of the paper's Qwen3.5
    models at toy size — layer 0 linear attention (a causal conv, then the gated delta rule),
    layer 1 full attention (GQA, gated output) — 32 wide (~40k parameters with ALFWorld's
    tokenizer). `init_std` > 0.02 gives peaked logits, so that a test of batch independence can see
    a leak (at 0.2 a padding leak changes most samples)."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    torch.manual_seed(seed)
    conf = Qwen3_5TextConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel_dim=4, max_position_embeddings=4096,
        tie_word_embeddings=True, initializer_range=init_std, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), bos_token_id=None)
    return Qwen3_5ForCausalLM(conf).eval()
