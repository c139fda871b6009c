"""``--draft`` for ``launch_server``: start the grouped draft server and turn on SEER in every instance.

Every instance gets the ``SEER`` speculative algorithm (and, on CPU, the ``seer_verify`` attention
backend) with the chosen drafter; its drafts sync through one draft server, so a sample's siblings,
and its own earlier chunks, feed its drafts wherever they ran. Flags the user gives SGLang
explicitly (``--speculative-*``, ``--attention-backend``) are left as given.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..kvpool.config import has_flag
from . import BUDGET_ENV, BUDGETS, COST_ENV, DRAFTER_ENV, DRAFTERS, SERVER_ENV
from .plugin_hooks import ALGORITHM, BACKEND_NAME

logger = logging.getLogger("seer_sglang.spec")
DRAFT_CHOICES = ("none", *DRAFTERS)


@dataclass
class RunningDrafts:
    drafter: str  # "none": speculation off
    draft_tokens: int = 8
    draft_paths: int = 4
    cpu: bool = True
    address: str | None = None
    budget: str = "adaptive"  # how many drafts each request verifies per step (seer_sglang.spec.budget)
    cost_path: str | None = None  # the adaptive budget's profile; without one each instance fits its own
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return self.drafter != "none"

    def describe(self) -> str:
        # On GPU the verify width is fixed (FlashInfer plans and CUDA graphs are per width): every
        # draft is verified and --draft-budget does not apply.
        budget = f"{self.budget} budget" if self.cpu else "every draft verified (fixed verify width on GPU)"
        return (f"{self.drafter}, up to {self.draft_tokens} draft tokens in {self.draft_paths} paths, "
                f"{budget}, draft server {self.address}")

    def instance_args(self, sglang_args: list[str]) -> list[str]:
        if not self.enabled or has_flag(sglang_args, "--speculative-algorithm"):
            return []
        args = ["--speculative-algorithm", ALGORITHM,
                "--speculative-num-draft-tokens", str(self.draft_tokens + 1),  # + the last verified token
                "--speculative-ngram-max-bfs-breadth", str(self.draft_paths)]
        if self.cpu and not has_flag(sglang_args, "--attention-backend"):
            args += ["--attention-backend", BACKEND_NAME]  # SGLang's CPU backends have no tree-verify mode
        return args

    def instance_env(self) -> dict[str, str]:
        if not self.enabled:
            return {}
        env = {DRAFTER_ENV: self.drafter, BUDGET_ENV: self.budget}
        if self.address:
            env[SERVER_ENV] = self.address
        if self.cost_path:
            env[COST_ENV] = str(Path(self.cost_path).resolve())
        return env

    def stop(self) -> None:
        from ..instances.launcher import stop_processes

        stop_processes(self.processes, grace_s=5)


def start_drafting(drafter: str, draft_tokens: int, draft_paths: int, log_dir: Path | None, cpu: bool,
                   with_plugin: bool = True, budget: str = "adaptive", cost_path: str | None = None) -> RunningDrafts:
    """Start the draft server on loopback (when we start the instances); ``none`` starts nothing."""
    if drafter not in DRAFT_CHOICES:
        raise ValueError(f"--draft must be one of {DRAFT_CHOICES}, got {drafter!r}")
    if draft_tokens < 1 or draft_paths < 1:
        raise ValueError("--draft-tokens and --draft-paths must be at least 1")
    if budget not in BUDGETS:
        raise ValueError(f"--draft-budget must be one of {BUDGETS}, got {budget!r}")
    if cost_path:
        from .budget import load_cost

        load_cost(cost_path)  # a bad profile fails here, not in every instance
    if log_dir is None or not with_plugin:
        drafter = "none"  # attached instances run whatever they were started with; plain SGLang has no SEER
    drafts = RunningDrafts(drafter, draft_tokens, draft_paths, cpu, budget=budget, cost_path=cost_path)
    if not drafts.enabled:
        return drafts
    from ..instances.launcher import free_port
    from .draft_client import wait_ready

    drafts.address = f"tcp://127.0.0.1:{free_port()}"
    with open(log_dir / "draft-server.log", "ab") as log:
        drafts.processes.append(subprocess.Popen(
            [sys.executable, "-m", "seer_sglang.spec.draft_server", "--bind", drafts.address, "--drafter", drafter],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    try:
        wait_ready(drafts.address, timeout_s=60)
    except BaseException:
        drafts.stop()
        raise
    return drafts
