"""The global KV pool as the frontend sees it.

``FilePool``: the ``file`` pool's directory: which pages of a sample are there, a size bound, clearing.
``PoolAccess``: what the engine and the routes use, for any kind of pool: how much of a context the
pool holds (to price a move), clearing it after a weight update, and the janitor.

SGLang names an L3 page ``<chained page hash>_<model>_<tp rank>_<tp size>.bin``; the hash chains
over the token ids, page by page, so the router can tell, without asking any instance, how much of
a sample's context a continuation will find in the pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config import KV_POOL
from ..core.migration import MigrationCost
from ..wire import weight_namespace

logger = logging.getLogger("seer_sglang.frontend")


def storage_model_name(served_model_name: str) -> str:
    return "-".join(served_model_name.split("/"))


class FilePool:
    def __init__(self, directory: str | Path, served_model_name: str, page_size: int, size_gb: float,
                 tp_size: int = 1, mla: bool = False):
        self.directory = Path(directory)
        # SGLang's HiCacheFile names a page's file by its hash and the model; each TP rank writes its
        # own shard (``_{model}_{rank}_{tp}``), except an MLA model's latent, which every rank shares.
        name = storage_model_name(served_model_name)
        self.suffixes = [f"_{name}.bin"] if mla else [f"_{name}_{rank}_{tp_size}.bin" for rank in range(tp_size)]
        self.page_size = page_size
        self.max_bytes = int(size_gb * 2**30)
        self.evicted_files = 0

    def is_page(self, name: str) -> bool:
        """A page file of this model (``<hex hash><suffix>``): the only files eviction and clearing
        remove from the directory."""
        suffix = next((s for s in self.suffixes if name.endswith(s)), None)
        stem = name[:-len(suffix)] if suffix else ""
        return bool(stem) and all(c in "0123456789abcdef" for c in stem)

    def page_hashes(self, token_ids: list[int], weight_version: str) -> list[str]:
        """The pages' names under the key the plugin gives every request: its weight version."""
        from sglang.srt.mem_cache.utils import get_hash_str, storage_namespace_seed

        full = len(token_ids) - len(token_ids) % self.page_size
        if full == 0:
            return []
        seed = storage_namespace_seed(weight_namespace(weight_version), None)
        return list(get_hash_str(token_ids[:full], seed, self.page_size))

    def pooled_tokens(self, token_ids: list[int], weight_version: str) -> int:
        """Tokens of the longest prefix of ``token_ids`` whose pages the pool holds for these weights
        (a page counts once every TP rank's shard of it is there: an instance loads it only then)."""
        hashes = self.page_hashes(token_ids, weight_version)
        lo, hi = 0, len(hashes)  # pages are written prefix first: binary search the last present one
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if all((self.directory / f"{hashes[mid - 1]}{suffix}").exists() for suffix in self.suffixes):
                lo = mid
            else:
                hi = mid - 1
        return lo * self.page_size

    def _pages(self) -> list[tuple[float, int, str]]:
        """(mtime, bytes, path) of every page file; instances write and delete them concurrently."""
        pages = []
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    if not self.is_page(entry.name):
                        continue
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    pages.append((st.st_mtime, st.st_size, entry.path))
        except (FileNotFoundError, NotADirectoryError):
            pass
        return pages

    @staticmethod
    def _unlink(path: str) -> bool:
        try:
            os.remove(path)
            return True
        except FileNotFoundError:
            return False

    def usage_bytes(self) -> int:
        return sum(size for _, size, _ in self._pages())

    def enforce_bound(self) -> int:
        """Evict the least recently written pages until the pool is under 90% of its bound."""
        pages = self._pages()
        total = sum(size for _, size, _ in pages)
        if total <= self.max_bytes:
            return 0
        removed = 0
        for _, size, path in sorted(pages):
            if total <= 0.9 * self.max_bytes:
                break
            self._unlink(path)
            total -= size
            removed += 1
        self.evicted_files += removed
        logger.info("KV pool over %.1f GiB: evicted %d oldest pages", self.max_bytes / 2**30, removed)
        return removed

    def remove_stale_partials(self, max_age_s: float = 60.0) -> int:
        """Delete half-written pages (``.<uuid>.tmp``, renamed to ``.bin`` once whole) older than
        ``max_age_s``: an instance killed mid-write leaves them, outside the size bound. A live write
        takes milliseconds, so an old one has no writer left."""
        removed, cutoff = 0, time.time() - max_age_s
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                        try:
                            if entry.stat().st_mtime < cutoff:
                                removed += self._unlink(entry.path)
                        except FileNotFoundError:
                            pass
        except (FileNotFoundError, NotADirectoryError):
            pass
        if removed:
            logger.info("KV pool: removed %d half-written pages left by a stopped instance", removed)
        return removed

    def clear(self, written_before: float | None = None) -> int:
        """Drop every page (after a weight update the pool's KV belongs to the old policy), or with
        ``written_before`` (a ``time.time()``) only the pages last written before then."""
        return sum(self._unlink(path) for mtime, _, path in self._pages()
                   if written_before is None or mtime < written_before)


@dataclass
class PoolAccess:
    """The pool of a run: its kind and page size, and the file pool's directory when it has one."""

    kind: str = "none"
    page_size: int = KV_POOL.page_size
    file_pool: FilePool | None = None
    reason: str = ""  # --kv-pool auto: the cost model's verdict

    @classmethod
    def of(cls, kind: str, page_size: int, directory: str | Path | None = None, served_model_name: str = "",
           size_gb: float = KV_POOL.size_gb, reason: str = "", tp_size: int = 1, mla: bool = False) -> "PoolAccess":
        file_pool = (FilePool(directory, served_model_name, page_size, size_gb, tp_size, mla) if kind == "file"
                     else None)
        return cls(kind, page_size, file_pool, reason)

    def probe(self) -> Callable[[list[int], str], int] | None:
        """How much of a context the pool holds: a file pool's page files are checked; a Mooncake store
        is not queried, its write-through is taken as done (whole pages), so moves are priced as loads."""
        if self.file_pool is not None:
            return self.file_pool.pooled_tokens
        if self.kind == "mooncake":
            whole_pages = MigrationCost(page_size=self.page_size).pooled
            return lambda ids, weight_version: whole_pages(len(ids))
        return None

    async def clear(self) -> int:
        """Empty the file pool (pages dropped); other kinds are cleared by their instances."""
        return await asyncio.to_thread(self.file_pool.clear) if self.file_pool is not None else 0

    async def info(self) -> dict[str, Any]:
        pool = self.file_pool
        chosen = {"auto": self.reason} if self.reason else {}
        if pool is None:
            return {"kind": self.kind, **chosen}
        return {"kind": "file", "directory": str(pool.directory), "page_size": pool.page_size,
                "bytes": await asyncio.to_thread(pool.usage_bytes), "max_bytes": pool.max_bytes,
                "evicted_pages": pool.evicted_files, **chosen}


async def janitor(pool: FilePool, is_idle: Callable[[], bool], on_usage: Callable[[int, int], None],
                  idle_clear_s: float = KV_POOL.idle_clear_s, every_s: float = 5.0) -> None:
    """Keep the pool under its bound, drop pages half-written by killed instances, and once the engine
    has been idle a while drop the pages nobody has written for as long, so a finished rollout's pages
    do not pile up on disk. A page written meanwhile (a request sent to an instance directly, which the
    engine does not see) is kept until it too is that old.
    ``on_usage(bytes, evicted_pages)`` reports the pool's size (metrics)."""
    idle_since = None
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(every_s)
        try:
            await asyncio.to_thread(pool.enforce_bound)
            await asyncio.to_thread(pool.remove_stale_partials)
            if not is_idle():
                idle_since = None
            else:
                idle_since = idle_since or loop.time()
                if loop.time() - idle_since >= idle_clear_s:
                    removed = await asyncio.to_thread(pool.clear, time.time() - idle_clear_s)
                    if removed:
                        logger.info("engine idle: cleared %d pages from the KV pool", removed)
            on_usage(await asyncio.to_thread(pool.usage_bytes), pool.evicted_files)
        except Exception:  # the janitor must never stop the frontend
            logger.exception("KV pool janitor")
