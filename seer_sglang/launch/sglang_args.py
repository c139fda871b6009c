"""Reading an SGLang command line: the flags a user gave win over the ones the launcher adds."""

from __future__ import annotations


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in an SGLang command line, given as ``--flag v`` or ``--flag=v``."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)
