"""warmstart.py — the embedded default policy: a tiny Qwen3 model built locally and behaviour-cloned.

Nothing can be downloaded on the laptop default, so the policy is *built*:
    1. a word-level tokenizer over the env's closed vocabulary. Text is split by
       `TOKEN_RE` = optional leading space + (a letter run | one digit | one other character), and
       newlines/other whitespace are tokens of their own, so decode(encode(text)) == text for all
       env text (no `<unk>`; digits are single tokens so "drawer 17" and "$12.99" need no number
       vocabulary). A ChatML chat template (`<|im_start|>user ... <|im_end|>`) makes it a chat model.
    2. a small Qwen3-architecture model (random init, local config),
    3. behaviour cloning on the simulator's expert with epsilon-random detours (DAgger-style labels:
       the expert's action at states the noisy policy actually visits):
           L_BC = − Σ_response tokens log π(token | prompt) / (number of response tokens)
       stopped early on purpose (a target success rate, checked every `check_every` steps) so the
       policy starts imperfect and RL has something to do. `--bc-episodes 0` skips it: RL starts
       from the random initialisation (a toy env, or one without an expert).
The result is saved as an ordinary HF folder (AutoModelForCausalLM / AutoTokenizer load it) under
a cache dir keyed by env + config, so a second run skips the warm start. With train.py's local
workers the cloning is data parallel (each rank half of every batch and of the success checks).

Leaves out: pre-trained weights, subword tokenizers (the vocabulary is closed), DAgger iterations
(the labels come from the expert at noisy-expert states, one pass).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass

import torch

from infra import dist
from grpo import Row, collate, token_logprobs
from infra.policy import HFGenerator
from rollout import Agent, AgentState, rollout_groups, spread_tasks

TOKEN_RE = r" ?[A-Za-z]+| ?[0-9]| ?[^A-Za-z0-9\s]|\n|\s"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
# Markup the agents write; added as whole tokens so the tiny model emits them in one step.
MARKUP = ["<action>", "</action>", "<think>", "</think>", "<search>", "</search>",
          "<answer>", "</answer>", "<information>", "</information>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
BC_VERSION = 4  # bump when the warm-start recipe changes so stale caches are not reused



# ---------------------------------------------------------------------------------------------
# 1. tokenizer
# ---------------------------------------------------------------------------------------------
def build_tokenizer(texts: list[str], atomic: list[str] = ()):
    """Closed word-level tokenizer covering every token of `texts` (+ printable ASCII fallbacks).
    `atomic` strings (e.g. product ids) become single tokens wherever they occur."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words: set[str] = set()
    for t in list(texts) + ["user assistant system"]:
        for w in re.findall(r"[A-Za-z]+|[0-9]|[^A-Za-z0-9\s]", t):
            words.add(w)
    words |= {chr(c) for c in range(33, 127) if not chr(c).isalpha()}  # every punctuation/digit
    vocab: dict[str, int] = {}
    for s in SPECIAL + MARKUP + ["\n", " ", "\t"]:
        vocab.setdefault(s, len(vocab))
    for w in sorted(words):
        vocab.setdefault(w, len(vocab))
        vocab.setdefault(" " + w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(TOKEN_RE), behavior="isolated")
    tk.decoder = decoders.Fuse()  # tokens carry their own spaces: concatenate them back
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token="<unk>", padding_side="left", additional_special_tokens=["<|im_start|>"])
    tok.add_tokens(MARKUP)  # already in the vocab: registers them as atomic (not split by the regex)
    if atomic:
        tok.add_tokens(sorted(set(atomic)))
    tok.chat_template = CHATML
    return tok


# ---------------------------------------------------------------------------------------------
# 2. tiny Qwen3 model
# ---------------------------------------------------------------------------------------------
@dataclass
class TinyConfig:
    hidden: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    intermediate: int = 192
    max_positions: int = 2048


def build_tiny_model(vocab_size: int, cfg: TinyConfig, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    conf = Qwen3Config(
        vocab_size=vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads, intermediate_size=cfg.intermediate,
        max_position_embeddings=cfg.max_positions, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=None, eos_token_id=2, pad_token_id=0)
    return Qwen3ForCausalLM(conf)


# ---------------------------------------------------------------------------------------------
# 3. behaviour-cloning warm start of the tiny policy (cached)
# ---------------------------------------------------------------------------------------------
@dataclass
class BCConfig:
    episodes: int = 400           # noisy expert episodes to collect
    epsilon: float = 0.3          # chance of a random admissible action instead of the expert's
    # Chance of a *slip*: an action that was admissible earlier in the episode but is not now (e.g.
    # `go to` the place the agent already stands at), which the env answers with "Nothing happens.".
    # Why: demos made only of admissible actions never show a failed action in the prompt's
    # history, so a cloned policy that emits one is off its training distribution and tends to
    # repeat it (bench/diagnose.py counts how often the policy's turns are not admissible and how
    # often it repeats its previous action). The target after a slip is the expert's next action
    # from the unchanged state: recovery. Off by default: it did not make RL learn faster (see
    # results/LOG.md, "Evening screens: `--bc-slip 0.1`, `--bc-target 0.25`").
    slip: float = 0.0
    steps: int = 400              # optimizer steps at most (few on purpose: the policy should start imperfect)
    batch: int = 64
    lr: float = 2e-3
    # Early stop at a target success rate (0 = off: run all `steps`). Why: BC stops in the steep
    # part of its learning curve on purpose, where a different seed moves the result a lot at a
    # fixed step count; stopping at a measured success makes every seed start RL from about the
    # same level (see results/LOG.md, "The warm start stops at a target success"). Success is
    # measured on `check_episodes` training-split tasks that neither the demos nor RL use (never
    # the eval split); a few dozen episodes give a noisy estimate, traded against a short warm start.
    target: float = 0.0
    check_from: int = 250         # first check at this step, then every `check_every` steps
    # Why 50, not 25: a check plays `check_episodes` episodes, and the failures run to the turn
    # limit, so checking every 25 steps took a large share of the warm start's time. The checks do
    # not change the weights (tested), so a coarser schedule stops at the same step when the first
    # passing check falls on a multiple of 50, else at a later passing one or at `steps` (the noisy
    # estimate can pass once and then fail the following checks). Fewer noisy checks are also
    # fewer chances to stop on a lucky estimate (see results/LOG.md, "Warm-start checks every 50
    # BC steps").
    check_every: int = 50
    check_episodes: int = 64
    check_temperature: float = 0.4   # the evaluation temperature


def collect_demos(spec, env_kwargs: dict, agent_fmt, bc: BCConfig, seed: int):
    """(prompt ids, target ids) pairs: the expert's next action at every state that an
    ε-noisy expert visits. `agent_fmt(state) -> prompt ids` is the rollout's own prompt builder,
    so the warm start sees exactly the prompts RL will use."""
    from tqdm import tqdm
    rng = random.Random(seed)
    env = spec.make(split=spec.splits[0], seed=seed, **env_kwargs)
    eos = agent_fmt.tok.eos_token
    data = []
    for ep in tqdm(range(bc.episodes), desc="warm start: expert demos", leave=False, mininterval=1,
                   disable=not sys.stderr.isatty()):            # no terminal: no redraw lines in a log
        obs, info = env.reset(10_000_000 + ep)  # far from RL's training task indices
        s = AgentState(None, obs, info, (), 0)
        seen: set[str] = set()            # actions admissible at some earlier step of this episode
        for _ in range(env.max_steps):
            a_star = env.expert_action()
            tgt = agent_fmt.tok(spec.response(a_star) + eos, add_special_tokens=False)["input_ids"]
            data.append((agent_fmt.prompt_ids(s), tgt))
            a = a_star
            slips = []
            if bc.slip > 0:
                adm_now = set(s.info.get("admissible") or [])
                slips = sorted(seen - adm_now)
                seen |= adm_now - {"help", "look", "inventory"}
            if slips and rng.random() < bc.slip:
                a = rng.choice(slips)
            elif rng.random() < bc.epsilon:   # a detour: the env's own notion of one, else an admissible action
                if hasattr(env, "random_action"):
                    a = env.random_action(rng)
                else:
                    adm = [x for x in (s.info.get("admissible") or []) if x not in ("help", "look", "inventory")]
                    a = rng.choice(adm) if adm else a_star
            obs, r, done, info = env.step(a)
            s = AgentState(None, obs, info, s.history + ((s.obs, a),), s.step + 1)
            if done:
                break
    return data


def bc_train(model, data, bc: BCConfig, pad_id: int, seed: int, check=None) -> list[float]:
    """Cross-entropy on the response tokens only (prompt tokens masked). `check(step) -> bool`
    (the target-success check) runs from `bc.check_from` every `bc.check_every` steps; True stops.

    Data parallel when torch.distributed is initialised (train.py's local workers): every rank
    draws the same batch (same RNG) and takes every world-th row; its loss is its token-sum over
    the *global* token count and gradients are summed over ranks, so each step is the
    single-process step up to float summation order, at 1/world of the compute per rank."""
    from tqdm import tqdm
    rank, world = dist.rank_world()
    g = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=bc.lr, weight_decay=0.0)
    model.train()
    losses = []
    bar = tqdm(range(bc.steps), desc="warm start: behaviour cloning", mininterval=1,
               disable=rank != 0 or not sys.stderr.isatty())
    for step in bar:
        batch = [data[g.randrange(len(data))] for _ in range(bc.batch)]
        rows = [Row(p, t, [0.0] * len(t), 0.0) for p, t in batch]
        n_tok = float(sum(len(r.action_ids) for r in rows))               # the global token count
        rows = rows[rank::world]
        ids, attn, mask, _, _ = collate(rows, pad_id)                     # (B/world, T), (B/world, T-1)
        lr = bc.lr * min(1.0, (step + 1) / 20)                            # short warm-up
        for gr in opt.param_groups:
            gr["lr"] = lr
        # cross-entropy on the response tokens only (token mean over the whole batch)
        loss = -(token_logprobs(model, ids, attn, mask) * mask).sum() / n_tok
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            dist.all_reduce_grads(model)
            loss = dist.all_reduce(loss.detach().clone())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        n = step + 1
        if check is not None and n >= bc.check_from and (n - bc.check_from) % bc.check_every == 0 and n < bc.steps:
            t_check = time.time()
            stop = check(n)
            if not bar.disable:
                # The check (dozens of episodes, often longer than 50 BC steps) is not a BC step:
                # move the bar's clock past it, so its rate and ETA are those of the steps alone
                # (its elapsed time is then the cloning time; the check prints its own line).
                paused = time.time() - t_check
                bar.start_t += paused
                bar.last_print_t += paused
            if stop:
                break
    bar.close()
    return losses


def success_check(spec, env_kwargs: dict, model, tok, bc: BCConfig, seed: int, history_len: int, log, record: list):
    """The warm start's stopping rule: success of the current policy at the evaluation
    temperature on `bc.check_episodes` training-split tasks (indices 20,000,000+: the demos use
    10,000,000+ and RL draws below 1,000,000; finite training splits are spread over instead)."""
    tasks = spread_tasks(spec.num_tasks(spec.splits[0]), bc.check_episodes, first=20_000_000)
    n = len(tasks)                                # a finite training split may hold fewer tasks
    rank, world = dist.rank_world()
    mine = list(range(rank, n, world))            # data parallel: each rank plays every world-th task
    envs = [spec.make(split=spec.splits[0], seed=seed, **env_kwargs) for _ in mine]
    agent = Agent(HFGenerator(model, tok), tok, spec, compact=True, history_len=history_len)

    def check(step: int) -> bool:
        groups = rollout_groups(agent, envs, [tasks[i] for i in mine], 1, bc.check_temperature, seed=seed + 11,
                                purpose="bc_check", keep_states=False, positions=mine)
        won = dist.all_reduce(torch.tensor([float(sum(g[0].success for g in groups))]))   # every rank decides alike
        sr = float(won[0]) / n
        record.append({"step": step, "success": sr})
        log(f"warm start: step {step}: success {sr:.3f} on {n} unseen training tasks (target {bc.target:.2f})")
        return sr >= bc.target
    return check


def template_texts(spec) -> list[str]:
    """The fixed words of the env's prompt templates (both styles), rendered with a dummy view."""
    from envs import PromptInput
    v = PromptInput(task="x", obs="y", admissible=["z"], history=[("a", "b")], step=1)
    v0 = PromptInput(task="x", obs="y", admissible=["z"], history=[], step=0)
    return [f(w, 2) for f in (spec.compact_prompt, spec.chat_prompt) for w in (v, v0)]


def env_tokenizer(spec):
    """The tiny policy's tokenizer for an env: its vocabulary, its prompt templates' words and its
    atomic strings (e.g. product ids) kept whole."""
    return build_tokenizer(spec.vocabulary() + template_texts(spec), spec.atomic())


def tiny_policy(spec, env_kwargs: dict, tiny: TinyConfig, bc: BCConfig, seed: int, cache_dir: str,
                history_len: int, log=print):
    """Build (or load from cache) the warm-started tiny policy; returns (model, tok, folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    bc_key = asdict(bc) if bc.target > 0 else {k: v for k, v in asdict(bc).items()
                                                 if k not in ("target", "check_from", "check_every", "check_episodes", "check_temperature")}
    if not bc.slip:          # added later: keys of warm starts without slips stay what they were
        bc_key.pop("slip")
    key = json.dumps({"env": spec.name, "env_kwargs": env_kwargs, "tiny": asdict(tiny), "bc": bc_key,
                      "seed": seed, "history_len": history_len, "v": BC_VERSION,
                      # the env's text: a changed vocabulary (e.g. new product ids) is a new key
                      "vocab": hashlib.sha1("\n".join(spec.vocabulary() + spec.atomic()).encode()).hexdigest()[:12]},
                     sort_keys=True)
    folder = os.path.join(os.path.expanduser(cache_dir), f"tiny-{spec.name}-{hashlib.sha1(key.encode()).hexdigest()[:12]}")
    cached = os.path.exists(os.path.join(folder, "done.json"))
    rank, world = dist.rank_world()
    if world > 1:    # data parallel: build together unless every rank sees the cache
            cached = bool(dist.all_reduce(torch.tensor([float(cached)]))[0] == world)
    if cached:
        log(f"tiny policy: cached warm start at {folder}")
        tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tok, folder
    t0 = time.time()
    log(f"tiny policy: building tokenizer + Qwen3 model and behaviour cloning ({bc.episodes} noisy expert "
        f"episodes, {bc.steps} steps); cached at {folder}" if bc.episodes else
        f"tiny policy: building tokenizer + Qwen3 model, untrained (--bc-episodes 0); cached at {folder}")
    tok = env_tokenizer(spec)
    model = build_tiny_model(len(tok), tiny, seed)
    data, losses, checks = [], [], []
    if bc.episodes:          # 0: no behaviour cloning, RL starts from the random initialisation
        fmt = Agent(gen=None, tok=tok, spec=spec, compact=True, history_len=history_len)
        data = collect_demos(spec, env_kwargs, fmt, bc, seed)
        unk = sum(t == tok.unk_token_id for p, tg in data for t in p + tg)
        if unk:
            log(f"tiny policy: warning: {unk} <unk> tokens in the demonstrations (vocabulary gap)")
        check = success_check(spec, env_kwargs, model, tok, bc, seed, history_len, log, checks) if bc.target > 0 else None
        losses = bc_train(model, data, bc, tok.pad_token_id, seed, check)
    if rank != 0:            # data-parallel warm start: rank 0 writes the cache, the others load it
        dist.barrier()
        tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tok, folder
    tmp = f"{folder}.tmp{os.getpid()}"  # private: two processes building the same key do not collide
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "done.json"), "w") as f:
        json.dump({"key": json.loads(key), "demos": len(data), "steps": len(losses), "final_loss": losses[-1] if losses else None,
                   "checks": checks, "seconds": time.time() - t0}, f, indent=1)
    try:
        os.replace(tmp, folder)  # atomic: a half-written cache is never picked up
    except OSError:              # another process finished the same key first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"tiny policy: warm start done in {time.time() - t0:.0f}s ({len(data)} demo steps, {len(losses)} BC steps"
        + (f", stopped at success {checks[-1]['success']:.3f}" if checks and checks[-1]["success"] >= bc.target else "")
        + (f", final loss {losses[-1]:.3f}" if losses else "") + (f", {world} workers" if world > 1 else "") + ")")
    if world > 1:
        dist.barrier()
    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tok, folder
