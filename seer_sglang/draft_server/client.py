"""The draft server's client inside an instance: local replicas of the groups it serves.

``update`` appends to the local replica and returns at once; ``draft`` answers from the local replica
only. A background thread pushes this instance's new tokens to the server (state-based: whatever the
server has not acknowledged, so nothing piles up in a queue while the server is away) and pulls the
siblings' tokens of the groups in use by offset. When the server is unreachable, drafting continues
from what the replica holds; when it comes back (even as a fresh process with no state), the thread
re-registers the groups and pushes the tokens again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import zmq

from ..config import DRAFT
from ..speculative.draft import DEFAULT_MIN_SCORE, Draft
from ..speculative.drafters import make_drafter
from .codec import decode, encode, pack_tokens, unpack_tokens

log = logging.getLogger(__name__)

MAX_BATCH_TOKENS = 1 << 16  # per update_many message: well under the timeout of server work


class _Timeout(Exception):
    pass


class RemoteError(RuntimeError):
    pass


@dataclass
class _Sync:
    """What the server is known to hold of one local group."""

    last_used: float
    ttl_s: float | None = None
    version: int = -1  # the server version this replica has fully applied; -1: unknown
    acked: dict[str, int] = field(default_factory=dict)  # requests written here -> server's count


class DraftClient:
    """Drafts for the groups this instance serves, kept in sync through the draft server at ``address``
    (``None``: local only, no thread). Thread-safe; no call waits on the network."""

    # A sync round costs the instance's Python (GIL) and the server's CPU: every 5 ms, two instances and
    # the server took 28% of a core on a 2-core machine, every 20 ms 11%; siblings' text a step late
    # drafts as well, since a decode step takes tens of milliseconds or more.
    SYNC_INTERVAL_S = DRAFT.sync_interval_s

    def __init__(self, address: str | None, drafter: str = DRAFT.drafter, *, native: bool | str | None = None,
                 sync_interval_s: float = SYNC_INTERVAL_S, timeout_s: float = 2.0, active_s: float = 10.0,
                 idle_drop_s: float = DRAFT.group_ttl_s, **drafter_kw: Any):
        self.address = address
        self.drafter = make_drafter(drafter, native=native, **drafter_kw)
        self.sync_interval_s, self.timeout_s = sync_interval_s, timeout_s
        self.active_s, self.idle_drop_s = active_s, idle_drop_s
        self._lock = threading.Lock()
        self._sync: dict[str, _Sync] = {}
        self._control: list[list] = []  # [method, *args] for the server, in order
        self._stop = threading.Event()
        self._server_id: str | None = None
        self._call_id = 0
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self.connected = False
        self.fetch_rounds = 0
        self.counters = {"calls": 0, "timeouts": 0, "pushed_tokens": 0, "fetched_tokens": 0, "reconnects": 0}
        self._thread: threading.Thread | None = None
        if address is not None:
            self._ctx = zmq.Context()
            self._thread = threading.Thread(target=self._run, name="draft-client-sync", daemon=True)
            self._thread.start()

    # ---- the instance's side: local, never blocking on the network ----
    def register_group(self, group_id: str, prompt: Sequence[int] = (), ttl_s: float | None = None) -> None:
        with self._lock:
            s = self._touch(group_id)
            s.ttl_s = ttl_s or s.ttl_s
            self.drafter.register_group(group_id, prompt)
            self._send_later(["register_group", group_id, s.ttl_s, pack_tokens(self.drafter.prompt(group_id))])

    def update(self, group_id: str, request_id: str, prev_token_count: int, new_tokens: Sequence[int]) -> int:
        """Append locally (idempotent, see ``Drafter.update``); the server gets it from the sync thread."""
        with self._lock:
            s = self._touch(group_id)
            if request_id not in s.acked:  # tokens already here came from the server
                s.acked[request_id] = self.drafter.count(group_id, request_id)
            return self.drafter.update(group_id, request_id, prev_token_count, new_tokens)

    def draft(self, group_id: str, request_id: str, max_tokens: int, max_paths: int = 1,
              min_score: float = DEFAULT_MIN_SCORE) -> Draft:
        with self._lock:
            self._touch(group_id)  # a group drafted here is in use: keep it synced
            return self.drafter.draft(group_id, request_id, max_tokens, max_paths, min_score)

    def prompt(self, group_id: str) -> list[int]:
        """The group's prompt as the replica holds it ([] until registered here or fetched)."""
        with self._lock:
            return self.drafter.prompt(group_id)

    def drop_group(self, group_id: str) -> None:
        """Forget the group here and on the server."""
        self.release_group(group_id)
        with self._lock:
            self._send_later(["drop_group", group_id])

    def release_group(self, group_id: str) -> None:
        """Forget the local replica only (this instance no longer serves the group)."""
        with self._lock:
            self._sync.pop(group_id, None)
            self.drafter.drop_group(group_id)

    def _send_later(self, msg: list) -> None:
        if self._thread is not None:
            self._control.append(msg)

    def _touch(self, group_id: str) -> _Sync:
        s = self._sync.get(group_id)
        now = time.monotonic()
        if s is None:
            s = self._sync[group_id] = _Sync(now)
            self.drafter.register_group(group_id)
        s.last_used = now
        return s

    # ---- waiting for the sync thread (tests, shutdown) ----
    def pending(self) -> int:
        """Tokens written here that the server has not acknowledged, plus queued control calls."""
        if self._thread is None:
            return 0
        with self._lock:
            n = len(self._control)
            for gid, s in self._sync.items():
                n += sum(max(0, self.drafter.count(gid, rid) - a) for rid, a in s.acked.items())
            return n

    def flush(self, timeout_s: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.pending():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def sync(self, timeout_s: float = 5.0) -> bool:
        """Wait for two more completed fetch rounds (so the state seen at the call time is applied)."""
        target = self.fetch_rounds + 2
        deadline = time.monotonic() + timeout_s
        while self.fetch_rounds < target:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def close(self, flush_timeout_s: float = 1.0) -> None:
        """Stop syncing; first give the server this instance's last tokens (siblings elsewhere want them)."""
        if self._thread is not None and self.connected and flush_timeout_s > 0:
            self.flush(flush_timeout_s)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self) -> DraftClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the sync thread ----
    def _run(self) -> None:
        failures, next_idle_check = 0, 0.0
        while not self._stop.is_set():
            try:
                if self._sock is None:
                    self._sock = self._ctx.socket(zmq.DEALER)
                    self._sock.setsockopt(zmq.LINGER, 0)
                    self._sock.connect(self.address)
                self._push_control()
                self._push_updates()
                self._fetch()
                self.connected, failures = True, 0
            except (_Timeout, zmq.ZMQError) as e:
                # A lost reply would leave a request socket stuck; a fresh socket drops it.
                self.counters["timeouts"] += 1
                if self.connected:
                    log.warning("draft server %s unreachable (%s); drafting from local replicas", self.address, e)
                self.connected = False
                self._close_socket()
                failures += 1
                self._stop.wait(min(1.0, 0.05 * 2 ** min(failures, 5)))
                continue
            except Exception:  # keep syncing whatever a bad reply did
                log.exception("draft client sync step failed")
            if time.monotonic() >= next_idle_check:
                self._drop_idle()
                next_idle_check = time.monotonic() + 1.0
            self._stop.wait(self.sync_interval_s)
        self._close_socket()

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def _call(self, method: str, *args: Any) -> Any:
        self._call_id += 1
        cid = self._call_id
        self.counters["calls"] += 1
        try:
            self._sock.send(encode([cid, method, list(args)]), zmq.NOBLOCK)
        except zmq.Again as e:
            raise _Timeout("send queue full") from e
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1):
                raise _Timeout(f"no reply to {method} within {self.timeout_s}s")
            rid, server_id, ok, result = decode(self._sock.recv())
            if rid != cid:
                continue  # a late reply to a call that already timed out
            self._check_server(server_id)
            if not ok:
                raise RemoteError(f"{method}: {result}")
            return result

    def _check_server(self, server_id: str) -> None:
        """A new server id means a fresh server: push every group and every written token again."""
        if server_id == self._server_id:
            return
        if self._server_id is not None:
            self.counters["reconnects"] += 1
            log.info("draft server restarted (%s -> %s); pushing local groups again", self._server_id, server_id)
            with self._lock:
                for gid, s in self._sync.items():
                    s.version = -1
                    s.acked = dict.fromkeys(s.acked, 0)
                    self._control.append(["register_group", gid, s.ttl_s, pack_tokens(self.drafter.prompt(gid))])
        self._server_id = server_id

    def _push_control(self) -> None:
        while True:
            with self._lock:
                if not self._control:
                    return
                msg = self._control[0]
            try:
                self._call(*msg)
            except RemoteError as e:  # the server refused it: retrying would not help
                log.warning("draft server refused %s: %s", msg[0], e)
            with self._lock:
                if self._control and self._control[0] is msg:
                    self._control.pop(0)

    def _push_updates(self) -> None:
        batch, budget = [], MAX_BATCH_TOKENS
        with self._lock:
            for gid, s in self._sync.items():
                for rid, acked in s.acked.items():
                    have = self.drafter.count(gid, rid)
                    if have > acked and budget > 0:
                        tail = self.drafter.tokens(gid, rid, acked)[:budget]
                        batch.append([gid, rid, acked, pack_tokens(tail)])
                        budget -= len(tail)
        if not batch:
            return
        counts = self._call("update_many", batch)
        with self._lock:
            for (gid, rid, prev, data), n in zip(batch, counts):
                s = self._sync.get(gid)
                if s is None or rid not in s.acked:
                    continue
                s.acked[rid] = n
                if n < prev:  # the server lost the start (expired or restarted): register, resend from n
                    self._control.append(["register_group", gid, s.ttl_s, pack_tokens(self.drafter.prompt(gid))])
                else:
                    self.counters["pushed_tokens"] += len(data) // 4

    def _fetch(self) -> None:
        now = time.monotonic()
        with self._lock:
            sent = {gid: s for gid, s in self._sync.items() if now - s.last_used <= self.active_s}
            infos = {gid: {"v": s.version, "prompt_len": len(self.drafter.prompt(gid)),
                           "counts": self.drafter.counts(gid)} for gid, s in sent.items()}
        if not infos:
            self.fetch_rounds += 1
            return
        server_before = self._server_id
        reply = self._call("fetch", list(infos), infos)
        same_server = self._server_id == server_before  # versions of another server run mean nothing
        for gid, g in reply.items():
            if not g:
                continue
            with self._lock:  # one group at a time keeps the lock short for the instance's calls
                s = self._sync.get(gid)
                if s is None or s is not sent[gid]:
                    continue  # released (or released and re-created) meanwhile
                if g.get("prompt"):
                    self.drafter.register_group(gid, unpack_tokens(g["prompt"]))
                for rid, (start, data) in (g.get("tails") or {}).items():
                    tokens = unpack_tokens(data)
                    self.drafter.update(gid, rid, start, tokens)
                    self.counters["fetched_tokens"] += len(tokens)
                s.version = g["v"] if same_server else -1
        self.fetch_rounds += 1

    def _drop_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [gid for gid, s in self._sync.items() if now - s.last_used > self.idle_drop_s]
        for gid in idle:
            self.release_group(gid)


def call(address: str, method: str, *args: Any, timeout_s: float = 2.0) -> Any:
    """One blocking call on a fresh socket, for admin and health checks (``ping``, ``stats``, ...).
    Raises TimeoutError when the server does not answer in time."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(address)
        sock.send(encode([1, method, list(args)]))
        if not sock.poll(int(timeout_s * 1000)):
            raise TimeoutError(f"draft server {address}: no reply to {method} within {timeout_s}s")
        _, _, ok, result = decode(sock.recv())
        if not ok:
            raise RemoteError(f"{method}: {result}")
        return result
    finally:
        sock.close(0)
        ctx.term()


def wait_ready(address: str, timeout_s: float = 30.0) -> dict:
    """Ping until the server answers; returns its ping reply."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(address, "ping", timeout_s=0.5)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
