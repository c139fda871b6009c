"""The ``file`` pool as the frontend sees it: which pages of a sample are there, a size bound, clearing.

SGLang names an L3 page ``<chained page hash>_<model>_<tp rank>_<tp size>.bin``; the hash chains
over the token ids, page by page, so the router can tell, without asking any instance, how much of
a sample's context a continuation will find in the pool.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

logger = logging.getLogger("seer_sglang.kvpool")


def storage_model_name(served_model_name: str) -> str:
    return "-".join(served_model_name.split("/"))


class FilePool:
    def __init__(self, directory: str | Path, served_model_name: str, page_size: int, size_gb: float,
                 tp_size: int = 1):
        self.directory = Path(directory)
        self.suffix = f"_{storage_model_name(served_model_name)}_0_{tp_size}.bin"
        self.page_size = page_size
        self.max_bytes = int(size_gb * 2**30)
        self.evicted_files = 0

    def page_hashes(self, token_ids: list[int]) -> list[str]:
        from sglang.srt.mem_cache.utils import get_hash_str

        full = len(token_ids) - len(token_ids) % self.page_size
        if full == 0:
            return []
        return list(get_hash_str(token_ids[:full], None, self.page_size))

    def pooled_tokens(self, token_ids: list[int]) -> int:
        """Tokens of the longest prefix of ``token_ids`` whose pages are all in the pool."""
        hashes = self.page_hashes(token_ids)
        lo, hi = 0, len(hashes)  # pages are written prefix first: binary search the last present one
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if (self.directory / f"{hashes[mid - 1]}{self.suffix}").exists():
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
                    if not entry.name.endswith(".bin"):
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

    def clear(self) -> int:
        """Drop every page: after a weight update the pool's KV belongs to the old policy."""
        return sum(self._unlink(path) for _, _, path in self._pages())
