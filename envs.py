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
* `ENVS` — the registry: name → "module:SPEC", imported on first use (so `--help` loads no env),
  the only place an env is named; `get_spec(name)`, `make_env(name, split=..., ...)`. The
  simulators live in sims/ (keydoor.py: the credit lab, an env with known pivotal decisions).
  An env's own defaults for train.py's flags are `EnvSpec.defaults`; tests/test_envs.py is the
  conformance test every registered env passes.

Agent context is *not* part of the env: the rollout keeps the (observation, action) history and the
prompt is rebuilt from it each turn (one user message per turn, as verl-agent does), so restoring
a turn means restoring the env snapshot plus that history (see `rollout.AgentState`).
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


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
    # --env-backend auto|builtin|real → (make keywords, one-line start-up message); resolved once
    backend: Callable[[str], tuple[dict, str]] = field(default=None)
    # train.py Config fields this env's maker takes: {config field: make keyword} (ALFWorld's
    # --preset); demo_kwargs: the same for the warm start's demonstrations only (--bc-expert)
    config_kwargs: dict[str, str] = field(default_factory=dict)
    demo_kwargs: dict[str, str] = field(default_factory=dict)
    # train.py Config fields this env sets where the flag is not given (the Config defaults are
    # tuned for ALFWorld), e.g. {"iters": 40}; printed at the start of a run
    defaults: dict[str, Any] = field(default_factory=dict)
    # the credit lab: turns carry truth labels (Turn.truth) and lab/oracle.py values the env exactly;
    # the methods and judges marked `lab` need it
    lab: bool = False

    def __post_init__(self):
        if self.backend is None:
            self.backend = lambda b: builtin_backend(self.name, b)


def builtin_backend(name: str, backend: str) -> tuple[dict, str]:
    """--env-backend for an env that has only its built-in version."""
    if backend == "real":
        raise ValueError(f"--env-backend real: env {name} has no real backend (only its built-in one)")
    return {}, f"{name}: built-in"


def builtin_or_real(name: str, backend: str) -> tuple[dict, str]:
    """--env-backend for an env whose maker takes backend="builtin"|"real" (auto = builtin)."""
    b = "builtin" if backend == "auto" else backend
    return {"backend": b}, f"{name}: backend {b}"


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
# ALFWorld prompts (verl-agent's templates)
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
# Registry
# ---------------------------------------------------------------------------------------------
# name -> "module:SPEC" (an EnvSpec); imported by name when first asked for, so an env module may
# import this one without an import circle. Adding an env: its module (with SPEC) and one line here.
ENVS: dict[str, str] = {
    "alfworld": "sims.alfworld_tw:SPEC",
    "webshop": "sims.webshop:SPEC",
    "searchqa": "sims.searchqa:SPEC",
    "keydoor": "sims.keydoor:SPEC",
}


def get_spec(name: str) -> EnvSpec:
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; choose one of {sorted(ENVS)}")
    module, attr = ENVS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def make_env(name: str, split: str = "train", seed: int = 0, **kw) -> Env:
    """Build one env of benchmark `name` on `split`. Extra keywords go to the benchmark's maker
    (e.g. `preset="small"`, `backend="builtin"|"real"|"auto"` for ALFWorld)."""
    spec = get_spec(name)
    if split not in spec.splits:
        raise ValueError(f"env {name!r} has no split {split!r}; choose one of {list(spec.splits)}")
    return spec.make(split=split, seed=seed, **kw)
