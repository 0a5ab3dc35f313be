"""Helpers the baselines share: their sampling seeds and the per-turn format penalty.

A baseline's continuations are seeded per (run seed, update, method salt, the groups' global ids):
ints only, because str hashes vary per process; the group ids make data-parallel ranks, which hold
different groups, draw different samples.
"""
from __future__ import annotations

import grpo


def seed_for(run, salt: int, groups) -> int:
    """Deterministic per (seed, step, method, the groups' global ids) — ints only (str hashes vary
    per process). The group ids make data-parallel ranks, which hold different groups, draw
    different samples (with the step alone every rank would reuse one random stream)."""
    return hash((run.cfg.seed, run.step, salt, *(grp[0].group_id for grp in groups))) & 0x7FFFFFFF


def penalised(x: float, turn, cfg) -> float:
    return x - grpo.turn_penalty(turn, cfg.invalid_penalty, cfg.inadmissible_penalty)
