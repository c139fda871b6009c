"""The shape of the repository: pure modules stay pure, no module imports another that imports it back
(seer_sglang, benchmarks and the tests' helpers alike), imports point down (benchmarks use the package,
the benchmark harness uses no benchmark script, nothing imports the tests), no private name crosses a
package, every benchmark answers --help without SGLang or torch, and every Seer default, choice list and
environment variable is written once (in ``seer_sglang.config``)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import io
import re
import sys
from pathlib import Path

import pytest

from import_graph import import_target

from seer_sglang import config

PACKAGE = Path(config.__file__).resolve().parent
REPO = PACKAGE.parent
TOPS = ("seer_sglang", "benchmarks", "tests")  # every importable tree of the repository
PURE = ("core", "speculative", "sim", "config", "wire")
SERVING = ("frontend", "plugin", "launch", "draft_server", "launch_server")


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cpu_shims" and "site" in rel.parts:
            continue  # installed into site-packages as other modules (sgl_kernel stand-in)
        parts = ["seer_sglang", *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def unit_of(module: str) -> str:
    """The package (or top-level module) of a module: core, frontend, config, ..."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports(module: str, path: Path) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import in the file, at any depth."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((import_target(node, module, is_package), [alias.name for alias in node.names]))
    return out


def test_pure_modules_import_neither_sglang_nor_serving_code(monkeypatch):
    """Every pure module loads where ``import sglang`` fails (those that compute with torch load where
    torch does), and nothing it imports, at any depth, is the frontend, the plugin, the launcher or the
    draft server."""
    pure = [m for m in modules() if unit_of(m) in PURE and not m.endswith("__main__")]
    assert len(pure) > 15
    monkeypatch.setitem(sys.modules, "sglang", None)  # any import of SGLang raises ImportError
    graph = module_graph()
    for name in pure:
        try:
            importlib.import_module(name)
        except ImportError as e:
            if e.name != "torch":  # the unit tier runs without torch (tests/unit_guard.py)
                raise
        serving = sorted(m for m in reachable(graph, name)
                         if m.startswith("seer_sglang.") and unit_of(m) in SERVING)
        assert not serving, f"{name} imports {serving}"


def test_pure_sources_name_no_serving_module():
    """Also imports inside functions, which the import test above does not run."""
    for module, path in modules().items():
        if unit_of(module) not in PURE:
            continue
        for target, _ in imports(module, path):
            assert not target.startswith("sglang"), f"{module} imports {target}"
            if target.startswith("seer_sglang."):
                assert unit_of(target) not in SERVING, f"{module} imports {target}"


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    known = modules()
    for module, path in known.items():
        for target, names in imports(module, path):
            if not target.startswith("seer_sglang"):
                continue
            targets = [target] + [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            for t in targets:
                if t != "seer_sglang" and unit_of(t) != unit_of(module):
                    graph.setdefault(unit_of(module), set()).add(unit_of(t))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_packages():
    graph = package_graph()
    assert graph["frontend"] >= {"core", "config", "wire"}  # the graph is really built
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def repository_modules() -> dict[str, Path]:
    """Every module of the repository's importable trees, by its dotted name."""
    out = {}
    for top in TOPS:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel.parts[:2] == ("seer_sglang", "cpu_shims") and "site" in rel.parts:
                continue  # installed into site-packages as other modules (sgl_kernel stand-in)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def module_graph(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the repository's modules it imports, at any depth of the file (imports inside
    functions too): ``from pkg import mod`` points at ``pkg.mod``, ``from pkg.mod import name`` at
    ``pkg.mod``, not at the packages above it."""
    known = repository_modules() if known is None else known
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for target, names in imports(module, path):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            for t in subs if subs and len(subs) == len(names) else [target, *subs]:
                while t and t not in known:
                    t = t.rpartition(".")[0]
                if t and t != module:
                    graph[module].add(t)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycle_between_modules():
    """Module by module over seer_sglang, benchmarks and tests: a cycle makes import order matter and
    ties modules that should be read and changed apart."""
    graph = module_graph()
    assert "benchmarks.harness.workload" in graph["benchmarks.rollout"]  # the graph is really built
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_imports_point_down():
    """seer_sglang imports neither the benchmarks nor the tests; the benchmarks import no test; the
    benchmark harness imports no benchmark script (scripts build on the harness, never the reverse)."""
    graph = module_graph()
    for module, targets in graph.items():
        top = module.split(".")[0]
        for target in targets:
            if top == "seer_sglang":
                assert not target.startswith(("benchmarks", "tests")), f"{module} imports {target}"
            if top == "benchmarks":
                assert not target.startswith("tests"), f"{module} imports {target}"
            if module.startswith("benchmarks.harness"):
                assert target.startswith(("benchmarks.harness", "seer_sglang")), f"{module} imports {target}"


def benchmark_scripts() -> list[str]:
    """The benchmark modules with a command line (``python -m benchmarks.<name>``)."""
    return sorted(m for m, path in repository_modules().items()
                  if m.startswith("benchmarks.") and not m.startswith("benchmarks.harness")
                  and "def main(" in path.read_text())


def test_benchmarks_have_a_command_line():
    assert {"benchmarks.rollout", "benchmarks.slo", "benchmarks.load", "benchmarks.kv_pool",
            "benchmarks.tables", "benchmarks.gpu_step"} <= set(benchmark_scripts())


@pytest.mark.parametrize("name", benchmark_scripts())
def test_benchmark_answers_help_without_sglang_or_torch(name, monkeypatch):
    """``python -m benchmarks.<name> --help`` parses its flags and prints them, in this process, with
    SGLang and torch unimportable: a script imports them where a measurement runs, not to parse flags."""
    monkeypatch.setitem(sys.modules, "sglang", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(sys, "argv", [f"python -m {name}", "--help"])
    module = importlib.import_module(name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code in (0, None)
    assert "usage:" in out.getvalue() and "--help" in out.getvalue()


def test_no_private_name_imported_across_packages():
    for module, path in modules().items():
        for target, names in imports(module, path):
            if target.startswith("seer_sglang") and target != "seer_sglang" and unit_of(target) != unit_of(module):
                private = [n for n in names if n.startswith("_")]
                assert not private, f"{module} imports private {private} from {target}"


def config_fields() -> list[dataclasses.Field]:
    sections = [*config.SECTIONS.values(), config.PluginConfig]
    return [f for cls in sections for f in dataclasses.fields(cls)]


# Names under which code elsewhere takes a config value as a parameter or field.
ALIASES = {"starvation_steps": "transfer_starvation_steps", "default_ttl_s": "group_ttl_s",
           "idle_drop_s": "group_ttl_s", "ttl_s": "group_ttl_s"}


def literal_defaults(tree: ast.AST):
    """(name, value) of every literal default: function parameters and class-level fields."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
                yield arg.arg, default
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    yield arg.arg, default
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                    yield stmt.target.id, stmt.value


def test_every_seer_default_is_written_once():
    names = {f.name for f in config_fields() if f.default is not None and f.default is not dataclasses.MISSING}
    names |= set(ALIASES)
    offenders = []
    for module, path in modules().items():
        if module == "seer_sglang.config":
            continue
        for name, value in literal_defaults(ast.parse(path.read_text())):
            if name in names and isinstance(value, ast.Constant) and value.value is not None:
                offenders.append(f"{module}: {name}={value.value!r}")
    assert not offenders, "defaults written outside seer_sglang.config: " + ", ".join(offenders)


def test_choices_and_environment_variables_are_written_once():
    choice_lists = {config.SCHEDULERS, config.KV_POOLS, config.DRAFTERS, config.DRAFT_MODES, config.BUDGETS}
    env_names = {f.metadata["env"] for f in config_fields() if "env" in f.metadata} | {config.CACHE_ENV}
    assert "SEER_DRAFT_SERVER" in env_names
    for module, path in modules().items():
        if module == "seer_sglang.config":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) for e in node.elts):
                values = tuple(e.value for e in node.elts)
                assert values not in choice_lists, f"{module} repeats the choice list {values}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in env_names, f"{module} names the environment variable {node.value}"


def test_registries_implement_the_configured_choices():
    from seer_sglang.core.policy import POLICIES
    from seer_sglang.speculative.budget import make_budget
    from seer_sglang.speculative.drafters import make_drafter

    assert tuple(POLICIES) == config.SCHEDULERS
    for name in config.DRAFTERS:
        make_drafter(name, native=False)
    for name in config.BUDGETS:
        make_budget(name, 4)
    with pytest.raises(ValueError):
        make_budget("greedy", 4)


def test_cli_is_built_from_the_config():
    from seer_sglang.launch_server import seer_parser

    parser = seer_parser()
    ns, rest = parser.parse_known_args(["--chunk-size", "64", "--draft", "none", "--kv-pool", "file",
                                        "--instance-urls", "http://a", "http://b", "--dtype", "float32"])
    cfg = config.from_namespace(ns)
    assert rest == ["--dtype", "float32"]  # SGLang's flags go through untouched
    assert cfg.scheduler.chunk_size == 64 and cfg.draft.drafter == "none" and cfg.kv_pool.kind == "file"
    assert cfg.instances.instance_urls == ("http://a", "http://b")
    assert cfg.scheduler.kv_headroom == config.SchedulerConfig().kv_headroom  # untouched flags keep defaults
    defaults = config.from_namespace(parser.parse_known_args([])[0])
    assert defaults == config.SeerConfig()
    flags = {a for action in parser._actions for a in action.option_strings}
    assert set(config.flag_names()) <= flags
    with pytest.raises(SystemExit):
        parser.parse_known_args(["--scheduler", "fastest"])


def test_plugin_config_travels_through_the_environment():
    sent = config.PluginConfig(drafter="sam", draft_server="tcp://127.0.0.1:9", budget="full",
                               cost_path="/x.json", transfer_scheduler=True, transfer_starvation_steps=7)
    env = sent.to_env()
    assert config.PluginConfig.from_env(env) == sent
    assert config.PluginConfig.from_env({}) == config.PluginConfig()
    assert config.PluginConfig.from_env(config.PluginConfig().to_env()) == config.PluginConfig()


def test_readme_flags_table_shows_the_config_defaults():
    """The README's flags table is written by hand: every flag is in it, with the config's default."""
    readme = (PACKAGE.parent / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`--"):
            rows[cells[0].strip("`").split()[0]] = cells[1]
    for section in config.SECTIONS.values():
        for f in dataclasses.fields(section):
            if "flag" not in f.metadata:
                continue
            assert f.metadata["flag"] in rows, f"README flags table lacks {f.metadata['flag']}"
            if isinstance(f.default, (int, float, str)) and not isinstance(f.default, bool):
                shown = f"{f.default:g}" if isinstance(f.default, float) else str(f.default)
                assert shown in rows[f.metadata["flag"]], (f.metadata["flag"], shown, rows[f.metadata["flag"]])


def headline_rows(readme: str) -> list[dict[str, str]]:
    """The README's headline table, row by row, by column name."""
    section = readme.split("## Headline results", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_readme_is_a_front_door_with_a_short_headline():
    """At most 180 lines; the headline holds 4 to 6 rows, each one number and what it is against."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 180
    rows = headline_rows(readme)
    assert 4 <= len(rows) <= 6
    for row in rows:
        assert set(row) == {"what", "result", "against", "how"}, row
        numbers = re.findall(r"\d+(?:[.,]\d+)*", re.sub(r"`[^`]*`", "", row["result"]))
        assert len(numbers) == 1, row["result"]
        assert row["against"], row


def test_the_architecture_page_says_which_packages_run_inside_the_sglang_instances():
    """The plugin runs inside every SGLang process, and what it imports runs there with it."""
    runs_in = {}
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        m = re.match(r"\| `seer_sglang/([a-z_]+)(?:/|\.py)` \| ([^|]+) \|", line)
        if m:
            runs_in[m[1]] = m[2]
    inside = package_graph()["plugin"]
    assert {"core", "speculative", "wire"} <= inside  # the graph is really read
    for unit in sorted(inside):
        cell = runs_in.get(unit, "")
        assert "every process" in cell or "instance" in cell or "SGLang process" in cell, (unit, cell)
