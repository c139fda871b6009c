"""CPU-only import shims for SGLang, installed into a venv by ``scripts/setup.sh`` (CPU recipe only).

They live in ``cpu_shims/site`` and reach ``sys.path`` through one ``.pth`` file, so uninstalling is
removing that file; a GPU machine never gets it and keeps the real ``sgl_kernel`` and torchvision.
"""

from pathlib import Path

PTH_NAME = "seer_sglang_cpu_shims.pth"
SHIM_DIR = Path(__file__).resolve().parent / "site"


def pth_text() -> str:
    # Appended to sys.path, so a real sgl_kernel installed later still wins.
    return f"{SHIM_DIR}\nimport seer_torchvision_fix\nimport seer_import_fixes\n"


def install(site_packages: str) -> Path:
    target = Path(site_packages) / PTH_NAME
    target.write_text(pth_text())
    return target


def uninstall(site_packages: str) -> None:
    (Path(site_packages) / PTH_NAME).unlink(missing_ok=True)
