"""GPU benchmark: eager vs torch.compile (default and max-autotune) vs generated, large
shapes, one CUDA device.

    python benchmarks/gpu.py [--quick] [--out FILE.md] [--case LABEL]
                             [--skip-max-autotune] [--commands]

Measures the device's copy bandwidth first, then each cuda case of
`benchmarks/pyproject.toml`, and prints a markdown table with a geometric-mean row.
Kernels are timed with `triton.testing.do_bench`; overhead-bound cases (a few
microseconds of work) as wall-clock latency per call. Progress, with elapsed seconds,
goes to stderr. The generated modules are imported from `benchmarks.generated.<stem>`;
produce them where `transpile` is installed with the commands `--commands` prints (see
benchmarks/README.md). Cases without one are reported as "not generated".
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from benchmarks import common

COPY_NUMEL = (256 * 2**20, 64 * 2**20)  # float32 elements: 1 GiB (--quick: 256 MiB)


def main(argv: list[str] | None = None) -> int:
    no_device_needed = {"--commands", "-h", "--help"}.intersection(argv or sys.argv)
    if not no_device_needed and not torch.cuda.is_available():
        print("error: no CUDA device (benchmarks/cpu.py is for CPUs)", file=sys.stderr)
        return 2
    return common.main(
        "cuda",
        common.cuda_timer,
        COPY_NUMEL,
        argv,
        make_latency_race=lambda quick: common.latency_race(
            quick, torch.cuda.synchronize
        ),
        max_autotune=True,
    )


if __name__ == "__main__":
    sys.exit(main())
