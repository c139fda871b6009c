"""The one result format of the benchmarks (``benchmarks.harness.result``) and how stored runs are found
(``benchmarks.harness.manifest``): a run folder written once, with the meta a later reader needs."""

from __future__ import annotations

import json
import platform

import pytest

from benchmarks.harness import manifest, result


@pytest.fixture
def quiet_machine(monkeypatch):
    """git and nvidia-smi are other processes, which the unit tier does not start: their answers stand in."""
    monkeypatch.setattr(result, "git_state", lambda cwd=result.ROOT: {"commit": "abc123", "dirty": True})
    monkeypatch.setattr(result, "gpu_name", lambda: None)


def test_a_run_is_a_dated_folder_named_by_out(tmp_path):
    assert result.run_folder("rollout", tmp_path / "cpu_tiny.json", "2026-01-02") == tmp_path / "rollout" / "2026-01-02-cpu_tiny"
    assert result.run_folder("slo", tmp_path / "slo_cpu", "2026-01-02") == tmp_path / "slo" / "2026-01-02-slo_cpu"
    assert result.run_folder("soak", None, "2026-01-02") == result.RESULTS / "soak" / "2026-01-02-run"
    # a run folder named in full (as the docs' commands name them) is taken as it is, once
    named = tmp_path / "rollout" / "2026-01-02-seerload"
    assert result.run_folder("rollout", named, "2026-03-04") == named
    assert result.run_folder("rollout", tmp_path / "rollout" / "seerload", "2026-03-04") == tmp_path / "rollout" / "2026-03-04-seerload"


def test_the_result_holds_meta_and_figures_and_is_written_once(tmp_path, quiet_machine):
    run = result.start("rollout", tmp_path / "x.json", emulated="h100-70b", argv=["--modes", "baseline,context"],
                       date="2026-01-02")
    plot = run.file("plot.png")
    assert plot.parent == run.folder == tmp_path / "rollout" / "2026-01-02-x"
    run.write({"modes": {"context": {"completion_s": 1.0}}}, partial=True)
    assert (run.folder / result.PARTIAL).exists() and not run.result.exists()
    path = run.write({"modes": {"context": {"completion_s": 2.0}}, "ratios": {"context": {"throughput": 1.5}}})
    data = json.loads(path.read_text())
    assert not (run.folder / result.PARTIAL).exists()  # the final result replaces what a cut-short run would keep
    assert data["modes"]["context"]["completion_s"] == 2.0 and data["ratios"]["context"]["throughput"] == 1.5
    meta = data["meta"]
    assert meta["command"] == "python -m benchmarks.rollout --modes baseline,context"
    assert meta["git"] == {"commit": "abc123", "dirty": True} and meta["emulated"] == "h100-70b"
    assert meta["machine"]["cpus"] >= 1 and meta["machine"]["python"] == platform.python_version()
    assert {"gpu", "torch", "sglang", "arch"} <= set(meta["machine"])
    assert platform.node() not in path.read_text()  # no host name
    with pytest.raises(FileExistsError):
        run.write({"modes": {}})
    with pytest.raises(FileExistsError):  # a rerun under the same label and date is refused, not overwritten
        result.start("rollout", tmp_path / "x.json", date="2026-01-02")
    assert json.loads(path.read_text())["modes"]["context"]["completion_s"] == 2.0


def test_versions_are_read_without_importing_the_package():
    assert result.version("pytest") == pytest.__version__
    assert result.version("no-such-package-here") is None


def test_a_moved_input_is_found_by_the_path_a_result_recorded(tmp_path, monkeypatch):
    folder = tmp_path / "benchmarks" / "results" / "record_text" / "2026-01-02-text_a"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"config": {"seed": 0}}))
    listing = tmp_path / "manifest.json"
    listing.write_text(json.dumps({"runs": [{
        "path": "benchmarks/results/record_text/2026-01-02-text_a", "benchmark": "record_text", "label": "text_a",
        "kind": "recording", "status": "current", "regime": "CPU-measured",
        "former": {"result.json": "benchmarks/results/text_a.json"}}]}))
    monkeypatch.setattr(manifest, "ROOT", tmp_path)
    monkeypatch.setattr(manifest.Entry, "folder", property(lambda e: tmp_path / e.path))
    manifest._index.cache_clear()
    try:
        found = manifest.resolve("benchmarks/results/text_a.json", listing)
        assert found == folder / "result.json"
        moved = manifest.Moved(found, "benchmarks/results/text_a.json")
        assert moved == "benchmarks/results/text_a.json" and moved == str(found) and moved != "other.json"
        assert json.loads(open(moved).read()) == {"config": {"seed": 0}}
        with pytest.raises(FileNotFoundError):
            manifest.resolve("benchmarks/results/never.json", listing)
    finally:
        manifest._index.cache_clear()


def test_a_new_run_joins_the_manifest_as_current_with_the_regime_its_meta_gives(tmp_path, monkeypatch, quiet_machine):
    monkeypatch.setattr(manifest, "ROOT", tmp_path)
    results = tmp_path / "benchmarks" / "results"
    emulated = result.start("rollout", results / "x30.json", emulated="h100-70b", argv=[], date="2026-01-02")
    emulated.write({"modes": {}})
    cpu = result.start("soak", results / "soak_cpu", argv=[], date="2026-01-03")
    cpu.write({"rounds": []})
    bounds = result.start("sim_bounds", results / "sim_bounds_a.json", argv=[], date="2026-01-04")
    bounds.write({"modes": {}})
    entries = {e["label"]: e for e in map(manifest.new_entry, (emulated.folder, cpu.folder, bounds.folder))}
    assert entries["x30"] == {"path": "benchmarks/results/rollout/2026-01-02-x30", "benchmark": "rollout",
                              "label": "x30", "kind": "result", "regime": "emulated", "status": "current",
                              "former": {}}
    assert entries["soak_cpu"]["regime"] == "CPU-measured" and entries["sim_bounds_a"]["regime"] == "simulated"

