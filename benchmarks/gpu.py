"""GPU benchmark: eager vs torch.compile vs generated, large shapes, one CUDA device.

    python benchmarks/gpu.py [--quick] [--out FILE.md] [--commands]

Measures the device's copy bandwidth first, then each cuda case of
`benchmarks/pyproject.toml`, and prints a markdown table. The generated modules are
imported from `benchmarks.generated.<stem>`; produce them where `transpile` is installed
with the commands `--commands` prints (see benchmarks/README.md). Cases without one are
reported as "not generated".
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from benchmarks import common

COPY_NUMEL = (256 * 2**20, 64 * 2**20)  # float32 elements: 1 GiB (--quick: 256 MiB)


def main(argv: list[str] | None = None) -> int:
    if "--commands" not in (argv or sys.argv) and not torch.cuda.is_available():
        print("error: no CUDA device (benchmarks/cpu.py is for CPUs)", file=sys.stderr)
        return 2
    return common.main("cuda", common.cuda_timer, COPY_NUMEL, argv)


if __name__ == "__main__":
    sys.exit(main())
