"""``python -m seer_sglang.launch.reaper DIR``: removes ``DIR`` when the launcher that started it dies.

The file pool's directory can hold gigabytes of pages. The launcher removes it when it stops; a
launcher killed with SIGKILL cannot, so it starts this small process, which the kernel signals when
the launcher dies (``processes.die_with_parent``) and which then removes the directory.
"""

from __future__ import annotations

import shutil
import signal
import sys


def main(directory: str) -> None:
    def remove(*_) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, remove)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which stops this one
    print("ready", flush=True)  # the launcher waits for this: from here on a SIGTERM removes DIR
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1])
