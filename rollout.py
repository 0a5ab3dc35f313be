"""Rollout: `Turn` / `Trajectory` records and batched multi-turn sampling.

Procedure (one call of `run_episodes`)
--------------------------------------
Every active episode is an `AgentState` (env snapshot + the agent's history). Each turn, for all
active episodes at once:
    1. build the prompt from the agent's view (verl-agent style: the user message is rebuilt every
       turn from the task, the last `history_len` steps, the current observation and the admissible
       actions) and wrap it with the model's chat template;
    2. sample one response per episode from the generation backend (HF or vLLM), keeping the
       sampled ids and their log-probs (the behaviour policy, for the PPO ratio);
    3. parse `<action>…</action>` (a missing tag is an invalid-format step: the env still gets the
       text, answers with its no-op, and the step counts), step the env, record a `Turn`.
An episode stops when the env says done (win or the step limit). Starting from `env.reset(task)`
and continuing from any restored `AgentState` are the same code path — which is what verification
(ProVer) and the Monte-Carlo baselines (SPO) need: the continuation sees exactly the prompt and env
state the original trajectory saw at that turn, and has the episode's *remaining* step budget.

Row layout for training: one row per (trajectory, turn): prompt ids + action ids, with the loss
mask on action ids only, so observation and prompt tokens never get credit.

Costs: every generated token and env step is added to a `Counter` under its purpose
(`rollout`, `eval`, `verify`, `judge`, ...) so methods are compared at measured cost.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from envs import Env, EnvSpec, PromptInput


@dataclass
class AgentState:
    """Everything needed to continue an episode from a turn: the env snapshot and the agent's
    context (the prompt is rebuilt from `history`). Restoring this reproduces the exact prompt
    and env state at that turn."""
    env_snap: Any
    obs: str                          # observation the agent is about to act on
    info: dict                        # env info at that point (task, admissible, ...)
    history: tuple                    # ((obs shown, action taken), ...) of earlier turns
    step: int                         # steps already taken
    done: bool = False                # episode over (win or step limit)


@dataclass
class Turn:
    t: int                            # 0-based turn index in its trajectory
    obs: str                          # observation the agent acted on
    admissible: list[str]             # admissible actions at that point
    text: str                         # the model's raw output text
    action: str                       # parsed action sent to the env
    valid: bool                       # output had the <action> tags (format-valid)
    next_obs: str                     # env's answer
    reward: float                     # env step reward
    done: bool
    prompt_ids: list[int] = field(default_factory=list)
    action_ids: list[int] = field(default_factory=list)     # generated tokens (incl. eos)
    logprobs: list[float] = field(default_factory=list)     # sampling log-probs, one per action id
    state: AgentState | None = None   # restore handle: state *before* this turn
    # ground truth from the env (keydoor: "key" / "trap" when this turn took one, "nokey" when it
    # walked out of the pivot room leaving the key, else ""); read
    # only by the credit-lab metrics (lab/metrics.py), never shown to the judge or the policy
    truth: str = ""


@dataclass
class Trajectory:
    traj_id: int                      # index within its group (0..G-1)
    group_id: int
    task: int                         # task index in the split
    task_text: str
    task_type: str
    turns: list[Turn]
    won: bool
    score: float                      # benchmark score in [0, 1] (= won for ALFWorld)
    start_step: int = 0               # >0 for continuations from a restored state
    R: float | None = None            # the outcome advantages use (see `outcome`); default 1[won]

    def __post_init__(self):
        if self.R is None:
            self.R = float(self.won)

    @property
    def success(self) -> float:
        return float(self.won)


# --reward: the trajectory outcome R that GRPO's advantages and every value estimate (verification,
# SPO) use, from the env's final info: success = 1[won] (binary, as in the ProVer paper and
# verl-agent), or score = the benchmark's score in [0, 1] (WebShop's own env reward: partial credit
# for type, attributes, options and price; equals success on ALFWorld and SearchQA)
REWARDS: dict[str, Callable[[dict], float]] = {
    "success": lambda info: float(bool(info.get("won", False))),
    "score": lambda info: float(info.get("score", 0.0)),
}


def outcome(info: dict, reward: str = "success") -> float:
    """The trajectory outcome R under `reward` (see REWARDS)."""
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {tuple(REWARDS)}, got {reward!r}")
    return REWARDS[reward](info)


@dataclass
class Agent:
    """How the policy talks to an env: backend + tokenizer + prompt style. One per run."""
    gen: Any                          # HFGenerator / VLLMGenerator (generate(prompts, ...), sync(model))
    tok: Any
    spec: EnvSpec
    compact: bool = True              # compact prompt (tiny policy) or the benchmark's chat prompt
    history_len: int = 2
    max_new_tokens: int = 24
    max_prompt_tokens: int = 1536
    reward: str = "success"           # trajectory outcome R: success | score (see `outcome`)
    counter: Counter = field(default_factory=Counter)

    def prompt_ids(self, s: AgentState) -> list[int]:
        return self.prompts_ids([s])[0]

    def prompts_ids(self, states: list[AgentState]) -> list[list[int]]:
        """Prompt ids of each state (one batched tokenizer call)."""
        from infra.policy import encode_chats
        fn = self.spec.compact_prompt if self.compact else self.spec.chat_prompt
        texts = [fn(PromptInput(task=s.info.get("task", ""), obs=s.obs,
                                admissible=list(s.info.get("admissible") or []),
                                history=list(s.history), step=s.step), self.history_len)
                 for s in states]
        out = []
        for ids in encode_chats(self.tok, texts):
            if len(ids) > self.max_prompt_tokens:   # keep the end (current obs + header); counted
                self.counter["prompt_truncations"] += 1
                ids = ids[-self.max_prompt_tokens:]
            out.append(ids)
        return out


NOTHING_HAPPENS = "Nothing happens."   # ALFWorld's answer to an action that changes nothing


def turn_error(turn: Turn) -> str | None:
    """Why a turn counts as a malformed / error-producing action, or None. The paper excludes
    these from the judge's segments even when recovering from them helped."""
    if not turn.valid:
        return "the output had no <action> tags (format-invalid)"
    if turn.admissible and turn.action not in turn.admissible:
        return f"action {turn.action!r} is not in that turn's admissible list"
    if turn.next_obs.strip() == NOTHING_HAPPENS:
        return f"the env answered {NOTHING_HAPPENS!r}"
    return None


def shortest_success(group: list[Trajectory]) -> int | None:
    """Index in `group` of the successful trajectory with the fewest turns (lowest index on ties);
    None if no trajectory won. ProVer's judge examines this one (the paper's choice)."""
    wins = [i for i, tr in enumerate(group) if tr.won]
    return min(wins, key=lambda i: (len(group[i].turns), i)) if wins else None


def start_state(env: Env, task: int) -> AgentState:
    obs, info = env.reset(task)
    return AgentState(env.snapshot(), obs, info, (), 0)


def run_episodes(agent: Agent, envs: list[Env], starts: list[AgentState], temperature: float,
                 seed: int, purpose: str, keep_states: bool = True,
                 progress: Callable[[int], None] | None = None, fresh_env_randomness: bool = False,
                 episode_ids: list[int] | None = None, absolute_steps: bool = False) -> tuple[list[list[Turn]], list[AgentState]]:
    """Play one episode per (env, start) to the end; returns the turns of each and the final
    states (whose `info` holds won/score). `envs[i]` is restored to `starts[i]` first, so the same
    env objects can be reused for any start.

    `fresh_env_randomness`: a snapshot restores the env's RNG too (exact replay), so K
    continuations from one snapshot would all see the *same* future env randomness and estimate
    V(s) for one draw of it only. Value estimates (verification, SPO) set this flag: each
    continuation's env then redraws its future randomness (`env.reseed`, for envs that have any
    randomness left after reset; ALFWorld has none).

    `absolute_steps`: seed a turn's sampling by the episode's absolute step (start.step + turns
    played) instead of the turns played in this call, so continuations from two states of one
    episode (verification's CRN) that reach the same step draw the same numbers there."""
    assert len(envs) == len(starts)
    states = list(starts)
    rs = random.Random(seed ^ 0x5EED)
    # every (episode, turn) has its own sampling seed: an episode's samples do not depend on the
    # batch it shares (data-parallel workers reproduce a single-process run)
    eids = episode_ids if episode_ids is not None else list(range(len(envs)))
    for e, s, eid in zip(envs, states, eids):
        e.restore(s.env_snap)
        if hasattr(e, "reseed"):   # envs with randomness after reset (keydoor's door); ALFWorld has none
            # continuations: fresh draws (see above); new episodes: one draw per episode id, so the
            # G rollouts of a group do not share one draw and any worker count gives the same draws
            e.reseed(rs.getrandbits(63) if fresh_env_randomness else hash((seed, eid, 0xD00)) & 0x7FFFFFFFFFFFFFFF)
    turns: list[list[Turn]] = [[] for _ in envs]
    active = [i for i, (e, s) in enumerate(zip(envs, states)) if not s.done and s.step < e.max_steps]
    while active:
        prompts = agent.prompts_ids([states[i] for i in active])
        seeds = [hash((seed, eids[i], len(turns[i]) + (starts[i].step if absolute_steps else 0))) & 0x7FFFFFFF
                 for i in active]
        samples = agent.gen.generate(prompts, agent.max_new_tokens, temperature, row_seeds=seeds)
        agent.counter[f"tokens/{purpose}"] += sum(len(s.ids) for s in samples)
        agent.counter[f"env_steps/{purpose}"] += len(active)
        still = []
        for i, p, smp in zip(active, prompts, samples):
            s, env = states[i], envs[i]
            text = agent.tok.decode(smp.ids, skip_special_tokens=True)
            action, valid = agent.spec.parse(text)
            obs, r, done, info = env.step(action)
            turns[i].append(Turn(
                t=len(turns[i]), obs=s.obs, admissible=list(s.info.get("admissible") or []),
                text=text, action=action, valid=valid, next_obs=obs, reward=float(r), done=bool(done),
                prompt_ids=p, action_ids=smp.ids, logprobs=smp.logprobs,
                state=s if keep_states else None, truth=str(info.get("pivotal") or "")))
            step = s.step + 1
            done = done or step >= env.max_steps
            states[i] = AgentState(env.snapshot() if keep_states else None, obs, info,
                                   s.history + ((s.obs, action),), step, done)
            if not done:
                still.append(i)
        if progress:
            progress(len(active) - len(still))
        active = still
    return turns, states


def spread_tasks(num_tasks: int, n: int, first: int = 0) -> list[int]:
    """`n` task indices for an evaluation-style pass. A finite split (`num_tasks` > 0) is ordered by
    task type, so the indices are spread evenly over it and every type is represented in proportion
    (at most `num_tasks` of them, so they stay distinct); a generated split (`num_tasks` = 0) takes n
    consecutive indices from `first`. Used by train.evaluate, the warm start's success check and
    bench/diagnose; callers size their passes by the length of the list it returns."""
    if num_tasks:
        n = min(n, num_tasks)
        return [i * num_tasks // n for i in range(n)]
    return [first + i for i in range(n)]


def make_trajectories(turns: list[list[Turn]], finals: list[AgentState], group_id: int, task: int,
                      start_step: int = 0, reward: str = "success") -> list[Trajectory]:
    return [Trajectory(traj_id=j, group_id=group_id, task=task, task_text=f.info.get("task", ""),
                       task_type=f.info.get("task_type", ""), turns=ts,
                       won=bool(f.info.get("won", False)), score=float(f.info.get("score", 0.0)),
                       start_step=start_step, R=outcome(f.info, reward))
            for j, (ts, f) in enumerate(zip(turns, finals))]


def rollout_groups(agent: Agent, envs: list[Env], tasks: list[int], G: int, temperature: float,
                   seed: int, purpose: str = "rollout", keep_states: bool = True,
                   progress=None, positions: list[int] | None = None) -> list[list[Trajectory]]:
    """G episodes of each task (a GRPO group shares its task and initial state). `envs` must
    hold at least len(tasks)*G envs of the right split. `positions`: each task's index in the
    global batch (data parallel), which fixes its episodes' sampling seeds and group ids."""
    n = len(tasks) * G
    assert len(envs) >= n, f"need {n} envs, got {len(envs)}"
    pos = positions if positions is not None else list(range(len(tasks)))
    starts = [start_state(envs[k * G + j], t) for k, t in enumerate(tasks) for j in range(G)]
    eids = [pos[k] * G + j for k in range(len(tasks)) for j in range(G)]
    turns, finals = run_episodes(agent, envs[:n], starts, temperature, seed, purpose, keep_states, progress,
                                 episode_ids=eids)
    return [make_trajectories(turns[k * G:(k + 1) * G], finals[k * G:(k + 1) * G], pos[k], t, reward=agent.reward)
            for k, t in enumerate(tasks)]


def continue_from(agent: Agent, envs: list[Env], starts: list[AgentState], K: int, temperature: float,
                  seed: int, purpose: str = "verify") -> list[AgentState]:
    """K continuations of the current policy from each restored state (verification, SPO), all in
    one batch. Returns the final states, K per start in order; `final.info['won']` / `['score']`
    are the outcomes. The step budget is what each episode has left (`start.step` counts against
    `env.max_steps`), and each continuation redraws the env's future randomness."""
    assert len(envs) >= K * len(starts)
    _, finals = run_episodes(agent, envs[:K * len(starts)], [s for s in starts for _ in range(K)], temperature,
                             seed, purpose, keep_states=False, fresh_env_randomness=True)
    return finals
