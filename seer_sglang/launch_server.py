"""``python -m seer_sglang.launch_server``: K real SGLang instances with the seer plugin + the Seer frontend.

Seer's own flags are listed below; every other flag is SGLang's and goes to each instance unchanged
(``--help`` lists both). With ``--instance-urls`` it attaches to running instances instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

SEER_DESCRIPTION = __doc__


def seer_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m seer_sglang.launch_server", description=SEER_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    g = p.add_argument_group("seer_sglang")
    g.add_argument("-h", "--help", action="store_true", help="show Seer's and SGLang's flags and exit")
    g.add_argument("--model-path", default=None,
                   help="model folder, or a built-in name (smollm2, tiny); default: the embedded SmolLM2-135M-Instruct")
    g.add_argument("--host", default="127.0.0.1", help="frontend bind address (default: loopback only)")
    g.add_argument("--port", type=int, default=30000, help="frontend port (default: 30000)")
    g.add_argument("--num-instances", type=int, default=None,
                   help="SGLang instances to start (default: one per GPU, or 2 on CPU)")
    g.add_argument("--instance-urls", nargs="+", default=None,
                   help="attach to these running SGLang instances instead of starting any")
    g.add_argument("--scheduler", default="context", choices=["group", "divided", "context", "oracle"],
                   help="rollout policy: group = whole groups unchunked (veRL-like), divided = chunks to the "
                        "least-loaded instance, context = divided + Seer's length context (default), oracle = "
                        "benchmarks only")
    g.add_argument("--chunk-size", type=int, default=8192, help="max new tokens per dispatch (default: 8192)")
    g.add_argument("--kv-headroom", type=float, default=0.95,
                   help="fraction of an instance's KV our in-flight chunks may claim, worst case (default: 0.95)")
    g.add_argument("--starvation-bound", type=int, default=256,
                   help="dispatches a waiting sample may be passed over before it goes first (default: 256)")
    g.add_argument("--kv-pool", default=None, choices=["none", "file", "mooncake"],
                   help="global KV pool shared by the instances, so a chunk that moves loads its KV instead of "
                        "recomputing it: file = host DRAM tier + a shared directory (default when starting "
                        "instances), mooncake = a Mooncake store, none = off")
    g.add_argument("--kv-pool-dir", default=None,
                   help="file pool: the shared directory (default: a fresh one under the log dir, removed at exit)")
    g.add_argument("--kv-pool-size-gb", type=float, default=16.0,
                   help="file pool: size bound; the oldest pages are evicted past it (default: 16)")
    g.add_argument("--kv-pool-config", default=None,
                   help="mooncake: JSON file with the store client config of an existing Mooncake cluster "
                        "(multi-node); without it a master + store are started on loopback")
    g.add_argument("--transfer-starvation-steps", type=int, default=4,
                   help="pool transfers yield to decode steps, but wait at most this many (weighted); 0 = never "
                        "yield (default: 4)")
    g.add_argument("--draft", default="group-suffix", choices=["none", "suffix", "group-suffix", "sam"],
                   help="speculative decoding with model-free drafts, verified losslessly by each instance: "
                        "group-suffix = one suffix tree per prompt group, fed by all siblings wherever they run "
                        "(default), suffix = each request's own history only, sam = suffix automaton, none = off")
    g.add_argument("--draft-tokens", type=int, default=8,
                   help="most draft tokens verified per request and step (default: 8)")
    g.add_argument("--draft-paths", type=int, default=4,
                   help="most branches of one draft tree (default: 4)")
    g.add_argument("--draft-budget", default="adaptive", choices=["adaptive", "threshold", "full"],
                   help="drafts verified per request and step: adaptive = the batch's best draft length from a "
                        "step-cost model, shared out by acceptance odds with long-tail requests weighted 2x, off "
                        "when it does not pay (default); threshold = all drafts up to batch size 32, none above; "
                        "full = all drafts always")
    g.add_argument("--draft-cost", default=None,
                   help="profile for the adaptive budget: JSON with base_s/per_seq_s/per_token_s/accept_curve, or "
                        "a step model written by benchmarks.rollout; without it each instance fits its own step "
                        "times as it runs (CPU) or verifies full drafts (GPU)")
    g.add_argument("--instance-host", default="127.0.0.1", help="bind address of started instances")
    g.add_argument("--log-dir", default=None, help="where instance logs go (default: ~/.cache/seer_sglang/logs/...)")
    g.add_argument("--startup-timeout", type=float, default=900.0, help="seconds to wait for instances to be healthy")
    g.add_argument("--no-plugin", action="store_true", help="start plain SGLang instances (without the seer plugin)")
    g.add_argument("--log-level", default="info", help="frontend log level")
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

    from .spec.plugin_hooks import register_spec

    register_spec()

    sg = argparse.ArgumentParser(prog="python -m seer_sglang.launch_server (SGLang flags)")
    ServerArgs.add_cli_args(sg)
    sg.parse_args(["--model-path", model_path, *sglang_args])


def default_log_dir() -> Path:
    from .models import cache_dir

    return cache_dir().parent / "logs" / time.strftime(f"run-%Y%m%d-%H%M%S-{os.getpid()}")


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
    args, sglang_args = seer_parser().parse_known_args(argv)
    if args.help:
        print_help()
        return
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s seer] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per telemetry poll otherwise
    log = logging.getLogger("seer_sglang.launch_server")
    t0 = time.monotonic()

    from .instances.launcher import (InstanceSpec, InstanceStartError, cpu_threads_per_instance, cuda_device_count,
                                     free_port, has_cuda, start_instance, stop_instances, wait_healthy)
    from .kvpool.launch import start_kv_pool
    from .models import resolve_model_path
    from .spec.launch import start_drafting

    try:
        listen_socket = bind_listen_socket(args.host, args.port)
    except OSError as e:
        log.error("%s", e)
        sys.exit(1)
    model_path = resolve_model_path(args.model_path)
    procs = []
    pool = drafts = None
    # SIGTERM behaves like Ctrl-C until uvicorn takes over, so `finally` always stops the instances.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if args.instance_urls:
            urls = [u.rstrip("/") for u in args.instance_urls]
            pool = start_kv_pool(args, sglang_args, None, model_path, cpu=True)
        else:
            validate_sglang_args(model_path, sglang_args)
            gpu = has_cuda()
            k = args.num_instances or (cuda_device_count() if gpu else 2)
            log_dir = Path(args.log_dir) if args.log_dir else default_log_dir()
            log_dir.mkdir(parents=True, exist_ok=True)
            pool = start_kv_pool(args, sglang_args, log_dir, model_path, cpu=not gpu)
            drafts = start_drafting(args.draft, args.draft_tokens, args.draft_paths, log_dir, cpu=not gpu,
                                    with_plugin=not args.no_plugin, budget=args.draft_budget,
                                    cost_path=args.draft_cost)
            instance_args = sglang_args + pool.config.instance_args(sglang_args) + drafts.instance_args(sglang_args)
            specs = [InstanceSpec(model_path=model_path, port=free_port(args.instance_host), host=args.instance_host,
                                  sglang_args=instance_args, cpu=not gpu, gpu_id=i if gpu else None,
                                  with_plugin=not args.no_plugin, log_path=log_dir / f"instance-{i}.log",
                                  cpu_threads=None if gpu else cpu_threads_per_instance(k),
                                  extra_env={**pool.instance_env(args.transfer_starvation_steps),
                                             **drafts.instance_env()})
                     for i in range(k)]
            if pool.config.enabled:
                log.info("KV pool: %s", pool.describe())
            if drafts.enabled:
                log.info("speculative decoding: %s", drafts.describe())
            log.info("starting %d SGLang instance(s) on %s with %s; logs in %s", k, "GPU" if gpu else "CPU",
                     model_path, log_dir)
            for spec in specs:
                procs.append(start_instance(spec))
                log.info("  instance %d: %s (pid %d)", len(procs) - 1, spec.url, procs[-1].pid)
            waited = wait_healthy(procs, timeout_s=args.startup_timeout)
            log.info("%d instance(s) healthy after %.1fs", k, waited)
            urls = [p.url for p in procs]

        import uvicorn

        from .server.app import create_app

        app = create_app(urls, scheduler=args.scheduler, model_path=model_path,
                         policy_kwargs={"chunk_size": args.chunk_size, "kv_headroom": args.kv_headroom,
                                        "starvation_bound": args.starvation_bound},
                         kv_pool=pool.file_pool, kv_pool_kind=pool.config.kind,
                         kv_pool_page_size=pool.config.page_size)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                                timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        original_startup = server.startup

        async def startup(sockets=None):
            await original_startup(sockets)
            if server.started:
                log.info("seer_sglang ready on http://%s:%d (%.1fs after launch)", args.host, args.port,
                         time.monotonic() - t0)

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
        listen_socket.close()


if __name__ == "__main__":
    main()
