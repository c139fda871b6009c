"""Compile a small C source into a shared library in the cache, once per source.

The library lands in ``$SEER_SGLANG_CACHE/native`` (or ``~/.cache/seer_sglang/native``), outside the
source tree, named by a hash of its sources and flags: an edited source is rebuilt, an unchanged one
is reused by every process and every clone that shares the cache. The build is atomic (a temporary
file renamed into place), since several processes may build the same library at once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from .config import cache_root

CFLAGS = ("-O2", "-std=c11", "-shared", "-fPIC")


def cache_dir() -> Path:
    return cache_root() / "native"


def digest(files: Sequence[Path], flags: Sequence[str] = CFLAGS) -> str:
    h = hashlib.sha256(" ".join(flags).encode())
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler found (set CC)")
    return cc


def compile_shared(out: Path, source: Path, args: Sequence[str] = (), libs: Sequence[str] = (),
                   flags: Sequence[str] = CFLAGS, force: bool = False) -> Path:
    """``out`` compiled from ``source`` (``args`` before it, ``libs`` after it); an existing ``out`` is
    kept unless ``force``. Raises RuntimeError with the compiler's message when the build fails."""
    if out.exists() and not force:
        return out
    cmd = [compiler(), *flags, *args, str(source), *libs]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        subprocess.run([*cmd, "-o", tmp], check=True, capture_output=True, text=True)
        os.replace(tmp, out)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"compiling {source} failed:\n{e.stderr}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
