#!/usr/bin/env bash
# The correctness tests with real Triton kernels on a GPU (see tests/devices.py):
# every `_cuda_N` variant the tests call runs on CUDA tensors instead of in Triton's
# CPU interpreter. On the lent GPU machine, from the repository root, with the
# wheels of libcst and black in .whl/ (carried: the machine has no registry):
#   bash benchmarks/gpu_tests.sh [pytest arguments]
set -uo pipefail
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" TRANSPILE_TEST_DEVICE=cuda
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton",
triton.__version__, torch.cuda.get_device_name())'
python3 -m pytest -q -p no:cacheprovider --runslow "${@:-tests}"
