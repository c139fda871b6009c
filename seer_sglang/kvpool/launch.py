"""Start (or attach to) the global KV pool for ``launch_server`` and stop what was started."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .config import KVPoolConfig, flag_value
from .file_pool import FilePool

logger = logging.getLogger("seer_sglang.kvpool")


@dataclass
class RunningPool:
    config: KVPoolConfig
    file_pool: FilePool | None = None
    processes: list[subprocess.Popen] = field(default_factory=list)
    owned_dir: Path | None = None  # a directory we made, removed at exit

    def describe(self) -> str:
        if self.config.kind == "file":
            return f"file, {self.config.directory}, bound {self.config.size_gb:g} GiB, page {self.config.page_size}"
        return f"{self.config.kind}"

    def instance_env(self, starvation_steps: int) -> dict[str, str]:
        """Turns on the in-instance transfer scheduler (pool pieces yield to decode steps)."""
        env: dict[str, str] = {}
        if self.config.kind == "mooncake":
            from .mooncake import library_env

            env.update(library_env())
        if self.config.enabled and starvation_steps > 0:
            env.update({"SEER_TRANSFER_SCHEDULER": "1", "SEER_TRANSFER_STARVATION_STEPS": str(starvation_steps)})
        return env

    def stop(self) -> None:
        from ..instances.launcher import stop_processes

        stop_processes(self.processes)
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)


def start_kv_pool(args: argparse.Namespace, sglang_args: list[str], log_dir: Path | None, model_path: str,
                  cpu: bool) -> RunningPool:
    """``--kv-pool``: defaults to ``file`` when we start the instances, ``none`` when attaching."""
    kind = args.kv_pool or ("file" if log_dir is not None and not args.no_plugin else "none")
    if kind != "none" and args.no_plugin and cpu:
        raise ValueError("--kv-pool on CPU needs the seer plugin (it makes HiCache run there); drop --no-plugin")
    page_size = int(flag_value(sglang_args, "--page-size") or 16)
    config = KVPoolConfig(kind=kind, size_gb=args.kv_pool_size_gb, page_size=page_size, cpu=cpu)
    pool = RunningPool(config)
    served = flag_value(sglang_args, "--served-model-name") or model_path
    if kind == "file":
        if args.kv_pool_dir:
            config.directory = Path(args.kv_pool_dir)
        elif log_dir is not None:
            config.directory = pool.owned_dir = Path(tempfile.mkdtemp(prefix="kv-pool-", dir=log_dir))
        else:
            raise ValueError("--kv-pool file with --instance-urls needs --kv-pool-dir (the instances' directory)")
        config.directory.mkdir(parents=True, exist_ok=True)
        pool.file_pool = FilePool(config.directory, served, page_size, args.kv_pool_size_gb)
    elif kind == "mooncake":
        from .mooncake import start_local_mooncake

        if args.kv_pool_config:
            config.mooncake = json.loads(Path(args.kv_pool_config).read_text())
        elif log_dir is not None:
            config.mooncake, pool.processes = start_local_mooncake(log_dir, args.kv_pool_size_gb)
        else:
            raise ValueError("--kv-pool mooncake with --instance-urls needs --kv-pool-config")
    return pool
