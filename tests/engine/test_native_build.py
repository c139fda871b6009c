"""The native suffix automaton's build, in an interpreter without a C compiler."""

from __future__ import annotations


def test_falls_back_to_python_without_a_compiler(tmp_path):
    import os
    import subprocess
    import sys

    code = ("from seer_sglang.speculative.drafters import make_drafter\n"
            "d = make_drafter('group-suffix')\n"
            "d.update('g', 'r', 0, [1, 2, 3, 1, 2])\n"
            "print(type(d._groups['g'].index).__name__, d.draft('g', 'r', 2).tokens)\n")
    env = {**os.environ, "SEER_SGLANG_CACHE": str(tmp_path), "CC": "/bin/false"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PySuffixAutomaton", "[3,", "1]"]
