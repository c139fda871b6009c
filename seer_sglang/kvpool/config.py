"""``--kv-pool {none,file,mooncake}``: the SGLang flags that make every instance share one KV pool.

Each instance keeps SGLang's radix cache on the device, HiCache's host memory as the DRAM tier,
and an L3 shared by all instances: a directory (the SSD tier, one machine) or a Mooncake store.
``write_through`` puts pages into the pool as they are computed, which is what lets a continuation
find its KV on another instance; only whole pages are stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

KV_POOL_KINDS = ("none", "file", "mooncake")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in an SGLang command line, given as ``--flag v`` or ``--flag=v``."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


@dataclass
class KVPoolConfig:
    kind: str = "none"
    directory: Path | None = None  # file: the shared directory
    size_gb: float = 16.0  # file: bound on the directory; oldest pages go first
    page_size: int = 16
    mooncake: dict = field(default_factory=dict)  # mooncake: the store client's config
    prefetch_timeout_s: float = 5.0  # a slow pool falls back to recompute after this
    # SGLang only looks in L3 for a miss of at least this many tokens (its default, 256, would
    # leave short continuations recomputing).
    prefetch_threshold: int = 64
    cpu: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KV_POOL_KINDS:
            raise ValueError(f"--kv-pool must be one of {KV_POOL_KINDS}, not {self.kind!r}")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def storage_extra_config(self) -> dict:
        extra: dict = {"prefetch_timeout_base": self.prefetch_timeout_s, "prefetch_timeout_per_ki_token": 0.5,
                       "prefetch_threshold": max(self.page_size, self.prefetch_threshold)}
        if self.kind == "file":
            extra["file_storage_path"] = str(self.directory)
        else:
            extra.update(self.mooncake)
        return extra

    def instance_args(self, user_args: list[str]) -> list[str]:
        """HiCache flags for one instance; a flag the user gave wins over ours."""
        if not self.enabled:
            return []
        ours: dict[str, str | None] = {
            "--enable-hierarchical-cache": None,
            "--hicache-write-policy": "write_through",
            "--hicache-storage-backend": self.kind,
            "--hicache-storage-backend-extra-config": json.dumps(self.storage_extra_config()),
            "--hicache-storage-prefetch-policy": "timeout",
            "--page-size": str(self.page_size),
        }
        if self.cpu:
            # The pointer-table "kernel" io backend has no CPU version; Mooncake wants page-first.
            ours["--hicache-io-backend"] = "direct"
            ours["--hicache-mem-layout"] = "page_first_direct" if self.kind == "mooncake" else "layer_first"
            # An idle HiCache scheduler otherwise spins a core, and CPU instances share the cores.
            ours["--sleep-on-idle"] = None
        args: list[str] = []
        for flag, value in ours.items():
            if has_flag(user_args, flag):
                continue
            args += [flag] if value is None else [flag, value]
        return args
