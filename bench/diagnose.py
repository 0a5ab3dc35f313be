"""bench/diagnose.py — why does a policy fail? Failure modes of a run's policy on held-out tasks.

    python bench/diagnose.py runs/alfworld-prover-s0                  # the run's last checkpoint
    python bench/diagnose.py runs/alfworld-prover-s0 --model ~/.cache/prover/tiny-alfworld-…   # its warm start

Plays `--episodes` held-out tasks (spread over the split like train.py's evaluation, same prompt
style, history and step limit as the run) at each of `--temperatures` (default: the evaluation's
0.4 and the training rollouts' 1.0) and reports, per temperature:

  success, mean episode length, out of steps (share of episodes that failed at the step limit),
  non-admissible  share of turns whose (well-formed) action was not in the env's admissible list
                  — ALFWorld answers "Nothing happens." and the turn is wasted,
  repeats         share of turns that repeat the previous turn's action (loops),
  the verbs of the non-admissible actions, and the first failed episode turn by turn.

Why this exists: success alone does not say what to fix. On the tiny ALFWorld policy it showed
that ~2/3 of held-out turns are non-admissible (absent objects and places) and that at T = 0.4
they become loops — the plateau of the learning runs is the tiny model's grounding, not the loop.
Writes results/diagnose/diagnose_<run name>.{md,json} (`--out-dir` to change).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def failure_modes(groups, max_steps: int) -> dict:
    """Counts over trajectories (one per group): the figures above, from the recorded turns."""
    trajs = [g[0] for g in groups]
    turns = [tn for tr in trajs for tn in tr.turns]
    n, nt = len(trajs), max(1, len(turns))
    nonadm = [tn for tn in turns if tn.valid and tn.admissible and tn.action not in tn.admissible]
    repeats = sum(1 for tr in trajs for a, b in zip(tr.turns, tr.turns[1:]) if a.action == b.action)
    return {"episodes": n, "success": sum(t.success for t in trajs) / n,
            "episode_len": len(turns) / n,
            "out_of_steps": sum(1 for t in trajs if not t.won and len(t.turns) >= max_steps) / n,
            "invalid_format": sum(not tn.valid for tn in turns) / nt,
            "non_admissible": len(nonadm) / nt, "repeats": repeats / nt,
            "non_admissible_verbs": dict(Counter(tn.action.split(" ")[0] for tn in nonadm).most_common(8))}


def transcript(tr, limit: int = 25) -> list[str]:
    lines = [f"task: {tr.task_text}  ({tr.task_type}; {'won' if tr.won else 'failed'} in {len(tr.turns)} turns)"]
    for tn in tr.turns[:limit]:
        flag = "" if not tn.admissible or tn.action in tn.admissible else "  [not admissible]"
        lines.append(f"{tn.t:3d}  {tn.action}{flag}  ->  {tn.next_obs[:90]}")
    if len(tr.turns) > limit:
        lines.append(f"... {len(tr.turns) - limit} more turns")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="a train.py run directory (its config.json; its checkpoint unless --model)")
    p.add_argument("--model", default="", help="diagnose this HF folder instead (e.g. the warm start in the cache dir)")
    p.add_argument("--episodes", type=int, default=64, help="held-out tasks (0 = the whole split)")
    p.add_argument("--temperatures", default="0.4,1.0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=os.path.join(ROOT, "results", "diagnose"))
    a = p.parse_args(argv)
    cfg_path = os.path.join(a.run, "config.json")
    if not os.path.exists(cfg_path):
        p.error(f"{a.run}: no config.json (not a train.py run directory)")
    model_dir = a.model or os.path.join(a.run, "checkpoint")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        p.error(f"{model_dir}: no model there (no checkpoint yet? pass --model)")
    import torch
    from infra import policy
    from infra import build
    import train
    from rollout import Agent, rollout_groups, spread_tasks
    torch.set_num_threads(1)
    saved = json.load(open(cfg_path))
    cfg = train.Config(**{k: v for k, v in saved.items() if k in train.Config.__dataclass_fields__})
    try:      # a hand-edited config.json can hold what train.py would have refused: one line, not a traceback
        spec, env_kw, _, split = build.env_setup(cfg, lambda *_: None)
    except ValueError as e:
        raise SystemExit(f"diagnose: {cfg_path}: {e}")
    if not (a.episodes or spec.num_tasks(split)):
        raise SystemExit(f"diagnose: --episodes 0 (the whole split): split {split!r} is generated; give a number")
    model, tok = policy.load_hf(model_dir)
    agent = Agent(policy.HFGenerator(model, tok), tok, spec, compact=not (cfg.chat_prompt or cfg.model),
                  history_len=cfg.history_len, max_new_tokens=cfg.max_new_tokens, reward=cfg.reward)
    tasks = spread_tasks(spec.num_tasks(split), a.episodes or spec.num_tasks(split))   # 0: the whole split
    n = len(tasks)
    envs = [spec.make(split=split, seed=cfg.seed, **env_kw) for _ in range(n)]
    res = {"run": a.run, "model": model_dir, "env": cfg.env, "split": split, "by_temperature": {}}
    md = [f"# Failure modes: {os.path.basename(os.path.normpath(a.run))}", "",
          f"Policy `{model_dir}`, {n} `{split}` tasks of {cfg.env}, history {cfg.history_len}.", "",
          "| T | success | episode len | out of steps | non-admissible turns | repeated actions | invalid format | non-admissible verbs |",
          "|---|---|---|---|---|---|---|---|"]
    failed = {}
    for T in (float(x) for x in a.temperatures.split(",")):
        groups = rollout_groups(agent, envs, tasks, 1, T, seed=a.seed + 7, purpose="eval", keep_states=False)
        m = failure_modes(groups, envs[0].max_steps)
        res["by_temperature"][str(T)] = m
        md.append(f"| {T} | {m['success']:.3f} | {m['episode_len']:.1f} | {m['out_of_steps']:.3f} | {m['non_admissible']:.3f} | {m['repeats']:.3f} "
                  f"| {m['invalid_format']:.3f} | {', '.join(f'{k} {v}' for k, v in m['non_admissible_verbs'].items())} |")
        print(f"T={T}: success {m['success']:.3f} | len {m['episode_len']:.1f} | non-admissible {m['non_admissible']:.3f} "
              f"| repeats {m['repeats']:.3f} | verbs {m['non_admissible_verbs']}")
        fail = next((g[0] for g in groups if not g[0].won), None)
        if fail is not None:
            failed[T] = transcript(fail)
    for T, lines in failed.items():
        md += ["", f"First failed episode at T = {T}:", "", "```", *lines, "```"]
    os.makedirs(a.out_dir, exist_ok=True)
    name = os.path.basename(os.path.normpath(a.run)) + ("-model" if a.model else "")
    for ext, text in (("json", json.dumps(res, indent=1)), ("md", "\n".join(md) + "\n")):
        with open(os.path.join(a.out_dir, f"diagnose_{name}.{ext}"), "w") as f:
            f.write(text)
    print(f"wrote {os.path.join(a.out_dir, f'diagnose_{name}.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
