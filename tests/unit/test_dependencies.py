"""pyproject.toml declares what the code imports: every third-party module seer_sglang imports is a
declared requirement (at run time, or in the extra of the feature that imports it), every run-time
requirement is imported by seer_sglang, and the tests' and benchmarks' imports are declared too."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# import name -> distribution name, where the two differ
DISTRIBUTION = {"zmq": "pyzmq", "prometheus_client": "prometheus-client", "flashinfer": "flashinfer-python",
                "sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow"}
# installed by scripts/setup.sh outside the declared lists: the Mooncake transfer engine (a CUDA and a
# non-CUDA wheel under different names) and the trainers' clients (veRL, AReaL: without their dependencies)
SETUP_INSTALLED = {"mooncake", "verl", "areal"}
# the repository's own modules, the CPU sgl_kernel stand-in, and pip (in every virtualenv)
LOCAL = {"seer_sglang", "benchmarks", "conftest", "fault_proxy", "kill_rollout", "mooncake_migration",
         "flashinfer_model", "import_graph", "unit_guard", "areal_client", "verl_client", "sgl_kernel", "pip"}


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def third_party_imports(root: Path) -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere under ``root`` (any depth), with the files."""
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if "cpu_shims/site" in path.as_posix():
            continue  # installed into site-packages as other modules (the sgl_kernel stand-in)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LOCAL:
                    found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def distribution(module: str) -> str:
    return DISTRIBUTION.get(module, module).lower().replace("_", "-")


def undeclared(root: str, requirements: list[str]) -> dict[str, set[str]]:
    declared = names(requirements)
    return {m: files for m, files in third_party_imports(ROOT / root).items()
            if distribution(m) not in declared and m not in SETUP_INSTALLED}


def test_every_module_the_package_imports_is_declared():
    extras = PROJECT["optional-dependencies"]
    assert undeclared("seer_sglang", PROJECT["dependencies"] + extras["gpu"]) == {}


def test_every_run_time_requirement_is_imported_by_the_package():
    imported = {distribution(m) for m in third_party_imports(ROOT / "seer_sglang")}
    assert names(PROJECT["dependencies"]) - imported == set()


def test_the_tests_and_benchmarks_imports_are_declared():
    extras = PROJECT["optional-dependencies"]
    run_time = PROJECT["dependencies"] + extras["gpu"]
    assert undeclared("tests", run_time + extras["test"]) == {}
    assert undeclared("benchmarks", run_time + extras["bench"]) == {}


def test_the_scan_maps_import_names_to_distributions():
    assert distribution("zmq") == "pyzmq" and distribution("prometheus_client") == "prometheus-client"
    assert names(["torch>=2.13,<2.15", "triton; sys_platform == 'linux'", "flashinfer_python[cu13]==0.7.2"]) == {
        "torch", "triton", "flashinfer-python"}
