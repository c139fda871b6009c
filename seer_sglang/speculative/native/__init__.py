"""The suffix automaton in C: a CPython extension, or the same code through ctypes.

``sam.c`` is the automaton; ``samext.c`` binds it as the extension module ``_sam`` (calls cost about a
tenth of a ctypes call, which matters at one update and one draft per request per decode step). When
the Python headers are missing, ``sam.c`` alone is loaded through ctypes. Both are compiled with the
system C compiler into a cache folder outside the source tree (``$SEER_SGLANG_CACHE/native`` or
``~/.cache/seer_sglang/native``), named by a hash of the sources, so an edited source is rebuilt.

``build()`` runs at install time (``python -m seer_sglang.speculative.native``); otherwise the first use
builds. ``best()`` is None when nothing compiles, and callers fall back to the Python automaton.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import sysconfig
from array import array
from pathlib import Path
from types import ModuleType
from typing import Sequence

from ...cbuild import cache_dir, compile_shared, digest

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
CORE, BINDING = HERE / "sam.c", HERE / "samext.c"
_loaded: dict[str, object] = {}  # kind -> module / library, or the error message (str)


def library_path(kind: str) -> Path:
    """``ext``: the CPython extension; ``ctypes``: the plain shared library."""
    if kind == "ext":
        return cache_dir() / f"_sam-{digest([CORE, BINDING])}{sysconfig.get_config_var('EXT_SUFFIX')}"
    return cache_dir() / f"libseer_sam-{digest([CORE])}.so"


def _compile(kind: str, force: bool) -> Path:
    if kind == "ext":
        include = sysconfig.get_paths()["include"]
        if not (Path(include) / "Python.h").exists():
            raise RuntimeError(f"no Python.h under {include} (install the Python development headers)")
        return compile_shared(library_path(kind), BINDING, [f"-I{include}", f"-I{HERE}"], force=force)
    return compile_shared(library_path(kind), CORE, force=force)


def build(force: bool = False) -> dict[str, str]:
    """Compile both routes; returns kind -> path, or the error for a route that failed."""
    out = {}
    for kind in ("ext", "ctypes"):
        try:
            out[kind] = str(_compile(kind, force))
        except RuntimeError as e:
            out[kind] = f"error: {e}"
    return out


def _declare(lib: ctypes.PyDLL) -> None:
    p, i32, f64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_double
    sigs = {
        "sam_new": (p, [i32]),
        "sam_free": (None, [p]),
        "sam_add_seq": (i32, [p]),
        "sam_extend": (i32, [p, i32, p, i32]),
        "sam_length": (i32, [p, i32]),
        "sam_read": (i32, [p, i32, i32, i32, p]),
        "sam_count": (i32, [p, p, i32]),
        "sam_memory": (ctypes.c_size_t, [p]),
        "sam_draft_freq": (i32, [p, i32, i32, i32, i32, i32, f64, i32, f64, p, p, p]),
        "sam_draft_recent": (i32, [p, i32, i32, i32, i32, p, p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def _load(kind: str) -> object | None:
    if kind not in _loaded:
        try:
            path = _compile(kind, force=False)
            if kind == "ext":
                spec = importlib.util.spec_from_file_location("_sam", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                _loaded[kind] = mod
            else:
                # PyDLL keeps the GIL during calls: they take microseconds, and Python threads sharing an
                # automaton never run C code on it concurrently.
                lib = ctypes.PyDLL(str(path))
                _declare(lib)
                _loaded[kind] = lib
        except (OSError, RuntimeError, ImportError) as e:
            _loaded[kind] = str(e)
            log.info("native suffix automaton (%s) unavailable: %s", kind, e)
    value = _loaded[kind]
    return None if isinstance(value, str) else value


def classes() -> dict[str, type]:
    """The native automaton classes that load here, fastest first."""
    out: dict[str, type] = {}
    ext = _load("ext")
    if isinstance(ext, ModuleType):
        out["ext"] = ext.SuffixAutomaton
    if _load("ctypes") is not None:
        out["ctypes"] = CtypesSuffixAutomaton
    return out


def best() -> type | None:
    """The fastest native automaton class, or None (then the Python one is used; logged once)."""
    ext = _load("ext")
    if isinstance(ext, ModuleType):
        return ext.SuffixAutomaton
    if _load("ctypes") is not None:
        return CtypesSuffixAutomaton
    if "_warned" not in _loaded:
        _loaded["_warned"] = "yes"
        log.warning("native suffix automaton unavailable (%s); using the slower Python one", _loaded.get("ctypes"))
    return None


def available() -> bool:
    return best() is not None


def _as_i32(tokens: Sequence[int]) -> array:
    return tokens if isinstance(tokens, array) and tokens.typecode == "i" else array("i", tokens)


class CtypesSuffixAutomaton:
    """Same interface and results as ``PySuffixAutomaton``, with sam.c called through ctypes."""

    def __init__(self, max_depth: int = 96):
        lib = _load("ctypes")
        if lib is None:
            raise RuntimeError(f"native suffix automaton unavailable: {_loaded.get('ctypes')}")
        self._lib = lib
        self.depth = max_depth
        self._h = lib.sam_new(max_depth)
        if not self._h:
            raise MemoryError("sam_new failed")
        self._cap = 0
        self._grow(64)

    def _grow(self, n: int) -> None:
        if n > self._cap:
            self._cap = max(n, 2 * self._cap)
            self._tok = (ctypes.c_int32 * self._cap)()
            self._par = (ctypes.c_int32 * self._cap)()
            self._score = (ctypes.c_double * self._cap)()

    def add_sequence(self) -> int:
        return self._lib.sam_add_seq(self._h)

    def extend(self, seq: int, tokens: Sequence[int]) -> int:
        buf = _as_i32(tokens)
        n = self._lib.sam_extend(self._h, seq, buf.buffer_info()[0], len(buf))
        if n < 0:
            if self.length(seq) < 0:
                raise IndexError(f"no sequence {seq}")
            raise MemoryError(f"sam_extend failed on sequence {seq}")
        return n

    def length(self, seq: int) -> int:
        return self._lib.sam_length(self._h, seq)

    def tokens(self, seq: int, start: int = 0) -> list[int]:
        m = self._lib.sam_length(self._h, seq) - start
        if m <= 0:
            return []
        out = array("i", bytes(4 * m))
        m = self._lib.sam_read(self._h, seq, start, m, out.buffer_info()[0])
        return out[:m].tolist()

    def count(self, tokens: Sequence[int]) -> int:
        buf = _as_i32(tokens)
        return self._lib.sam_count(self._h, buf.buffer_info()[0], len(buf))

    def draft_frequent(self, head: int, seq: int, match_cap: int, max_tokens: int, max_paths: int,
                       min_score: float, mix_states: int = 1,
                       escape: float = 0.0) -> tuple[list[int], list[int], list[float]]:
        self._grow(max_tokens)
        n = self._lib.sam_draft_freq(self._h, head, seq, match_cap, max_tokens, max_paths, min_score, mix_states,
                                     escape, self._tok, self._par, self._score)
        return self._tok[:n], self._par[:n], self._score[:n]

    def draft_recent(self, head: int, seq: int, match_cap: int, max_tokens: int) -> tuple[list[int], list[float]]:
        self._grow(max_tokens)
        n = self._lib.sam_draft_recent(self._h, head, seq, match_cap, max_tokens, self._tok, self._score)
        return self._tok[:n], self._score[:n]

    def memory_bytes(self) -> int:
        return self._lib.sam_memory(self._h) if self._h else 0

    def close(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.sam_free(h)

    def __del__(self) -> None:
        self.close()
