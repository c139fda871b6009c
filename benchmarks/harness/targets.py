"""What an emulated rollout is held to, and by how much and why a run falls short.

Two sets of targets, by the baseline a run measured. A run with only veRL's whole-group dispatch
(``plain-group``) is held to Seer's reported gains on its own rollouts against that baseline: ``divided``
at least 1.3x the throughput, ``context`` at least 1.4x and above ``divided`` and ``group``, ``context``
within 3% of ``oracle``, grouped speculation (``context+sd``) at least 1.8x, and a tail (the last 10% of
samples) at most 0.2x plain SGLang's. A run that also measured plain SGLang behind sglang-router
(``plain-router``, ``plain-router-p2``) is held, against the fastest of the three (its ``reference``), to
what a user who could run that instead must see: ``context`` at least 1.2x, ``context+sd`` at least 1.9x,
a tail at most 0.3x, and ``context`` within 5% of ``oracle``. A run with speculation's ablation arms is held
to Seer's ablation: ``context+sd`` at least 1.25x ``context+sd-fixed`` (every draft verified at every batch
size: the paper's "No-Adapt") and above ``context+sd-suffix`` (each sample drafting from its own history
only: "No-Context"). A run is held to those of its modes that it ran, and a run's own validity to two more:
every mode's steps within the profile (at most 5% overran) and the simulator within 5% of every valid mode.

A target missed carries its shortfall and the evidence of why, from the run itself: the same run's
``oracle`` (the most any dispatch order gets from these workloads), and the simulator's bound policies on
the run's own workloads (``bounds``). ``late-oracle`` knows each group's longest sample once its first
sample finishes, ``group-oracle`` from the start; together they split ``context``'s gap to ``oracle`` into
its estimate, the first wave (dispatched before any length is known) and the spread of lengths within a
group. ``benchmarks.rollout`` checks them with every run, ``benchmarks.targets`` for stored runs.
"""

from __future__ import annotations

import statistics

from dataclasses import dataclass, field

from benchmarks.harness.baselines import PLAIN_SAMPLE, ROUTER_POLICIES, is_plain, reference_of
from benchmarks.harness.emulation import is_invalid, mode_runs, schedule_bound, worst_overrun


@dataclass(frozen=True)
class Targets:
    """One set of targets: throughput and tail as multiples of the reference's, the gap to ``oracle``."""

    against: str  # how the rows name the reference
    throughput: dict[str, float] = field(default_factory=dict)
    oracle_gap: float = 0.03  # context's throughput at most this far below oracle's
    tail: float = 0.2


# Seer's own gains, against plain SGLang fed as veRL feeds it
PAPER = Targets("plain SGLang's", {"divided": 1.3, "context": 1.4, "context+sd": 1.8}, 0.03, 0.2)
# against the strongest plain SGLang a trainer runs (whole groups, or per sample behind sglang-router)
STRONGEST = Targets("the strongest plain SGLang's", {"context": 1.2, "context+sd": 1.9}, 0.05, 0.3)
ABOVE = (("context", "divided"), ("context", "group"))
# Seer's speculation ablation: the full design's throughput over each arm's at least this much
ABLATION_OF = "context+sd"
ABLATION = {"context+sd-fixed": 1.25, "context+sd-suffix": 1.0}
SIM_ERROR = 0.05


def targets_of(run: dict) -> Targets:
    """``STRONGEST`` for a run that measured plain SGLang per sample (behind sglang-router, or in turn: its
    reference is then at least as fast as the per-sample dispatch a trainer runs), else ``PAPER``."""
    return STRONGEST if any(m in run["modes"] for m in (*ROUTER_POLICIES, PLAIN_SAMPLE)) else PAPER


def context_modes(modes) -> list[str]:
    """The run's ``context`` modes held to ``oracle``: plain ``context`` and its grouped speculation (not the
    ablation's arms, which are held to the full design)."""
    out = []
    for mode in modes:
        policy, *options = mode.split("+")
        if policy == "context" and all(o.startswith("sd") for o in options) and mode not in ABLATION:
            out.append(mode)
    return out


def bound_modes(modes) -> list[str]:
    """The simulator's bound policies for each ``context`` mode of a run, and its ``oracle`` where the
    run did not measure it (a tail's bound)."""
    out = []
    for mode in context_modes(modes):
        suffix = mode[len("context"):]
        out += [f"late-oracle{suffix}", f"group-oracle{suffix}"]
        if f"oracle{suffix}" not in modes:
            out.append(f"oracle{suffix}")
    return out


def bounds(predicted: dict) -> dict:
    """``benchmarks.harness.simulate.predict``'s runs of the bound modes, as means over the run's repeats."""
    return {mode: {"predicted_s": statistics.fmean(r.completion_s for r in runs),
                   "predicted_tail_s": statistics.fmean(r.tail_s for r in runs)}
            for mode, runs in predicted.items()}


def overrun(run: dict, mode: str) -> float:
    """The worst repeat's share of steps that overran the profile."""
    return worst_overrun(mode_runs(run, mode))


def row(kind: str, target: str, mode: str, measured, met, short_by=None, why: str | None = None) -> dict:
    """One target: ``kind`` says what ``measured`` is (``retractions``; ``throughput`` and ``tail``, x plain
    SGLang's; ``above``, relative throughput; ``ablation``, ``context+sd``'s throughput over an arm's;
    ``oracle``, throughput behind it; ``overrun``, the share of
    steps; ``sim``, the simulator's signed error); ``met`` is None where the run cannot judge it."""
    return {"kind": kind, "target": target, "mode": mode, "measured": measured, "met": met, "short_by": short_by,
            "why": why}


def unreported(run: dict, mode: str) -> str:
    return f"not reported: `{mode}` overran the profile on {overrun(run, mode):.1%} of its steps (worst repeat)"


def check(run: dict, bound: dict | None = None) -> list[dict]:
    """Every target the run's modes allow, in the order the module docstring gives them."""
    modes = run["modes"]
    goal = targets_of(run)
    valid = {m: not is_invalid(mode_runs(run, m)) for m in modes}
    sim = run.get("sim_check", {})
    rows = []
    ref = reference_of(run)  # the strongest plain SGLang of the run: the ratios are against it
    plain = is_plain(ref) and valid[ref]
    if plain:
        base = modes[ref]
        seer = max((modes[m]["retractions"] for m in modes if not is_plain(m)), default=0)
        idle = [x for x in base.get("idle_share", []) if x is not None]
        why = f"{base['retractions']:.0f} retractions per rollout (seer modes: at most {seer:.0f})"
        if idle:
            why += f"; its instances idle {statistics.fmean(idle):.0%} of the rollout on average"
        rows.append(row("retractions", "plain SGLang retracts and idles in the tail", ref,
                        base["retractions"], base["retractions"] > 0, why=why))
        for mode, target in goal.throughput.items():
            for m in [m for m in modes if m == mode or (mode == "context+sd" and m.startswith("context+sd")
                                                         and m not in ABLATION)]:
                rows.append(throughput_row(run, m, target, valid, bound or {}, goal))
    for a, b in ABOVE:  # a run's ratios are all against one mode, so these need no plain SGLang
        if a in modes and b in modes:
            rows.append(above_row(run, a, b, valid))
    if ABLATION_OF in modes:
        rows += [ablation_row(run, arm, valid) for arm in ABLATION if arm in modes]
    for mode in context_modes(modes):
        suffix = mode[len("context"):]
        oracle = f"oracle{suffix}"
        if oracle in modes:
            rows.append(oracle_row(run, mode, oracle, valid, bound or {}, goal))
        if plain:
            rows.append(tail_row(run, mode, valid, bound or {}, goal))
    for mode in modes:
        rows.append(row("overrun", "steps within the profile (at most 5% overran)", mode, overrun(run, mode),
                        valid[mode], why=None if valid[mode] else unreported(run, mode)))
    for mode, s in sim.items():
        if valid.get(mode):
            ok = abs(s["error"]) <= SIM_ERROR
            rows.append(row("sim", "the simulator within 5% of the completion time", mode, s["error"], ok,
                            short_by=None if ok else abs(s["error"]) - SIM_ERROR,
                            why=None if ok else sim_miss(run, mode, s)))
    return rows


def sim_miss(run: dict, mode: str, s: dict) -> str:
    why = (f"the simulator predicts {s['predicted_s']:.1f} s against {s['real_s']:.1f} s measured; the host fell "
           f"behind the profile on {overrun(run, mode):.1%} of `{mode}`'s steps")
    # a run made before results recorded their commit (``meta``) and the draft budget they ran
    if "sim_check_revision" not in run and "meta" not in run and "budget_kv_read" not in run.get("config", {}):
        why += "; the simulator of the run's day (its configuration predates settings a recheck needs)"
    return why


def throughput_row(run: dict, mode: str, target: float, valid: dict, bound: dict, goal: Targets = PAPER) -> dict:
    name = f"throughput >= {target}x {goal.against}"
    if not valid[mode]:
        return row("throughput", name, mode, None, None, why=unreported(run, mode))
    measured = run["ratios"][mode]["throughput"]
    if measured >= target:
        return row("throughput", name, mode, measured, True)
    suffix = mode[len(mode.split("+")[0]):]
    oracle = f"oracle{suffix}"
    why = []
    if oracle in run["modes"] and valid[oracle]:
        o = run["ratios"][oracle]["throughput"]
        why.append(f"`{oracle}`, which knows every length, reaches {o:.2f}x in the same run"
                   + (": no dispatch order reaches the target on these workloads" if o < target else ""))
    simulated = simulated_bounds(run, suffix, bound, "predicted_s")
    if simulated:
        ratios = [(m, 1.0 / x) for m, x in simulated]  # the reference's time over the mode's
        why.append(bounds_clause(ratios) + (", so no policy simulated reaches the target"
                                            if max(r for _, r in ratios) < target else ""))
    ref = reference_of(run)
    work = schedule_bound(run, ref) if not suffix else None  # speculation changes the steps themselves
    if work:
        why.append(f"`{ref}`'s instances spent {work['work_s']:.0f} s per instance in steps of its "
                   f"{work['completion_s']:.0f} s: with the same steps no dispatch order is more than "
                   f"{work['bound']:.2f}x faster" + (", below the target" if work["bound"] < target else ""))
    return row("throughput", name, mode, measured, False, short_by=target - measured, why="; ".join(why) or None)


def simulated_bounds(run: dict, suffix: str, bound: dict, key: str) -> list[tuple[str, float]]:
    """The simulator's bound policies on the run's workloads (``late-oracle``, ``group-oracle``, ``oracle``
    with the mode's options): each one's ``key`` figure over the reference's, simulated alike."""
    predicted = {**bound, **run.get("sim_check", {})}
    base = predicted.get(reference_of(run), {}).get(key)
    if not base:
        return []
    return [(m, predicted[m][key] / base) for m in (f"late-oracle{suffix}", f"group-oracle{suffix}", f"oracle{suffix}")
            if m in predicted]


def bounds_clause(ratios: list[tuple[str, float]]) -> str:
    return "in the simulator on this run's workloads: " + ", ".join(f"`{m}` {r:.2f}x" for m, r in ratios)


def above_row(run: dict, a: str, b: str, valid: dict) -> dict:
    name = f"`{a}` above `{b}`"
    if not (valid[a] and valid[b]):
        return row("above", name, a, None, None, why=unreported(run, a if not valid[a] else b))
    ra, rb = run["ratios"][a], run["ratios"][b]
    per_a, per_b = ra.get("per_repeat") or [], rb.get("per_repeat") or []
    wins = sum(x > y for x, y in zip(per_a, per_b))
    met = ra["throughput"] > rb["throughput"]
    return row("above", name, a, ra["throughput"] / rb["throughput"] - 1.0, met,
               why=f"above on {wins} of {len(per_a)} {'workloads' if run['config'].get('vary_trace') else 'repeats'}"
               if per_a else None)


def ablation_row(run: dict, arm: str, valid: dict) -> dict:
    """``context+sd``'s throughput over an ablation arm's, with the simulator's ratio of the two on the
    run's workloads where the target is missed: the step model's answer to what each arm's verify costs."""
    need = ABLATION[arm]
    name = f"`{ABLATION_OF}` {'above' if need == 1.0 else f'>= {need}x'} `{arm}`"
    if not (valid[ABLATION_OF] and valid[arm]):
        return row("ablation", name, arm, None, None, why=unreported(run, arm if valid[ABLATION_OF] else ABLATION_OF))
    measured = run["ratios"][ABLATION_OF]["throughput"] / run["ratios"][arm]["throughput"]
    met = measured > need if need == 1.0 else measured >= need
    if met:
        return row("ablation", name, arm, measured, True)
    sim = run.get("sim_check", {})
    why = None
    if ABLATION_OF in sim and arm in sim:
        why = (f"the simulator predicts {sim[arm]['predicted_s'] / sim[ABLATION_OF]['predicted_s']:.2f}x on the "
               f"run's workloads from the step model alone")
    return row("ablation", name, arm, measured, False, short_by=need - measured, why=why)


def oracle_row(run: dict, mode: str, oracle: str, valid: dict, bound: dict, goal: Targets = PAPER) -> dict:
    name = f"within {goal.oracle_gap:.0%} of `{oracle}`"
    if not (valid[mode] and valid[oracle]):
        return row("oracle", name, mode, None, None, why=unreported(run, mode if not valid[mode] else oracle))
    gap = 1.0 - run["modes"][oracle]["completion_s"] / run["modes"][mode]["completion_s"]
    if gap <= goal.oracle_gap:
        return row("oracle", name, mode, gap, True)
    return row("oracle", name, mode, gap, False, short_by=gap - goal.oracle_gap,
               why=gap_parts(run, mode, oracle, bound))


def gap_parts(run: dict, mode: str, oracle: str, bound: dict) -> str | None:
    """The simulator's split of ``mode``'s gap to ``oracle`` on the run's own workloads: each part is the
    throughput one policy loses against the next better informed one, and the parts multiply up to the gap."""
    suffix = mode[len("context"):]
    sim = run.get("sim_check", {})
    late, group = bound.get(f"late-oracle{suffix}"), bound.get(f"group-oracle{suffix}")
    if not (late and group and mode in sim and oracle in sim):
        return None
    c, o = sim[mode]["predicted_s"], sim[oracle]["predicted_s"]
    l, g = late["predicted_s"], group["predicted_s"]
    estimate, wave, within = 1.0 - l / c, 1.0 - g / l, 1.0 - o / g
    largest = max((estimate, "the estimate"), (wave, "the first wave, dispatched before any length is known"),
                  (within, "lengths varying within a group"))[1]
    return (f"in the simulator on this run's workloads `{mode}` is {1.0 - o / c:.1%} behind "
            f"`{oracle}`: its estimate costs {estimate:+.1%} (against `late-oracle{suffix}`, which knows each "
            f"group's longest sample once its first sample finishes), the first wave {wave:+.1%} (against "
            f"`group-oracle{suffix}`, which knows it from the start), lengths varying within a group "
            f"{within:+.1%} (against `{oracle}`); the largest part is {largest}")


def tail_row(run: dict, mode: str, valid: dict, bound: dict, goal: Targets = PAPER) -> dict:
    name = f"tail <= {goal.tail}x {goal.against}"
    if not valid[mode]:
        return row("tail", name, mode, None, None, why=unreported(run, mode))
    measured = run["ratios"][mode]["tail"]
    if measured <= goal.tail:
        return row("tail", name, mode, measured, True)
    suffix = mode[len("context"):]
    oracle = f"oracle{suffix}"
    why = []
    if oracle in run["modes"] and valid[oracle]:
        why.append(f"`{oracle}`'s tail is {run['ratios'][oracle]['tail']:.2f}x in the same run")
    simulated = simulated_bounds(run, suffix, bound, "predicted_tail_s")
    if simulated:
        why.append(bounds_clause(simulated) + (", so no policy simulated reaches the target"
                                               if min(t for _, t in simulated) > goal.tail else ""))
    return row("tail", name, mode, measured, False, short_by=measured - goal.tail, why="; ".join(why) or None)
