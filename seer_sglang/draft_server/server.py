"""Grouped draft server: the authoritative token store of every prompt group, over ZeroMQ.

    python -m seer_sglang.draft_server --bind tcp://127.0.0.1:5571 --drafter group-suffix

Instances append their requests' tokens (``update``, idempotent by offset) and pull what their
siblings wrote elsewhere (``fetch``, incremental by offset), so each instance drafts from a local
replica of the group and never waits on this server. A group lives until ``drop_group`` or until its
TTL passes without an update or a registration.

Wire format (``codec``): one ROUTER socket; each request is a msgpack list ``[call_id, method, args]``
and each reply ``[call_id, server_id, ok, result]`` (``server_id`` changes when the server restarts,
which tells clients to push their tokens again). Token lists travel as little-endian int32 bytes.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq

from ..config import DRAFT, DRAFTERS
from ..speculative.draft import DEFAULT_MIN_SCORE
from ..speculative.drafters import IndexedDrafter, make_drafter
from .codec import decode, encode, pack_tokens, unpack_tokens

log = logging.getLogger(__name__)

DEFAULT_TTL_S = DRAFT.group_ttl_s


@dataclass
class _Group:
    ttl_s: float
    last_active: float
    prompt: array = field(default_factory=lambda: array("i"))
    requests: dict[str, array] = field(default_factory=dict)
    version: int = 0  # bumped on every change, so a fetch can skip groups a replica already has


class DraftStore:
    """The server's state and API, without sockets (the loop below only decodes and dispatches)."""

    def __init__(self, drafter: str | None = DRAFT.drafter, default_ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic, max_tokens: int = DRAFT.max_store_tokens):
        self.max_tokens = max_tokens
        self.tokens = 0  # response tokens held, over every group
        self.drafter_name = drafter if drafter and drafter != "none" else None
        self.drafter: IndexedDrafter | None = make_drafter(self.drafter_name) if self.drafter_name else None
        self.default_ttl_s = default_ttl_s
        self.clock = clock
        self.server_id = uuid.uuid4().hex[:12]
        self.started = clock()
        self.groups: dict[str, _Group] = {}
        self.counters = {"update_calls": 0, "updates": 0, "tokens_in": 0, "gaps": 0, "fetches": 0,
                         "fetched_tokens": 0, "expired": 0, "registered": 0, "dropped": 0, "evicted": 0}

    def _group(self, group_id: str) -> _Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = _Group(self.default_ttl_s, self.clock())
            if self.drafter:
                self.drafter.register_group(group_id)
        return g

    def ping(self) -> dict:
        return {"server_id": self.server_id, "drafter": self.drafter_name or "none", "groups": len(self.groups)}

    def register_group(self, group_id: str, ttl_s: float | None = None, prompt: bytes = b"") -> int:
        """Create or refresh a group; a prompt is taken if it has none yet. Returns its prompt length."""
        g = self._group(group_id)
        g.ttl_s = float(ttl_s) if ttl_s else g.ttl_s
        g.last_active = self.clock()
        if prompt and not g.prompt:
            g.prompt = unpack_tokens(prompt)
            g.version += 1
            if self.drafter:
                self.drafter.register_group(group_id, g.prompt)
        self.counters["registered"] += 1
        return len(g.prompt)

    def update(self, group_id: str, request_id: str, prev_token_count: int, tokens: bytes) -> int:
        """Append the tokens after the first prev_token_count (idempotent); returns the stored count,
        below prev_token_count on a gap (nothing stored; the sender resends from there)."""
        g = self._group(group_id)
        g.last_active = self.clock()
        stored = g.requests.get(request_id)
        if stored is None:
            stored = g.requests[request_id] = array("i")
        n = len(stored)
        self.counters["updates"] += 1
        if prev_token_count > n:
            self.counters["gaps"] += 1
            return n
        new = unpack_tokens(tokens)
        skip = n - prev_token_count
        if skip < len(new):
            tail = new[skip:]
            stored.extend(tail)
            g.version += 1
            self.tokens += len(tail)
            self.counters["tokens_in"] += len(tail)
            if self.drafter:
                self.drafter.update(group_id, request_id, n, tail)
            if self.tokens > self.max_tokens:
                self._evict(keep=group_id)
        return len(stored)

    def _evict(self, keep: str) -> None:
        """Drop the groups idle longest (never ``keep``) until the store is under 90% of its bound."""
        for gid, _ in sorted(((gid, g.last_active) for gid, g in self.groups.items() if gid != keep),
                             key=lambda item: item[1]):
            if self.tokens <= 0.9 * self.max_tokens:
                break
            self._remove(gid)
            self.counters["evicted"] += 1

    def update_many(self, updates: list) -> list[int]:
        self.counters["update_calls"] += 1
        return [self.update(*u) for u in updates]

    def fetch(self, group_ids: list[str], cache_infos: dict[str, dict]) -> dict[str, Any]:
        """What each replica lacks. cache_infos[g] = {"v": version seen, "prompt_len": n,
        "counts": {request_id: tokens held}}; the reply per group is None (unknown group), or
        {"v": version} when nothing changed since "v", or {"v", "prompt", "tails": {rid: [start, bytes]}}."""
        self.counters["fetches"] += 1
        out: dict[str, Any] = {}
        for gid in group_ids:
            g = self.groups.get(gid)
            if g is None:
                out[gid] = None
                continue
            info = cache_infos.get(gid) or {}
            if info.get("v") == g.version:
                out[gid] = {"v": g.version}
                continue
            counts = info.get("counts") or {}
            tails = {}
            for rid, toks in g.requests.items():
                have = counts.get(rid, 0)
                if len(toks) > have:
                    tails[rid] = [have, pack_tokens(toks[have:])]
                    self.counters["fetched_tokens"] += len(toks) - have
            prompt = pack_tokens(g.prompt) if g.prompt and not info.get("prompt_len") else None
            out[gid] = {"v": g.version, "prompt": prompt, "tails": tails}
        return out

    def _remove(self, group_id: str) -> bool:
        g = self.groups.pop(group_id, None)
        if g is None:
            return False
        self.tokens -= sum(len(t) for t in g.requests.values())
        if self.drafter:
            self.drafter.drop_group(group_id)
        return True

    def drop_group(self, group_id: str) -> bool:
        dropped = self._remove(group_id)
        self.counters["dropped"] += dropped
        return dropped

    def draft(self, group_id: str, request_id: str, max_tokens: int, max_paths: int = 1,
              min_score: float = DEFAULT_MIN_SCORE) -> list:
        """A draft from the server's own index (for callers without a replica)."""
        if not self.drafter:
            return [[], [], []]
        d = self.drafter.draft(group_id, request_id, max_tokens, max_paths, min_score)
        return [d.tokens, d.parents, d.scores]

    def expire(self) -> list[str]:
        now = self.clock()
        gone = [gid for gid, g in self.groups.items() if now - g.last_active > g.ttl_s]
        for gid in gone:
            self._remove(gid)
        self.counters["expired"] += len(gone)
        return gone

    def stats(self) -> dict:
        requests = sum(len(g.requests) for g in self.groups.values())
        tokens = sum(len(t) for g in self.groups.values() for t in g.requests.values())
        return {**self.counters, "server_id": self.server_id, "groups": len(self.groups), "requests": requests,
                "tokens": tokens, "uptime_s": self.clock() - self.started,
                "drafter": self.drafter_name or "none",
                "drafter_bytes": self.drafter.memory_bytes() if self.drafter else 0}

    METHODS = ("ping", "register_group", "update", "update_many", "fetch", "drop_group", "draft", "stats")

    def handle(self, method: str, args: list) -> Any:
        if method not in self.METHODS:
            raise ValueError(f"unknown method {method!r}")
        return getattr(self, method)(*args)


def serve(bind: str, store: DraftStore, should_stop: Callable[[], bool] = lambda: False,
          expire_every_s: float = 0.1) -> None:
    """Answer requests on a ROUTER socket until should_stop(); expires groups between messages."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(bind)
    next_expire = 0.0
    try:
        while not should_stop():
            if sock.poll(int(expire_every_s * 1000)):
                for _ in range(256):  # drain a burst, then check timers
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    sock.send_multipart([frames[0], _reply(store, frames[-1])])
            if time.monotonic() >= next_expire:
                store.expire()
                next_expire = time.monotonic() + expire_every_s
    finally:
        sock.close(0)
        ctx.term()


def _reply(store: DraftStore, payload: bytes) -> bytes:
    call_id = None
    try:
        call_id, method, args = decode(payload)
        return encode([call_id, store.server_id, True, store.handle(method, args)])
    except Exception as e:  # a bad request must not stop the server
        log.warning("draft server: request failed: %r", e)
        return encode([call_id, store.server_id, False, repr(e)])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bind", default="tcp://127.0.0.1:5571")
    ap.add_argument("--drafter", default=DRAFT.drafter, choices=[*DRAFTERS, "none"],
                    help="index kept on the server too, for the 'draft' call ('none': store tokens only)")
    ap.add_argument("--default-ttl", type=float, default=DEFAULT_TTL_S,
                    help="seconds a group lives without updates when registered without a TTL")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    store = DraftStore(args.drafter, args.default_ttl)
    log.info("draft server %s listening on %s (drafter %s, pid %d)", store.server_id, args.bind,
             store.drafter_name or "none", os.getpid())
    serve(args.bind, store, lambda: bool(stop))


if __name__ == "__main__":
    main()
