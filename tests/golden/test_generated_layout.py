"""What a reviewer of `generated/` reads: each file holds its own code, not copies of
shared code. The helpers of every C++ file are runtime_shim/kernels.h, included; a
kernel that two modules compile (gpt.py's GPT builds gpt_block.py's Block) is written
once, in the first module of the run, and called there by the other
(`pipeline.share_kernels`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"
WINDOW = 21  # lines: a block this long in two files is a copy


def _blocks(path: Path) -> set[tuple[str, ...]]:
    """Every run of `WINDOW` code lines of a file, kernels included: two kernels
    that compute the same steps (two layer norms' statistics) share helpers, not
    copies."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    lines = [line for line in lines if line and not line.startswith("//")]
    return {tuple(lines[i : i + WINDOW]) for i in range(len(lines) - WINDOW + 1)}


def test_no_block_of_cpp_repeats_across_files():
    files = sorted(GENERATED.glob("*.cpp"))
    assert len(files) > 5  # the examples' C++ files, which the golden tests keep
    seen: dict[tuple[str, ...], str] = {}
    repeated = []
    for path in files:
        for block in _blocks(path):
            if block in seen and seen[block] != path.name:
                repeated.append((seen[block], path.name, block[0]))
            seen.setdefault(block, path.name)
    assert repeated == []


def _kernels(path: Path) -> dict[str, str]:
    """The kernel functions of a C++ file, by name, each with its parameters named
    by position and its comments dropped: two with the same text are one kernel."""
    kernels, lines, name = {}, [], None
    for line in path.read_text().splitlines():
        match = re.match(r'extern "C" void (\w+)\(', line)
        name = match[1] if match else name
        if name is not None and not line.startswith("//"):
            lines.append(line)
        if name is not None and line == "}":
            text = "\n".join(lines)
            params = re.findall(r"(\w+_ptr)\b", text.split(") {")[0])
            for i, param in enumerate(params):
                text = re.sub(rf"\b{param}\b", f"p{i}", text)
            kernels[name] = text.split("(", 1)[1]
            lines, name = [], None
    return kernels


def test_no_kernel_is_written_in_two_files():
    where: dict[str, str] = {}
    written_twice = []
    for path in sorted(GENERATED.glob("*.cpp")):
        for name, text in _kernels(path).items():
            if where.setdefault(text, f"{path.name}:{name}") != f"{path.name}:{name}":
                written_twice.append((where[text], f"{path.name}:{name}"))
    assert written_twice == []
    calls = (GENERATED / "gpt.py").read_text()
    assert '_cpp_gpt_block.function("cpp_fused_addmm_gelu_0"' in calls


def test_the_check_sees_a_copied_block(tmp_path):
    copied = "\n".join(f"    float tmp{i} = tmp{i - 1} * 2;" for i in range(WINDOW))
    for name in ("a", "b"):
        kernel = f'extern "C" void {name}(float* out) {{\n{copied}\n}}'
        (tmp_path / f"{name}.cpp").write_text(f"// {name}\n{kernel}\n")
    assert _blocks(tmp_path / "a.cpp") & _blocks(tmp_path / "b.cpp")


def test_cpp_files_include_the_shared_helpers():
    for path in sorted(GENERATED.glob("*.cpp")):
        text = path.read_text()
        assert '#include "runtime_shim/kernels.h"' in text, path.name
        assert "static inline float bf16_to_float" not in text, path.name


def test_kernel_parameters_are_named_after_what_they_carry():
    """`x_ptr`, `ln_1_weight_ptr`, `out_ptr`: not positions (`in_ptr3`), which a
    reviewer would have to look up at the launch."""
    kernel_files = [*GENERATED.glob("*.cpp"), *GENERATED.glob("*_triton.py")]
    assert len(kernel_files) > 10
    for path in kernel_files:
        assert not re.search(r"\b(in|out)_ptr\d", path.read_text()), path.name


def _guard_lines(text: str) -> int:
    """Non-blank lines of the guard functions (`def _guards_...` to the next
    top-level line)."""
    count, inside = 0, False
    for line in text.splitlines():
        if line.startswith("def _guards_"):
            inside = True
        elif inside and line and not line.startswith((" ", ")")):
            inside = False
        count += inside and bool(line.strip())
    return count


def test_guard_functions_are_a_small_part_of_the_wrappers():
    """The model is checked by tables (runtime_shim/modules.py), the inputs a few
    lines each (in a block their snapshot skips: Note [Inputs seen before]): guard
    functions are under 30% of the wrappers' lines (26% now; checks of each
    parameter written out would be over half)."""
    wrappers = [
        p
        for p in GENERATED.glob("*.py")
        if p.name != "__init__.py" and not p.name.endswith("_triton.py")
    ]
    texts = [p.read_text() for p in wrappers]
    guards = sum(_guard_lines(t) for t in texts)
    total = sum(len([line for line in t.splitlines() if line.strip()]) for t in texts)
    assert guards < 0.3 * total, (guards, total)
    assert _guard_lines("def _guards_a(x):\n    return None\n\nx = 1\n") == 2
