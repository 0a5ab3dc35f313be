"""Environment throughput and difficulty: built-in ALFWorld simulator vs the real engine.

Measures, and writes to results/speed/env_speed.json:
  * steps/s of `household.Household` (one core, uniform-random admissible policy, step calls
    only; resets timed separately), presets small and full;
  * steps/s of alfworld's real TextWorld PDDL engine on the *same* games exported with
    `alfworld_tw.write_game` (load time reported separately), and the speed ratio;
  * success rate and mean plan length of both built-in experts (search, the default; oracle)
    per preset and task type (1,000 games per type);
  * success rate of a uniformly random admissible policy per preset and task type (50 steps).

Run:  .venv/bin/python bench/env_speed.py [--games 1000] [--real-games 6]
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time

from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from sims import household as H  # noqa: E402


def random_play(env, rng, n_games, preset, tt_cycle=True):
    """Uniform-random admissible play; returns (steps, step_seconds, reset_seconds)."""
    steps, t_step, t_reset = 0, 0.0, 0.0
    for i in range(n_games):
        g = H.generate_game("train", preset, 99, i, task_type=H.TASK_TYPES[i % 6] if tt_cycle else None)
        t0 = time.perf_counter()
        env.reset_game(g)
        t_reset += time.perf_counter() - t0
        t0 = time.perf_counter()
        while not env.done:
            env.step(rng.choice(env.admissible))
            steps += 1
        t_step += time.perf_counter() - t0
    return steps, t_step, t_reset


def sim_speed(preset, n_games):
    env, rng = H.Household(preset=preset), random.Random(0)
    steps, t_step, t_reset = random_play(env, rng, n_games, preset)
    # the bare `rng.choice` cost is included above; it is ~0.3 us, negligible
    env.reset(0)                                   # builds the valid_seen fingerprint set once
    t0 = time.perf_counter()
    for i in range(n_games):
        env.reset(i)                               # generation + disjointness check + reset
    t_gen = time.perf_counter() - t0
    return {"steps": steps, "steps_per_s": steps / t_step, "resets_per_s": n_games / t_reset,
            "generate_and_reset_per_s": n_games / t_gen}


def real_speed(preset, n_games):
    os.environ.setdefault("ALFWORLD_DATA", tempfile.mkdtemp(prefix="alfworld_data_"))
    from sims import alfworld_tw
    out = tempfile.mkdtemp(prefix="alfworld_gen_")
    steps, t_step, t_load, t_sim = 0, 0.0, 0.0, 0.0
    for i in range(n_games):
        g = H.generate_game("train", preset, 99, i, task_type=H.TASK_TYPES[i % 6])
        path = alfworld_tw.write_game(g, out)
        t0 = time.perf_counter()
        real = alfworld_tw.RealAlfworld(game_files=[path])
        real.reset(0)
        t_load += time.perf_counter() - t0
        sim = H.Household(preset=preset)
        sim.reset_game(g)
        rng = random.Random(i)
        cmds = []
        while not sim.done:
            cmds.append(rng.choice(sim.admissible))
            sim.step(cmds[-1])
        sim.reset_game(g)
        t0 = time.perf_counter()
        for c in cmds:
            sim.step(c)
        t_sim += time.perf_counter() - t0
        t0 = time.perf_counter()
        for c in cmds:
            real.step(c)
        t_step += time.perf_counter() - t0
        steps += len(cmds)
    return {"games": n_games, "steps": steps, "steps_per_s": steps / t_step, "load_s_per_game": t_load / n_games,
            "sim_steps_per_s_same_commands": steps / t_sim, "ratio_sim_over_real": (steps / t_sim) / (steps / t_step)}


def expert_and_random(preset, n_games):
    """Success and plan length of both built-in experts (search: the default, sees only what the
    agent sees; oracle: walks to the hidden object) and of uniform random admissible commands."""
    res = {}
    for tt in H.TASK_TYPES:
        rng = random.Random(1)
        envs = {e: H.Household(preset=preset, expert=e) for e in H.EXPERTS}
        won, plan, won_r = dict.fromkeys(H.EXPERTS, 0), dict.fromkeys(H.EXPERTS, 0), 0
        for i in tqdm(range(n_games), desc=f"{preset} {tt}", leave=False):
            g = H.generate_game("train", preset, 7, i, task_type=tt)
            for e, env in envs.items():
                env.reset_game(g)
                while not env.done:
                    env.step(env.expert_action())
                won[e] += env.won
                plan[e] += env.steps
            env = envs["search"]                          # the random policy ignores the expert
            env.reset_game(g)
            while not env.done:
                env.step(rng.choice(env.admissible))
            won_r += env.won
        res[tt] = {"expert_success": won["search"] / n_games, "expert_plan_len": plan["search"] / n_games,
                   "oracle_success": won["oracle"] / n_games, "oracle_plan_len": plan["oracle"] / n_games,
                   "random_success": won_r / n_games}
    for k in ("expert", "oracle"):
        res[f"mean_{k}_plan_len"] = sum(res[tt][f"{k}_plan_len"] for tt in H.TASK_TYPES) / len(H.TASK_TYPES)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--games", type=int, default=1000, help="games per task type for expert/random stats")
    ap.add_argument("--speed-games", type=int, default=600, help="games for simulator throughput")
    ap.add_argument("--real-games", type=int, default=6, help="exported games played on the real engine")
    args = ap.parse_args()
    out = {"simulator": {}, "real_engine": {}, "policies": {}}
    for preset in H.PRESETS:
        out["simulator"][preset] = s = sim_speed(preset, args.speed_games)
        print(f"[sim {preset}] {s['steps_per_s']:,.0f} steps/s, {s['resets_per_s']:,.0f} resets/s")
    try:
        for preset in H.PRESETS:
            out["real_engine"][preset] = r = real_speed(preset, args.real_games)
            print(f"[real {preset}] {r['steps_per_s']:.1f} steps/s, load {r['load_s_per_game']:.2f} s/game, "
                  f"simulator on the same commands {r['sim_steps_per_s_same_commands']:,.0f} steps/s "
                  f"(x{r['ratio_sim_over_real']:,.0f})")
    except ImportError as e:                       # alfworld not installed: report, keep the rest
        out["real_engine"] = {"skipped": str(e)}
        print(f"[real] skipped: {e}")
    for preset in H.PRESETS:
        out["policies"][preset] = p = expert_and_random(preset, args.games)
        for tt in H.TASK_TYPES:
            v = p[tt]
            print(f"[{preset}] {tt:32s} search expert {v['expert_success']:.3f} plan {v['expert_plan_len']:.2f}  "
                  f"oracle {v['oracle_success']:.3f} plan {v['oracle_plan_len']:.2f}  random {v['random_success']:.3f}")
        print(f"[{preset}] mean plan length: search expert {p['mean_expert_plan_len']:.2f}, "
              f"oracle {p['mean_oracle_plan_len']:.2f}")
    os.makedirs(os.path.join(ROOT, "results", "speed"), exist_ok=True)
    path = os.path.join(ROOT, "results", "speed", "env_speed.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print("wrote", path)


if __name__ == "__main__":
    main()
