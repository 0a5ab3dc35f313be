"""GRPO: group advantages, per-token broadcast, the PPO-clip loss and one policy update.

    L(θ) = 1/|M| Σ_{(b,t)∈M} max(−A_bt·ρ_bt, −A_bt·clip(ρ_bt, 1−ε_low, 1+ε_high))  +  β·KL_k3
    ρ_bt = exp(log π_θ(y_bt) − log π_old(y_bt)),   M = the policy's own (action) tokens

Group advantage of trajectory i among the G rollouts of one task (outcome R_i):
    A_i = R_i − mean_g R                       (default: the ProVer paper's A^GRPO, "Dr. GRPO")
    A_i = (R_i − mean_g R) / (std_g R + ε)     (--norm-std; unbiased std, as torch.std)
and every action token of every turn of trajectory i gets A_i. Credit methods (ProVer, GiGPO,
SPO, CriticSearch) change the per-turn scalar before this broadcast; the loss is the same for all.

One update is one pass over the batch in S mini-batches (--minibatches, verl's
ppo_mini_batch_size): S optimizer steps; the first is on-policy (ρ = 1), later ones are up to
S−1 steps stale, which the clip bounds. Aggregation (--loss-agg): token-mean (above; verl-agent's
default: a trajectory weighs in proportion to its length) or traj-mean (token (b, t) of trajectory
i weighs 1/|M_i|, divided by the number of trajectories: every trajectory alike, so long ALFWorld
failures do not outweigh short successes).

Shapes: N groups, G group size, B rows (one per trajectory turn: prompt + that turn's action),
T padded row length.

Deviations from verl / verl-agent, numbered (the code says which it follows):
 1. An all-equal group, and a singleton group (G = 1), get A = 0 (verl returns the raw score for
    G = 1, which silently makes those samples REINFORCE without a baseline).
 2. The invalid-format penalty (verl-agent: 0.1) is subtracted from the offending turn's advantage
    only. OURS, off by default: `--inadmissible-penalty` does the same for a well-formed action
    outside the env's admissible list. Outcomes R, and so verification, are unchanged.
 3. Rows with advantage exactly 0 carry no policy gradient: with kl_coef = 0 they are dropped
    before the forward pass, but still count in the token-mean's denominator (otherwise a batch
    whose only signal is two penalised turns would be scaled up to a full-size step).
 4. A non-finite loss or gradient skips the optimizer step (counted), so one bad batch never
    reaches the weights or the checkpoint.
Leaves out: a value network, importance-sampling corrections across updates, entropy bonus.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from infra import dist


# ---------------------------------------------------------------------------------------------
# 1. advantages
# ---------------------------------------------------------------------------------------------
def group_advantages(R: torch.Tensor, norm_std: bool = False, eps: float = 1e-6) -> torch.Tensor:
    """R: (G,) outcomes of one group → (G,) advantages."""
    if R.shape[-1] == 1:
        return torch.zeros_like(R)                                   # deviation 1
    A = R - R.mean(dim=-1, keepdim=True)                             # (G,)
    if norm_std:
        A = A / (R.std(dim=-1, keepdim=True) + eps)                  # (G,), unbiased std
    return A


def turn_penalty(turn, invalid_penalty: float = 0.1, inadmissible_penalty: float = 0.0) -> float:
    """Per-turn penalty (deviation 2): `invalid_penalty` if the output lacked the <action> tags;
    else `inadmissible_penalty` if the env lists admissible actions and this one was not among
    them (ALFWorld answers "Nothing happens." and the turn is wasted). Never both."""
    if not turn.valid:
        return invalid_penalty
    return inadmissible_penalty if turn.admissible and turn.action not in turn.admissible else 0.0


def trajectory_advantages(groups, norm_std: bool = False, invalid_penalty: float = 0.1,
                          inadmissible_penalty: float = 0.0) -> list[list[list[float]]]:
    """GRPO per-turn advantages for a list of groups of Trajectory: adv[g][i][t]."""
    out = []
    for grp in groups:
        A = group_advantages(torch.tensor([tr.R for tr in grp], dtype=torch.float64), norm_std)   # (G,)
        out.append([[float(A[i]) - turn_penalty(turn, invalid_penalty, inadmissible_penalty) for turn in tr.turns]
                    for i, tr in enumerate(grp)])
    return out


# ---------------------------------------------------------------------------------------------
# 2. rows → padded batch
# ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    prompt_ids: list[int]
    action_ids: list[int]
    logprobs: list[float]        # behaviour-policy log-probs of action_ids
    adv: float                   # the per-turn scalar, broadcast over the action tokens
    minibatch: int = 0           # which optimizer step of the update trains it (`minibatch_of`)
    weight: float = 1.0          # per-token loss weight (traj-mean: 1 / its trajectory's action tokens)


def collate(rows: list[Row], pad_id: int):
    """Right-padded batch. Position j of the *targets* (ids shifted by one) is trained iff it is
    an action token; the mask holds the row's token weight there (1 unless traj-mean).
    Returns ids (B, T), attn (B, T), mask (B, T-1), old (B, T-1), adv (B, T-1)."""
    T = max(len(r.prompt_ids) + len(r.action_ids) for r in rows)
    B = len(rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)                # (B, T)
    attn = torch.zeros((B, T), dtype=torch.long)                      # (B, T)
    mask = torch.zeros((B, T - 1))                                    # (B, T-1)
    old = torch.zeros((B, T - 1))                                     # (B, T-1)
    adv = torch.zeros((B, T - 1))                                     # (B, T-1)
    for b, r in enumerate(rows):
        P, A = len(r.prompt_ids), len(r.action_ids)
        ids[b, :P + A] = torch.tensor(r.prompt_ids + r.action_ids)
        attn[b, :P + A] = 1
        # target at position j is ids[j+1]; action tokens are ids[P:P+A] → targets P-1 .. P+A-2
        mask[b, P - 1:P + A - 1] = r.weight
        old[b, P - 1:P + A - 1] = torch.tensor(r.logprobs[:A])
        adv[b, P - 1:P + A - 1] = r.adv
    return ids, attn, mask, old, adv


def token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """log π(ids[:, j+1] | ids[:, :j+1]) at the masked positions, zero elsewhere: (B, T-1).
    The LM head and softmax run only on masked (action) positions — a small fraction of all
    positions (actions are short next to their prompts), and the head over the vocabulary is the
    most expensive layer of a tiny model.
    The temperature matches the one used for sampling so ρ compares the same distributions.
    A sharded model gets this computation run inside its root's call (infra/dist.py root_call): its
    weights are gathered in hooks around module calls, and this reads the body and the head
    directly instead of calling the model (every worker must then call it alike)."""
    return dist.root_call(model, _token_logprobs, model, ids, attn, mask, temperature)


def _token_logprobs(model, ids, attn, mask, temperature):
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model        # PEFT/LoRA
    h = lm.base_model(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1]   # (B, T-1, H)
    sel = mask.bool()                                                                  # (B, T-1)
    logits = lm.get_output_embeddings()(h[sel]).float()                               # (M, V)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    lp = torch.gather(F.log_softmax(logits, -1), -1, ids[:, 1:][sel][:, None]).squeeze(-1)  # (M,)
    out = torch.zeros(mask.shape, dtype=lp.dtype, device=lp.device)                  # (B, T-1)
    out[sel] = lp
    return out


# ---------------------------------------------------------------------------------------------
# 3. loss
# ---------------------------------------------------------------------------------------------
def ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, ref_logp=None, kl_coef=0.0,
                  denom: float | None = None):
    """Mask-weighted token-sum of the PPO-clip (+ k3 KL) loss, divided by `denom` (the mask's sum
    over the *whole* batch, so micro-batches add up to the token mean, or the trajectory mean when
    the mask holds traj-mean weights). All (B, T-1). Stats are unweighted sums over masked tokens."""
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))                          # (B, T-1)
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high))
    loss_tok = pg
    kl = torch.zeros_like(pg)
    if ref_logp is not None and kl_coef > 0:
        # k3 estimator, "low_var_kl" (http://joschu.net/blog/kl-approx.html): e^d − d − 1, d = ref − θ
        d = torch.clamp(ref_logp - logp, -20, 20)
        kl = torch.clamp(torch.exp(d) - d - 1, -10, 10)                          # (B, T-1)
        loss_tok = pg + kl_coef * kl
    denom = denom if denom is not None else mask.sum().clamp(min=1)
    loss = (loss_tok * mask).sum() / denom
    with torch.no_grad():
        on = (mask > 0).float()                                                  # (B, T-1)
        clipped = ((ratio < 1 - clip_low) | (ratio > 1 + clip_high)).float()
        stats = {"clipfrac": float((clipped * on).sum()), "kl": float((kl * on).sum()),
                 "ratio": float((ratio * on).sum())}
    return loss, stats


@dataclass
class UpdateCfg:
    # (no learning rate: the optimizer passed to `update` carries it, and train.py sets it per update)
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    micro_tokens: int = 8192       # padded tokens per forward pass (memory knob)
    minibatches: int = 1           # optimizer steps per rollout batch (see `update`)
    bf16: bool = False             # bf16 autocast for the forward passes (real models on GPU)


def minibatch_of(group_id: int, traj_id: int, start_step: int, turn: int, minibatches: int) -> int:
    """Which of the M mini-batches a turn-row belongs to. A fixed function of the turn's identity
    (global group position, rollout, turn), not of the worker or the row's place in a list, so the
    union over data-parallel workers of mini-batch k is the same set of turns as in one process.
    Consecutive turns of a trajectory go to consecutive mini-batches (a stratified split: every
    mini-batch gets ~1/M of every trajectory's turns, so no step sees only one group's signal)."""
    return (group_id + traj_id + start_step + turn) % max(1, minibatches)


# --loss-agg: the loss weight of every action token of a trajectory with n action tokens
LOSS_AGGS = {"token-mean": lambda n: 1.0,                  # every token alike
             "traj-mean": lambda n: 1.0 / max(1, n)}       # every trajectory alike


def rows_from(groups, adv, minibatches: int = 1, loss_agg: str = "token-mean") -> list[Row]:
    """One Row per turn with action tokens; `loss_agg` sets the token weights (module docstring)."""
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss_agg must be one of {tuple(LOSS_AGGS)}, got {loss_agg!r}")
    weight = LOSS_AGGS[loss_agg]
    rows = []
    for g, grp in enumerate(groups):
        for i, tr in enumerate(grp):
            w = weight(sum(len(tn.action_ids) for tn in tr.turns))
            rows += [Row(tn.prompt_ids, tn.action_ids, tn.logprobs, adv[g][i][t],
                         minibatch_of(tr.group_id, tr.traj_id, tr.start_step, t, minibatches), w)
                     for t, tn in enumerate(tr.turns) if tn.action_ids]
    return rows


def update(model, opt, rows: list[Row], cfg: UpdateCfg, pad_id: int, ref_model=None) -> dict:
    """One PPO update on a rollout batch: `cfg.minibatches` optimizer steps, step k on the rows
    with `row.minibatch == k` (1 = one step on everything). As in verl's PPO/GRPO actor (one epoch,
    ppo_mini_batch_size < the batch): the first step is on-policy (ρ = 1, the clip is inactive);
    later steps see rows whose π_old is now 1..M−1 steps stale, which is what the clip is for.
    Same rollouts, same forward/backward work — only more, smaller steps. Returns metrics summed
    or token-weighted over the steps (`loss/pg`: the mean over the steps taken);
    `train/skipped_nonfinite` counts dropped steps."""
    M = max(1, cfg.minibatches)
    parts = [step(model, opt, [r for r in rows if r.minibatch % M == k] if M > 1 else rows, cfg, pad_id, ref_model)
             for k in range(M)]
    n = sum(p["n_trained"] for p in parts)
    stepped = [p for p in parts if p["stepped"]]     # a mini-batch with nothing to train is no step
    out = {"loss/pg": sum(p["loss/pg"] for p in stepped) / max(1, len(stepped)),
           "train/rows": sum(p["train/rows"] for p in parts),
           "train/tokens_trained": n,
           "train/skipped_nonfinite": sum(p["train/skipped_nonfinite"] for p in parts),
           "train/grad_norm": max(p["train/grad_norm"] for p in parts),
           "train/steps": sum(p["stepped"] for p in parts)}
    for k in ("clipfrac", "kl", "ratio"):       # means over every trained token of the update
        out[f"train/{k}"] = sum(p[k] for p in parts) / n if n else (1.0 if k == "ratio" else 0.0)
    return out


def micro_batches(rows: list[Row], micro_tokens: int) -> list[list[Row]]:
    """Consecutive runs of `rows` (sorted by length) of at most `micro_tokens` padded tokens each."""
    out, i = [], 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and (j + 1 - i) * (len(rows[j].prompt_ids) + len(rows[j].action_ids)) <= micro_tokens:
            j += 1
        out.append(rows[i:j])
        i = j
    return out


def step(model, opt, rows: list[Row], cfg: UpdateCfg, pad_id: int, ref_model=None) -> dict:
    """One optimizer step on `rows` (token-mean over all of them, gradient accumulation over
    micro-batches). Returns metric sums (clipfrac/kl/ratio summed over trained tokens).

    With data-parallel workers (infra/dist.py: `team`, the identity in one process) each worker
    holds its own groups' rows; the token counts and the gradients are summed over the workers,
    and each worker's loss is its token-sum over the *global* count, so every worker takes exactly
    the step one process would take on the union of the rows. `team.passes` may add zero-weight
    passes on a one-token dummy row (a sharded model needs every worker in every forward)."""
    team = dist.workers()
    dev = next(model.parameters()).device
    kept = rows if cfg.kl_coef != 0 else [r for r in rows if r.adv != 0.0]      # deviation 3
    # the loss denominator is the weighted count of every action token of the batch (deviation 3;
    # token-mean: the tokens, traj-mean: the trajectories); n_trained the (unweighted) tokens of
    # the rows kept; n_rows the rows kept
    counts = team.sum(torch.tensor([float(sum(r.weight * len(r.action_ids) for r in rows)),
                                    float(sum(len(r.action_ids) for r in kept)), float(len(kept))],
                                   dtype=torch.float64, device=dev))
    n_tok, n_trained, n_rows = float(counts[0].item()), int(round(counts[1].item())), int(round(counts[2].item()))
    rows = sorted(kept, key=lambda r: len(r.prompt_ids) + len(r.action_ids))
    if n_trained == 0:      # no token carries a gradient anywhere: no step (Adam would still move)
        return {"loss/pg": 0.0, "train/rows": 0, "n_trained": 0, "train/skipped_nonfinite": 0,
                "train/grad_norm": 0.0, "stepped": 0, "clipfrac": 0.0, "kl": 0.0, "ratio": 0.0}
    model.train()
    opt.zero_grad(set_to_none=True)
    agg = torch.zeros(4, device=dev)                                 # loss, clipfrac, kl, ratio sums
    dummy = [Row([pad_id], [pad_id], [0.0], 0.0)]
    for batch, real in team.passes(model, micro_batches(rows, cfg.micro_tokens), dummy):
        ids, attn, mask, old, adv = (t.to(dev) for t in collate(batch, pad_id))
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            logp = token_logprobs(model, ids, attn, mask, cfg.temperature)
            ref = None
            if ref_model is not None and cfg.kl_coef > 0:
                with torch.no_grad():
                    ref = token_logprobs(ref_model, ids, attn, mask, cfg.temperature)
        loss, st = ppo_clip_loss(logp, old, adv, mask, cfg.clip_low, cfg.clip_high, ref, cfg.kl_coef, denom=n_tok)
        (loss if real else loss * 0.0).backward()                   # the dummy: gradients +0
        if real:
            agg += torch.tensor([loss.item(), st["clipfrac"], st["kl"], st["ratio"]], device=dev)
    params = team.summed_grads(model)
    team.sum(agg)
    # on a sharded model's gradients (DTensor shards) clip_grad_norm_ computes the norm of the
    # WHOLE gradient and scales every shard by the same factor
    gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
    if hasattr(gn, "full_tensor"):
        gn = gn.full_tensor()
    total = agg[0].item()
    skipped = not (math.isfinite(total) and math.isfinite(float(gn)))
    if skipped:
        opt.zero_grad(set_to_none=True)                              # deviation 4
    else:
        opt.step()
    return {"loss/pg": total, "train/rows": n_rows, "n_trained": n_trained,
            "train/skipped_nonfinite": int(skipped), "train/grad_norm": float(gn), "stepped": int(not skipped),
            "clipfrac": agg[1].item(), "kl": agg[2].item(), "ratio": agg[3].item()}
