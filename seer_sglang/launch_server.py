"""``python -m seer_sglang.launch_server``: K real SGLang instances with the seer plugin + the Seer frontend.

Seer's own flags are listed below; every other flag is SGLang's and goes to each instance unchanged
(``--help`` lists both). With ``--instance-urls`` it attaches to running instances instead.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import time

from .config import SeerConfig, add_flags, from_namespace

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
    from .launch import deployment
    from .launch.instances import InstanceStartError

    dep = None
    # SIGTERM behaves like Ctrl-C until uvicorn takes over, so `finally` always stops the instances.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        dep = deployment.start(config, sglang_args)
        import uvicorn

        from .frontend.app import create_app

        from .launch.supervisor import for_deployment

        app = create_app(dep.urls, dep.config, model_path=dep.model_path, pool=dep.pool_access(),
                         supervisor=for_deployment(dep))
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
        original_exit = server.handle_exit

        def handle_exit(sig, frame):
            """uvicorn then closes the port and waits up to its grace period for open requests: fail
            the unfinished samples now, so those requests end within it with a clear 503."""
            frontend = getattr(app.state, "frontend", None)
            if frontend is not None and not frontend.shutting_down:
                app.state.loop.call_soon_threadsafe(frontend.begin_shutdown)
            original_exit(sig, frame)

        server.handle_exit = handle_exit
        server.run(sockets=[listen_socket])
    except (InstanceStartError, ValueError) as e:
        log.error("%s", e)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        if dep is not None:
            dep.stop()


if __name__ == "__main__":
    main()
