"""Core pieces: tokenizer, HF generator log-probs, rollout + restore, GRPO advantages and loss.

    python -m pytest -q tests/test_core.py
"""
import math
import os
import random

import pytest
import torch

import envs
import grpo
from infra import policy
from infra import warmstart
from rollout import Agent, AgentState, rollout_groups, run_episodes, spread_tasks, start_state


# --------------------------------------------------------------------------- tokenizer
def test_tokenizer_roundtrip_no_unk_on_env_text():
    spec = envs.get_spec("alfworld")
    tok = warmstart.build_tokenizer(spec.vocabulary() + warmstart.template_texts(spec))
    env = spec.make(split="train", seed=3)
    rng = random.Random(0)
    texts = []
    for task in range(20):
        obs, info = env.reset(task)
        texts.append(obs)
        for _ in range(15):
            a = rng.choice(info["admissible"])
            obs, _, done, info = env.step(a)
            texts += [obs, a, "<action>" + a + "</action>"]
            if done:
                break
    for t in texts:
        ids = tok(t, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids, t
        assert tok.decode(ids) == t


def test_chat_template_is_chatml():
    tok = warmstart.build_tokenizer(["go to desk 1"])
    s = tok.apply_chat_template([{"role": "user", "content": "go to desk 1"}], tokenize=False, add_generation_prompt=True)
    assert s == "<|im_start|>user\ngo to desk 1<|im_end|>\n<|im_start|>assistant\n"
    assert policy.stop_ids(tok) == sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")})


# --------------------------------------------------------------------------- generator
@pytest.mark.slow
def test_sampling_logprobs_equal_teacher_forced(tiny_alfworld):
    spec, model, tok, _ = tiny_alfworld
    gen = policy.HFGenerator(model, tok)
    agent = Agent(gen, tok, spec)
    env = spec.make(split="train", seed=0)
    prompts = [agent.prompt_ids(start_state(env, t)) for t in range(6)]
    for T in (1.0, 0.7):
        samples = gen.generate(prompts, 16, T, seed=1)
        rows = [grpo.Row(p, s.ids, s.logprobs, 1.0) for p, s in zip(prompts, samples)]
        ids, attn, mask, old, _ = grpo.collate(rows, tok.pad_token_id)
        with torch.no_grad():
            lp = grpo.token_logprobs(model, ids, attn, mask, T)
        assert float(((lp - old).abs() * mask).max()) < 1e-4
    # same seed → same samples
    a = gen.generate(prompts, 16, 1.0, seed=5)
    b = gen.generate(prompts, 16, 1.0, seed=5)
    assert [s.ids for s in a] == [s.ids for s in b]


def test_lean_qwen3_runner_samples_what_the_transformers_forward_samples(tiny_alfworld):
    # Prompts of very different lengths (several prefill buckets, one row much longer than the
    # rest) and real env prompts: same seeded samples and the same log-probs as the transformers
    # forward, at the training, evaluation and greedy temperatures.
    spec, model, tok, _ = tiny_alfworld
    lean, ref = policy.HFGenerator(model, tok), policy.HFGenerator(model, tok, lean=False)
    assert (lean.runner_name, ref.runner_name) == ("qwen3-lean", "transformers")
    agent = Agent(lean, tok, spec)
    env = spec.make(split="train", seed=0)
    rng = random.Random(0)
    prompts = [agent.prompt_ids(start_state(env, t)) for t in range(5)]
    prompts += [[rng.randrange(5, len(tok)) for _ in range(n)] for n in (3, 40, 41, 90, 260, 700)]
    for T in (1.0, 0.4, 0.0):
        a, b = lean.generate(prompts, 12, T, seed=7), ref.generate(prompts, 12, T, seed=7)
        assert [s.ids for s in a] == [s.ids for s in b]
        assert max(abs(x - y) for s, r in zip(a, b) for x, y in zip(s.logprobs, r.logprobs)) < 1e-4


@pytest.mark.parametrize("arch", ["qwen3-lean", "qwen3-transformers", "qwen3.5"])
def test_a_rows_sample_does_not_depend_on_its_batch_mates(tiny_alfworld, arch):
    """Left-padded batches of prompts of very different lengths (real env prompts, 3 to 700
    tokens): each row's sample and log-probs are the ones it gets alone, with its own seed — for
    the lean Qwen3 runner, the transformers forward, and the paper's hybrid Qwen3.5 (its linear-
    attention layers must not read the padding either)."""
    spec, model, tok, _ = tiny_alfworld
    if arch == "qwen3.5":
        from helpers import tiny_qwen3_5
        model = tiny_qwen3_5(tok, init_std=0.2)
    gen = policy.HFGenerator(model, tok, lean=arch == "qwen3-lean")
    assert gen.runner_name == ("qwen3-lean" if arch == "qwen3-lean" else "transformers")
    agent = Agent(gen, tok, spec)
    env = spec.make(split="train", seed=0)
    rng = random.Random(0)
    prompts = [agent.prompt_ids(start_state(env, t)) for t in range(5)]
    prompts += [[rng.randrange(5, len(tok)) for _ in range(n)] for n in (3, 40, 41, 90, 260, 700)]
    seeds = [100 + i for i in range(len(prompts))]
    batch = gen.generate(prompts, 12, 1.0, row_seeds=seeds)
    alone = [gen.generate([p], 12, 1.0, row_seeds=[s])[0] for p, s in zip(prompts, seeds)]
    assert [s.ids for s in batch] == [s.ids for s in alone]
    assert max(abs(x - y) for s, r in zip(batch, alone) for x, y in zip(s.logprobs, r.logprobs)) < 1e-4
    assert len({tuple(s.ids) for s in batch}) > 3                   # the rows sample different things


def test_other_architectures_use_the_transformers_forward():
    from transformers import LlamaConfig, LlamaForCausalLM
    tok = warmstart.build_tokenizer(["go to desk 1"])
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, pad_token_id=0))
    gen = policy.HFGenerator(m, tok)
    assert gen.runner_name == "transformers"
    s = gen.generate([tok("go to desk 1")["input_ids"], tok("go")["input_ids"]], 5, 1.0, seed=0)
    assert all(1 <= len(x.ids) == len(x.logprobs) <= 5 for x in s)


def test_spread_tasks_covers_a_finite_split_without_repeats():
    # 140 tasks ordered by type (7 types x 20): 14 evaluation episodes take one task in every ten,
    # so each type gets two; asking for more episodes than the split holds plays each task once.
    assert spread_tasks(140, 14) == list(range(0, 140, 10))
    assert spread_tasks(5, 12) == [0, 1, 2, 3, 4]
    assert spread_tasks(0, 3, first=20_000_000) == [20_000_000, 20_000_001, 20_000_002]


def test_generation_stops_at_eos(tiny_alfworld):
    spec, model, tok, _ = tiny_alfworld
    gen = policy.HFGenerator(model, tok)
    prompts = [Agent(gen, tok, spec).prompt_ids(start_state(spec.make(split="train"), 0))]
    for s in gen.generate(prompts * 8, 24, 1.0, seed=0):
        stops = [i for i, t in enumerate(s.ids) if t in policy.stop_ids(tok)]
        assert stops in ([], [len(s.ids) - 1])
        assert len(s.ids) == len(s.logprobs) <= 24


# --------------------------------------------------------------------------- rollout / restore
def test_restore_reproduces_prompt_and_env(tiny_alfworld):
    spec, model, tok, _ = tiny_alfworld
    agent = Agent(policy.HFGenerator(model, tok), tok, spec)
    envs_ = [spec.make(split="train", seed=0) for _ in range(4)]
    groups = rollout_groups(agent, envs_, [11, 12], 2, 1.0, seed=3)
    env = spec.make(split="train", seed=0)
    checked = 0
    for g in groups:
        for tr in g:
            assert len(tr.turns) >= 1 and tr.turns[-1].done
            for tn in tr.turns[::3]:
                s = tn.state
                assert agent.prompt_ids(s) == tn.prompt_ids        # exact agent context
                env.restore(s.env_snap)
                obs, r, done, _ = env.step(tn.action)              # exact env state
                assert (obs, r, done) == (tn.next_obs, tn.reward, tn.done)
                checked += 1
    assert checked > 4
    assert agent.counter["tokens/rollout"] == sum(len(tn.action_ids) for g in groups for tr in g for tn in tr.turns)
    assert agent.counter["env_steps/rollout"] == sum(len(tr.turns) for g in groups for tr in g)


def test_continuation_has_remaining_budget(tiny_alfworld):
    spec, model, tok, _ = tiny_alfworld
    agent = Agent(policy.HFGenerator(model, tok), tok, spec)
    env = spec.make(split="train", seed=0, max_steps=6)
    s = start_state(env, 3)
    env.restore(s.env_snap)
    obs, _, _, info = env.step("look")
    s2 = AgentState(env.snapshot(), obs, info, ((s.obs, "look"),), 1)
    turns, finals = run_episodes(agent, [spec.make(split="train", seed=0, max_steps=6) for _ in range(3)],
                                 [s2] * 3, 1.0, seed=0, purpose="verify")
    for ts, f in zip(turns, finals):
        assert len(ts) <= 5 and f.step <= 6
    assert agent.counter["tokens/verify"] > 0 and agent.counter["tokens/rollout"] == 0


# --------------------------------------------------------------------------- GRPO
@pytest.mark.parametrize("norm_std", [False, True])
def test_group_advantages_match_the_formula(norm_std):
    g = torch.Generator().manual_seed(0)
    R = (torch.rand((7, 8), generator=g) > 0.6).double()
    R[0] = 1.0                                   # all-equal group
    for r in R.tolist():
        m = sum(r) / len(r)
        sd = math.sqrt(sum((x - m) ** 2 for x in r) / (len(r) - 1))
        ref = [(x - m) / (sd + 1e-6) if norm_std else x - m for x in r]
        assert torch.allclose(grpo.group_advantages(torch.tensor(r, dtype=torch.float64), norm_std),
                              torch.tensor(ref, dtype=torch.float64), atol=1e-9)
    assert torch.all(grpo.group_advantages(R[0], norm_std) == 0)


def test_group_advantage_edge_cases():
    assert grpo.group_advantages(torch.tensor([1.0])).tolist() == [0.0]          # singleton: no baseline
    A = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert A.tolist() == [0.75, -0.25, -0.25, -0.25]                            # R − mean, no std
    A = grpo.group_advantages(torch.tensor([1.0, 0.0]), norm_std=True)
    assert math.isclose(A[0].item(), 0.5 / (math.sqrt(0.5) + 1e-6), rel_tol=1e-6)


def _loss_loop(logp, old, adv, mask, eps=0.2):
    num, den = 0.0, 0.0
    for b in range(len(logp)):
        for t in range(len(logp[0])):
            if mask[b][t]:
                r = math.exp(logp[b][t] - old[b][t])
                a = adv[b][t]
                num += max(-a * r, -a * min(max(r, 1 - eps), 1 + eps))
                den += 1
    return num / den


def test_ppo_clip_loss_matches_loop():
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand((4, 9), generator=g) * 3
    old = logp + (torch.rand((4, 9), generator=g) - 0.5)
    adv = torch.randn((4, 9), generator=g)
    mask = (torch.rand((4, 9), generator=g) > 0.4).float()
    loss, _ = grpo.ppo_clip_loss(logp, old, adv, mask)
    assert math.isclose(loss.item(), _loss_loop(logp.tolist(), old.tolist(), adv.tolist(), mask.tolist()), rel_tol=1e-5)


def test_collate_masks_only_action_tokens():
    rows = [grpo.Row([1, 2, 3], [7, 8], [-0.1, -0.2], 0.5), grpo.Row([4], [9], [-0.3], -1.0)]
    ids, attn, mask, old, adv = grpo.collate(rows, pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 7, 8], [4, 9, 0, 0, 0]]
    assert mask.tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]]        # targets 7, 8 | 9
    assert adv.tolist() == [[0, 0, 0.5, 0.5], [-1.0, 0, 0, 0]]
    assert old[0, 2:].tolist() == pytest.approx([-0.1, -0.2])


def test_update_skips_nonfinite_loss(tiny_alfworld):
    spec, model, tok, _ = tiny_alfworld
    import copy
    m = copy.deepcopy(model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    rows = [grpo.Row([5, 6, 7], [8, 9], [float("nan"), -1.0], 1.0)]
    st = grpo.update(m, opt, rows, grpo.UpdateCfg(), tok.pad_token_id)
    assert st["train/skipped_nonfinite"] == 1
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    st = grpo.update(m, opt, [grpo.Row([5, 6, 7], [8, 9], [-2.0, -1.0], 1.0)], grpo.UpdateCfg(), tok.pad_token_id)
    assert st["train/skipped_nonfinite"] == 0
    assert any(not torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_update_without_signal_takes_no_step(tiny_alfworld):
    """A batch whose advantages are all 0 (KL off) trains nothing: no optimizer step, so Adam's
    momentum from earlier updates cannot move the weights."""
    import copy
    spec, model, tok, _ = tiny_alfworld
    m = copy.deepcopy(model)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    grpo.update(m, opt, [grpo.Row([5, 6, 7], [8, 9], [-2.0, -1.0], 1.0)], grpo.UpdateCfg(), tok.pad_token_id)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    st = grpo.update(m, opt, [grpo.Row([5, 6, 7], [8, 9], [-2.0, -1.0], 0.0)], grpo.UpdateCfg(), tok.pad_token_id)
    assert st["train/steps"] == 0 and st["train/tokens_trained"] == 0
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    # two mini-batches, one of them all-zero: one step, and loss/pg is that step's loss (the empty
    # mini-batch does not halve it)
    rows = [grpo.Row([5, 6, 7], [8, 9], [-2.0, -1.0], 1.0, minibatch=0), grpo.Row([5, 6], [8], [-2.0], 0.0, minibatch=1)]
    def upd(rs, M):
        c = copy.deepcopy(m)
        return grpo.update(c, torch.optim.AdamW(c.parameters(), lr=1e-3), rs, grpo.UpdateCfg(minibatches=M), tok.pad_token_id)
    one, two = upd(rows[:1], 1), upd(rows, 2)
    assert two["train/steps"] == 1 and one["loss/pg"] != 0.0
    assert two["loss/pg"] == pytest.approx(one["loss/pg"])


def test_minibatches_take_several_clipped_steps(tiny_alfworld):
    """--minibatches M: M optimizer steps on one rollout batch. The first is on-policy (ρ = 1, no
    clipping); the later ones train on rows whose π_old is stale, so with a large step the clip
    engages; with M = 1 there is one step and ρ = 1 everywhere. Turns of a trajectory are spread
    over the mini-batches by their identity (group, rollout, turn), not by list position."""
    import copy
    from rollout import Trajectory, Turn
    spec, model, tok, _ = tiny_alfworld
    prompts = [tok.encode(f"You are in the middle of a room. Step {t}.") for t in range(8)]
    action = tok.encode("<action>go to desk 1</action>")

    def batch(m):                    # 8 turn-rows with their exact current log-probs as π_old
        rows = []
        for t, p in enumerate(prompts):
            ids, attn, mask, _, _ = grpo.collate([grpo.Row(p, action, [0.0] * len(action), 1.0)], tok.pad_token_id)
            with torch.no_grad():
                lp = grpo.token_logprobs(m, ids, attn, mask)[0][mask[0].bool()].tolist()
            rows.append(grpo.Row(p, action, lp, 1.0 if t % 2 else -1.0, grpo.minibatch_of(0, 0, 0, t, 4)))
        return rows

    stats = {}
    for M in (1, 4):
        m = copy.deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-2)
        stats[M] = grpo.update(m, opt, batch(m), grpo.UpdateCfg(minibatches=M), tok.pad_token_id)
        assert stats[M]["train/steps"] == M and stats[M]["train/skipped_nonfinite"] == 0
        assert all(s["step"] == M for s in opt.state.values())              # Adam took M steps
    assert stats[1]["train/ratio"] == pytest.approx(1.0, abs=1e-5) and stats[1]["train/clipfrac"] == 0.0
    assert stats[4]["train/clipfrac"] > 0.0 and stats[4]["train/ratio"] != pytest.approx(1.0, abs=1e-3)
    assert stats[1]["train/tokens_trained"] == stats[4]["train/tokens_trained"] == 8 * len(action)
    # the split: consecutive turns go to consecutive mini-batches; the identity decides, so a
    # rank holding only some groups puts each turn where a single process would
    tr = Trajectory(3, 5, 0, "t", "x", [Turn(t, "o", [], "x", "a", True, "o", 0.0, False, [1], [2], [0.0]) for t in range(6)], True, 1.0)
    rows = grpo.rows_from([[tr]], [[[1.0] * 6]], 4)
    assert [r.minibatch for r in rows] == [(5 + 3 + t) % 4 for t in range(6)]
    other = Trajectory(0, 1, 0, "t", "x", tr.turns, True, 1.0)
    assert [r.minibatch for r in grpo.rows_from([[other], [tr]], [[[1.0] * 6], [[1.0] * 6]], 4)][6:] == [r.minibatch for r in rows]


def test_invalid_format_penalty_on_turn_only():
    from rollout import Trajectory, Turn
    def tr(i, won, valids):
        return Trajectory(i, 0, 0, "t", "x", [Turn(t, "o", [], "x", "a", v, "o", 0.0, False) for t, v in enumerate(valids)], won, float(won))
    adv = grpo.trajectory_advantages([[tr(0, True, [True, False]), tr(1, False, [True])]], invalid_penalty=0.1)
    assert adv == [[[0.5, 0.4], [-0.5]]]


def test_inadmissible_penalty_on_turn_only():
    """--inadmissible-penalty: a well-formed action the env did not list costs that turn only;
    a format-invalid turn pays the format penalty alone; envs without a list are unaffected; an
    all-failure group (A = 0) still trains its inadmissible turns away."""
    from rollout import Trajectory, Turn
    adm = ["go to desk 1", "open drawer 1"]
    def turn(t, action, valid=True, admissible=adm):
        return Turn(t, "o", list(admissible), "x", action, valid, "o", 0.0, False, [1], [2], [0.0])
    win = Trajectory(0, 0, 0, "t", "x", [turn(0, "go to desk 1"), turn(1, "go to sofa 1"), turn(2, "go to", valid=False)], True, 1.0)
    lose = Trajectory(1, 0, 0, "t", "x", [turn(0, "take pen 1 from desk 1", admissible=[])], False, 0.0)
    adv = grpo.trajectory_advantages([[win, lose]], invalid_penalty=0.1, inadmissible_penalty=0.2)
    assert adv == [[[0.5, pytest.approx(0.3), pytest.approx(0.4)], [-0.5]]]
    assert grpo.trajectory_advantages([[win, lose]], invalid_penalty=0.1) == [[[0.5, 0.5, pytest.approx(0.4)], [-0.5]]]
    fail = Trajectory(0, 0, 0, "t", "x", [turn(0, "go to desk 1"), turn(1, "go to sofa 1")], False, 0.0)
    adv = grpo.trajectory_advantages([[fail, fail]], inadmissible_penalty=0.1)
    assert adv == [[[0.0, -0.1], [0.0, -0.1]]]
    assert [r.adv for r in grpo.rows_from([[fail]], [adv[0][:1]])] == [0.0, -0.1]   # the update keeps the 2nd


def test_score_reward_is_the_outcome_when_asked():
    """--reward score: R = the benchmark score (WebShop's partial credit), so a group with no win
    still has a GRPO signal; --reward success keeps R = 1[won]."""
    from rollout import AgentState, make_trajectories, outcome
    finals = [AgentState(None, "", {"won": w, "score": s}, (), 3) for w, s in ((False, 0.75), (False, 0.25), (True, 1.0))]
    turns = [[] for _ in finals]
    succ = make_trajectories(turns, finals, 0, 0)
    score = make_trajectories(turns, finals, 0, 0, reward="score")
    assert [t.R for t in succ] == [0.0, 0.0, 1.0] and [t.R for t in score] == [0.75, 0.25, 1.0]
    assert [t.success for t in score] == [0.0, 0.0, 1.0]            # success metrics stay 1[won]
    with pytest.raises(ValueError, match="reward"):
        outcome({}, "wins")
    from rollout import Turn
    for grp in (score,):
        for t in grp:
            t.turns = [Turn(0, "o", [], "x", "a", True, "o", 0.0, True)]
    assert [round(a[0], 6) for a in grpo.trajectory_advantages([score], invalid_penalty=0.0)[0]] == [0.083333, -0.416667, 0.333333]


# --------------------------------------------------------------------------- prompts / parsing
def test_parse_action_first_tag_lowercased_and_invalid_fallback():
    assert envs.parse_action_tag("<think>x</think><action> Go To Desk 1 </action><action>b</action>") == ("go to desk 1", True)
    a, ok = envs.parse_action_tag("I will go to the desk 1 now")
    assert not ok and a == "i will go to the desk 1 now"[-30:].strip()
    assert envs.parse_action_tag("") == ("", False)


def test_alfworld_chat_prompt_follows_verl_agent_template():
    v0 = envs.PromptInput(task="put a apple in fridge.", obs="-= Welcome =-\n\nroom\n\nYour task is to: put a apple in fridge.",
                          admissible=["go to fridge 1", "help", "look"], history=[], step=0)
    p0 = envs.alfworld_chat_prompt(v0, 2)
    assert p0.startswith("You are an expert agent operating in the ALFRED Embodied Environment.\nYour current observation is: -= Welcome")
    assert "Your admissible actions of the current situation are: ['go to fridge 1'\n 'look']." in p0   # help removed
    assert p0.endswith("present it within <action> </action> tags.")
    v = envs.PromptInput(task=v0.task, obs="You arrive at fridge 1. The fridge 1 is closed.", admissible=["open fridge 1"],
                         history=[("o1", "a1"), ("o2", "a2"), ("o3", "a3")], step=3)
    p = envs.alfworld_chat_prompt(v, 2)
    assert "Environment. Your task is to: put a apple in fridge.\n" in p
    assert ("Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observaitons and the "
            "corresponding actions you took: [Observation 2: 'o2', Action 2: 'a2']\n[Observation 3: 'o3', Action 3: 'a3']\n"
            "You are now at step 4 and your current observation is: You arrive at fridge 1.") in p


def test_traj_mean_loss_is_the_mean_over_trajectories_of_token_means():
    """--loss-agg traj-mean: the collated, micro-batched loss equals a plain loop's mean over
    trajectories of each trajectory's token-mean PPO-clip loss; token-mean stays the plain token
    mean; and the update's denominator counts the zero-advantage trajectory too (deviation 3)."""
    from rollout import Trajectory, Turn
    g = torch.Generator().manual_seed(0)

    def traj(i, lens, R):
        turns = [Turn(t, "o", [], "x", "a", True, "o", 0.0, False, [5, 6, 7][: 1 + t % 3], list(range(8, 8 + n)),
                      (-torch.rand(n, generator=g)).tolist()) for t, n in enumerate(lens)]
        return Trajectory(i, 0, 0, "t", "x", turns, bool(R), float(R))
    grp = [traj(0, [3, 1], 1), traj(1, [2, 2, 2, 4, 1], 0), traj(2, [1, 5, 2], 0), traj(3, [4], 1)]
    adv = [[[(tr.R - 0.5) - 0.1 * (t == 1) for t in range(len(tr.turns))] for tr in grp]]
    new_lp = {id(tn.action_ids): torch.tensor(tn.logprobs) + 0.3 * torch.randn(len(tn.logprobs), generator=g)
              for tr in grp for tn in tr.turns}

    def plain(per_traj: bool) -> float:
        per = []      # (trajectory, token) losses, clip ε = 0.2
        for i, tr in enumerate(grp):
            toks = []
            for t, tn in enumerate(tr.turns):
                A = adv[0][i][t]
                for lp, old in zip(new_lp[id(tn.action_ids)].tolist(), tn.logprobs):
                    r = math.exp(lp - old)
                    toks.append(max(-A * r, -A * min(max(r, 0.8), 1.2)))
            per.append(toks)
        if per_traj:
            return sum(sum(x) / len(x) for x in per) / len(per)
        return sum(sum(x) for x in per) / sum(len(x) for x in per)

    for agg in grpo.LOSS_AGGS:
        rows = grpo.rows_from([grp], adv, loss_agg=agg)
        denom = sum(r.weight * len(r.action_ids) for r in rows)
        assert denom == pytest.approx(4.0 if agg == "traj-mean" else 27.0)
        total = 0.0
        for k in range(0, len(rows), 3):          # micro-batches add up
            part = rows[k:k + 3]
            ids, attn, mask, old, A = grpo.collate(part, pad_id=0)
            logp = torch.zeros_like(old)
            for b, r in enumerate(part):
                P = len(r.prompt_ids)
                logp[b, P - 1:P - 1 + len(r.action_ids)] = new_lp[id(r.action_ids)]   # rows share the turns' lists
            loss, st = grpo.ppo_clip_loss(logp, old, A, mask, denom=denom)
            total += loss.item()
            assert st["ratio"] > 0 and st["clipfrac"] <= (mask > 0).sum()     # stats count tokens, unweighted
        assert total == pytest.approx(plain(agg == "traj-mean"), rel=1e-5)
    with pytest.raises(ValueError, match="loss_agg"):
        grpo.rows_from([grp], adv, loss_agg="seq-mean")


def test_demo_slips_are_inadmissible_and_followed_by_recovery():
    """--bc-slip: a slip is an action admissible earlier in the episode but not now; the env
    answers "Nothing happens.", and the next demo's target is the expert's action from the
    unchanged state. Off (0), no demo prompt ever shows a failed action."""
    spec = envs.get_spec("alfworld")
    tok = warmstart.env_tokenizer(spec)
    fmt = Agent(gen=None, tok=tok, spec=spec, compact=True, history_len=2)
    kw = {"preset": "small", "backend": "builtin", "expert": "search"}

    def demos(slip):
        data = warmstart.collect_demos(spec, kw, fmt, warmstart.BCConfig(episodes=12, slip=slip), seed=3)
        return [(tok.decode(p), tok.decode(t)) for p, t in data]

    assert not any("Nothing happens." in p for p, _ in demos(0.0))
    slipped = demos(0.2)
    # the prompts right after a slip: the last history step is the failed action
    after = [(p, t) for p, t in slipped if p.split("\nactions: ")[0].endswith("obs: Nothing happens.")]
    assert 10 < len(after) < len(slipped) / 2
    for p, t in after:
        adm = p.split("actions: ")[1].split("<|im_end|>")[0].split(" | ")
        act = t.split("<action>")[1].split("</action>")[0]
        assert act in adm or act == "look"          # the target is the expert's admissible recovery
        failed = p.split("\nact: ")[-1].split("\n")[0]
        assert failed != act and failed not in adm  # the slip was not admissible there


@pytest.mark.slow
def test_warm_start_stops_at_target_success(tmp_path):
    """BC's early stop: checks run from `check_from` every `check_every` steps and the first one
    at or above the target ends BC there; an unreachable target runs every step. With the target
    off, the check settings do not enter the cache key."""
    import json
    import envs
    torch.set_num_threads(1)
    spec = envs.get_spec("keydoor")
    tiny = warmstart.TinyConfig(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)

    def build(**kw):
        bc = warmstart.BCConfig(episodes=12, steps=80, batch=16, lr=5e-3, check_from=20, check_every=10, check_episodes=8, **kw)
        _, _, folder = warmstart.tiny_policy(spec, {}, tiny, bc, seed=0, cache_dir=str(tmp_path), history_len=2,
                                          log=lambda *_: None)
        return folder, json.load(open(os.path.join(folder, "done.json")))

    never_dir, never = build(target=1.5)                         # success can't reach 1.5
    assert never["steps"] == 80 and [c["step"] for c in never["checks"]] == [20, 30, 40, 50, 60, 70]
    assert never["checks"][0]["success"] < never["checks"][-1]["success"]   # BC does learn the task
    first_ok = next(c for c in never["checks"] if c["success"] > 0)   # same seed → same checks up to a stop
    _, stop = build(target=first_ok["success"])
    assert stop["steps"] == first_ok["step"] == stop["checks"][-1]["step"]
    assert all(c["success"] < first_ok["success"] for c in stop["checks"][:-1])
    off_a, off = build(target=0.0)
    off_b, _ = build(target=0.0, check_temperature=0.9)
    assert off["steps"] == 80 and off["checks"] == [] and off_a == off_b
    # the checks only read the policy (own sampling streams, eval mode): six checks leave the
    # weights bit-identical to no checks, so how often BC checks changes where it can stop, not
    # what it learns by a given step
    from safetensors.torch import load_file as _load
    w_checked, w_off = _load(os.path.join(never_dir, "model.safetensors")), _load(os.path.join(off_a, "model.safetensors"))
    assert w_checked.keys() == w_off.keys() and all(torch.equal(w_checked[k], w_off[k]) for k in w_off)
    # data parallel (2 gloo ranks, as train.py's workers): the same checks and the same weights
    # up to float summation order — each rank trains on half of every batch and plays half the checks
    import socket
    import subprocess
    import sys
    from safetensors.torch import load_file
    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = f"""
import os, sys, json, torch, torch.distributed as dist
sys.path.insert(0, {ROOT!r})
torch.set_num_threads(1)
dist.init_process_group("gloo")
import envs
from infra import policy
from infra import warmstart
spec = envs.get_spec("keydoor")
tiny = warmstart.TinyConfig(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)
bc = warmstart.BCConfig(episodes=12, steps=80, batch=16, lr=5e-3, check_from=20, check_every=10, check_episodes=8, target=1.5)
_, _, folder = warmstart.tiny_policy(spec, {{}}, tiny, bc, seed=0, cache_dir=sys.argv[1], history_len=2, log=lambda *_: None)
print("FOLDER", folder)
"""
    with socket.socket() as s_:
        s_.bind(("127.0.0.1", 0))
        port = s_.getsockname()[1]
    dp = tmp_path / "dp"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(dp)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
             for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][1][-2000:] + outs[1][1][-2000:]
    folder = outs[0][0].split("FOLDER ")[1].strip()
    assert folder == outs[1][0].split("FOLDER ")[1].strip()
    par = json.load(open(os.path.join(folder, "done.json")))
    assert [c["step"] for c in par["checks"]] == [c["step"] for c in never["checks"]]
    assert [c["success"] for c in par["checks"]] == [c["success"] for c in never["checks"]]
    one = load_file(os.path.join(tmp_path, os.path.basename(folder), "model.safetensors"))
    two = load_file(os.path.join(folder, "model.safetensors"))
    # 80 Adam steps at lr 5e-3 let summation-order differences grow to ~1e-4 (weights are O(0.1))
    assert all(torch.allclose(one[k], two[k], atol=1e-3) for k in one)
