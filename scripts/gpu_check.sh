#!/usr/bin/env bash
# The GPU checks that need no SGLang install: the FlashInfer cascade verifier and the Triton kernels
# against the torch reference (tests marked gpu), then the benchmarks, each a run folder under
# RESULTS_DIR/<benchmark>/<date>-<label>/ (benchmarks/harness/result.py): the verifier
# (cascade_verify_<gpu>), one TP rank of the h100-70b profile's model against the profile (gpu_step_<gpu>,
# the profile with its measured terms beside the result; again with FlashInfer's prefill attention,
# gpu_step_<gpu>_flashinfer) and that rank's attention, torch's kernels against FlashInfer's
# (gpu_attention_<gpu>). About 10 minutes on an H100, most of it FlashInfer
# building its kernels. FlashInfer comes from WHEEL_DIR
# (scripts/gpu_wheels.sh) unless the machine already has it.
#   bash scripts/gpu_check.sh [WHEEL_DIR] [RESULTS_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=${1:-$ROOT/.whl}
RESULTS=${2:-$ROOT/benchmarks/results}
PY=${PYTHON:-python3}
cd "$ROOT"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA GPU visible to $PY" >&2
  exit 2
fi
SITE=$(mktemp -d)
if ! "$PY" -c "import flashinfer" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -L || true
rc=0
"$PY" -m pytest -q -ra --durations=10 -m gpu -p no:cacheprovider tests/gpu || rc=$?
GPU=$("$PY" -c "import torch, re; print(re.sub(r'[^A-Za-z0-9]+', '_', torch.cuda.get_device_name()).strip('_'))")
mkdir -p "$RESULTS"
"$PY" -m benchmarks.cascade_verify --out "$RESULTS/cascade_verify_$GPU.json" || rc=$?
"$PY" -m benchmarks.gpu_step --out "$RESULTS/gpu_step_$GPU.json" || rc=$?
"$PY" -m benchmarks.gpu_step --attention flashinfer --out "$RESULTS/gpu_step_${GPU}_flashinfer.json" || rc=$?
"$PY" -m benchmarks.gpu_attention --out "$RESULTS/gpu_attention_$GPU.json" || rc=$?
exit $rc
