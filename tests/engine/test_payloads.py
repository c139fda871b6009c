"""What the frontend refuses of /update_weights_from_tensor entries before an instance unpickles them."""

from __future__ import annotations

import base64
import os
import pickle

import torch
from sglang.srt.utils.common import MultiprocessingSerializer

from seer_sglang.frontend.payloads import tensor_payload_problem


def _serialized(named, strategy: str) -> str:
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(strategy)
    try:
        return MultiprocessingSerializer.serialize(named, output_str=True)
    finally:
        torch.multiprocessing.set_sharing_strategy(before)


def test_sglangs_own_serialized_tensors_pass():
    named = [("layer.weight", torch.randn(4, 3)), ("layer.bias", torch.zeros(3, dtype=torch.bfloat16))]
    assert tensor_payload_problem(_serialized(named, "file_system")) is None


def test_a_host_tensor_shared_by_file_descriptor_is_refused():
    """torch's default strategy hands a descriptor over the sender's resource sharer, which only the
    sender's children may ask: an instance's unpickle of it fails, and its scheduler dies."""
    problem = tensor_payload_problem(_serialized({"lora_A": torch.ones(2)}, "file_descriptor"))
    assert problem is not None and "file_system" in problem


def test_what_sglangs_unpickler_would_fail_on_is_refused():
    good = MultiprocessingSerializer.serialize([("w", torch.ones(2))], output_str=True)
    raw = base64.b64decode(good)
    assert "base64 string" in tensor_payload_problem(7)
    assert "complete pickle" in tensor_payload_problem("")
    assert "base64" in tensor_payload_problem("not base64!")
    assert "complete pickle" in tensor_payload_problem(base64.b64encode(raw[: len(raw) // 2]).decode())
    unsafe = base64.b64encode(pickle.dumps(os.system)).decode()  # a global SafeUnpickler blocks
    assert "posix.system" in tensor_payload_problem(unsafe) or "os.system" in tensor_payload_problem(unsafe)
    old_protocol = base64.b64encode(pickle.dumps(os.system, protocol=0)).decode()  # GLOBAL, not STACK_GLOBAL
    assert "refuses" in tensor_payload_problem(old_protocol)


def test_weight_update_values_sglangs_scheduler_would_fail_on_are_refused():
    from seer_sglang.frontend.payloads import update_body_problem

    assert update_body_problem("/update_weights_from_disk", {"model_path": "m", "load_format": "safetensors"}, []) is None
    assert update_body_problem("/update_weights_from_disk", {"load_format": "bogus"}, [])[0] == "load_format"
    assert update_body_problem("/update_weights_from_disk", {"weight_version": {"a": 1}}, [])[0] == "weight_version"
    assert update_body_problem("/update_weights_from_tensor", {"load_format": "my.loader"}, ["my.loader"]) is None
    assert update_body_problem("/update_weights_from_tensor", {"load_format": "my.loader"}, [])[0] == "load_format"
    good = {"names": ["w"], "dtypes": ["bfloat16"], "shapes": [[2, 3]]}
    assert update_body_problem("/update_weights_from_distributed", good, []) is None
    assert update_body_problem("/update_weights_from_distributed", {**good, "dtypes": ["floaty"]}, [])[0] == "dtypes"
    assert update_body_problem("/update_weights_from_distributed", {**good, "shapes": [[-1]]}, [])[0] == "shapes"
    assert update_body_problem("/update_weights_from_distributed", {**good, "names": []}, [])[0] == "names"


def test_a_host_tensor_whose_shared_memory_is_gone_is_refused():
    """torch's file_system strategy names a shared-memory file; an instance given a name whose file is gone
    fails in its scheduler and goes down, so the frontend refuses it when the instances share its host."""
    import re

    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        alive = torch.ones(8)
        raw = base64.b64decode(MultiprocessingSerializer.serialize([("w", alive)], output_str=True))
        names = re.findall(rb"/torch_[0-9_]+", raw)
        assert names and all(os.path.exists("/dev/shm" + n.decode()) for n in names)
        assert tensor_payload_problem(base64.b64encode(raw).decode(), local=True) is None
        gone = names[0][:-1] + (b"8" if names[0][-1:] == b"9" else b"9")  # same length, another name
        while os.path.exists("/dev/shm" + gone.decode()):
            gone = gone[:-2] + b"99"
        stale = base64.b64encode(raw.replace(names[0], gone)).decode()
        assert "no longer exists" in tensor_payload_problem(stale, local=True)
        assert tensor_payload_problem(stale) is None  # instances elsewhere: their memory is not ours to check
    finally:
        torch.multiprocessing.set_sharing_strategy("file_descriptor")
