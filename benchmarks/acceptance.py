"""Cost of one verify-acceptance call and one draft-budget decision, per batch size (CPU or GPU).

    python -m benchmarks.acceptance --batch 1 16 64 256 --nodes 9 --vocab 32000 --out results.json

Each request verifies a random tree of ``--nodes`` nodes (root included) against random target
logits; sampling runs at temperature 1 with top-p 0.95. CPU timings depend heavily on machine load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.harness.result import start as start_run


def _median_ms(fn, repeats: int, device: str) -> float:
    import torch
    times = []
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[1:])  # the first call warms up


def measure(batch: int, nodes: int, vocab: int, repeats: int, device: str) -> dict:
    import torch

    from seer_sglang.speculative.acceptance import greedy_accept, sample_accept
    from seer_sglang.speculative.budget import BudgetRequest, CostModel, DraftBudget

    gen = torch.Generator().manual_seed(batch)
    parents = torch.full((batch, nodes), -1, dtype=torch.long)
    for i in range(1, nodes):
        parents[:, i] = (torch.rand(batch, generator=gen) * i).long()
    tokens = torch.randint(0, vocab, (batch, nodes), generator=gen)
    logits = torch.randn(batch, nodes, vocab, generator=gen) * 4  # peaked, like a trained model's
    parents, tokens, logits = parents.to(device), tokens.to(device), logits.to(device)
    budget = DraftBudget(CostModel(0.012, 4e-5, 2e-6, CostModel.geometric_curve(0.6)))
    reqs = [BudgetRequest(str(r), r % 4 == 0, [0.9 ** (j + 1) for j in range(8)]) for r in range(batch)]
    return {"batch": batch, "nodes": nodes, "vocab": vocab, "device": device,
            "greedy_ms": _median_ms(lambda: greedy_accept(tokens, parents, logits), repeats, device),
            "sample_ms": _median_ms(lambda: sample_accept(tokens, parents, logits, 1.0, top_p=0.95), repeats, device),
            "budget_ms": _median_ms(lambda: budget.allocate(reqs), repeats, "cpu")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--nodes", type=int, default=9)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default=None, help="default: cuda where there is a GPU, else cpu")
    ap.add_argument("--threads", type=int, help="torch CPU threads (one is faster on a busy machine)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    run = start_run("acceptance", args.out) if args.out else None
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [measure(b, args.nodes, args.vocab, args.repeats, args.device) for b in args.batch]
    for row in rows:
        print(json.dumps(row))
    if run:
        run.write({"config": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows})


if __name__ == "__main__":
    main()
