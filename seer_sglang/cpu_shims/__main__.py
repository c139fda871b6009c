import sys

from . import install, uninstall

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("install", "uninstall"):
        sys.exit("usage: python -m seer_sglang.cpu_shims {install|uninstall} SITE_PACKAGES")
    (install if sys.argv[1] == "install" else uninstall)(sys.argv[2])
