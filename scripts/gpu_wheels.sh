#!/usr/bin/env bash
# Wheels for a GPU machine that has PyTorch but no package index: FlashInfer 0.7.2 (the version SGLang
# 0.5.23 pins) and apache-tvm-ffi, for CPython 3.12 on x86-64. FlashInfer's wheel carries the CUDA
# sources of every kernel it can JIT-build (65 MB); the copy made here keeps only the top-level
# sources (attention, cascade merge, sampling, page ops: what the cascade verifier builds), 35 MB.
#   bash scripts/gpu_wheels.sh [OUT_DIR]     (default .whl; then: bash scripts/gpu_check.sh OUT_DIR)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-$ROOT/.whl}" && cd "${1:-$ROOT/.whl}" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$TMP" "flashinfer-python==0.7.2" "apache-tvm-ffi==0.1.12"
cp "$TMP"/apache_tvm_ffi-*.whl "$OUT"/
python3 - "$TMP"/flashinfer_python-*.whl "$OUT" <<'PY'
import sys, zipfile
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
dst = out / src.name
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        parts = item.filename.split("/")
        if parts[:3] == ["flashinfer", "data", "csrc"] and len(parts) > 4:
            continue  # kernel families in subfolders (MoE, MLA variants, ...): not built by the verifier
        zout.writestr(item, zin.read(item.filename))
print(f"{dst} ({dst.stat().st_size / 1e6:.1f} MB)")
PY
ls -la "$OUT"
