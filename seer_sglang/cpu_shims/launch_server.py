"""``python -m seer_sglang.cpu_shims.launch_server [SGLang's flags]``: SGLang's own ``launch_server``, its
scheduler and detokenizer forked from the launcher instead of spawned. CPU instances only.

SGLang spawns its children because a CUDA context does not survive a fork. A spawned child imports
SGLang again before it does anything. On a 2-core machine that is about 40 of the 62 CPU-seconds an
instance takes to start, and the instance answers ``/health`` after 47 s instead of 28 s. A CPU
instance has no CUDA context to lose, and its launcher has already imported everything its children
run, so they are forked. The rest is unchanged: the same ``launch_server`` with the same flags, and the
children run the same code.
"""

import multiprocessing
import runpy
import sys

SGLANG_SERVER = "sglang.launch_server"


def fork_instead_of_spawn(mp=multiprocessing) -> None:
    """SGLang sets ``spawn`` (with ``force=True``) each time it launches its children; that one choice
    becomes ``fork``, any other start method passes through."""
    set_start_method = mp.set_start_method

    def chosen(method, force=False):
        return set_start_method("fork" if method == "spawn" else method, force=force)

    mp.set_start_method = chosen


if __name__ == "__main__":
    fork_instead_of_spawn()
    sys.argv[0] = SGLANG_SERVER
    runpy.run_module(SGLANG_SERVER, run_name="__main__", alter_sys=True)
