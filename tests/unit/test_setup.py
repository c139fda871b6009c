"""The CPU shims' files, the tokenizer's stop-string hold-back and the launcher's port and CPU defaults,
in process (what needs an interpreter of its own is in tests/engine/test_setup_cli.py)."""

from pathlib import Path

from seer_sglang import cpu_shims
from seer_sglang.frontend.tokenizer import PromptTokenizer, TextStreamer

def test_cpu_shims_install_and_uninstall_roundtrip(tmp_path):
    target = cpu_shims.install(str(tmp_path))
    assert target.exists() and str(cpu_shims.SHIM_DIR) in target.read_text()
    cpu_shims.uninstall(str(tmp_path))
    assert not target.exists()


def test_text_streamer_holds_back_possible_stop_prefix(tiny_model):
    tok = PromptTokenizer(tiny_model)
    ids = tok.encode_text("the sum is 12 then stop here")
    streamer = TextStreamer(tok, stop=["stop here"])
    pieces = [streamer.delta(ids[:i]) for i in range(1, len(ids) + 1)]
    assert "stop here" not in "".join(pieces)  # never streamed before the stop is known
    final = streamer.final("the sum is 12 then ")
    assert "".join(pieces) + final == "the sum is 12 then "


def test_free_port_stays_out_of_the_ranges_others_pick_from():
    from seer_sglang.launch.instances import free_port

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(30000 < p < low for p in ports)  # above SGLang's NCCL picks, below client sockets' ports
    assert len(ports) > 1  # random picks: two launchers starting together do not race for one port


def test_ports_picked_together_are_distinct_even_when_a_pick_repeats(monkeypatch):
    """Servers started together (Mooncake's master RPC and admin ports, a deployment's instances) bind
    their ports only later, so a second pick may land on the first: ``free_port`` never hands out a port
    it handed out lately, even when every pick tries the same ports in the same order."""
    from seer_sglang.launch import processes

    monkeypatch.setattr(processes.random, "sample", lambda population, k: list(population)[:k])
    ports = [processes.free_port() for _ in range(8)]
    assert len(set(ports)) == 8, ports  # each pick tried the same port first


def test_cpu_instances_sleep_when_idle_unless_told_otherwise():
    """CPU instances share the machine's cores: an idle one must not spin one of them."""
    from seer_sglang.launch.instances import cpu_default_args

    args = cpu_default_args(["--dtype", "float32"])
    assert "--sleep-on-idle" in args and args[args.index("--device") + 1] == "cpu"
    assert cpu_default_args(["--sleep-on-idle", "--device", "cpu", "--max-total-tokens", "8"]) == []
