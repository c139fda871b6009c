"""``--kv-pool {auto,none,file,mooncake}``: the SGLang flags that make every instance share one KV pool,
and the processes and directory behind it.

Each instance keeps SGLang's radix cache on the device, HiCache's host memory as the DRAM tier,
and an L3 shared by all instances: a directory (the SSD tier, one machine) or a Mooncake store.
``write_through`` puts pages into the pool as they are computed, which is what lets a continuation
find its KV on another instance; only whole pages are stored.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..config import KV_POOL, KV_POOLS, EmulationConfig, KVPoolConfig
from ..wire import POOL_MARKER
from .instances import tp_size
from .pool_choice import is_mla
from .sglang_args import flag_value, has_flag

logger = logging.getLogger("seer_sglang.launch")


@dataclass
class PoolSetup:
    """The pool every instance is started with (or attached to), resolved from the flags."""

    kind: str = "none"
    directory: Path | None = None  # file: the shared directory
    size_gb: float = KV_POOL.size_gb  # file: bound on the directory; oldest pages go first
    page_size: int = KV_POOL.page_size
    mooncake: dict = field(default_factory=dict)  # mooncake: the store client's config
    served_model_name: str = ""  # names the file pool's pages
    tp_size: int = 1  # each TP rank writes its own shard of a page (one file each) ...
    mla: bool = False  # ... except an MLA model's latent, one file for all ranks
    cpu: bool = True
    reason: str = ""  # --kv-pool auto: why the cost model chose this kind and page size
    prefetch_timeout_s: float = KV_POOL.prefetch_timeout_s  # then a continuation recomputes

    def __post_init__(self) -> None:
        if self.kind not in KV_POOLS or self.kind == "auto":
            raise ValueError(f"--kv-pool must be one of {KV_POOLS}, not {self.kind!r}")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def storage_extra_config(self) -> dict:
        extra: dict = {"prefetch_timeout_base": self.prefetch_timeout_s,
                       "prefetch_timeout_per_ki_token": KV_POOL.prefetch_timeout_per_ki_token_s,
                       "prefetch_threshold": max(self.page_size, KV_POOL.prefetch_threshold)}
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
        args: list[str] = []
        for flag, value in ours.items():
            if has_flag(user_args, flag):
                continue
            args += [flag] if value is None else [flag, value]
        return args


@dataclass
class RunningPool:
    setup: PoolSetup
    transfer_starvation_steps: int = KV_POOL.transfer_starvation_steps
    write_wait_ms: float = KV_POOL.write_wait_ms
    processes: list[subprocess.Popen] = field(default_factory=list)
    owned_dir: Path | None = None  # a directory we made, removed at exit
    # False when the Mooncake store is reachable from elsewhere (a cluster of --kv-pool-config, or the
    # local store on a routable host): the instances' store clients must be too, so their binds are
    # not confined to loopback
    confines_instances: bool = True

    def describe(self) -> str:
        if self.setup.kind == "file":
            return f"file, {self.setup.directory}, bound {self.setup.size_gb:g} GiB, page {self.setup.page_size}"
        return f"{self.setup.kind}"

    def plugin_settings(self) -> dict[str, object]:
        """The plugin's part of the config: the in-instance transfer scheduler (pool pieces yield to
        decode steps), on with a pool unless ``--transfer-starvation-steps 0``; and how long a
        finished chunk's answer waits for its pages to reach the pool."""
        on = self.setup.enabled and self.transfer_starvation_steps > 0
        wait_s = self.write_wait_ms / 1000 if self.setup.enabled else 0.0
        return {"transfer_scheduler": on, "transfer_starvation_steps": self.transfer_starvation_steps,
                "pool_write_wait_s": wait_s}

    def process_env(self) -> dict[str, str]:
        """What a process that loads the pool's library needs in its environment."""
        if self.setup.kind == "mooncake":
            from .mooncake import library_env

            return library_env()
        return {}

    def stop(self) -> None:
        from .processes import stop_processes

        stop_processes(self.processes)
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)


def start_reaper(directory: Path) -> subprocess.Popen:
    """A process that removes ``directory`` if the launcher dies without removing it (``reaper.py``)."""
    import sys

    from .processes import die_with_parent

    reaper = subprocess.Popen([sys.executable, "-m", "seer_sglang.launch.reaper", str(directory)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
    reaper.stdout.readline()  # its handler is in place
    reaper.stdout.close()
    return reaper


def claim_pool_dir(directory: Path) -> None:
    """Take ``directory`` for the file pool: created if missing, marked as the pool's (``POOL_MARKER``).
    A directory that holds anything and no marker is refused, since the pool evicts and clears files
    there."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / POOL_MARKER
    if not marker.exists():
        foreign = sorted(p.name for p in directory.iterdir())
        if foreign:
            raise ValueError(f"--kv-pool-dir {directory} holds files that are not a seer KV pool's "
                             f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); give an empty "
                             f"directory, or one a seer run made")
        marker.write_text("seer_sglang KV pool: page files in here are evicted and cleared by seer_sglang\n")


def start_kv_pool(config: KVPoolConfig, sglang_args: list[str], log_dir: Path | None, model_path: str,
                  cpu: bool, with_plugin: bool = True, instances: int = 1,
                  emulation: EmulationConfig | None = None, chunk_size: int | None = None) -> RunningPool:
    """``--kv-pool``: defaults to ``auto`` when we start the instances with the plugin (the page-hash
    warm-up and the write wait live there), else ``none`` (attaching: ``log_dir`` None). ``auto``
    asks the cost model (``pool_choice``) for file or none and the page size; a page is at most a
    quarter of a chunk, since the router shortens each chunk by up to a page to end it on a page
    boundary. A ``--page-size`` the user gave is kept."""
    starting = log_dir is not None
    kind = config.kind or ("auto" if starting and with_plugin else "none")
    user_page = flag_value(sglang_args, "--page-size")
    page_size = int(user_page or KV_POOL.page_size)
    reason = ""
    if kind == "auto":
        if not starting:
            raise ValueError("--kv-pool auto decides for instances seer starts; name the pool of --instance-urls")
        from .pool_choice import auto_pool

        pages = (int(user_page),) if user_page else tuple(
            p for p in KV_POOL.auto_page_sizes if chunk_size is None or 4 * p <= chunk_size) or (KV_POOL.page_size,)
        choice = auto_pool(model_path, sglang_args, cpu, instances, emulation, pages)
        kind, page_size = ("file" if choice.enabled else "none"), choice.page_size
        reason = f"file pool, {choice.reason}" if choice.enabled else f"none (the best file pool: {choice.reason})"
        logger.info("KV pool (--kv-pool auto): %s", reason)
    if kind != "none" and not with_plugin and cpu:
        raise ValueError("--kv-pool on CPU needs the seer plugin (it makes HiCache run there); drop --no-plugin")
    served = flag_value(sglang_args, "--served-model-name") or model_path
    setup = PoolSetup(kind=kind, size_gb=config.size_gb, page_size=page_size, served_model_name=served, cpu=cpu,
                      reason=reason, tp_size=tp_size(sglang_args), mla=is_mla(model_path),
                      prefetch_timeout_s=config.prefetch_timeout_s)
    pool = RunningPool(setup, transfer_starvation_steps=config.transfer_starvation_steps,
                       write_wait_ms=config.write_wait_ms)
    if kind == "file":
        if config.directory:
            setup.directory = Path(config.directory)
        elif log_dir is not None:
            setup.directory = pool.owned_dir = Path(tempfile.mkdtemp(prefix="kv-pool-", dir=log_dir))
            pool.processes.append(start_reaper(pool.owned_dir))
        else:
            raise ValueError("--kv-pool file with --instance-urls needs --kv-pool-dir (the instances' directory)")
        claim_pool_dir(setup.directory)
    elif kind == "mooncake":
        from .bind_host import is_loopback
        from .mooncake import start_local_mooncake

        if config.mooncake_config:
            setup.mooncake = json.loads(Path(config.mooncake_config).read_text())
            pool.confines_instances = False  # a cluster on other nodes reaches the instances' clients
        elif log_dir is not None:
            setup.mooncake, pool.processes = start_local_mooncake(log_dir, config.size_gb, config.host)
            pool.confines_instances = is_loopback(config.host)
        else:
            raise ValueError("--kv-pool mooncake with --instance-urls needs --kv-pool-config")
    return pool
