"""CPU benchmark: eager vs torch.compile (inductor C++) vs generated, CPU-sized shapes.

    python benchmarks/cpu.py [--quick] [--out FILE.md] [--commands]

Measures the copy bandwidth of main memory first, then each cpu case of
`benchmarks/pyproject.toml`, and prints a markdown table. The generated modules are
imported from `benchmarks.generated.<stem>`; produce them with the commands `--commands`
prints (see benchmarks/README.md). Cases without one are reported as "not generated".
"""

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from benchmarks import common

COPY_NUMEL = (64 * 2**20, 16 * 2**20)  # float32 elements: 256 MiB (--quick: 64 MiB)


def pin_malloc_thresholds() -> bool:
    """Fix glibc's mmap and trim thresholds (32 MiB, 1 GiB) before anything is timed,
    and take every chunk from the heap, none from mmap.

    glibc raises its mmap threshold only after a large chunk is freed, so whether each
    fresh 4 MiB tensor costs ~1000 page faults differs from process to process: a 4x
    swing in eager timings at these shapes. The threshold cannot be set above 32 MiB,
    so a fresh 32 MiB output would still be mapped and faulted in on every call, or
    not, by the same history; with no mmap at all, every run measures the same thing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return False
    m_trim_threshold, m_mmap_threshold, m_mmap_max = -1, -3, -4
    return bool(
        libc.mallopt(m_mmap_threshold, 32 * 2**20)
        and libc.mallopt(m_trim_threshold, 2**30)
        and libc.mallopt(m_mmap_max, 0)
    )


def main(argv: list[str] | None = None) -> int:
    pinned = pin_malloc_thresholds()
    note = (
        "glibc malloc pinned (thresholds, no mmap)"
        if pinned
        else "malloc thresholds not pinned"
    )
    return common.main("cpu", common.cpu_timer, COPY_NUMEL, argv, note)


if __name__ == "__main__":
    sys.exit(main())
