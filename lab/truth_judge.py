"""The truth judge (credit lab only): it proposes the examined success's pivotal turn, from the env's truth.

    --judge truth      (--env keydoor; the lab's "perfect selection" arm)

keydoor labels the turn that took the key `Turn.truth == "key"` (never shown to the policy or to
the other judges). This judge proposes that one turn as the segment (ℓ = r = the key turn), through
the same validation as every judge (judge.validate_proposal), so ProVer's verification then
estimates its Δ̂ with real noise: truth-select + verification isolates estimation from selection.
A success that never took the key has no pivotal turn: the group is dropped ("no_pivot").
With `choose_success`, it examines the shortest success that took the key (the default τ* when
that one did). Costs nothing: 0 judge tokens (it reads labels, not text).
Leaves out: the trap and the failures' "nokey" turns (it proposes what a success did right).
"""
from __future__ import annotations

from judge import JudgeResult, validate_proposal


def key_turn(traj) -> int | None:
    return next((tn.t for tn in traj.turns if tn.truth == "key"), None)


class TruthJudge:
    name = "truth"

    def propose(self, group, success_id: int, choose_success: bool = False) -> JudgeResult:
        sid = success_id
        if choose_success and key_turn(group[sid]) is None:
            took = [i for i, tr in enumerate(group) if tr.won and key_turn(tr) is not None]
            sid = min(took, key=lambda i: (len(group[i].turns), i)) if took else sid
        t = key_turn(group[sid])
        chosen = sid if choose_success else None
        if t is None:
            return JudgeResult(None, "dropped", "no_pivot: the examined success did not take the key", 0, 0, 0, 0,
                               success_id=chosen)
        prop, err = validate_proposal({"failure_mode": "the failures left the key behind", "start_turn": t,
                                       "end_turn": t, "rationale": "the env's truth label"}, group, sid)
        if prop is None:
            return JudgeResult(None, "dropped", err, 0, 0, 0, 0, success_id=chosen)
        return JudgeResult(prop, "valid", None, 0, 0, 0, 0, success_id=chosen)
