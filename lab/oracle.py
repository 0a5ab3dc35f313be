"""Exact credit for the credit lab: A*(s, a) = Q^π(s, a) − V^π(s) in `keydoor` (sims/keydoor.py).

What this implements: in keydoor everything but the policy is known (the moves are deterministic;
after reset the only randomness is the door's draw, whose chance is a known function of what is
held, and the apples' draws), so the policy's value is computed instead of estimated:

    V^π(n)    = Σ_a π(a | n) · Q^π(n, a)
    Q^π(n, a) = r̄(n, a) + door_chance(key, coin)         a = "open door" in the last room
              = r̄(n, a)                                 the step limit ends the episode
              = r̄(n, a) + V^π(child(n, a))              otherwise
    A*(n, a)  = Q^π(n, a) − V^π(n)

r̄(n, a): the step's expected reward, 0 but a · APPLE_CHANCE for a move into a middle room with
apples on (the value is then the expected score, the outcome under --reward score). Nodes n = the
game state plus the prompt's view (the current observation and the last `history_len`
(observation, action) pairs): histories that show the same prompt are one node, so the DP is exact
for any policy that sees only its prompt.

Procedure (`Oracle.values`): breadth first from the roots, one level per step (every step counts
against the limit, so the graph is acyclic): score π at a level's new nodes in one batch
(`ModelPolicy`: the model's exact probability of each candidate action's canonical response
`<action>a</action>` at the sampling temperature), expand, then back the values up from the
deepest level. Values are cached until `reset()` (call it whenever the policy changes).

Approximations, each with a stated bound (in full: docs/credit_lab.md, "Exact credit"):
* Residual mass: malformed responses, 1 − Σ_a π(a), are followed as one invalid turn whose history
  entry is `RESIDUAL`; the mass is reported (`Oracle.stats["residual_mass"]`) and
  bench/oracle_check.py measures its cost against Monte Carlo with the real sampler.
* Pruning: a child reached with probability < `eps` is valued by walking out to the door;
  `Oracle.bound[n]` backs the error bound up exactly (eps = 0: no pruning, bound 0).

Also here: mode "key_held" (the same DP, stopped when the agent leaves the pivot room: P(key held
then), lab/p_key_held, the lab's headline speed measure), `advantages` (A* for every turn of a
batch: the ladder's `oracle*` arms) and `expected_reward`.

Leaves out: every env but keydoor (no other env's dynamics are known in closed form). The oracle
needs no hint of which objects matter (the keys, the trap's coin): it reads the rules by stepping
a `keydoor.KeyDoor`. "key_held" follows the pivot room's key (the first) whatever N is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from sims import keydoor
from envs import PromptInput
from rollout import AgentState

RESIDUAL = ""               # the history entry of a turn whose response is no admissible action
MODES = ("success", "key_held")


# ---------------------------------------------------------------------------------------------
# Policies: a batch of views -> action probabilities
# ---------------------------------------------------------------------------------------------
# A policy is any callable  policy(views: list[AgentState]) -> list[dict[action, probability]]
# (probabilities of actions, admissible or not: an inadmissible one costs a step; what they leave
# to 1 is the residual). The views carry
# obs, info["task"/"admissible"], history (padded to `step` entries: the chat prompt numbers its
# steps) and step; env_snap is None.
Policy = Callable[[list], list]


def candidates(view) -> list[str]:
    """The actions whose canonical responses are scored at a view: the admissible ones, plus every
    well-formed action the prompt makes plausible (the two moves, and take / drop / examine of each
    object the prompt names). A well-formed inadmissible action is not residual: the env answers it
    with "Nothing happens." and the next prompt's history shows it, so it is followed exactly."""
    text = " ".join([view.obs] + [o for o, _ in view.history[-2:]] + list(view.info["admissible"]))
    names = [x for x in keydoor.OBJECTS + [keydoor.KEY, keydoor.TRAP] if x in text]
    extra = ["go forward", "open door"] + [f"{v} {x}" for x in names for v in ("take", "drop", "examine")]
    return list(dict.fromkeys(list(view.info["admissible"]) + extra))


class ModelPolicy:
    """The model's exact action probabilities at `temperature`: for each candidate action a,
    Π_j π(y_j | prompt, y_<j) with y = spec.response(a) up to its closing tag (the env acts on the
    first `<action>…</action>`; what follows it does not matter). Another spelling of the same
    action (a different tokenisation) is counted as residual — the same convention as lab/q_key.

    Two ways to compute the same numbers:
    * shared prompt (`share_prompt`, for Qwen3-architecture models — the tiny policy): each view's
      prompt runs once (infra.policy.Qwen3Runner's prefill, length buckets), its K, V are copied to
      every candidate of that view, and the candidates' responses run on top. Why: a view has
      several candidates whose responses are a few tokens next to a prompt many times longer, and
      the plain path runs that prompt once per candidate (bench/oracle_speed.py times both). The
      numbers equal the plain path's up to float rounding (tests/test_oracle.py holds them to 1e-5).
    * plain (any model): one row per (view, candidate) = prompt + response through grpo's
      token_logprobs, rows sorted by length, `chunk` rows per forward."""

    def __init__(self, model, agent, temperature: float, chunk: int = 256, share_prompt: bool | None = None):
        from infra.policy import Qwen3Runner
        self.model, self.agent, self.temperature, self.chunk = model, agent, float(temperature), chunk
        self.share_prompt = Qwen3Runner.supports(model) if share_prompt is None else bool(share_prompt)
        self._resp: dict[str, list[int]] = {}
        self.calls = self.rows = 0

    def response_ids(self, a: str) -> list[int]:
        if a not in self._resp:
            self._resp[a] = self.agent.tok(self.agent.spec.response(a), add_special_tokens=False)["input_ids"]
        return self._resp[a]

    @torch.no_grad()
    def __call__(self, views: list) -> list[dict]:
        prompts = self.agent.prompts_ids(views)
        pairs = [(v, a) for v in range(len(views)) for a in candidates(views[v])]
        was = self.model.training
        self.model.eval()
        try:
            vals = (self._shared if self.share_prompt else self._plain)(prompts, pairs)
        finally:
            self.model.train(was)
        self.rows += len(pairs)
        out = [dict() for _ in views]
        for (v, a), lp in zip(pairs, vals):
            out[v][a] = math.exp(lp)
        return out

    def _plain(self, prompts: list[list[int]], pairs: list[tuple[int, str]]) -> list[float]:
        from grpo import Row, collate, token_logprobs
        # rows sorted by length so each chunk pads little; one forward per chunk
        order = sorted(range(len(pairs)), key=lambda k: len(prompts[pairs[k][0]]))
        vals = [0.0] * len(pairs)
        for c in range(0, len(order), self.chunk):
            idx = order[c:c + self.chunk]
            resp = [self.response_ids(pairs[k][1]) for k in idx]
            rows = [Row(prompts[pairs[k][0]], r, [0.0] * len(r), 0.0) for k, r in zip(idx, resp)]
            ids, attn, mask, _, _ = collate(rows, self.agent.tok.pad_token_id)      # (B, T), (B, T), (B, T-1)
            lp = token_logprobs(self.model, ids, attn, mask, self.temperature).sum(-1)   # (B,)
            for k, v in zip(idx, lp.tolist()):
                vals[k] = v
            self.calls += 1
        return vals

    def _shared(self, prompts: list[list[int]], pairs: list[tuple[int, str]]) -> list[float]:
        from infra.policy import Qwen3Runner
        import torch.nn.functional as F
        by_view: dict[int, list[int]] = {}
        for k, (v, _) in enumerate(pairs):
            by_view.setdefault(v, []).append(k)
        order = sorted(by_view, key=lambda v: len(prompts[v]))
        vals = [0.0] * len(pairs)
        t = self.temperature if self.temperature > 0 else 1.0
        pad = self.agent.tok.pad_token_id
        dev = next(self.model.parameters()).device
        while order:                                   # views in chunks of about `chunk` pairs
            n, take = 0, 0
            while take < len(order) and (take == 0 or n + len(by_view[order[take]]) <= self.chunk):
                n += len(by_view[order[take]])
                take += 1
            vs, order = order[:take], order[take:]
            ks = [k for v in vs for k in by_view[v]]                       # this chunk's pairs
            resp = [self.response_ids(pairs[k][1]) for k in ks]
            R = max(len(r) for r in resp)                                  # longest response
            run = Qwen3Runner(self.model, pad, max(1, R - 1))
            first = F.log_softmax(run.prefill([prompts[v] for v in vs]).float() / t, -1)   # (b, V): y_0 | prompt
            L = run.n                                                      # prompt columns of the cache
            local = {v: i for i, v in enumerate(vs)}
            vi = torch.tensor([local[pairs[k][0]] for k in ks], device=dev)  # (P,) each pair's view row
            lp = first[vi, torch.tensor([r[0] for r in resp], device=dev)]     # (P,) log π(y_0)
            if R > 1:
                # every pair gets its own copy of its view's K, V (advanced indexing copies), then
                # y_0 .. y_{n-2} run on top and predict y_1 .. y_{n-1}
                run.cache = [(kc[vi], vc[vi]) for kc, vc in run.cache]   # (P, kv, L + R - 1, hd)
                P, T = len(ks), R - 1
                ids = torch.full((P, T), pad, dtype=torch.long)
                tgt = torch.zeros((P, T), dtype=torch.long)
                sel = torch.zeros((P, T), dtype=torch.bool)                # positions predicting a real token
                for i, r in enumerate(resp):
                    ids[i, :len(r) - 1] = torch.tensor(r[:-1])
                    tgt[i, :len(r) - 1] = torch.tensor(r[1:])
                    sel[i, :len(r) - 1] = True
                pos = run.pos[vi] + torch.arange(T, device=dev)[None]     # (P, T)
                causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
                mask = torch.cat([run.valid[vi, None, :L].expand(P, T, L), causal.expand(P, T, T)], -1)  # (P, T, L+T)
                h = run._forward(ids.to(dev), pos, mask[:, None], slice(None), L, last=False)   # (P, T, D)
                sel, tgt = sel.to(dev), tgt.to(dev)
                logits = self.model.lm_head(h[sel]).float() / t                             # (M, V)
                tok_lp = torch.zeros((P, T), device=dev)
                tok_lp[sel] = torch.gather(F.log_softmax(logits, -1), -1, tgt[sel][:, None]).squeeze(-1)
                lp = lp + tok_lp.sum(-1)
            for k, v in zip(ks, lp.tolist()):
                vals[k] = v
            self.calls += 1
        return vals


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------
def _game_key(s: keydoor.State) -> tuple:
    """The rule-relevant part of a keydoor.State (task and the expert's coin are not)."""
    return (s.room, s.items, s.held, s.key, s.keys, s.trap_taken, s.steps)


@dataclass
class _Node:
    state: keydoor.State
    obs: str
    window: tuple                    # the last history_len (obs, action) pairs
    admissible: list


class Oracle:
    """Exact values and advantages of a policy in one keydoor configuration.

    `env_kwargs`: the keydoor options (rooms, p_key, p_nokey, trap, pivot, max_steps, ...);
    `policy`: see `Policy`; `history_len`: the prompt's history window; `eps`: pruning threshold on
    a node's reach probability (0 = exact enumeration)."""

    def __init__(self, env_kwargs: dict, policy: Policy, history_len: int = 2, eps: float = 1e-4,
                 max_nodes: int = 2_000_000):
        self.env = keydoor.make(split="test", seed=0, **env_kwargs)    # the rules only; split/seed unused
        self.policy, self.h, self.eps, self.max_nodes = policy, int(history_len), float(eps), max_nodes
        # the largest value (the score's range): the error bound of a pruned node
        self.top = 1.0 + self.env.apples * len(self.env.middle)
        self.reset()

    def reset(self) -> None:
        """Forget every value and probability (call after the policy changes)."""
        self.nodes: dict[tuple, _Node] = {}
        self.pi: dict[tuple, dict] = {}
        self.value = {m: {} for m in MODES}        # mode -> node key -> value
        self.bound = {m: {} for m in MODES}        # mode -> node key -> |error| bound from pruning
        self.trans: dict[tuple, tuple] = {}       # (node, action, text, mode) -> step()'s answer
        self.stats = {"nodes": 0, "levels": 0, "pruned_mass": 0.0, "residual_mass": 0.0, "scored": 0}
        # residual_mass: summed over scored nodes (divide by `scored` for the mean per node)

    # ---- nodes --------------------------------------------------------------------------------
    def _register(self, st: keydoor.State, obs: str, window: tuple) -> tuple:
        key = (_game_key(st), obs, window)
        if key not in self.nodes:
            self.env.s = replace(st)
            self.nodes[key] = _Node(replace(st), obs, window, self.env.admissible())
        return key

    def node_of(self, s: AgentState) -> tuple:
        """The node of a rollout's AgentState (its env snapshot holds the game state)."""
        st = s.env_snap[0]
        return self._register(st, s.obs, self._window(s.history))

    def _window(self, history) -> tuple:
        return tuple(tuple(x) for x in history[max(0, len(history) - self.h):]) if self.h else ()

    def view(self, key: tuple) -> AgentState:
        n = self.nodes[key]
        pad = (("", ""),) * (n.state.steps - len(n.window))
        return AgentState(None, n.obs, {"task": keydoor.TASK, "admissible": list(n.admissible)},
                          pad + n.window, n.state.steps)

    def step(self, key: tuple, action: str, text: str | None = None, mode: str = "success"):
        """One transition: (terminal value, None) or (the step's expected reward r̄, child key). `text`: the history entry
        (the parsed action; default `action`). Memoised: the DP asks for each one twice (expanding
        a level, then backing values up)."""
        memo = (key, action, text, mode)
        if memo not in self.trans:
            self.trans[memo] = self._step(key, action, text, mode)
        return self.trans[memo]

    def _step(self, key: tuple, action: str, text: str | None, mode: str):
        n, env = self.nodes[key], self.env
        s, last = n.state, env.rooms - 1
        leaving = s.room == env.pivot and ((action == "go forward" and s.room < last) or
                                           (action == "open door" and s.room == last))
        if mode == "key_held" and (leaving or s.room > env.pivot):
            return float(s.key), None
        if action == "open door" and s.room == last:
            return keydoor.door_chance(s.keys, s.trap_taken, env.p_key, env.p_nokey, env.trap, env.keys), None
        env.s = replace(s)
        obs, _, done, _ = env.step(action)                 # never opens the door (an apple's draw may use the RNG)
        # the expected apple of a move into a middle room (the draw itself is noise, not state)
        r = env.apples * keydoor.APPLE_CHANCE if (mode == "success" and env.s.room != s.room
                                                  and env.s.room in env.middle) else 0.0
        if done:                                           # the step limit
            return (float(env.s.key) if mode == "key_held" else r), None
        return r, self._register(env.s, obs, self._window(n.window + ((n.obs, action if text is None else text),)))

    def _fallback(self, key: tuple, mode: str) -> float:
        """Value of a pruned node: walk out (go forward to the door and open it) if the steps allow."""
        s, env = self.nodes[key].state, self.env
        if mode == "key_held":
            return float(s.key)
        need = (env.rooms - 1 - s.room) + 1
        ok = env.max_steps - s.steps >= need
        apples = env.apples * keydoor.APPLE_CHANCE * keydoor.apples_ahead(s.room, env.rooms, env.pivot, env.keys)
        return keydoor.door_chance(s.keys, s.trap_taken, env.p_key, env.p_nokey, env.trap, env.keys) + apples if ok else 0.0

    # ---- the DP -------------------------------------------------------------------------------
    def _branches(self, key: tuple) -> list[tuple[float, str, str]]:
        """(probability, action, history text) of each branch of a node, the residual included."""
        pi = self.pi[key]
        out = [(p, a, a) for a, p in pi.items() if p > 0]
        res = 1.0 - sum(pi.values())
        if res > 1e-12:
            out.append((res, "", RESIDUAL))               # the env answers "" with "Nothing happens."
        return out

    def solve(self, roots: list[tuple], mode: str = "success") -> None:
        """Values (and pruning bounds) of every root under `mode`, cached."""
        V, B = self.value[mode], self.bound[mode]
        frontier = {k: 1.0 for k in roots if k not in V}
        levels = []
        while frontier:
            new = [k for k in frontier if k not in self.pi]
            if new:
                for k, p in zip(new, self.policy([self.view(k) for k in new])):
                    tot = sum(p.values())
                    if tot > 1.0 + 1e-4:
                        raise ValueError(f"oracle: the policy's probabilities sum to {tot:.4f} > 1")
                    self.pi[k] = {a: v / max(1.0, tot) for a, v in p.items()}
                self.stats["scored"] += len(new)
                self.stats["residual_mass"] += sum(max(0.0, 1.0 - sum(self.pi[k].values())) for k in new)
            children: dict[tuple, float] = {}
            for k, m in frontier.items():
                for p, a, text in self._branches(k):
                    val, child = self.step(k, a, text, mode)
                    if child is not None and child not in V:
                        children[child] = children.get(child, 0.0) + m * p
            levels.append(frontier)
            if len(self.nodes) > self.max_nodes:
                raise RuntimeError(f"oracle: more than {self.max_nodes} nodes; raise eps")
            keep = {c: m for c, m in children.items() if m >= self.eps}
            for c, m in children.items():
                if m < self.eps:
                    V[c], B[c] = self._fallback(c, mode), self.top
                    self.stats["pruned_mass"] += m
            frontier = keep
        for level in reversed(levels):                     # back up, deepest level first
            for k in level:
                v = b = 0.0
                for p, a, text in self._branches(k):
                    val, child = self.step(k, a, text, mode)
                    if child is None:
                        v += p * val
                    else:
                        v += p * (val + V[child])
                        b += p * B[child]
                V[k], B[k] = v, b
        self.stats["levels"] = max(self.stats["levels"], len(levels))
        self.stats["nodes"] = len(self.nodes)

    def values(self, states: list[AgentState], mode: str = "success") -> list[float]:
        """V^π (mode success: the chance to win; key_held: to hold the key when leaving the pivot
        room) of each rollout state."""
        keys = [self.node_of(s) for s in states]
        self.solve(keys, mode)
        return [self.value[mode][k] for k in keys]

    def q_values(self, key: tuple, mode: str = "success") -> dict[str, float]:
        """Q^π(n, a) for every admissible action of a solved node (children solved on demand)."""
        out = {}
        for a in self.nodes[key].admissible:
            val, child = self.step(key, a, None, mode)
            if child is not None:
                self.solve([child], mode)
                val += self.value[mode][child]
            out[a] = val
        return out

    def turn_q(self, s: AgentState, action: str, mode: str = "success") -> float:
        """Q^π(s, action) of a turn taken from rollout state s (action = the parsed action text,
        which is also what the next prompt's history shows)."""
        k = self.node_of(s)
        val, child = self.step(k, action, action, mode)
        if child is None:
            return val
        self.solve([child], mode)
        return val + self.value[mode][child]

    def advantages(self, groups) -> list:
        """A*[g][i][t] = Q^π(s_t, a_t) − V^π(s_t) for every turn of every trajectory (turns need
        their `state`: rollouts with keep_states)."""
        roots, kids = [], []
        for group in groups:
            for tr in group:
                for tn in tr.turns:
                    k = self.node_of(tn.state)
                    roots.append(k)
                    val, child = self.step(k, tn.action, tn.action)
                    if child is not None:
                        kids.append(child)
        self.solve(roots + kids)
        V = self.value["success"]
        out = []
        for group in groups:
            out.append([])
            for tr in group:
                row = []
                for tn in tr.turns:
                    k = self.node_of(tn.state)
                    val, child = self.step(k, tn.action, tn.action)
                    row.append((val if child is None else val + V[child]) - V[k])
                out[-1].append(row)
        return out

    def max_bound(self, states: list[AgentState], mode: str = "success") -> float:
        return max((self.bound[mode][self.node_of(s)] for s in states), default=0.0)


def expected_reward(tr, env_kwargs: dict) -> float:
    """E[R | the trajectory's decisions]: the door's chance with what was held when the door was
    opened, 0 if the episode ran out of steps, plus a · APPLE_CHANCE per middle room entered with
    apples on — the door's and the apples' draws removed (outcome noise only). What
    was held comes from the turns' truth labels (the key and the coin cannot be dropped), so it
    needs no env snapshots (evaluation rollouts keep none)."""
    env = keydoor.make(split="test", seed=0, **env_kwargs)
    # the k-th move that is answered with a room (not "Nothing happens.") enters room k
    moved = sum(tn.action == "go forward" and tn.next_obs != keydoor.NOTHING for tn in (tr.turns or []))
    apples = env.apples * keydoor.APPLE_CHANCE * sum(1 for r in env.middle if r <= moved)
    if not tr.turns or tr.turns[-1].next_obs not in (keydoor.DOOR_OPENS, keydoor.DOOR_SHUT):
        return apples
    keys = sum(tn.truth == "key" for tn in tr.turns)
    coin = any(tn.truth == "trap" for tn in tr.turns)
    return keydoor.door_chance(keys, coin, env.p_key, env.p_nokey, env.trap, env.keys) + apples
