"""``python -m seer_sglang.launch_server``: K real SGLang instances with the seer plugin + the Seer frontend.

Seer's own flags are listed below; every other flag is SGLang's and goes to each instance unchanged
(``--help`` lists both). With ``--instance-urls`` it attaches to running instances instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from .config import INSTANCES, PluginConfig, SeerConfig, add_flags, cache_root, from_namespace

SEER_DESCRIPTION = __doc__


def seer_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m seer_sglang.launch_server", description=SEER_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    g = p.add_argument_group("seer_sglang")
    g.add_argument("-h", "--help", action="store_true", help="show Seer's and SGLang's flags and exit")
    add_flags(g)
    return p


def print_help() -> None:
    seer_parser().print_help()
    print("\nSGLang server flags (passed to every instance):\n")
    from sglang.srt.server_args import ServerArgs

    sg = argparse.ArgumentParser(prog="sglang", add_help=False)
    ServerArgs.add_cli_args(sg)
    sg.print_help()


def validate_sglang_args(model_path: str, sglang_args: list[str]) -> None:
    """Fail fast, with SGLang's own message, on a flag SGLang would reject in every instance. The
    plugin's names (``--attention-backend seer_verify|seer_cascade``, ``--speculative-algorithm SEER``)
    are registered here as in the instances, so they pass."""
    from sglang.srt.server_args import ServerArgs

    from .plugin.spec_registry import register_spec

    register_spec()

    sg = argparse.ArgumentParser(prog="python -m seer_sglang.launch_server (SGLang flags)")
    ServerArgs.add_cli_args(sg)
    sg.parse_args(["--model-path", model_path, *sglang_args])


def default_log_dir() -> Path:
    return cache_root() / "logs" / time.strftime(f"run-%Y%m%d-%H%M%S-{os.getpid()}")


def bind_listen_socket(host: str, port: int) -> socket.socket:
    """Bind the frontend's port at once, so that a port in use fails in a second, not after the
    instances have loaded, and no client socket can take it while they load."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    return sock  # uvicorn calls listen() when it serves: until then clients are refused, not left hanging


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns, sglang_args = seer_parser().parse_known_args(argv)
    if ns.help:
        print_help()
        return
    config = from_namespace(ns)
    level = config.frontend.log_level
    logging.basicConfig(level=level.upper(), format="[%(asctime)s seer] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per telemetry poll otherwise
    log = logging.getLogger("seer_sglang.launch_server")
    t0 = time.monotonic()
    try:
        listen_socket = bind_listen_socket(config.frontend.host, config.frontend.port)
    except OSError as e:
        log.error("%s", e)
        sys.exit(1)
    try:
        serve(config, sglang_args, listen_socket, log, t0)
    finally:
        listen_socket.close()


def serve(config: SeerConfig, sglang_args: list[str], listen_socket: socket.socket, log: logging.Logger,
          t0: float) -> None:
    """Start (or attach to) the instances, the KV pool and the draft server, then serve the frontend
    until stopped; everything started here is stopped on the way out."""
    from .launch import emulation
    from .launch.drafting import start_drafting
    from .launch.instances import (InstanceSpec, InstanceStartError, cpu_threads_per_instance, cuda_device_count,
                                   has_cuda, seeded_sampling, start_instance, stop_instances, wait_healthy)
    from .launch.kv_pool import start_kv_pool
    from .launch.processes import free_port
    from .launch.sglang_args import flag_value
    from .models import resolve_model_path

    inst = config.instances
    model_path = resolve_model_path(config.frontend.model_path)
    keys = {"api_key": flag_value(sglang_args, "--api-key"), "admin_api_key": flag_value(sglang_args, "--admin-api-key")}
    config = dataclasses.replace(config, frontend=dataclasses.replace(config.frontend, **keys))
    procs = []
    pool = drafts = None
    # SIGTERM behaves like Ctrl-C until uvicorn takes over, so `finally` always stops the instances.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if inst.instance_urls:
            urls = [u.rstrip("/") for u in inst.instance_urls]
            pool = start_kv_pool(config.kv_pool, sglang_args, None, model_path, cpu=True,
                                 with_plugin=not inst.no_plugin)
        else:
            validate_sglang_args(model_path, sglang_args)
            gpu = has_cuda()
            k = inst.num_instances or (cuda_device_count() if gpu else INSTANCES.cpu_instances)
            log_dir = Path(inst.log_dir) if inst.log_dir else default_log_dir()
            log_dir.mkdir(parents=True, exist_ok=True)
            pool = start_kv_pool(config.kv_pool, sglang_args, log_dir, model_path, cpu=not gpu,
                                 with_plugin=not inst.no_plugin)
            drafts = start_drafting(config.draft, log_dir, cpu=not gpu, with_plugin=not inst.no_plugin)
            plugin = PluginConfig(**{**pool.plugin_settings(), **drafts.plugin_settings(),
                                     **emulation.plugin_settings(config.emulation)})
            instance_args = (sglang_args + emulation.instance_args(config.emulation, sglang_args)
                             + pool.setup.instance_args(sglang_args) + drafts.instance_args(sglang_args))
            specs = [InstanceSpec(model_path=model_path, port=free_port(inst.instance_host), host=inst.instance_host,
                                  sglang_args=instance_args, cpu=not gpu, gpu_id=i if gpu else None,
                                  with_plugin=not inst.no_plugin, log_path=log_dir / f"instance-{i}.log",
                                  cpu_threads=None if gpu else cpu_threads_per_instance(k),
                                  extra_env={**pool.process_env(), **plugin.to_env(),
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
            if pool.setup.enabled:
                log.info("KV pool: %s", pool.describe())
            if drafts.enabled:
                log.info("speculative decoding: %s", drafts.describe())
            log.info("starting %d SGLang instance(s) on %s with %s; logs in %s", k, "GPU" if gpu else "CPU",
                     model_path, log_dir)
            for spec in specs:
                procs.append(start_instance(spec))
                log.info("  instance %d: %s (pid %d)", len(procs) - 1, spec.url, procs[-1].pid)
            waited = wait_healthy(procs, timeout_s=inst.startup_timeout)
            log.info("%d instance(s) healthy after %.1fs", k, waited)
            urls = [p.url for p in procs]

        import uvicorn

        from .frontend.app import create_app
        from .frontend.kv_pool import PoolAccess

        setup = pool.setup
        access = PoolAccess.of(setup.kind, setup.page_size, setup.directory, setup.served_model_name,
                               setup.size_gb)
        app = create_app(urls, config, model_path=model_path, pool=access)
        uv_config = uvicorn.Config(app, host=config.frontend.host, port=config.frontend.port,
                                   log_level=config.frontend.log_level.lower(), timeout_graceful_shutdown=5)
        server = uvicorn.Server(uv_config)
        original_startup = server.startup

        async def startup(sockets=None):
            await original_startup(sockets)
            if server.started:
                log.info("seer_sglang ready on http://%s:%d (%.1fs after launch)", config.frontend.host,
                         config.frontend.port, time.monotonic() - t0)

        server.startup = startup
        server.run(sockets=[listen_socket])
    except (InstanceStartError, ValueError) as e:
        log.error("%s", e)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        if procs:
            log.info("stopping %d SGLang instance(s)", len(procs))
            stop_instances(procs)
        if pool is not None:
            pool.stop()
        if drafts is not None:
            drafts.stop()


if __name__ == "__main__":
    main()
