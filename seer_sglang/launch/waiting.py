"""Waiting for a condition: one polling loop for the library, the tests and the benchmarks.

A server start, a process's progress and a test's "the rollout has begun" are all the same loop: ask,
sleep, ask again until a deadline. Written once, every wait has a deadline, names what it waited for
when it gives up, and stops early when the process it waits on has died (rather than polling a corpse
until the timeout). This module imports neither SGLang nor torch: the unit tests and the benchmarks'
drivers use it too.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable, TypeVar

import httpx

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.25, what: str = "the condition") -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something true, and return that.

    Raises ``TimeoutError`` naming ``what`` once ``timeout`` seconds have passed; an exception from
    ``predicate`` ends the wait at once (that is how a caller stops early, e.g. on a dead process).
    The predicate is always asked once more at the deadline, so a zero timeout is a single check.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(min(interval, left))


class ProcessExited(RuntimeError):
    """The process a wait depended on ended before the wait was over."""


def log_tail(log_path: Path | str | None, lines: int = 40) -> str:
    """The last ``lines`` lines of a process's log ("" without one), for the error that says it died."""
    if log_path is None:
        return ""
    try:
        return "\n".join(Path(log_path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_healthy(url: str, timeout: float, process: subprocess.Popen | None = None, status: int = 200,
                 log_path: Path | str | None = None, interval: float = 0.25) -> None:
    """Wait until ``GET {url}/health`` answers ``status`` (200: ready; seer's frontend answers 503 while
    it is up without a healthy instance).

    With ``process``, a process that exits first raises ``ProcessExited`` at once; ``log_path`` adds
    that process's last log lines to either error, which is usually where the reason is.
    """
    with httpx.Client(timeout=2.0) as client:
        def answered() -> bool:
            if process is not None and process.poll() is not None:
                raise ProcessExited(f"the process serving {url} exited with code {process.returncode}"
                                    f"\n{log_tail(log_path)}")
            try:
                return client.get(f"{url}/health").status_code == status
            except httpx.HTTPError:
                return False

        try:
            wait_until(answered, timeout, interval, what=f"{url}/health answering {status}")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{log_tail(log_path)}") from None
