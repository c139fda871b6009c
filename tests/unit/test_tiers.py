"""The unit tier stays free of SGLang, torch and child processes, also when it runs inside the whole
suite: there tests/unit_guard.py leaves its import guard off (the engine tests load SGLang), so the
rule is checked here from the sources. A unit test module's imports (at any depth, since its test
functions run them) are followed through the repository's own modules, whose imports at load time
(module and class bodies, not function bodies, not ``if TYPE_CHECKING:``) run with them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from import_graph import import_target

ROOT = Path(__file__).resolve().parents[2]
UNIT = Path(__file__).resolve().parent
OWN = ("seer_sglang", "benchmarks")
FORBIDDEN = ("sglang", "torch")
PROCESS_MODULES = ("subprocess", "multiprocessing")


def source_of(module: str) -> Path | None:
    """The repository file of a module of seer_sglang or benchmarks; None for anything else."""
    if module.split(".")[0] not in OWN:
        return None
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported(module: str, path: Path, load_time_only: bool) -> set[str]:
    """Modules a file imports: ``from a import b`` names a.b too, since b may be a submodule."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if load_time_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if load_time_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, module, is_package)
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {name for name in found if name}


def reached(test_file: Path) -> dict[str, list[str]]:
    """Every module the test file reaches, with one import chain that leads to it."""
    chains: dict[str, list[str]] = {}
    todo = [(name, [test_file.name]) for name in sorted(imported(test_file.stem, test_file, load_time_only=False))]
    while todo:
        name, chain = todo.pop()
        # importing a.b.c runs a and a.b first
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in chains:
                continue
            chains[prefix] = chain + [prefix]
            path = source_of(prefix)
            if path is not None:
                todo += [(n, chains[prefix]) for n in sorted(imported(prefix, path, load_time_only=True))]
    return chains


def unit_test_files() -> list[Path]:
    return sorted(UNIT.glob("test_*.py")) + [UNIT.parent / "unit_guard.py", UNIT.parent / "conftest.py"]


def test_no_unit_test_module_reaches_sglang_or_torch():
    problems = []
    for test_file in unit_test_files():
        for module, chain in reached(test_file).items():
            if module.split(".")[0] in FORBIDDEN:
                problems.append(" -> ".join(chain))
    assert not problems, "move these tests to tests/engine:\n" + "\n".join(sorted(set(problems)))


def test_no_unit_test_module_imports_a_process_module():
    """The modules that start processes are not a unit test's to use (the launcher's own modules may
    import subprocess: the unit tests call their pure parts)."""
    others = [f for f in sorted(UNIT.glob("test_*.py")) if f != Path(__file__)]  # this one calls it, refused
    offenders = [f.name for f in others
                 if {m.split(".")[0] for m in imported(f.stem, f, load_time_only=False)} & set(PROCESS_MODULES)]
    assert not offenders, offenders


def test_the_scan_sees_an_import_through_a_chain_and_inside_a_function(tmp_path):
    """The check itself: a test function's ``from package import module`` whose module loads torch."""
    engine_side = tmp_path / "test_engine_side.py"
    engine_side.write_text("def test_x():\n    from seer_sglang.plugin import pool_writes\n")
    chains = reached(engine_side)
    assert "torch" in chains and chains["torch"][0] == "test_engine_side.py"
    pure = tmp_path / "test_pure.py"
    pure.write_text("from seer_sglang.core.step_model import StepModel\n")
    assert not {m.split(".")[0] for m in reached(pure)} & set(FORBIDDEN)


def test_a_unit_only_session_cannot_import_sglang_or_torch_or_start_a_process(pytestconfig):
    """The guard (tests/unit_guard.py), as a unit test meets it."""
    guard = sys.modules["unit_guard"]
    if not guard.unit_only(pytestconfig):
        pytest.skip("this session collects more than tests/unit: the guard is off")
    for name in FORBIDDEN:
        with pytest.raises(ImportError):
            __import__(name)
    with pytest.raises(guard.ProcessStartRefused, match="tests/engine"):
        subprocess.run(["true"])


def test_the_suite_has_one_conftest():
    """One conftest.py (tests/), imported as ``conftest``; a second one anywhere below would take that
    name over, and the tests that import the shared helpers from ``conftest`` would find none of them."""
    assert [p.relative_to(ROOT) for p in (ROOT / "tests").rglob("conftest.py")] == [Path("tests/conftest.py")]
