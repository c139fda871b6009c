"""Per-turn latency of a multi-turn agent loop through seer_sglang's ``POST /generate``, against plain
SGLang. CPU figures with the tiny model, never GPU measurements.

    python -m benchmarks.multiturn --out benchmarks/results/multiturn/<date>-cpu_tiny

An agent loop sends one ``/generate`` per turn and waits for it: each turn's prompt is the previous
turn's prompt, its answer and a new observation, as veRL's agent loop and AReaL's multi-turn workflows
build them. A fixed wait in front of dispatch (a grouping window) would add to every turn; a lost
instance affinity would re-prefill the whole trajectory every turn. Four modes, one agent at a time
(latency, not throughput), after a warm-up of every server; each repeat empties every prefix cache
and then sends turn k of trajectory t in every mode back to back, in a random order, before turn k
of the next: a slow spell of the shared host falls on every mode alike, and each turn has a paired
latency in every mode.

- ``plain``: one plain SGLang instance, called directly.
- ``seer``: a seer_sglang server of ``--instances`` instances, each turn naming its trajectory
  (``session_id``), so a turn goes to the instance that ran the trajectory's last turn. Same
  trajectories as ``plain``: its tokens are checked against plain SGLang's.
- ``seer-no-session``: the same server, no trajectory named.
- ``seer-instance``: turns sent straight to the server's first instance, past the frontend: the
  difference to ``seer`` is what the frontend adds to a turn; the difference to ``plain`` what the
  instance's own settings add (the plugin, speculation on by default).

The two other seer modes run trajectories of their own (the same lengths, other tokens), so no mode
finds another's turns in a cache it shares.

Every instance is float32 and sleeps when idle (seer starts its own so; an idle SGLang scheduler otherwise
spins a core the other modes need), the host's cores split among all of them. Reported per mode:
per-turn latency (p50, p90, mean over every turn of every repeat), the median of its turns' paired differences to ``plain``,
the share of each turn's prompt found cached (``meta_info.cached_tokens / prompt_tokens``), and the
turns seer answered with tokens other than plain SGLang's (greedy: none expected). Writes its run
(``benchmarks.harness.result``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import httpx

from benchmarks.harness.result import start as start_run
from benchmarks.harness.servers import launch_seer
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, start_instance,
                                          stop_instances, wait_healthy)
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path

MODES = ("plain", "seer", "seer-no-session", "seer-instance")


def trajectory_prompts(seed: int, trajectories: int, first_len: int, observation_len: int,
                       vocab: int = 1500) -> list[tuple[list[int], list[list[int]]]]:
    """Per trajectory: its first prompt and the observation appended after each turn's answer."""
    rng = random.Random(seed)
    out = []
    for _ in range(trajectories):
        first = [rng.randrange(20, vocab) for _ in range(first_len)]
        observations = [[rng.randrange(20, vocab) for _ in range(observation_len)] for _ in range(64)]
        out.append((first, observations))
    return out


def flush(http: httpx.Client, url: str) -> None:
    """Empty the server's prefix cache (seer's fans out to its instances), so that a mode's cache hits
    are its own turns', not another mode's run of the same trajectories."""
    deadline = time.monotonic() + 120
    while http.post(f"{url}/flush_cache").status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not flush its cache")
        time.sleep(0.5)


class Agent:
    """One mode's agent on one trajectory: the prompt it sends next."""

    def __init__(self, url: str, mode: str, trajectory: int, first: list[int], observations: list[list[int]],
                 session: str):
        self.url, self.mode, self.trajectory = url, mode, trajectory
        self.prompt, self.observations, self.session = list(first), observations, session

    def turn(self, http: httpx.Client, turn: int, max_tokens: int) -> dict:
        body = {"input_ids": self.prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0,
                                                              "ignore_eos": True}}
        if self.mode == "seer":
            body["session_id"] = self.session
        start = time.perf_counter()
        answer = http.post(f"{self.url}/generate", json=body)
        latency = time.perf_counter() - start
        answer.raise_for_status()
        data = answer.json()
        meta = data["meta_info"]
        self.prompt = self.prompt + data["output_ids"] + self.observations[turn]
        return {"trajectory": self.trajectory, "turn": turn, "latency_s": latency, "prompt_tokens": meta["prompt_tokens"],
                "cached_tokens": meta.get("cached_tokens", 0), "output_ids": data["output_ids"]}


def run_repeat(http: httpx.Client, urls: dict[str, str], sets: dict[str, list], turns: int, max_tokens: int,
               rng: random.Random, tag: str) -> list[dict]:
    """One repeat: every cache emptied, then turn by turn, trajectory by trajectory, every mode's agent
    in a random order; one record per turn and mode."""
    for url in set(urls.values()):
        flush(http, url)
    records = []
    count = len(next(iter(sets.values())))
    for t in range(count):
        agents = {m: Agent(urls[m], m, t, *sets[m][t], session=f"{tag}-traj{t}") for m in urls}
        for turn in range(turns):
            order = list(agents)
            rng.shuffle(order)
            for mode in order:
                records.append({**agents[mode].turn(http, turn, max_tokens), "mode": mode})
    return records


def summary(records: list[dict]) -> dict:
    lat = sorted(r["latency_s"] * 1000 for r in records)
    later = [r for r in records if r["turn"] > 0]
    return {"turns": len(records), "p50_ms": statistics.median(lat), "p90_ms": lat[int(0.9 * (len(lat) - 1))],
            "mean_ms": statistics.fmean(lat),
            "cached_share_later_turns": (sum(r["cached_tokens"] for r in later) / sum(r["prompt_tokens"] for r in later))
            if later else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.multiturn", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="model path or a bundled name (default: %(default)s)")
    ap.add_argument("--instances", type=int, default=2, help="seer's instances (default: %(default)s)")
    ap.add_argument("--trajectories", type=int, default=6, help="agent trajectories per repeat (default: %(default)s)")
    ap.add_argument("--turns", type=int, default=8, help="turns per trajectory (default: %(default)s)")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens per turn's answer (default: %(default)s)")
    ap.add_argument("--first-len", type=int, default=64, help="first prompt's tokens (default: %(default)s)")
    ap.add_argument("--observation-len", type=int, default=24,
                    help="tokens appended after each answer (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats, modes in a random order each (default: %(default)s)")
    ap.add_argument("--seer-args", default="", help="more flags for the seer server, e.g. '--draft none' "
                    "(default: none: the deployment a user gets)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="run folder (default: benchmarks/results/multiturn/<date>-run)")
    args = ap.parse_args(argv)

    run = start_run("multiturn", args.out, argv=argv)
    model = resolve_model_path(args.model)
    logs = run.file("logs")
    logs.mkdir()
    plain = start_instance(InstanceSpec(model_path=model, port=free_port(), with_plugin=False,
                                        sglang_args=["--dtype", "float32", "--sleep-on-idle"], log_path=logs / "plain.log",
                                        cpu_threads=cpu_threads_per_instance(args.instances + 1)))
    seer_proc = None
    try:
        wait_healthy([plain], timeout_s=900, progress=False)
        seer_proc, seer_url = launch_seer(model, ["--num-instances", str(args.instances), "--dtype", "float32",
                                                  *args.seer_args.split()], logs / "seer")
        first_instance = httpx.get(f"{seer_url}/instances", timeout=30).json()["instances"][0]["url"]
        urls = {"plain": plain.spec.url, "seer": seer_url, "seer-no-session": seer_url, "seer-instance": first_instance}
        rng = random.Random(args.seed)
        per_mode: dict[str, list[dict]] = {m: [] for m in MODES}
        own_set = {"plain": 0, "seer": 0, "seer-no-session": 1, "seer-instance": 2}  # plain and seer alike
        with httpx.Client(timeout=600) as http:
            warm = {m: trajectory_prompts(args.seed + 999 + own_set[m], 2, args.first_len, args.observation_len)
                    for m in MODES}
            run_repeat(http, urls, warm, 2, args.max_tokens, rng, "warm")  # first requests compile, fill caches
            for repeat in range(args.repeats):
                sets = {m: trajectory_prompts(args.seed + 1000 * own_set[m] + repeat, args.trajectories,
                                              args.first_len, args.observation_len) for m in MODES}
                for r in run_repeat(http, urls, sets, args.turns, args.max_tokens, rng, f"r{repeat}"):
                    per_mode[r.pop("mode")].append({**r, "repeat": repeat})
                print(f"[multiturn] repeat {repeat}: p50 " + ", ".join(
                    f"{m} {summary([r for r in per_mode[m] if r['repeat'] == repeat])['p50_ms']:.1f} ms" for m in MODES),
                    flush=True)
    finally:
        if seer_proc is not None:
            stop_processes([seer_proc])
        stop_instances([plain])

    def key(r: dict) -> tuple[int, int, int]:
        return (r["repeat"], r["trajectory"], r["turn"])

    plain_turns = {key(r): r for r in per_mode["plain"]}
    modes = {}
    for mode, records in per_mode.items():
        s = summary(records)
        s["per_repeat_p50_ms"] = [summary([r for r in records if r["repeat"] == k])["p50_ms"] for k in range(args.repeats)]
        # the turn's latency less plain SGLang's for the same turn (sent back to back with it)
        s["paired_over_plain_p50_ms"] = statistics.median(
            1000 * (r["latency_s"] - plain_turns[key(r)]["latency_s"]) for r in records)
        s["turns_differing_from_plain"] = (sum(r["output_ids"] != plain_turns[key(r)]["output_ids"] for r in records)
                                           if own_set[mode] == 0 else None)
        modes[mode] = s
    figures = {"config": {**vars(args), "model": args.model, "modes": list(MODES), "interleaved": True},
               "modes": modes,
               "seer_over_plain_p50_ms": modes["seer"]["p50_ms"] - modes["plain"]["p50_ms"],
               "frontend_p50_ms": modes["seer"]["p50_ms"] - modes["seer-instance"]["p50_ms"],
               "turns": {m: [{k: v for k, v in r.items() if k != "output_ids"} for r in recs]
                         for m, recs in per_mode.items()}}
    path = run.write(figures)
    print(f"[multiturn] p50 plain {modes['plain']['p50_ms']:.1f} ms, seer {modes['seer']['p50_ms']:.1f} ms "
          f"({figures['seer_over_plain_p50_ms']:+.1f} ms, paired {modes['seer']['paired_over_plain_p50_ms']:+.1f} ms; "
          f"the frontend {figures['frontend_p50_ms']:+.1f} ms), "
          f"seer without session {modes['seer-no-session']['p50_ms']:.1f} ms; {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
