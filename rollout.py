"""Rollout: `Turn` / `Trajectory` records and batched multi-turn sampling.

(Records first; the sampling loop follows below them.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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

    @property
    def success(self) -> float:
        return float(self.won)
