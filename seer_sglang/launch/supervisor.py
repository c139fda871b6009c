"""Instances that die are started again, on their own port, by the launcher that started them.

An instance process that exits (a crash, an out-of-memory kill, an operator's ``kill``) is started
again with the same command after a backoff that doubles with each restart; its lost chunks have
already gone to the other instances from the tokens they had. The frontend holds it out of dispatch
from its exit until, started again, it runs the trainer's current weights (``on_exit``,
``on_started``: ``Frontend.hold`` and ``Frontend.readmit_restarted``). After ``max_restarts`` restarts within ``window_s`` an
instance stays down, and ``/health`` says so. Attached instances (``--instance-urls``) are not ours
to restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ..config import INSTANCES

log = logging.getLogger("seer_sglang.launch_server")


@dataclass
class RestartPolicy:
    """When an instance that exited is started again: the decision, apart from the processes."""

    max_restarts: int = INSTANCES.max_restarts
    window_s: float = INSTANCES.restart_window_s
    first_backoff_s: float = INSTANCES.restart_backoff_s
    restarts: dict[int, list[float]] = field(default_factory=dict)  # instance -> its restart times

    def next_restart(self, index: int, now: float) -> float | None:
        """Seconds to wait before restarting ``index`` now; None once it has used up its restarts."""
        recent = [t for t in self.restarts.get(index, []) if now - t < self.window_s]
        self.restarts[index] = recent
        if len(recent) >= self.max_restarts:
            return None
        return self.first_backoff_s * 2 ** len(recent)

    def record(self, index: int, now: float) -> None:
        self.restarts.setdefault(index, []).append(now)


class Supervisor:
    """Watches the instance processes the launcher started and restarts the ones that exit."""

    def __init__(self, procs: list, policy: RestartPolicy | None = None, poll_s: float = 1.0):
        self.procs = procs  # InstanceProcess: restarted in place, so every holder sees the new process
        self.policy = policy or RestartPolicy()
        self.poll_s = poll_s
        self.given_up: set[int] = set()
        self.restarting: set[int] = set()
        # Set by the frontend: an instance that exited is held out of dispatch (``on_exit``) until,
        # once started again, it runs the weights the others run (``on_started``, run as a task).
        self.on_exit: Callable[[int], None] | None = None
        self.on_started: Callable[[int], Awaitable[None]] | None = None

    def status(self) -> dict:
        return {"restarts": {str(i): len(t) for i, t in sorted(self.policy.restarts.items()) if t},
                "restarting": sorted(self.restarting), "down_for_good": sorted(self.given_up)}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            for index, proc in enumerate(self.procs):
                if proc.alive() or index in self.restarting or index in self.given_up:
                    continue
                if self.on_exit is not None:
                    self.on_exit(index)
                wait = self.policy.next_restart(index, time.monotonic())
                if wait is None:
                    self.given_up.add(index)
                    log.error("instance %d (%s) exited with code %s and has been restarted %d times in %.0f s: "
                              "it stays down", index, proc.url, proc.popen.returncode, self.policy.max_restarts,
                              self.policy.window_s)
                    continue
                self.restarting.add(index)
                asyncio.get_running_loop().create_task(self._restart(index, proc, wait))

    async def _restart(self, index: int, proc, wait_s: float) -> None:
        from .instances import start_instance

        log.warning("instance %d (%s) exited with code %s; restarting it in %.0f s", index, proc.url,
                    proc.popen.returncode, wait_s)
        try:
            await asyncio.sleep(wait_s)
            self.policy.record(index, time.monotonic())
            # In the loop's own thread: the kernel signals a child when the thread that forked it
            # ends (die_with_parent), and an executor's thread may end before the launcher does.
            proc.popen = start_instance(proc.spec).popen
            log.info("instance %d restarted (pid %d)", index, proc.pid)
            if self.on_started is not None:
                asyncio.get_running_loop().create_task(self.on_started(index))
        except Exception:
            log.exception("instance %d could not be restarted", index)
        finally:
            self.restarting.discard(index)


def for_deployment(dep) -> Supervisor | None:
    """The supervisor of a deployment's started instances; None when it attached to running ones or
    restarts are off (``--max-instance-restarts 0``)."""
    limit = dep.config.instances.max_restarts
    return Supervisor(dep.procs, RestartPolicy(max_restarts=limit)) if dep.procs and limit > 0 else None
