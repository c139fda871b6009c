"""Drafter acceptance replayed over recorded grouped rollouts, without a model.

    python -m benchmarks.draft_replay benchmarks/results/spec_acceptance_cpu_smollm2.outputs.json \
        --drafters group-suffix,suffix,sam --draft-tokens 8 --draft-paths 4

Seeded verification makes acceptance a function of the output alone: a draft token is accepted
exactly when it equals the token the seeded sampler draws there, i.e. the recorded next token. So
replaying the recorded samples step by step, as a decode batch runs them (every running sample
verifies once per step; the whole batch feeds the drafter before anyone drafts, as the SEER worker
does), gives the acceptance length the live server would measure, in seconds instead of minutes.
The drafters are the same objects the instances use (``seer_sglang.speculative.drafters.make_drafter``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.manifest import resolve
from benchmarks.harness.result import Run, start as start_run
from seer_sglang.speculative.drafters import make_drafter
from seer_sglang.speculative.drafters import ESCAPE, MIX_STATES
from seer_sglang.speculative.draft import accepted_length


FINISHED_MIN_STEPS = 100  # the fewest verify steps behind one point of the by-finished-siblings curve


@dataclass
class ReplayResult:
    tokens: int  # decode-phase tokens (each sample's first token comes from prefill)
    steps: int  # verify steps
    by_sibling: list[float]  # acceptance length of sibling i over all groups
    tail_tokens: int = 0  # the long tail: tokens of steps where every sibling of the sample had finished
    tail_steps: int = 0
    by_finished: dict[int, list[int]] | None = None  # finished siblings at the step -> [tokens, steps]
    by_sample: dict[tuple[int, int], list[int]] | None = None  # (group, sibling) -> [tokens, steps]

    @property
    def acceptance_length(self) -> float:
        return self.tokens / max(1, self.steps)

    @property
    def tail_acceptance_length(self) -> float | None:
        return self.tail_tokens / self.tail_steps if self.tail_steps else None

    def finished_curve(self, min_steps: int) -> dict[int, float]:
        """Tokens per verify step by the number of siblings finished at the step; a count seen in fewer
        than ``min_steps`` steps is pooled with the counts after it (the last ones with the pool before
        them), and the pool sits at their step-weighted mean count."""
        pools: list[list[int]] = []  # [tokens, steps, sum of n weighted by steps]
        for n, (tokens, steps) in sorted((self.by_finished or {}).items()):
            if not pools or pools[-1][1] >= min_steps:
                pools.append([0, 0, 0])
            pools[-1] = [pools[-1][0] + tokens, pools[-1][1] + steps, pools[-1][2] + n * steps]
        if len(pools) > 1 and pools[-1][1] < min_steps:
            last = pools.pop()
            pools[-1] = [a + b for a, b in zip(pools[-1], last)]
        # Pools cover increasing, disjoint ranges of counts, so their rounded means are distinct.
        return {round(n_sum / steps): tokens / steps for tokens, steps, n_sum in pools}


def verify_step(drafter, group_id: str, request_id: str, out: list[int], pos: int, draft_tokens: int,
                draft_paths: int, width: int | None = None) -> int:
    """Tokens one verify step emits for a sample with ``pos`` output tokens committed: its accepted
    draft path plus the bonus token, up to the sample's end. ``width``: the most draft nodes the step
    verifies, taken best first as the budget gives them out (the SEER worker's ``keep(best_first()[:k])``);
    None verifies the whole draft."""
    draft = drafter.draft(group_id, request_id, draft_tokens, draft_paths)
    if width is not None and width < len(draft):
        draft = draft.keep(draft.best_first()[:width])
    return min(len(out) - pos, 1 + accepted_length(draft, out[pos:]))


def _result(tokens: list[int], steps: list[int], *tail: int, by_finished=None, by_sample=None) -> ReplayResult:
    return ReplayResult(sum(tokens), sum(steps), [t / s if s else 0.0 for t, s in zip(tokens, steps)], *tail,
                        by_finished=by_finished, by_sample=by_sample)


def drafter_for(name: str, blend: tuple[int, float] | None = None):
    """The instances' drafter; ``blend`` = (mix_states, escape) overrides the suffix drafters' blend
    (``(1, 0.0)``: the count ratios of the longest matched suffix with a continuation alone)."""
    if blend is None or name == "sam":
        return make_drafter(name)
    return make_drafter(name, mix_states=blend[0], escape=blend[1])


def replay(drafter_name: str, groups: list[dict], draft_tokens: int = 8, draft_paths: int = 4,
           staggered: bool = False, blend: tuple[int, float] | None = None,
           width: int | None = None) -> ReplayResult:
    """``groups``: [{"prompt": [...], "outputs": [[...] per sibling]}]. ``staggered`` runs sibling 0
    of every group to the end first (the length probe), then the rest together. ``width``: the draft
    nodes each step verifies (``verify_step``)."""
    drafter = drafter_for(drafter_name, blend)
    size = max(len(g["outputs"]) for g in groups)
    waves = [[0], list(range(1, size))] if staggered else [list(range(size))]
    tokens, steps = [0] * size, [0] * size
    tail = [0, 0]
    finished = [0] * len(groups)
    by_finished: dict[int, list[int]] = {}
    by_sample: dict[tuple[int, int], list[int]] = {}
    for g, group in enumerate(groups):
        drafter.register_group(f"g{g}", group["prompt"])
    for wave in waves:
        # position = output tokens committed; the prefill commits the first
        running = {(g, i): 1 for g, group in enumerate(groups) for i in wave if i < len(group["outputs"])}
        fed = dict.fromkeys(running, 0)
        while running:
            for (g, i), pos in running.items():  # only the tokens committed since the last step
                start = fed[(g, i)]
                fed[(g, i)] = drafter.update(f"g{g}", f"g{g}-{i}", start, groups[g]["outputs"][i][start:pos])
            for (g, i), pos in list(running.items()):
                out = groups[g]["outputs"][i]
                if pos >= len(out):
                    del running[(g, i)]
                    finished[g] += 1
                    continue
                advance = verify_step(drafter, f"g{g}", f"g{g}-{i}", out, pos, draft_tokens, draft_paths, width)
                running[(g, i)] = pos + advance
                tokens[i] += advance
                steps[i] += 1
                for bucket in (by_finished.setdefault(finished[g], [0, 0]), by_sample.setdefault((g, i), [0, 0])):
                    bucket[0] += advance
                    bucket[1] += 1
                if not any(h == g and j != i for h, j in running) and wave is waves[-1]:
                    tail[0] += advance
                    tail[1] += 1
    return _result(tokens, steps, *tail, by_finished=by_finished, by_sample=by_sample)


def replay_with_references(drafter_name: str, groups: list[dict], references: int, draft_tokens: int = 8,
                           draft_paths: int = 4, blend: tuple[int, float] | None = None) -> ReplayResult:
    """Each sample decoded alone after ``references`` of its siblings finished whole: the sibling-reference
    experiment of the Seer paper (acceptance at n = 0, 1, 5, 15 references). A per-request drafter never
    sees the references, so its figure is the n = 0 one. Sample i takes siblings i+1, i+2, ... (cyclic) as
    references, so every sample counts at every n."""
    size = max(len(g["outputs"]) for g in groups)
    if not 0 <= references < size:
        raise ValueError(f"references must be in [0, {size - 1}] for groups of {size}")
    tokens, steps = [0] * size, [0] * size
    for group in groups:
        outs = group["outputs"]
        for i, out in enumerate(outs):
            drafter = drafter_for(drafter_name, blend)
            drafter.register_group("g", group["prompt"])
            for k in range(1, references + 1):
                j = (i + k) % len(outs)
                drafter.update("g", f"ref{j}", 0, outs[j])
            pos, fed = 1, 0  # the prefill commits the first token
            while pos < len(out):
                fed = drafter.update("g", "me", fed, out[fed:pos])
                advance = verify_step(drafter, "g", "me", out, pos, draft_tokens, draft_paths)
                pos += advance
                tokens[i] += advance
                steps[i] += 1
    return _result(tokens, steps)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.draft_replay")
    ap.add_argument("outputs", help="recorded samples: {'groups': [{'prompt': [...], 'outputs': [[...], ...]}]}")
    ap.add_argument("--drafters", default="group-suffix,suffix,sam")
    ap.add_argument("--draft-tokens", type=int, default=8)
    ap.add_argument("--draft-paths", type=int, default=4)
    ap.add_argument("--arrival", default="together", choices=["together", "staggered"])
    ap.add_argument("--verify-width", type=int, default=None,
                    help="the most draft nodes a step verifies, best first (the budget's width in a loaded batch); "
                         "default: every node drafted")
    ap.add_argument("--widths", default=None,
                    help="comma-separated verify widths (e.g. 1,2,3,4,8,32): the batch replay at each, for each of "
                         "--path-counts, instead of one replay; the plot goes beside the run's result")
    ap.add_argument("--path-counts", default="1,4,8", help="draft paths compared by --widths")
    ap.add_argument("--references", default=None,
                    help="comma-separated sibling counts (e.g. 0,1,3,5,7): decode each sample alone after that many "
                         "siblings finished, instead of the batch replay; the plot goes beside the run's result")
    ap.add_argument("--blend", default=None, metavar="STATES,ESCAPE",
                    help="suffix drafters' blend (mix_states,escape), e.g. 1,0 for the longest matched suffix alone; "
                         "default: the instances' own")
    ap.add_argument("--out", default=None, help="names the run that holds the results (benchmarks.harness.result)")
    args = ap.parse_args()
    run = start_run("draft_replay", args.out) if args.out else None
    states, escape = (args.blend or f"{MIX_STATES},{ESCAPE}").split(",")
    args.blend = (int(states), float(escape))
    data = json.loads(resolve(args.outputs).read_text())
    # a benchmarks.record_text recording holds one workload per seed: their groups together
    groups = data["groups"] if "groups" in data else [g for w in data["workloads"] for g in w["groups"]]
    if args.references is not None:
        reference_curves(groups, args, sample_keys(data), run)
        return
    if args.widths is not None:
        width_curves(groups, args, run)
        return
    results = {}
    for name in args.drafters.split(","):
        r = replay(name, groups, args.draft_tokens, args.draft_paths, args.arrival == "staggered", args.blend,
                   args.verify_width)
        results[name] = {"acceptance_length": r.acceptance_length, "by_sibling_index": r.by_sibling,
                         "tokens": r.tokens, "steps": r.steps, "tail_acceptance_length": r.tail_acceptance_length,
                         "tail_steps": r.tail_steps}
        print(f"{name:>13}: acceptance {r.acceptance_length:.3f}  tail {r.tail_acceptance_length or 0:.3f} "
              f"({r.tail_steps} steps)  by sibling " + " ".join(f"{x:.2f}" for x in r.by_sibling), flush=True)
    if "suffix" in results:
        base = results["suffix"]["acceptance_length"]
        tail_base = results["suffix"]["tail_acceptance_length"]
        for name, r in results.items():
            r["vs_suffix"] = r["acceptance_length"] / base
            tail = r["tail_acceptance_length"]
            r["tail_vs_suffix"] = tail / tail_base if tail and tail_base else None
    if run:
        run.write({"config": vars(args), "drafters": results})


def width_curves(groups: list[dict], args, run: Run | None) -> None:
    """Acceptance length of the batch replay against the verify width (the draft nodes a step takes,
    best first), per drafter and number of draft paths. A loaded batch verifies the few nodes the budget
    gives each request (its ``gamma*``), the tail of a rollout the whole draft: which of the drafter's
    settings pay at which width. With a ``run``, written to it with a plot."""
    widths = [int(w) for w in args.widths.split(",")]
    paths = [int(n) for n in args.path_counts.split(",")]
    curves: dict[str, dict[int, dict[int, float]]] = {}
    for name in args.drafters.split(","):
        curves[name] = {}
        for n in paths:
            curves[name][n] = {w: replay(name, groups, args.draft_tokens, n, args.arrival == "staggered", args.blend,
                                         w).acceptance_length for w in widths}
            print(f"{name:>13}, {n:>2} paths: " + "  ".join(f"w={w} {a:.3f}" for w, a in curves[name][n].items()),
                  flush=True)
    if run is None:
        return
    run.write({"config": vars(args), "acceptance_by_width": curves})
    _plot(run, {f"{name}, {n} paths": curve for name, by_paths in curves.items() for n, curve in by_paths.items()},
          "draft nodes verified per step (best first)",
          f"{_recording_name(args.outputs)}: {args.draft_tokens} tokens, {args.arrival}", log2=True)


def _recording_name(path: str) -> str:
    """A recording's name for a plot title: its run folder's, or a flat file's stem."""
    p = Path(path)
    return p.parent.name if p.name == "result.json" else p.stem


def _plot(run: Run, lines: dict[str, dict], xlabel: str, title: str, log2: bool = False) -> None:
    """Tokens per verify step against ``xlabel``, one line per entry of ``lines``, beside the run's result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, curve in lines.items():
        ax.plot(list(curve), list(curve.values()), marker="o", label=label)
    if log2:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tokens per verify step")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(run.file("plot.png"), dpi=100)


def sample_keys(data: dict) -> list[str]:
    """Per group of the replay, in order, the name of its samples in ``acceptance_by_sample``: a
    recording's workload seed and the group's index in that workload (``seed:group``)."""
    if "groups" in data:
        return [f"0:{g}" for g in range(len(data["groups"]))]
    return [f"{w['seed']}:{g}" for w in data["workloads"] for g in range(len(w["groups"]))]


def reference_curves(groups: list[dict], args, keys: list[str], run: Run | None) -> None:
    """Acceptance length against the number of finished sibling references, per drafter; ``keys``
    names each group's samples (``sample_keys``); with a ``run``, written to it with a plot."""
    counts = [int(n) for n in args.references.split(",")]
    curves: dict[str, dict[int, float]] = {}
    for name in args.drafters.split(","):
        curves[name] = {n: replay_with_references(name, groups, n, args.draft_tokens, args.draft_paths,
                                                  args.blend).acceptance_length
                        for n in counts}
        print(f"{name:>13}: " + "  ".join(f"n={n} {a:.3f}" for n, a in curves[name].items()), flush=True)
    if run is None:
        return
    # The same text decoded with every sibling running at once, as instances decode a group: a
    # running sibling's tokens are drafts too, so this is the acceptance by finished siblings that
    # the simulator takes (``SpecModel.from_replay``).
    together = {name: replay(name, groups, args.draft_tokens, args.draft_paths, False, args.blend)
                for name in curves}
    for name, r in together.items():
        print(f"{name:>13}: together {r.acceptance_length:.3f}, by finished siblings " +
              "  ".join(f"n={n} {a:.3f}" for n, a in r.finished_curve(FINISHED_MIN_STEPS).items()), flush=True)
    base = curves.get("suffix", {}).get(counts[0])
    report = {"config": vars(args), "acceptance_by_references": curves,
              "vs_suffix": {d: {n: a / base for n, a in c.items()} for d, c in curves.items()} if base else None,
              "acceptance_together": {name: r.acceptance_length for name, r in together.items()},
              "acceptance_by_finished": {name: r.finished_curve(FINISHED_MIN_STEPS) for name, r in together.items()},
              # Each sample's own tokens per verify step in that replay (``seed:group:sibling``): samples that
              # run long are often the most repetitive, and a simulator of this very text can follow them.
              "acceptance_by_sample": {name: {f"{keys[g]}:{i}": tokens / steps
                                              for (g, i), (tokens, steps) in sorted(r.by_sample.items())}
                                       for name, r in together.items()}}
    run.write(report)
    _plot(run, curves, "finished sibling references",
          f"{_recording_name(args.outputs)}: {args.draft_tokens} tokens, {args.draft_paths} paths")


if __name__ == "__main__":
    main()
