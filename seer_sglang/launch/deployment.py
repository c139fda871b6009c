"""Everything a seer run starts besides the frontend: the SGLang instances (or the running ones it
attaches to), the global KV pool and the draft server. ``launch_server`` serves the frontend over
them on a port; ``seer_sglang.Engine`` runs it in the caller's process."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import INSTANCES, PluginConfig, SeerConfig, cache_root

log = logging.getLogger("seer_sglang.launch_server")


def default_log_dir() -> Path:
    import os
    import time

    return cache_root() / "logs" / time.strftime(f"run-%Y%m%d-%H%M%S-{os.getpid()}")


def validate_sglang_args(model_path: str, sglang_args: list[str]) -> None:
    """Fail fast, with SGLang's own message, on a flag SGLang would reject in every instance. The
    plugin's names (``--attention-backend seer_verify|seer_cascade``, ``--speculative-algorithm SEER``)
    are registered here as in the instances, so they pass."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    from ..plugin.spec_registry import register_spec

    register_spec()
    sg = argparse.ArgumentParser(prog="python -m seer_sglang.launch_server (SGLang flags)")
    ServerArgs.add_cli_args(sg)
    sg.parse_args(["--model-path", model_path, *sglang_args])


@dataclass
class Deployment:
    config: SeerConfig  # with the API keys read from the SGLang flags
    model_path: str
    urls: list[str]
    procs: list[Any] = field(default_factory=list)  # the instances started here (none when attached)
    pool: Any = None
    drafts: Any = None

    def pool_access(self):
        from ..frontend.kv_pool import PoolAccess

        setup = self.pool.setup
        return PoolAccess.of(setup.kind, setup.page_size, setup.directory, setup.served_model_name, setup.size_gb,
                             setup.reason, setup.tp_size, setup.mla)

    def stop(self) -> None:
        """Stop what was started here (attached instances are left running)."""
        from .instances import stop_instances

        if self.procs:
            log.info("stopping %d SGLang instance(s)", len(self.procs))
            stop_instances(self.procs)
            self.procs = []
        if self.pool is not None:
            self.pool.stop()
            self.pool = None
        if self.drafts is not None:
            self.drafts.stop()
            self.drafts = None


def start(config: SeerConfig, sglang_args: list[str]) -> Deployment:
    """Start (or attach to) the instances with the pool and the draft server; returns once every
    started instance is healthy. On failure everything started so far is stopped again."""
    from . import emulation
    from .bind_host import loopback_env
    from .drafting import start_drafting
    from .instances import (InstanceSpec, cpu_threads_per_instance, has_cuda, plan_gpus, seeded_sampling,
                            start_instance, tp_size, visible_gpus, wait_healthy)
    from .kv_pool import start_kv_pool
    from .processes import free_port
    from .sglang_args import flag_value
    from ..models import resolve_model_path

    inst = config.instances
    model_path = resolve_model_path(config.frontend.model_path)
    keys = {"api_key": flag_value(sglang_args, "--api-key"), "admin_api_key": flag_value(sglang_args, "--admin-api-key")}
    config = dataclasses.replace(config, frontend=dataclasses.replace(config.frontend, **keys))
    dep = Deployment(config, model_path, [])
    try:
        if inst.instance_urls or inst.num_instances == 0:  # attached, or registered later (POST /workers)
            dep.urls = [u.rstrip("/") for u in inst.instance_urls or ()]
            dep.pool = start_kv_pool(config.kv_pool, sglang_args, None, model_path, cpu=True,
                                     with_plugin=not inst.no_plugin)
            return dep
        validate_sglang_args(model_path, sglang_args)
        gpu = has_cuda()
        gpu_sets: list[str | None] = (plan_gpus(visible_gpus(), tp_size(sglang_args), inst.num_instances) if gpu
                                      else [None] * (inst.num_instances or INSTANCES.cpu_instances))
        k = len(gpu_sets)
        log_dir = Path(inst.log_dir) if inst.log_dir else default_log_dir()
        log_dir.mkdir(parents=True, exist_ok=True)
        dep.pool = start_kv_pool(config.kv_pool, sglang_args, log_dir, model_path, cpu=not gpu,
                                 with_plugin=not inst.no_plugin, instances=k, emulation=config.emulation,
                                 chunk_size=config.scheduler.smallest_chunk())
        dep.drafts = start_drafting(config.draft, log_dir, cpu=not gpu, with_plugin=not inst.no_plugin,
                                    sglang_args=sglang_args)
        plugin = PluginConfig(**{**dep.pool.plugin_settings(), **dep.drafts.plugin_settings(),
                                 **emulation.plugin_settings(config.emulation),
                                 "slo_headroom": config.slo.headroom})
        # SGLang's own metrics stay off unless asked for (SGLang's default): they cost its scheduler work
        # at every step, 2-3 ms of a 17-step request's latency on the CPU host. With SGLang's
        # --enable-metrics, which every instance gets, the frontend re-exports them (sglang:*, per instance).
        instance_args = (sglang_args + emulation.instance_args(config.emulation, sglang_args)
                         + dep.pool.setup.instance_args(sglang_args) + dep.drafts.instance_args(sglang_args))
        # On a loopback host, what the instances bind to every interface (SGLang's process-group store,
        # Mooncake's transfer engines) stays on loopback too; a process group across nodes needs its
        # store reachable from the others.
        confine = dep.pool.confines_instances and flag_value(sglang_args, "--nnodes") in (None, "1")
        bind_env = loopback_env(inst.instance_host) if confine else {}
        specs = [InstanceSpec(model_path=model_path, port=free_port(inst.instance_host), host=inst.instance_host,
                              sglang_args=instance_args, cpu=not gpu, gpus=gpu_sets[i],
                              with_plugin=not inst.no_plugin, log_path=log_dir / f"instance-{i}.log",
                              cpu_threads=None if gpu else cpu_threads_per_instance(k),
                              extra_env={**dep.pool.process_env(), **bind_env, **plugin.to_env(),
                                         **emulation.instance_env(config.emulation)})
                 for i in range(k)]
        if seeded_sampling(instance_args):
            log.info("seeded sampling on: a sample draws the same tokens however it is chunked or moved")
        else:
            log.warning("SEEDED SAMPLING IS OFF (--sampling-backend %s): samples are still drawn from the "
                        "model's distribution, but a chunked or migrated sample draws other tokens than an "
                        "unchunked run, and a request seed does not reproduce a rollout. Drop the flag to "
                        "keep the guarantee.", flag_value(instance_args, "--sampling-backend"))
        emulated = emulation.emulated_model(config.emulation)
        if emulated is not None:
            log.warning("EMULATION: every forward step is padded to the step-time profile %s (%s); "
                        "timings are emulated, not measured on GPUs", emulated.name, emulated.source)
        if dep.pool.setup.enabled:
            log.info("KV pool: %s", dep.pool.describe())
        if dep.drafts.enabled:
            log.info("speculative decoding: %s", dep.drafts.describe())
        log.info("starting %d SGLang instance(s) on %s with %s; logs in %s", k,
                 f"GPUs {' | '.join(gpu_sets)}" if gpu else "CPU", model_path, log_dir)
        for spec in specs:
            dep.procs.append(start_instance(spec))
            log.info("  instance %d: %s (pid %d)", len(dep.procs) - 1, spec.url, dep.procs[-1].pid)
        waited = wait_healthy(dep.procs, timeout_s=inst.startup_timeout)
        log.info("%d instance(s) healthy after %.1fs", k, waited)
        dep.urls = [p.url for p in dep.procs]
        return dep
    except BaseException:
        dep.stop()
        raise
