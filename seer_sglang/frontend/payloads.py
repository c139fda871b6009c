"""Checks on serialized tensors before they reach an instance.

SGLang's scheduler unpickles ``/update_weights_from_tensor`` entries in its event loop; one that does
not unpickle (bad base64, a truncated pickle, a global its ``SafeUnpickler`` blocks) raises there and
takes the instance down. The frontend reads each entry's opcodes without running them
(``pickletools``) and refuses, with a 400, what SGLang's unpickler would fail on. That includes a host
tensor shared through a shared-memory file (torch's ``file_system`` strategy) whose file is gone: the
sender let its tensor go, or a handle was reused after its receivers closed it; and one shared by file
descriptor (torch's default strategy), which no process but the sender's children can open. The same
checks hold for ``/load_lora_adapter_from_tensors``."""

from __future__ import annotations

import binascii
import os
import pickletools
from typing import Any, Iterable
from urllib.parse import urlsplit

_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
               "SHORT_BINSTRING"}
_LOAD_FROM_BYTES = ("torch.storage", "_load_from_bytes")  # SGLang's unpickler maps it to a safe loader
_BYTES_OPS = {"SHORT_BINBYTES", "BINBYTES", "BINBYTES8"}
# torch's default (file_descriptor) strategy: the receiver asks the sender's resource sharer for the
# descriptor, which only a process holding the sender's multiprocessing authkey may do; any other
# fails its unpickle (an instance's scheduler, which dies of it)
_BY_DESCRIPTOR = ("multiprocessing.resource_sharer", "DupFd")
_SHM_PREFIX = b"/torch_"  # torch's names for the shared-memory files of the file_system strategy
SHM_DIR = "/dev/shm"


def tensor_payload_problem(entry: Any, local: bool = False) -> str | None:
    """Why SGLang's unpickler would fail on ``entry`` (one serialized rank of named tensors), or None.
    ``local``: the instances share this host's shared memory, so a missing file can be seen here."""
    from sglang.srt.utils.common import SafeUnpickler, normalize_serialized_named_tensor_payload

    if not isinstance(entry, str):
        return f"an entry is a base64 string, not {type(entry).__name__}"
    try:
        data = normalize_serialized_named_tensor_payload(entry)
    except (binascii.Error, TypeError, ValueError) as e:
        return f"an entry is not base64: {e}"
    try:
        ops = list(pickletools.genops(data))
    except Exception as e:  # pickletools raises ValueError or others on any malformed stream
        return f"an entry is not a complete pickle: {e}"
    if not ops or ops[-1][0].name != "STOP":
        return "an entry is not a complete pickle"
    strings: list[str] = []  # string values pushed so far, for STACK_GLOBAL's module and name
    memo: dict[int, str] = {}
    memo_size, last_string = 0, None
    shared: list[bytes] = []
    for op, arg, _ in ops:
        name = op.name
        if name in _BYTES_OPS and isinstance(arg, bytes) and arg.startswith(_SHM_PREFIX):
            shared.append(arg)
        pushed = None
        if name in _STRING_OPS:
            pushed = arg if isinstance(arg, str) else str(arg)
        elif name in ("BINGET", "LONG_BINGET", "GET") and arg in memo:
            pushed = memo[arg]
        elif name == "MEMOIZE":
            if last_string is not None:
                memo[memo_size] = last_string
            memo_size += 1
        elif name in ("BINPUT", "LONG_BINPUT", "PUT") and last_string is not None:
            memo[arg] = last_string
        global_ = None
        if name == "GLOBAL":
            global_ = tuple(str(arg).split(" ", 1))
        elif name == "STACK_GLOBAL":
            if len(strings) < 2:
                return "an entry's pickle names a global it does not give"
            global_ = (strings[-2], strings[-1])
        if global_ is not None and global_ != _LOAD_FROM_BYTES and global_ not in SafeUnpickler.ALLOWED_GLOBALS:
            return f"an entry's pickle loads {'.'.join(global_)}, which SGLang's unpickler refuses"
        if global_ == _BY_DESCRIPTOR:
            return ("an entry shares a host tensor by file descriptor (torch's default sharing strategy), which only "
                    "a child process of the sender can open; share host tensors with "
                    "torch.multiprocessing.set_sharing_strategy('file_system')")
        if pushed is not None:
            strings.append(pushed)
        if name not in ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"):
            last_string = pushed
    if local and os.path.isdir(SHM_DIR):
        gone = next((h for h in shared if not os.path.exists(SHM_DIR + h.decode(errors="replace"))), None)
        if gone is not None:
            return (f"an entry shares a host tensor through {gone.decode(errors='replace')}, which no longer exists: "
                    "keep the tensors alive until the update returns, and share fresh ones for each update")
    return None


def tensor_entries_problem(entries: Iterable[Any], instance_urls: Iterable[str]) -> str | None:
    """The first of ``entries`` that ``tensor_payload_problem`` refuses, and why; the shared-memory
    check where every instance runs on this host and so sees its shared memory."""
    local = all(urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1") for url in instance_urls)
    return next(filter(None, (tensor_payload_problem(entry, local) for entry in entries)), None)


def update_body_problem(path: str, body: dict[str, Any], custom_loaders: list[str]) -> tuple[str, str] | None:
    """(field, why) for a weight-update body whose values SGLang's scheduler would fail on (its HTTP
    layer checks only their types), or None. ``custom_loaders``: the instances' ``--custom-weight-loader``."""
    import torch
    from sglang.srt.configs.load_config import LoadFormat

    version = body.get("weight_version")
    if version is not None and (not isinstance(version, str) or not version):
        return "weight_version", "weight_version is a non-empty string (or null: seer names the update)"
    fmt = body.get("load_format")
    if path == "/update_weights_from_disk":
        allowed = [f.value for f in LoadFormat]
    elif path == "/update_weights_from_tensor":
        allowed = ["direct", "flattened_bucket", *custom_loaders]
    else:
        allowed = ["flattened_bucket"]
    if fmt is not None and fmt not in allowed:
        return "load_format", f"load_format {fmt!r} is not one of {allowed} (or null)"
    if path == "/update_weights_from_distributed":
        names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
        if not (isinstance(names, list) and isinstance(dtypes, list) and isinstance(shapes, list)
                and len(names) == len(dtypes) == len(shapes)):
            return "names", "names, dtypes and shapes are lists of the same length"
        bad = next((d for d in dtypes if not isinstance(d, str) or not isinstance(getattr(torch, d, None), torch.dtype)),
                   None)
        if bad is not None:
            return "dtypes", f"{bad!r} is not a torch dtype name"
        if not all(isinstance(s, list) and all(isinstance(n, int) and n >= 0 for n in s) for s in shapes):
            return "shapes", "each shape is a list of non-negative integers"
    return None
