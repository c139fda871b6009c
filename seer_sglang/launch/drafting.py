"""``--draft``: start the grouped draft server and turn on SEER in every instance.

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

from ..config import BUDGETS, DRAFT, DRAFT_MODES, VERIFY_LAYOUTS, DraftConfig
from ..speculative.budget import AUTO_DRAFT_TOKENS, draft_tokens_for, verify_layout
from ..wire import SPEC_ALGORITHM, VERIFY_BACKEND
from .sglang_args import has_flag

logger = logging.getLogger("seer_sglang.launch")


@dataclass
class RunningDrafts:
    drafter: str  # "none": speculation off
    draft_tokens: int = AUTO_DRAFT_TOKENS["ragged"]  # the CPU's default (start_drafting: by verify layout)
    draft_paths: int = DRAFT.draft_paths
    cpu: bool = True
    address: str | None = None
    budget: str = DRAFT.budget  # how many drafts each request verifies per step (speculative.budget)
    cost_path: str | None = None  # the adaptive budget's profile; without one each instance fits its own
    server_timeout_s: float = DRAFT.server_timeout_s  # an instance's call to the draft server
    verify_layout: str = DRAFT.verify_layout  # ragged, bucketed or full (auto: by device)
    lora: bool = False  # the instances run LoRA, which takes one verify width per step
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return self.drafter != "none"

    def describe(self) -> str:
        layout = verify_layout(self.verify_layout, self.cpu, self.lora)
        # At the full width (the GPU's default: FlashInfer plans and CUDA graphs are per width) every
        # draft is verified and --draft-budget does not apply.
        budget = "every draft verified" if layout == "full" else f"{self.budget} budget"
        return (f"{self.drafter}, up to {self.draft_tokens} draft tokens in {self.draft_paths} paths, "
                f"{budget}, {layout} verify, draft server {self.address}")

    def instance_args(self, sglang_args: list[str]) -> list[str]:
        if not self.enabled or has_flag(sglang_args, "--speculative-algorithm"):
            return []
        args = ["--speculative-algorithm", SPEC_ALGORITHM,
                "--speculative-num-draft-tokens", str(self.draft_tokens + 1),  # + the last verified token
                "--speculative-ngram-max-bfs-breadth", str(self.draft_paths)]
        if self.cpu and not has_flag(sglang_args, "--attention-backend"):
            args += ["--attention-backend", VERIFY_BACKEND]  # SGLang's CPU backends have no tree-verify mode
        return args

    def plugin_settings(self) -> dict[str, object]:
        """The plugin's part of the config (``config.PluginConfig``) that speculation sets."""
        if not self.enabled:
            return {}
        return {"drafter": self.drafter, "budget": self.budget, "draft_server": self.address,
                "verify_layout": self.verify_layout,
                "draft_server_timeout_s": self.server_timeout_s,
                "cost_path": str(Path(self.cost_path).resolve()) if self.cost_path else None}

    def stop(self) -> None:
        from .processes import stop_processes

        stop_processes(self.processes, grace_s=5)


def lora_enabled(sglang_args: list[str]) -> bool:
    from .sglang_args import has_flag

    return has_flag(sglang_args, "--enable-lora") or has_flag(sglang_args, "--lora-paths")


def start_drafting(config: DraftConfig, log_dir: Path | None, cpu: bool, with_plugin: bool = True,
                   sglang_args: list[str] = ()) -> RunningDrafts:
    """Start the draft server on loopback (when we start the instances); ``none`` starts nothing.

    Instances that run LoRA verify in the ``bucketed`` layout where the ``ragged`` one would apply:
    SGLang's LoRA layers lay a verify batch out with one width for every request."""
    if config.drafter not in DRAFT_MODES:
        raise ValueError(f"--draft must be one of {DRAFT_MODES}, got {config.drafter!r}")
    if (config.draft_tokens is not None and config.draft_tokens < 1) or config.draft_paths < 1:
        raise ValueError("--draft-tokens and --draft-paths must be at least 1")
    if config.budget not in BUDGETS:
        raise ValueError(f"--draft-budget must be one of {BUDGETS}, got {config.budget!r}")
    if config.verify_layout not in VERIFY_LAYOUTS:
        raise ValueError(f"--verify-layout must be one of {VERIFY_LAYOUTS}, got {config.verify_layout!r}")
    if config.cost_path:
        from ..speculative.budget import load_cost

        load_cost(config.cost_path)  # a bad profile fails here, not in every instance
    drafter = config.drafter
    if log_dir is None or not with_plugin:
        drafter = "none"  # attached instances run whatever they were started with; plain SGLang has no SEER
    lora = lora_enabled(list(sglang_args))
    tokens = draft_tokens_for(verify_layout(config.verify_layout, cpu, lora), config.draft_tokens)
    drafts = RunningDrafts(drafter, tokens, config.draft_paths, cpu, budget=config.budget,
                           cost_path=config.cost_path, server_timeout_s=config.server_timeout_s,
                           verify_layout=config.verify_layout, lora=lora)
    if not drafts.enabled:
        return drafts
    from ..draft_server.client import wait_ready
    from .processes import die_with_parent, free_port

    drafts.address = f"tcp://127.0.0.1:{free_port()}"
    with open(log_dir / "draft-server.log", "ab") as log:
        drafts.processes.append(subprocess.Popen(
            [sys.executable, "-m", "seer_sglang.draft_server", "--bind", drafts.address, "--drafter", drafter,
             "--default-ttl", str(config.group_ttl_s)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent))
    try:
        wait_ready(drafts.address, timeout_s=60)
    except BaseException:
        drafts.stop()
        raise
    return drafts
