"""Environments: the `Env` protocol every module speaks, the registry, prompts and action parsing.

What lives here
---------------
* `Env` — the one narrow protocol for a multi-turn text environment:

      obs, info            = env.reset(task)          # task: int index into the split's task list
      obs, r, done, info   = env.step(action_text)    # every call counts towards env.max_steps
      snap                 = env.snapshot()           # opaque, cheap, deep copy of the whole state
      env.restore(snap)                               # continue exactly from there

  `info` always carries: `task` (the task sentence), `task_type` (for per-type metrics),
  `admissible` (list[str], may be empty where the benchmark has no list), `won` (bool) and
  `score` (float in [0, 1]; equals `won` for ALFWorld, WebShop's reward for WebShop).
  Reward is the benchmark's own step reward (ALFWorld/SearchQA: 1.0 on the winning step).
  Bad action text never raises: the env answers as the real benchmark would.
  Optional, used only by the tiny policy's warm start: `expert_action()` (the simulator's expert)
  and `random_action(rng)` (a detour for ε-noisy demos where `admissible` is empty or partial).

* `EnvSpec` — everything the trainer needs about one benchmark: how to build an env for a split,
  its closed vocabulary (for the tiny word-level tokenizer), how to turn the agent's view into a
  prompt (a verl-agent-style chat prompt for real LLMs and a compact one for the tiny policy), and
  how to parse the model's text into an action.
* `make_env(name, split=..., ...)` / `ENVS` — the registry (an explicit dict, no string matching).
* `PivotEnv` — a tiny controlled environment where exactly one decision decides success with known
  probabilities; the tests use it to check verification against analytic values.

Agent context is *not* part of the env: the rollout keeps the (observation, action) history and the
prompt is rebuilt from it each turn (one user message per turn, as verl-agent does), so restoring
a turn means restoring the env snapshot plus that history (see `rollout.AgentState`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np


class Env(Protocol):
    name: str
    max_steps: int

    def reset(self, task: int) -> tuple[str, dict]: ...
    def step(self, action: str) -> tuple[str, float, bool, dict]: ...
    def snapshot(self) -> Any: ...
    def restore(self, snap: Any) -> None: ...


@dataclass
class PromptInput:
    """The agent's view at one turn; prompts are pure functions of it."""
    task: str                         # task sentence, e.g. "put a apple in fridge."
    obs: str                          # current observation (the full intro at step 0)
    admissible: list[str]             # admissible actions now (may be empty)
    history: list[tuple[str, str]]    # all earlier (observation shown, action taken), oldest first
    step: int                         # number of steps already taken


@dataclass
class EnvSpec:
    name: str
    make: Callable[..., Env]                          # make(split, seed=..., **kw) -> Env
    splits: tuple[str, ...]                           # first is the training split
    num_tasks: Callable[[str], int | None]            # tasks in a split (None = unbounded)
    vocabulary: Callable[[], list[str]]               # every word env text can contain
    chat_prompt: Callable[[PromptInput, int], str]    # (view, history_len) -> user message
    compact_prompt: Callable[[PromptInput, int], str]
    parse: Callable[[str], tuple[str, bool]]          # model text -> (action, format_valid)
    task_types: tuple[str, ...] = ()
    response: Callable[[str], str] = lambda a: f"<action>{a}</action>"   # action -> the text a policy writes
    # strings the tiny word-level tokenizer keeps whole (e.g. WebShop's product ids), so that
    # copying one from the observation is a single token
    atomic: Callable[[], list[str]] = lambda: []
    extra: dict = field(default_factory=dict)
    # --env-opt KEY=VALUE: the env's own parameters, each checked before anything is built
    options: dict[str, "EnvOption"] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# --env-opt: one generic way for any env to take parameters from the command line
# ---------------------------------------------------------------------------------------------
@dataclass
class EnvOption:
    """One `--env-opt KEY=VALUE` an env accepts: the value's type, its default, a check that
    returns an error message (or None), and a one-line help. The parsed values are passed to
    `spec.make(...)` as keyword arguments."""
    type: type                                        # int | float | str | bool
    default: Any
    check: Callable[[Any], str | None] = lambda v: None
    help: str = ""


def in_range(lo: float, hi: float) -> Callable[[Any], str | None]:
    """Check for EnvOption: lo <= value <= hi."""
    return lambda v: None if lo <= v <= hi else f"must be in [{lo}, {hi}]"


def parse_env_opts(spec: EnvSpec, items: list[str]) -> dict:
    """`["rooms=8", "p_key=0.8"]` → `{"rooms": 8, "p_key": 0.8}`, typed and checked by the env's
    `options`. Raises ValueError with one line naming the bad item (unknown key, unparsable or
    out-of-range value, repeated key); an env with no options accepts none."""
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--env-opt {item!r}: expected KEY=VALUE")
        if key not in spec.options:
            have = ", ".join(sorted(spec.options)) or "none"
            raise ValueError(f"--env-opt {key}: unknown option for env {spec.name} (it has: {have})")
        if key in out:
            raise ValueError(f"--env-opt {key}: given twice")
        opt = spec.options[key]
        try:
            if opt.type is bool:
                if raw.strip().lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError
                val = raw.strip().lower() in ("1", "true", "yes")
            else:
                val = opt.type(raw.strip())
        except ValueError:
            raise ValueError(f"--env-opt {key}={raw}: not a valid {opt.type.__name__}") from None
        if isinstance(val, float) and val != val:
            raise ValueError(f"--env-opt {key}={raw}: not a number")
        err = opt.check(val)
        if err:
            raise ValueError(f"--env-opt {key}={raw}: {err}")
        out[key] = val
    return out


# ---------------------------------------------------------------------------------------------
# Action parsing shared by ALFWorld and WebShop (verl-agent's projection)
# ---------------------------------------------------------------------------------------------
_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL)


def parse_action_tag(text: str, fallback_chars: int = 30) -> tuple[str, bool]:
    """First `<action>…</action>`, lower-cased and stripped. Missing tags: the step is invalid and
    (as verl-agent does) the last `fallback_chars` characters are sent, which the env answers
    with its no-op. `<think>` is not required: the tiny policy does not think."""
    low = text.lower()
    m = _ACTION_RE.search(low)
    if m is None:
        return low[-fallback_chars:].strip(), False
    return m.group(1).strip(), True


# ---------------------------------------------------------------------------------------------
# ALFWorld prompts (verl-agent templates, reference/alfworld.md §5)
# ---------------------------------------------------------------------------------------------
_ALF_HEAD = "You are an expert agent operating in the ALFRED Embodied Environment."
_ALF_TAIL = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)


def _alf_admissible(adm: list[str]) -> str:
    return "\n ".join(f"'{a}'" for a in adm if a != "help")


def alfworld_chat_prompt(v: PromptInput, history_len: int = 2) -> str:
    """verl-agent's ALFWORLD_TEMPLATE_NO_HIS / ALFWORLD_TEMPLATE, verbatim incl. its typo."""
    adm = f"Your admissible actions of the current situation are: [{_alf_admissible(v.admissible)}].\n\n"
    if v.step == 0 or history_len == 0:
        return f"{_ALF_HEAD}\nYour current observation is: {v.obs}\n{adm}{_ALF_TAIL}"
    k0 = max(0, len(v.history) - history_len)
    recs = "\n".join(f"[Observation {k + 1}: '{o}', Action {k + 1}: '{a}']"
                     for k, (o, a) in enumerate(v.history) if k >= k0)
    return (f"{_ALF_HEAD} Your task is to: {v.task}\n"
            f"Prior to this step, you have already taken {v.step} step(s). Below are the most recent "
            f"{min(history_len, len(v.history))} observaitons and the corresponding actions you took: {recs}\n"
            f"You are now at step {v.step + 1} and your current observation is: {v.obs}\n"
            f"{adm}{_ALF_TAIL}")


def compact_prompt(v: PromptInput, history_len: int = 2) -> str:
    """Short prompt for the tiny offline policy (any env): task, the last few steps, the current
    observation and the admissible actions. The chat prompt's information except its step counter
    ("you have already taken N step(s)"), in ~5x fewer tokens, which is what makes CPU RL
    affordable. The answer format is the same `<action>…</action>`."""
    lines = [f"task: {v.task}"]
    for o, a in v.history[max(0, len(v.history) - history_len):]:
        lines.append(f"obs: {o}")
        lines.append(f"act: {a}")
    lines.append(f"obs: {v.obs}")
    if v.admissible:
        lines.append("actions: " + " | ".join(a for a in v.admissible if a not in ("help", "look", "inventory")))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# PivotEnv: a controlled environment for testing verification and judges
# ---------------------------------------------------------------------------------------------
class PivotEnv:
    """One decision decides success, with known probabilities.

    The episode walks a corridor of `n_steps` rooms. At room `pivot` the agent must `take key`
    (the pivotal decision); every other room admits `go forward` (and `take key` elsewhere does
    nothing useful). At the last room the door opens with probability `p_with_key` if the key is
    held, else `p_without` — drawn from the env's own seeded RNG, which is part of the snapshot, so
    restore + replay is exact. Under any policy π the analytic values are
        V(s_pre)  = π(take key | pivot room)·p_with_key + (1−π(...))·p_without
        V(s_post) = p_with_key            (after taking the key, the rest is forced)
    which the verification tests compare Δ̂ against.
    """
    name = "pivot"

    def __init__(self, split: str = "train", seed: int = 0, n_steps: int = 4, pivot: int = 1,
                 p_with_key: float = 0.9, p_without: float = 0.1):
        self.n_steps, self.pivot = n_steps, pivot
        self.p_with_key, self.p_without = p_with_key, p_without
        self.max_steps = n_steps + 2
        self.seed, self.split = seed, split
        self.room, self.key, self.steps, self.done, self.won = 0, False, 0, False, False
        self.rng = np.random.default_rng(seed)

    def _obs(self) -> str:
        return f"You are in room {self.room + 1}." + (" A key lies here." if self.room == self.pivot and not self.key else "")

    def _info(self) -> dict:
        adm = ["go forward"] + (["take key"] if self.room == self.pivot and not self.key else [])
        return {"task": "reach the end and open the door.", "task_type": "pivot",
                "admissible": adm, "won": self.won, "score": float(self.won)}

    def reset(self, task: int) -> tuple[str, dict]:
        self.rng = np.random.default_rng([self.seed, task])
        self.room, self.key, self.steps, self.done, self.won = 0, False, 0, False, False
        return self._obs() + "\n\nYour task is to: reach the end and open the door.", self._info()

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.done:
            return "Nothing happens.", 0.0, True, self._info()
        self.steps += 1
        a = action.strip()
        if a == "take key" and self.room == self.pivot and not self.key:
            self.key, obs = True, "You pick up the key."
        elif a == "go forward":
            self.room += 1
            if self.room >= self.n_steps:
                p = self.p_with_key if self.key else self.p_without
                self.won = bool(self.rng.random() < p)
                self.done = True
                obs = "The door opens." if self.won else "The door stays shut."
            else:
                obs = self._obs()
        else:
            obs = "Nothing happens."
        if self.steps >= self.max_steps:
            self.done = True
        return obs, float(self.won and self.done), self.done, self._info()

    def reseed(self, seed: int) -> None:
        """Fresh future randomness (the door draw) for a continuation from a snapshot."""
        self.rng = np.random.default_rng(seed)

    def expert_action(self) -> str:
        return "take key" if self.room == self.pivot and not self.key else "go forward"

    def snapshot(self) -> Any:
        return (self.room, self.key, self.steps, self.done, self.won, self.rng.bit_generator.state)

    def restore(self, snap: Any) -> None:
        self.room, self.key, self.steps, self.done, self.won, st = snap
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = st


def _pivot_vocab() -> list[str]:
    return ["You are in room 0123456789.", "A key lies here.", "Your task is to: reach the end and open the door.",
            "You pick up the key.", "The door opens.", "The door stays shut.", "Nothing happens.",
            "go forward", "take key"]


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------
def _alfworld_spec() -> EnvSpec:
    import household  # built-in simulator; the real engine lives in alfworld_tw.py
    return EnvSpec(
        name="alfworld", make=household.make_alfworld, splits=household.SPLITS,
        num_tasks=household.num_tasks, vocabulary=household.vocabulary,
        chat_prompt=alfworld_chat_prompt, compact_prompt=compact_prompt, parse=parse_action_tag,
        task_types=household.TASK_TYPES)


def _pivot_spec() -> EnvSpec:
    return EnvSpec(
        name="pivot", make=lambda split="train", seed=0, **kw: PivotEnv(split, seed, **kw),
        splits=("train", "test"), num_tasks=lambda split: None if split == "train" else 64,
        vocabulary=_pivot_vocab, chat_prompt=compact_prompt, compact_prompt=compact_prompt,
        parse=parse_action_tag, task_types=("pivot",))


def _webshop_spec() -> EnvSpec:
    import webshop
    return webshop.SPEC


def _searchqa_spec() -> EnvSpec:
    import searchqa
    return searchqa.SPEC


ENVS: dict[str, Callable[[], EnvSpec]] = {
    "alfworld": _alfworld_spec,
    "webshop": _webshop_spec,
    "searchqa": _searchqa_spec,
    "pivot": _pivot_spec,
}


def get_spec(name: str) -> EnvSpec:
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; choose one of {sorted(ENVS)}")
    return ENVS[name]()


def make_env(name: str, split: str = "train", seed: int = 0, **kw) -> Env:
    """Build one env of benchmark `name` on `split`. Extra keywords go to the benchmark's maker
    (e.g. `preset="small"`, `backend="builtin"|"real"|"auto"` for ALFWorld)."""
    spec = get_spec(name)
    if split not in spec.splits:
        raise ValueError(f"env {name!r} has no split {split!r}; choose one of {list(spec.splits)}")
    return spec.make(split=split, seed=seed, **kw)
