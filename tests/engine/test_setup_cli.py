"""The set-up as SGLang and the command line see it, each check in an interpreter of its own: the CPU
shims under SGLang, the models CLI, the launcher's CLI and an instance process that dies at start."""

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from seer_sglang import cpu_shims
from seer_sglang.frontend.tokenizer import PromptTokenizer
from seer_sglang.launch.instances import has_cuda

cpu_only = pytest.mark.skipif(has_cuda(), reason="CPU shims are installed only without a GPU")

HEALTHY = ("import http.server, sys\n"
           "class H(http.server.BaseHTTPRequestHandler):\n"
           "    def do_GET(self):\n"
           "        self.send_response(200); self.end_headers()\n"
           "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")


@cpu_only
def test_cpu_shims_are_installed_in_this_venv():
    pth = Path(sysconfig.get_paths()["purelib"]) / cpu_shims.PTH_NAME
    assert pth.read_text() == cpu_shims.pth_text()


@cpu_only
def test_sgl_kernel_stand_in_follows_sglang_fallback_rules():
    code = """
import importlib, torch, sgl_kernel
assert sgl_kernel.SEER_CPU_STUB
from sgl_kernel import some_cuda_op
try:
    some_cuda_op(1)
    raise SystemExit('stub did not raise')
except RuntimeError as e:
    assert 'not available on the CPU engine' in str(e)
import sgl_kernel.speculative as spec
assert callable(spec.tree_speculative_sampling_target_only)
try:
    importlib.import_module('sgl_kernel.quantization')
    raise SystemExit('generic submodule resolved')
except ImportError:
    pass
from sglang.srt.utils import cpu_has_amx_support
assert not cpu_has_amx_support(), 'AMX path would be taken'
import torchvision  # needs the op-schema fix on CPU torch
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_models_cli_prints_path_last(tiny_model):
    out = subprocess.run([sys.executable, "-m", "seer_sglang.models", "tiny"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path == Path(tiny_model)
    config = json.loads((path / "config.json").read_text())
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA
    tok = PromptTokenizer(str(path))
    ids = tok.encode_chat([{"role": "user", "content": "What is 2+3?"}])
    assert tok.decode(ids, skip_special_tokens=False).startswith("<|im_start|>user\nWhat is 2+3?<|im_end|>")


def test_launch_server_help_lists_seer_and_sglang_flags():
    out = subprocess.run([sys.executable, "-m", "seer_sglang.launch_server", "--help"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    for flag in ("--num-instances", "--instance-urls", "--scheduler", "--port", "--host"):
        assert flag in out.stdout
    for flag in ("--max-total-tokens", "--dtype", "--schedule-policy", "--mem-fraction-static"):
        assert flag in out.stdout


def test_launch_server_rejects_unknown_flag_before_starting_anything(tiny_model):
    out = subprocess.run([sys.executable, "-m", "seer_sglang.launch_server", "--model-path", tiny_model,
                          "--no-such-flag"], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "--no-such-flag" in out.stderr


def test_launch_server_refuses_a_busy_port_before_starting_anything(tiny_model, tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "seer_sglang.launch_server", "--model-path", tiny_model,
                              "--port", str(port), "--log-dir", str(tmp_path)], capture_output=True, text=True,
                             timeout=300)
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert not list(tmp_path.glob("instance-*.log"))  # failed before any instance started


def test_instance_that_lost_a_port_race_starts_again_on_a_new_port(tmp_path, monkeypatch):
    from seer_sglang.launch import instances as launcher

    spec = launcher.InstanceSpec(model_path="unused", port=launcher.free_port(), log_path=tmp_path / "inst.log")
    spec.log_path.write_text("torch.distributed.DistNetworkError: ... port: 26535, code: -98, name: EADDRINUSE\n")
    lost = launcher.InstanceProcess(spec, subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"]))
    started = []

    def start(s):  # stands in for an SGLang server: answers /health on the spec's port
        started.append(s.port)
        return launcher.InstanceProcess(s, subprocess.Popen([sys.executable, "-c", HEALTHY, str(s.port)]))

    monkeypatch.setattr(launcher, "start_instance", start)
    first_port = spec.port
    lost.popen.wait()
    try:
        launcher.wait_healthy([lost], timeout_s=60, progress=False)
        assert started == [lost.spec.port] and lost.spec.port != first_port and lost.alive()
        assert lost.url == f"http://127.0.0.1:{lost.spec.port}"
    finally:
        launcher.stop_instances([lost])


def test_instance_that_failed_otherwise_is_reported_not_restarted(tmp_path):
    from seer_sglang.launch import instances as launcher

    spec = launcher.InstanceSpec(model_path="unused", port=launcher.free_port(), log_path=tmp_path / "inst.log")
    spec.log_path.write_text("ValueError: no such model\n")
    dead = launcher.InstanceProcess(spec, subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"]))
    dead.popen.wait()
    with pytest.raises(launcher.InstanceStartError, match="no such model"):
        launcher.wait_healthy([dead], timeout_s=30, progress=False)
