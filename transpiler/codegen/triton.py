"""Render kernels as Triton source.

A pointwise kernel gives each program `XBLOCK` elements. A reduction kernel gives each
program `XBLOCK` rows of `rnumel` elements; when a row fits in one block (`RBLOCK >=
rnumel`) the reduction is *persistent*, straight-line code over registers, otherwise
each `Loop` walks the row in `RBLOCK` chunks. A matmul kernel gives each program a
tile of `a @ w.T` and runs the kernel's body on it as the epilogue (Note [Matmul
epilogues] in passes/matmul_epilogue.py). f16/bf16 are loaded into f32 and stored
back, so all arithmetic is f32. Block sizes and warps are chosen here, at transpile
time (by `heuristic_config`, or by timing candidates: see transpiler/autotune.py).

Note [Online softmax]
~~~~~~~~~~~~~~~~~~~~~
Softmax, log_softmax and cross-entropy reduce a row twice: its max `m`, then the
sum of `exp(v - m)`. When a row does not fit in one block, each is a loop reading
the row from memory. One loop computes both (Milakov and Gimelshein, "Online
normalizer calculation for softmax", 2018): each lane keeps the largest value it
has seen and the sum of exponentials shifted by it, and rescales that sum by
`exp(old max - new max)` whenever its max grows; at the end the lanes' sums are
rescaled to the row's max and added. Lanes that have seen only -inf hold 0 (not
`exp(-inf - -inf)`, a NaN); a NaN or +inf in the row makes the sum NaN, as the
two-loop form does. The loops that follow recompute `exp(v - m)` from `m`.
Of a value v and a lane's max m, one exponential is needed, not two: v <= m adds
`exp(v - m)`, v > m rescales by `exp(m - v)` and adds 1, and either is
`exp(-|v - m|)`. The exponential is the loop's costliest work per element: a
GPU's special-function units give an eighth as many results a cycle as its
arithmetic units.

Note [Welford]
~~~~~~~~~~~~~~
A variance reads its row twice (Note [Variance] in passes/schedule.py): once for
the mean, once for the deviations from it. In registers that costs nothing; when a
row does not fit in one block, each is a loop reading the row from memory. One
loop computes both (Welford, 1962): each lane keeps how many values it has seen,
their mean and the sum of their squared deviations from it; a value v moves the
mean by (v - mean) / count and adds (v - old mean) * (v - new mean) to the sum;
each lane within the row has seen one value per block, so the count, and its
reciprocal, is one per block, not a division per element.
At the end the lanes are joined pairwise (Chan, Golub and LeVeque, 1979): the
means weighted by the counts, and the sums plus delta^2 * n_a * n_b / n, delta
the difference of the means. Welford's updates lose about (mean / spread) * eps
of the variance: for 1000 + 1e-3 * randn in f32, 0.7%. So the loop takes the
deviations from the row's first value, which is within a few spreads of the
mean for any row but a pathological one, and the loss is eps again (1e-6 there);
the mean is that value plus the deviations' mean. The loops that follow read the
mean and the sum of squares; the deviations' sum, which corrects the two-pass
mean, is 0. The loop sums the row as well, for a row holding an inf: its mean
turns NaN (inf - inf), and the mean is then the sum's, inf, as eager's is.

Note [Passes over a row]
~~~~~~~~~~~~~~~~~~~~~~~~
A kernel whose row does not fit in one block reads it once per loop over it: a
group norm's statistics, then its normalized values. The second read comes from
L2 only for what is still there, and every program resident on the GPU reads its
own row in between: 528 rows of 32768 f32 (4 programs of 16 warps on each of the
H100's 132 SMs) are 67 MB, against 50 MB of L2. So a load that a later loop of
the kernel makes again asks L2 to keep the line (`evict_last`), and the last
loop's load lets it go first (`evict_first`). On the H100, GroupNorm over rows of
32768: 127 to 116 us, with SiLU 151 to 129. Hints on the last loop's stores, or
walking the second loop backwards, changed neither (116 to 118 and 129 to 130).

Note [Rows read once]
~~~~~~~~~~~~~~~~~~~~
A row of up to LONG_ROW_MAX elements fits in the registers of one program of 32
warps, and a kernel that reads the row again after reducing it (softmax's
`exp(v - m) / s`, a layer norm's normalized values) reads it from memory once
that way, where a loop reads it twice. A kernel whose loops read the row once
gains nothing from holding it: the log-sum-exp of a cross-entropy is one online
loop (Note [Online softmax]), where the row in registers waits on its max, then
its exponentials' sum, each an exchange between 32 warps, with one program an
SM and no load in flight meanwhile. So such a row goes through the loop, several
programs an SM. On an H200, over rows of 32000 f32 (in registers, then looped):
cross-entropy 310.8 to 295.6 us, log-sum-exp over 32768 154.0 to 145.8, the
gather of log_softmax's target 307.2 to 296.1. A row reduced once (an argmax)
has no chain to wait on, and stays whole: 241.6 us against 258.8 looped. A
variance stays whole too: its loop (Note [Welford]) is one pass, but less
accurate than the two passes over registers.

Note [Values per block]
~~~~~~~~~~~~~~~~~~~~~~~
A loop over a row reads it a block of RBLOCK elements at a time, from `roffset`, a
multiple of RBLOCK. An index term `(rindex // d) % m` with d a multiple of RBLOCK
is then the same for every element of the block, `(roffset // d) % m`: a group
norm's weight, one per channel of d = H * W elements of the group's row. Printed
so, the load is one value per row of the block, where over `rindex` each thread
loaded the same value once for each of its elements (Triton vectorizes a load
along contiguous addresses, not along equal ones). The value then varies along no
axis of the block, and a reduction of it broadcasts it over the block first.

Note [Blocks that never overhang]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A block's elements past the end of the tensor (or of the row) are masked off:
loads read nothing there, stores write nothing, and reductions see their
identity. Where the tensor's size is a static multiple of the block (XBLOCK
divides xnumel; RBLOCK divides rnumel), no block overhangs, and the kernel has no
`xmask` (`rmask`): its loads and stores are unmasked and a reduction reads its
values as they are. Besides the text, that saves a select for every element
reduced (three in a Welford loop), which counts where a kernel does much work
per byte. On an H200, GroupNorm over groups of 32768 f32 0.105 to 0.097 ms, with
SiLU 0.122 to 0.107; LayerNorm and GELU over rows of 4096 bf16 0.127 to 0.121
(the rounding of Note [Rounding casts] in passes/schedule.py dropped too). A
dynamic size, a matmul's tile and a block that does not divide keep their masks,
and so does a kernel with a load made only where a condition holds (a gather's
index in range, a piece of a `cat`): the condition is and'ed with them, which
gives it the shape of the whole block, as Triton's interpreter needs of a mask.

Note [Positions past int32]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
A block's positions (`xindex`, `rindex`) are int32, and so is arithmetic on them
with numbers that fit: a coordinate that torch computes in int64 and multiplies
past 2^31 (`torch.arange(n) * 2**20`, a flat offset of a large tensor) would wrap
in the kernel and give wrong values silently. So a coordinate is converted to
int64 where a value computed from it in int32 may leave int32: one with no
bounds from positions and constants (ir/value_ranges.py), or bounds beyond.
Coordinates whose values all stay within, the common case, stay int32.
"""

from __future__ import annotations

import re

import torch

from transpiler.codegen.indexing import across_rows, format_index
from transpiler.codegen.optable import (
    OPERATOR_STARTS,
    TRITON,
    TRITON_DTYPES,
    TRITON_HELPERS,
    TRITON_TENSOR_OPERANDS,
    TRITON_TYPED,
    op_text,
    triton_literal,
)
from transpiler.codegen.segments import (
    Loop,
    OnlineSoftmax,
    Welford,
    online_softmax,
    segments,
    welford,
)
from transpiler.ir.dynamic import dims_in, size
from transpiler.ir.program import (
    Const,
    Index,
    Kernel,
    LaunchConfig,
    Stmt,
    Store,
    Term,
    operands,
)
from transpiler.ir.value_ranges import fits_int32, kernel_bounds
from transpiler.text import comment

PERSISTENT_MAX = 8192  # widest row reduced in registers
# Rows up to LONG_ROW_MAX are reduced in registers too when the kernel computes at
# most LONG_ROW_BODY values per element and holding the row spares a read (Note
# [Rows read once]): 32 warps hold 32 elements of each per thread, and with 1024
# threads a thread has 64 registers. On the H100, rows of 32K f32 in registers
# against a loop: softmax (4 values) 0.37 against 0.55 ms, argmax (1) 0.35 against
# 0.36, cross-entropy (4) 0.40 against 0.37; GroupNorm (9) 0.17 against 0.19, with
# SiLU (11) 0.21 against 0.19 (spilled). On an H200, with the loop's weight one load
# a block (Note [Values per block]): GroupNorm 0.088 against 0.086 looped, with SiLU
# 0.102 against 0.086.
LONG_ROW_MAX = 32768
LONG_ROW_BODY = 8
# Warps of a reduction to a position (argmax, argmin), at most: the warps exchange
# (value, position) pairs, two values a step where a sum has one. On an H200, the
# argmax of rows of 32000 bf16 in registers took 63.4 us with 32 warps, 53.8 with
# 8; of 32000 f32 241.6 and 245.6 (benchmarks/launch_sweep.py).
POSITION_WARPS = 8
# Bytes of a row in registers each thread loads (with at least 2 warps, and at
# most 16, or 32 past PERSISTENT_MAX): 16 f32 or 32 bf16 elements, its loads in
# flight, with fewer warps for a reduction's exchange. On the H100, against 8
# elements a thread of any type: LayerNorm and GELU over rows of 4096 bf16 162 to
# 135 us, `any` and `all` over rows of 8192 bools 135 to 100, LayerNorm over rows
# of 1024 f32 155 to 142; RMSNorm over rows of 4096 bf16 141 to 144, the
# variance of rows of 4096 f32 98 to 99 (benchmarks/launch_sweep.py).
ROW_BYTES_PER_THREAD = 64
# A row longer than that goes through a loop, a block of LOOPED_RBLOCK at a time, 16
# warps each. On the H100, against blocks of 2048 (8 warps): GroupNorm over rows of
# 32768 149 to 127 us, with SiLU 151 to 143; over 64 rows of 40960 (Stable
# Diffusion's first block) 23.6 to 18.3; cross-entropy over 128256 columns 361 to
# 360. Blocks of 1024 were slower in all four, of 4096 with 32 warps in two.
LOOPED_RBLOCK = 4096
# (XBLOCK, RBLOCK) of a kernel reading across rows: on the H100, a masked mean over
# the 512 tokens of [256, 512, 768] took 145 us in blocks of (64, 16), 137 in (32,
# 32); the column sums and maxima of [4096, 2048] 96 and 89. (128, 8), (64, 8) and
# (256, 8) were slower in both, (256, 16) and (128, 32) in between.
ACROSS_ROWS_BLOCK = (32, 32)
# A kernel that reads its rows side by side more than once (a normalization over
# the channels of NCHW: the statistics, then each element again) holds rows of up
# to ACROSS_ROWS_HELD elements in registers, the tile's 32 rows side by side, 16
# f32 a thread: one read of memory. On the H200, F.normalize over the 256
# channels of [64, 256, 56, 56] took 103 us in (32, 256) against 159 looping
# in (32, 32), ConvNeXt's LayerNorm over the 96 channels of [32, 96, 56, 56] 27.1
# against 29.4 in (32, 128) with 8 warps; (64, 128) with 16 took 40.7, (16, 256)
# 109, (8, 256) 145, (4, 256) 325.
ACROSS_ROWS_HELD = 256
# Warps of such a tile: 2, 16 elements a thread. On an H200, against 4: the masked
# mean 114.6 to 105.1 us, the column sums and maxima of [16384, 4096] 80.4 to 75.2
# (benchmarks/launch_sweep.py).
ACROSS_ROWS_WARPS = 2
# A pointwise kernel reading neighbouring elements from addresses apart gives each
# thread two elements, not eight: a warp's load then reads 32 neighbours, within
# a few cache lines, where eight elements a thread spread each load over 32 times
# as many. On the H100, a 3 x 3 max pool of stride 2 over [32, 64, 112, 112] took
# 79 us in blocks of 1024 (4 warps), 83 in 1024 (8), 54 in 256 (4) or 512 (8).
STRIDED_XBLOCK = 256
TINY_ROW = 8  # elements of a row reduced one step each when they are pieces
ARG = ("argmax", "argmin")  # reductions to a position
NO_POSITION = 2**31 - 1  # of lanes past the row's end: never the first position
MATMUL_CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
BLOCK_START = "roffset"  # an index term's variable: the start of a loop's block
# the atomic op of each scatter store but a write (Note [Scatters] in
# passes/schedule.py)
ATOMICS = {
    "add": "atomic_add",
    "amax": "atomic_max",
    "amin": "atomic_min",
}
# the comparison by which a scatter's value beats the element it keeps an
# extremum in (Note [Extrema checked first] in passes/schedule.py)
CHECKED = {
    "amax": ">",
    "amin": "<",
}


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def launch_config(k: Kernel) -> LaunchConfig:
    """The config the kernel is launched with: the tuned one if any, else the
    heuristic."""
    return k.tuned.config if k.tuned is not None else heuristic_config(k)


def heuristic_config(k: Kernel) -> LaunchConfig:
    """Block sizes and warps; a dynamic size counts as a typical one (ir.dynamic)."""
    xnumel, rnumel = size(k.xnumel), size(k.rnumel)
    if not k.is_reduction:
        xblock = min(1024, max(16, next_pow2(xnumel)))
        if _strided_reads(k):  # two elements a thread
            return LaunchConfig(
                min(xblock, STRIDED_XBLOCK), 1, 4 if xblock >= 256 else 2
            )
        return LaunchConfig(xblock, 1, 4 if xblock >= 512 else 2)
    if isinstance(k.rnumel, int) and k.rnumel <= TINY_ROW and _pieces_only(k):
        # a row of a few pieces (`stack(...).sum(0)`): a step per piece, each
        # reading a contiguous block of rows, as a pointwise kernel reads
        return LaunchConfig(min(1024, max(16, next_pow2(xnumel))), 1, 4)
    if across_rows(k) and _held_across(k):
        rblock = next_pow2(rnumel)
        xblock = min(next_pow2(xnumel), ACROSS_ROWS_BLOCK[0])
        per_thread = ROW_BYTES_PER_THREAD // _row_itemsize(k)
        warps = min(16, max(2, xblock * rblock // (32 * per_thread)))
        return LaunchConfig(xblock, rblock, next_pow2(warps))
    if across_rows(k):  # tiles of neighbouring rows, the rows' elements in step
        xblock = min(ACROSS_ROWS_BLOCK[0], next_pow2(xnumel))
        rblock = min(ACROSS_ROWS_BLOCK[1], next_pow2(rnumel))
        return LaunchConfig(xblock, rblock, ACROSS_ROWS_WARPS)
    persistent = isinstance(k.rnumel, int) and (
        rnumel <= PERSISTENT_MAX
        or (rnumel <= LONG_ROW_MAX and _per_element(k) <= LONG_ROW_BODY and _rereads(k))
    )
    rblock = next_pow2(rnumel) if persistent else LOOPED_RBLOCK
    xblock = max(1, min(next_pow2(xnumel), 1024 // rblock)) if rblock < 1024 else 1
    most = 32 if rblock > PERSISTENT_MAX else 16
    if any(s.op == "reduce" and s.reduce in ARG for s in k.body if isinstance(s, Stmt)):
        most = min(most, POSITION_WARPS)
    per_thread = ROW_BYTES_PER_THREAD // _row_itemsize(k) if persistent else 8
    warps = min(most, max(2, (xblock * rblock) // (32 * per_thread)))
    return LaunchConfig(xblock, rblock, next_pow2(warps))


def _strided_reads(k: Kernel) -> bool:
    """Whether a load of pointwise kernel `k` reads neighbouring elements from
    addresses a few elements apart (a window of stride 2, `x[..., ::2]`); farther
    apart (a transpose), each is a cache line of its own however they are spread."""
    for s in k.body:
        if isinstance(s, Stmt) and s.op == "load":
            inner = [t for t in s.args[1].terms if t.var == "x" and t.div == 1]
            if any(isinstance(t.stride, int) and 1 < abs(t.stride) < 32 for t in inner):
                return True
    return False


def _held_across(k: Kernel) -> bool:
    """Whether a kernel reading its rows side by side holds them in registers:
    rows of at most ACROSS_ROWS_HELD elements that it would loop over more than
    once (its statistics, then its elements again)."""
    if not isinstance(k.rnumel, int) or next_pow2(k.rnumel) > ACROSS_ROWS_HELD:
        return False
    if k.rnumel <= ACROSS_ROWS_BLOCK[1]:
        return False  # one block of the tile holds the row already
    loops = [seg for seg in segments(k) if isinstance(seg, Loop)]
    return len(loops) > 1 and _rereads(k)


def _row_itemsize(k: Kernel) -> int:
    """Bytes of an element of the widest input the kernel reads along its rows: a
    load whose address moves along the row. One value a row (a gather's index),
    loaded in the block's shape for its mask, is not."""
    size = {a.param: a.dtype.itemsize for a in k.inputs}
    rows = [
        size[s.args[0]]
        for s in k.body
        if isinstance(s, Stmt)
        and s.op == "load"
        and s.level == "r"
        and any(t.var == "r" for t in s.args[1].terms)
    ]
    return max(rows, default=4)


def _pieces_only(k: Kernel) -> bool:
    """Whether every per-element load of `k` is a piece of a `stack` or `cat`: it
    reads one address for all elements of a row, masked to the element its piece
    is, and another for each row. A load that reads one value for every element
    of a row without a mask broadcasts it along the row (`x.expand(3, n).sum(0)`)."""
    loads = [s for s in k.body if isinstance(s, Stmt) and s.op == "load"]
    per_element = [s for s in loads if s.level == "r"]
    return bool(per_element) and all(
        len(s.args) == 3  # masked: `(param, index, within)`
        and any(t.var == "x" for t in s.args[1].terms)
        and not any(t.var == "r" for t in s.args[1].terms)
        for s in per_element
    )


def _per_element(k: Kernel) -> int:
    """How many values the kernel computes for each element of a row."""
    return sum(isinstance(s, Stmt) and s.level == "r" for s in k.body)


def one_pass(segs: list, i: int, rnumel) -> tuple:
    """The loop `segs[i]` in one pass with the next loop, where one pass computes
    both (Note [Online softmax], Note [Welford]): the `OnlineSoftmax` or `Welford`
    form and the positions of the segments it takes with it; `(None, range(0))`
    for a loop alone."""
    j = next((j for j in range(i + 1, len(segs)) if isinstance(segs[j], Loop)), 0)
    if j:
        online = j == i + 1 and online_softmax(segs[i], segs[j])
        if online:
            return online, range(j, j + 1)
        variance = welford(segs[i], segs[i + 1 : j], segs[j], rnumel)
        if variance:
            return variance, range(i + 1, j + 1)
    return None, range(0)


def _rereads(k: Kernel) -> bool:
    """Whether holding a long row in registers spares reading it again, or waiting
    on a chain of reductions (Note [Rows read once]): false where one online loop
    (Note [Online softmax]) is all the kernel's passes over the row."""
    segs = segments(k)
    loops = [i for i, seg in enumerate(segs) if isinstance(seg, Loop)]
    if len(loops) != 2:
        return True
    form, taken = one_pass(segs, loops[0], k.rnumel)
    return not (isinstance(form, OnlineSoftmax) and loops[1] in taken)


def is_persistent(k: Kernel, config: LaunchConfig) -> bool:
    """A reduction whose whole row fits in one block: no loop over `rindex`."""
    return k.is_reduction and isinstance(k.rnumel, int) and config.rblock >= k.rnumel


def _wide_positions(k: Kernel) -> tuple[set[str], set[str]]:
    """The int64 coordinates (`index` statements) a kernel computes in int64 (Note
    [Positions past int32]); the others are int32, as the block's positions. Then
    the int64 statements computed in int32: those coordinates and what is computed
    from them alone."""
    bounds = kernel_bounds(k)
    stmts = [s for s in k.body if isinstance(s, Stmt) and s.dtype == torch.int64]
    names = {s.name for s in stmts}
    wide: set[str] = set()
    while True:
        narrow: dict[str, set[str]] = {}  # in int32 -> the coordinates it is of
        for s in stmts:
            if s.op == "index":
                if s.name not in wide:
                    narrow[s.name] = {s.name}
                continue
            if s.op in ("load", "cast", "reduce", "scan", "matmul"):
                continue
            ints = [a for a in s.args if isinstance(a, str)]
            consts = [a.value for a in s.args if isinstance(a, Const)]
            wide_operand = any(a in names and a not in narrow for a in ints)
            if not any(a in narrow for a in ints) or wide_operand:
                continue  # promoted to int64 by a wide operand, or of none
            if not all(fits_int32((c, c)) for c in consts):
                continue  # a literal past int32 is int64 to Triton
            narrow[s.name] = set().union(*(narrow[a] for a in ints if a in narrow))
        spilled = {
            c
            for name, coords in narrow.items()
            if not fits_int32(bounds.get(name))
            for c in coords
        }
        if not spilled:
            return wide, set(narrow)
        wide |= spilled


class _Renderer:
    def __init__(self, k: Kernel, config: LaunchConfig):
        self.k = k
        # Note [Positions past int32]
        self.wide, self.narrow = _wide_positions(k)
        self.config = config
        self.red = k.is_reduction
        self.persistent = is_persistent(k, config)
        self.statements = {s.name: s for s in k.body if isinstance(s, Stmt)}
        self.axes: dict[str, frozenset[str]] = {}  # statement -> `_axes`, once
        # Note [Blocks that never overhang]
        conditional = any(  # a load where a condition holds: and'd with the masks
            isinstance(s, Stmt) and s.op == "load" and len(s.args) > 2 for s in k.body
        )
        self.xfull = (
            k.matmul is None
            and not conditional
            and isinstance(k.xnumel, int)
            and k.xnumel % config.xblock == 0
        )
        self.rfull = (
            self.red
            and not conditional
            and isinstance(k.rnumel, int)
            and k.rnumel % config.rblock == 0
        )
        self.lines: list[str] = []
        self.done: set[str] = set()  # statements already computed (persistent)
        self.eviction: dict[str, dict[int, str]] = {}  # load -> segment -> hint
        self.at = 0  # the segment being rendered
        self.looping = False  # rendering the body of a loop over the row

    def index(self, index: Index, store: bool = False) -> str:
        return format_index(
            index,
            {"x": "xindex", "r": "rindex", BLOCK_START: "roffset"},
            {"x": self.k.xnumel, "r": self.k.rnumel, BLOCK_START: self.k.rnumel},
            "//",
            "xindex" if store else None,
        )

    def _per_block(self, index: Index) -> Index:
        """`index` with each term the same for every element of a loop's block
        taken at the block's start (Note [Values per block])."""
        if not self.looping:
            return index
        terms = tuple(
            Term(BLOCK_START, t.div, t.mod, t.stride) if self._per_block_term(t) else t
            for t in index.terms
        )
        return Index(index.offset, terms)

    def _per_block_term(self, t: Term) -> bool:
        return (
            not self.persistent
            and t.var == "r"
            and isinstance(t.div, int)
            and t.div % self.config.rblock == 0
        )

    def mask(self, level: str) -> str | None:
        """The mask of the block's elements within the tensor at `level`; None
        where the block never overhangs (Note [Blocks that never overhang])."""
        parts = [] if self.xfull else ["xmask"]
        if self.red and level != "x" and not self.rfull:
            parts.append("rmask")
        return " & ".join(parts) or None

    def xmask(self) -> list[str]:
        """The line defining `xmask`, where a block may overhang the tensor."""
        return [] if self.xfull else ["    xmask = xindex < xnumel"]

    def rmask(self, indent: str) -> list[str]:
        """The line defining `rmask`, where a block may overhang the row."""
        return [] if self.rfull else [f"{indent}rmask = rindex < rnumel"]

    def block(self, value: str) -> str:
        """`value` over the whole block, to be reduced: a value the same along
        the row counts once per element (and its position is the element's).
        The masks' `tl.where` (`within`) broadcasts it along their axes."""
        axes = self._axes(value)
        axes |= set() if self.xfull and self.config.xblock > 1 else {"x"}
        axes |= set() if self.rfull and self.config.rblock > 1 else {"r"}
        if axes == {"x", "r"}:
            return value
        return f"tl.broadcast_to({value}, [XBLOCK, RBLOCK])"

    def _axes(self, name: str) -> frozenset[str]:
        """The block's axes along which statement `name` varies (a row's value:
        "x" alone; a weight's: "r" alone); a name of no statement, none."""
        if name in self.axes:
            return self.axes[name]
        s = self.statements.get(name)
        axes: frozenset[str] = frozenset()
        if s is not None and s.op == "reduce":
            axes = frozenset("x")
        elif s is not None and s.op == "scan":
            axes = frozenset("xr")
        elif s is not None:
            if s.op == "load":  # a term per block varies along no axis of it
                axes = frozenset(
                    t.var
                    for t in s.args[1].terms
                    if t.var in ("x", "r") and not self._per_block_term(t)
                )
            elif s.op == "index":
                axes = frozenset(t.var for t in s.args[0].terms if t.var in ("x", "r"))
            for a in operands(s):
                axes |= self._axes(a)
        self.axes[name] = axes
        return axes

    def within(self, value: str, other: str, level: str = "r") -> str:
        """`value` where the element lies within the tensor, else `other`."""
        mask = self.mask(level)
        return value if mask is None else f"tl.where({mask}, {value}, {other})"

    def arg(self, a, dtype: torch.dtype) -> str:
        if isinstance(a, Const):
            return triton_literal(a.value, a.dtype)
        return a

    def stmt(self, s: Stmt, indent: str) -> None:
        if s.op == "load":
            param, index, *within = s.args
            text = self.index(self._per_block(index))
            # positions, or an index computed from them (Note [Positions as
            # indices]): past the last row, a block's lanes may address anything
            positional = any(
                t.var in ("x", "r") or self._axes(t.var) for t in index.terms
            )
            if positional:
                mask = self.mask(s.level)
                if within:  # `!= 0`: a 0-d condition and'd with a block is not a
                    # mask to Triton's interpreter, though it has its values
                    mask = f"({mask} & {within[0]}) != 0"
                hint = self.eviction.get(s.name, {}).get(self.at)
                hint = f", eviction_policy={hint!r}" if hint else ""
                masked = f", {mask}, other=0" if mask else ""
                expr = f"tl.load({param} + {_group(text)}{masked}{hint})"
            elif index.terms and within:  # at a loaded index only: if in range
                expr = f"tl.load({param} + {_group(text)}, {within[0]}, other=0)"
            else:  # one address for all, one that is there
                expr = f"tl.load({param} + {text})"
            src = next(a.dtype for a in self.k.inputs if a.param == param)
            if src != s.dtype:
                expr += f".to({TRITON_DTYPES[s.dtype]})"
        elif s.op == "cast":
            expr = f"{s.args[0]}.to({TRITON_DTYPES[s.dtype]})"
            if (
                s.dtype == torch.uint8
                and self._operand_dtype(s.args[0]).is_floating_point
            ):
                # through int64 as torch converts (Note [Unsigned integers])
                expr = f"{s.args[0]}.to(tl.int64).to(tl.uint8)"
        elif s.op == "index":  # a coordinate of the position
            expr = self.index(s.args[0])
            if s.name in self.wide:
                expr = f"({expr}).to(tl.int64)"
        elif s.op == "scan":
            self.scan(s, indent)
            return
        elif s.op == "matmul":  # the product, rounded as `linear` would return it
            product = TRITON_DTYPES[self.k.matmul.dtype]
            expr = f"acc.to({product})"
            if s.dtype != self.k.matmul.dtype:
                expr += f".to({TRITON_DTYPES[s.dtype]})"
        else:
            text = op_text(TRITON, TRITON_TYPED, s.op, self._operand_dtype(s.args[0]))
            args = [self.arg(a, s.dtype) for a in s.args]
            if s.op in TRITON_TENSOR_OPERANDS:
                args = [
                    (
                        f"tl.full([], {x}, {TRITON_DTYPES[a.dtype]})"
                        if isinstance(a, Const)
                        else x
                    )
                    for a, x in zip(s.args, args)
                ]
            expr = text.format(*args)
        self.lines.append(f"{indent}{s.name} = {expr}")

    def scan(self, s: Stmt, indent: str) -> None:
        """A running sum or product along the block's rows (Note [Scans] in
        passes/schedule.py); in a loop over the row, the carry from the blocks
        before is added in, and becomes the block's last element. Elements past
        the row's end come after every element of it, so they change none."""
        x = s.args[0]
        if self._axes(x) != {"x", "r"}:  # one value per row (or column), at each
            x = f"tl.broadcast_to({x}, [XBLOCK, RBLOCK])"
        scanned = f"tl.cum{s.reduce}({x}, 1)"
        if self.persistent:
            self.lines.append(f"{indent}{s.name} = {scanned}")
            return
        op, carry = "+" if s.reduce == "sum" else "*", f"{s.name}_carry"
        last = f"tl.where(rbase == RBLOCK - 1, {s.name}, 0)"
        self.lines += [
            f"{indent}{s.name} = {carry} {op} {scanned}",
            f"{indent}{carry} = tl.sum({last}, 1)[:, None]",
        ]

    def store(self, s: Store, indent: str) -> None:
        value = s.value
        if TRITON_DTYPES[s.dtype] != TRITON_DTYPES.get(self._dtype(value)):
            value = f"{value}.to({TRITON_DTYPES[s.dtype]})"
        index = self.index(s.index, store=True)
        mask = self.mask(s.level)
        if s.scatter is not None:  # Note [Scatters] in passes/schedule.py
            if all(t.var != "x" for t in s.index.terms):  # one address: a block of it
                index = f"{index} + 0 * xindex"
            if s.mask is not None:  # `!= 0`: a block though the mask is one
                # value (Triton's interpreter takes no broadcast mask here)
                mask = f"({mask} & {s.mask}) != 0" if mask else s.mask
        if s.scatter in CHECKED:  # Note [Extrema checked first] in schedule.py
            held = f"{s.value}_held"
            other = f", mask={mask}, other=0" if mask else ""
            self.lines.append(
                f"{indent}{held} = tl.load({s.buffer} + {_group(index)}{other})"
            )
            beats = f"({value} {CHECKED[s.scatter]} {held})"
            if s.dtype.is_floating_point:  # a NaN beats any
                beats = f"({beats} | ({value} != {value}))"
            mask = f"({mask}) & {beats}" if mask else beats
        if s.scatter in ATOMICS:
            mask = f", mask={mask}" if mask else ""
            self.lines.append(
                f"{indent}tl.{ATOMICS[s.scatter]}({s.buffer} + {_group(index)},"
                f' {value}{mask}, sem="relaxed")'
            )
            return
        mask = f", {mask}" if mask else ""
        self.lines.append(
            f"{indent}tl.store({s.buffer} + {_group(index)}, {value}{mask})"
        )

    def _dtype(self, name: str) -> torch.dtype:
        return self.statements[name].dtype

    def _operand_dtype(self, a) -> torch.dtype:
        return a.dtype if isinstance(a, Const) else self._dtype(a)

    def _reduced(self, r: Stmt) -> str:
        """The block reduction `r` reduces: a value of positions that torch has in
        int64 and the kernel computes in int32 (`rindex`, a position where a
        condition holds) as int64, when the reduction starts from an int64
        extreme, which is no int32 value."""
        x = self.block(r.args[0])
        if r.reduce in ("max", "min") and r.args[0] in self.narrow:
            return f"{x}.to(tl.int64)"
        return x

    def _identity(self, r: Stmt) -> str:
        """The value reduction `r` starts from: 0 for a sum, 1 for a product, else
        the lowest (for max) or highest (for min) value of what it reduces."""
        if r.reduce in OPERATOR_STARTS:
            return OPERATOR_STARTS[r.reduce]
        dtype = self._dtype(r.args[0]) if r.reduce in ARG else r.dtype
        low = r.reduce in ("max", "argmax")
        if dtype.is_floating_point:
            return 'float("-inf")' if low else 'float("inf")'
        info = torch.iinfo(dtype)
        return str(info.min if low else info.max)

    def loop(self, loop: Loop, n: int) -> None:
        """Render loop `n` over the row: its statements, stores and reductions."""
        if self.persistent:
            self.whole_row(loop)
            return
        acc = {r.name: f"acc{n}_{i}" for i, r in enumerate(loop.reductions)}
        ident = {r.name: self._identity(r) for r in loop.reductions}
        shape = "[XBLOCK, RBLOCK]"
        for r in loop.reductions:
            dtype = TRITON_DTYPES[r.dtype]
            if r.reduce in ARG:  # the best value so far, and its position
                dtype = TRITON_DTYPES[self._dtype(r.args[0])]
                self.lines.append(
                    f"    {acc[r.name]}_at = tl.full({shape}, {NO_POSITION}, tl.int32)"
                )
            self.lines.append(
                f"    {acc[r.name]} = tl.full({shape}, {ident[r.name]}, {dtype})"
            )
        scans = [s for s in loop.body if isinstance(s, Stmt) and s.op == "scan"]
        for s in scans:
            one = "0" if s.reduce == "sum" else "1"
            dtype = TRITON_DTYPES[s.dtype]
            self.lines.append(
                f"    {s.name}_carry = tl.full([XBLOCK, 1], {one}, {dtype})"
            )
        self.lines.append("    for roffset in range(0, rnumel, RBLOCK):")
        self.lines.append("        rindex = roffset + rbase")
        self.lines += self.rmask("        ")
        indent = "        "
        self.looping = True
        for s in loop.body:
            (self.store if isinstance(s, Store) else self.stmt)(s, indent)
        self.looping = False
        for r in loop.reductions:
            a = acc[r.name]
            masked = self.within(self._reduced(r), ident[r.name])
            if r.reduce in ARG:
                at = self.within("rindex", str(NO_POSITION))
                self.lines.append(
                    f"{indent}{a}, {a}_at = _{r.reduce}({a}, {a}_at, {masked}, {at})"
                )
                continue
            nan_aware = "_" if r.dtype.is_floating_point else "tl."  # ints: no NaN
            combine = {
                "sum": f"{a} + {masked}",
                "prod": f"{a} * {masked}",
                "max": f"{nan_aware}maximum({a}, {masked})",
                "min": f"{nan_aware}minimum({a}, {masked})",
            }[r.reduce]
            self.lines.append(f"{indent}{a} = {combine}")
        for r in loop.reductions:
            a = acc[r.name]
            if r.reduce in ARG:
                self.lines.append(
                    f"    _, {r.name} = tl.reduce(({a}, {a}_at), 1, _{r.reduce})"
                )
                self.lines.append(f"    {r.name} = {r.name}[:, None].to(tl.int64)")
                continue
            total = _total(r.reduce, a, r.dtype.is_floating_point)
            self.lines.append(f"    {r.name} = {total}[:, None]")

    def whole_row(self, loop: Loop) -> None:
        """A pass over a row held in registers: its statements once (a later pass
        reuses what an earlier one computed), each reduction over the block."""
        for s in loop.body:
            if isinstance(s, Store):
                self.store(s, "    ")
            elif s.name not in self.done:
                self.stmt(s, "    ")
                self.done.add(s.name)
        for r in loop.reductions:
            x, ident = r.args[0], self._identity(r)
            value = self.within(self._reduced(r), ident)
            source = self._dtype(x) if r.reduce in ARG else r.dtype
            if self._dtype(x) != source:
                value += f".to({TRITON_DTYPES[source]})"
            if r.reduce not in ARG:
                total = _total(r.reduce, value, source.is_floating_point)
                self.lines.append(f"    {r.name} = {total}[:, None]")
                continue
            positions = self.within(self.block("rindex"), str(NO_POSITION))
            self.lines += [
                f"    _, {r.name} = tl.reduce(({value}, {positions}), 1, _{r.reduce})",
                f"    {r.name} = {r.name}[:, None].to(tl.int64)",
            ]

    def online_loop(self, o: OnlineSoftmax, n: int) -> None:
        """The max of a row and the sum of exponentials shifted by it, in one loop
        over the row (Note [Online softmax])."""
        dtype = TRITON_DTYPES[self._dtype(o.max)]
        m, s, v = f"acc{n}_max", f"acc{n}_sum", o.value
        inf = 'float("-inf")'
        self.lines += [
            "    # online softmax: the row's max and the sum of exp(value - max) in",
            "    # one pass, each lane's sum rescaled whenever its max grows",
            f"    {m} = tl.full([XBLOCK, RBLOCK], {inf}, {dtype})",
            f"    {s} = tl.full([XBLOCK, RBLOCK], 0, {dtype})",
            "    for roffset in range(0, rnumel, RBLOCK):",
            "        rindex = roffset + rbase",
            *self.rmask("        "),
        ]
        self.looping = True
        for st in o.body:
            self.stmt(st, "        ")
        self.looping = False
        self.lines += [
            f"        value = {self.within(v, inf)}",
            "        # exp(smaller - larger) of the value and the lane's max: the",
            "        # value's term, or the factor that rescales the sum to it",
            f"        shrink = tl.exp(-tl.abs(value - {m}))",
            f"        added = tl.where(value == {inf}, {s}, {s} + shrink)",
            f"        {s} = tl.where(value > {m}, {s} * shrink + 1, added)",
            f"        {m} = _maximum({m}, value)",
            f"    {o.max} = tl.reduce({m}, 1, _maximum)[:, None]",
            f"    lanes = tl.where({m} == {inf}, 0, {s} * tl.exp({m} - {o.max}))",
            f"    {o.sum} = tl.sum(lanes, 1)[:, None]",
        ]

    def loops(self, segs: list, i: int, n: int) -> range:
        """Render the loop `segs[i]`, in one pass with the next loop where one pass
        computes both (Note [Online softmax], Note [Welford]); the positions of
        the segments rendered with it."""
        if not self.persistent:
            form, taken = one_pass(segs, i, self.k.rnumel)
            if isinstance(form, OnlineSoftmax):
                self.online_loop(form, n)
                return taken
            if isinstance(form, Welford):
                self.welford_loop(form, n)
                return taken
        self.loop(segs[i], n)
        return range(0)

    def welford_loop(self, w: Welford, n: int) -> None:
        """A row's mean and its sum of squared deviations, in one loop over the row
        (Note [Welford]); then the per-row statements that were between the loops."""
        dtype = TRITON_DTYPES[self._dtype(w.total)]
        total, mean, m2 = f"acc{n}_sum", f"acc{n}_mean", f"acc{n}_m2"
        count, shift = f"acc{n}_count", f"acc{n}_shift"
        v, k = w.value, triton_literal(self.k.rnumel, self._dtype(w.total))
        self.lines += [
            "    # Welford: the row's mean and the sum of squared deviations from it",
            "    # in one pass, of the values less the row's first; each lane's",
            "    # count, mean and sum joined at the end",
            "    rindex = rbase * 0  # the loop's shapes: its values keep one type",
            *self.rmask("    "),
        ]
        for st in w.body:
            self.stmt(st, "    ")
        self.lines += [
            f"    {shift} = tl.sum(tl.where(rbase == 0, {v}, 0), 1)[:, None]",
            *(
                f"    {a} = tl.full([XBLOCK, RBLOCK], 0, {dtype})"
                for a in (total, mean, m2, count)
            ),
            "    for roffset in range(0, rnumel, RBLOCK):",
            "        rindex = roffset + rbase",
            *self.rmask("        "),
        ]
        self.looping = True
        for st in w.body:
            self.stmt(st, "        ")
        self.looping = False
        self.lines += [
            f"        {total} = {total} + {self.within(v, '0')}",
            f"        deviation = {v} - {shift}",
            f"        seen = {count} + 1",
            "        # every lane within the row has seen one value per block: the",
            "        # same count, whose reciprocal is one division per block",
            "        step = 1.0 / (roffset // RBLOCK + 1)",
            f"        moved = {mean} + (deviation - {mean}) * step",
            f"        {m2} = "
            + self.within(f"{m2} + (deviation - {mean}) * (deviation - moved)", m2),
            f"        {mean} = {self.within('moved', mean)}",
            f"        {count} = {self.within('seen', count)}",
            f"    {w.total} = tl.sum({total}, 1)[:, None]",
            f"    {mean}, {m2}, _ = tl.reduce(({mean}, {m2}, {count}), 1, _welford)",
            f"    {mean} = {shift} + {mean}[:, None]",
            "    # an inf in the row makes the mean NaN (inf - inf); the sum's mean is",
            "    # inf then, as eager's",
            f"    {w.mean} = tl.where({mean} != {mean}, {w.total} / {k}, {mean})",
            f"    {w.squares} = {m2}[:, None]",
            f"    {w.residual} = tl.zeros([XBLOCK, 1], {dtype})",
        ]
        for st in w.between:
            if st.name != w.mean:
                self.stmt(st, "    ")

    def matmul_head(self) -> list[str]:
        """The tile of `a @ w.T` this program computes, into `acc`; then `xindex`
        and `xmask` over the tile for the epilogue."""
        k, mm = self.k, self.k.matmul
        params = [a.param for a in k.inputs + k.outputs]
        params += [f"{c}: tl.constexpr" for c in MATMUL_CONSTEXPRS]
        head = ["@triton.jit", f"def triton_{k.name}({', '.join(params)}):"]
        head += [f"    # {comment(f'{span}: {span.text}')}" for span in k.spans]
        c = mm.config
        # masks only where a tile can overhang the matrix
        k_edge = mm.k % c.block_k != 0
        m_edge, n_edge = mm.m % c.block_m != 0, mm.n % c.block_n != 0
        a_mask = _and(m_edge and "rm < m", k_edge and "rk[None, :] < k - k0")
        w_mask = _and(n_edge and "rn < n", k_edge and "rk[:, None] < k - k0")
        a_load = f"{mm.a} + rm * k + k0 + rk[None, :]"
        w_load = f"{mm.w} + rn * k + k0 + rk[:, None]"
        head += [
            f"    # acc = a @ w.T, a [{mm.m}, {mm.k}] at {mm.a} and w [{mm.n}, {mm.k}]"
            f" at {mm.w}: a tile of",
            "    # BLOCK_M x BLOCK_N per program, GROUP_M row tiles at a time so that",
            "    # neighbouring programs share w's tiles in L2",
            f"    m, n, k = {mm.m}, {mm.n}, {mm.k}",
            "    tiles_n = tl.cdiv(n, BLOCK_N)",
            "    group = tl.program_id(0) // (GROUP_M * tiles_n)",
            "    group_rows = min(tl.cdiv(m, BLOCK_M) - group * GROUP_M, GROUP_M)",
            "    in_group = tl.program_id(0) % (GROUP_M * tiles_n)",
            "    tile_m = group * GROUP_M + in_group % group_rows",
            "    tile_n = in_group // group_rows",
            "    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]",
            "    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]",
            "    rk = tl.arange(0, BLOCK_K)",
            "    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)",
            "    for k0 in range(0, k, BLOCK_K):",
            f"        a = tl.load({a_load}{a_mask and f', {a_mask}, other=0'})",
            f"        w = tl.load({w_load}{w_mask and f', {w_mask}, other=0'})",
            "        acc = tl.dot(a, w, acc)",
            "    # the epilogue, on each element x = i * n + j of the tile",
            "    xindex = rm * n + rn",
            "    xmask = (rm < m) & (rn < n)",
        ]
        return head

    def render(self) -> str:
        k, c = self.k, self.config
        if k.matmul is not None:
            self.lines = self.matmul_head()
            for s in k.body:
                (self.store if isinstance(s, Store) else self.stmt)(s, "    ")
            return "\n".join(self.lines) + "\n"
        params = [a.param for a in k.inputs + k.outputs]
        params += sorted(dims_in(k))  # dynamic sizes, passed at run time
        params.append("XBLOCK: tl.constexpr")
        if self.red:
            params.append("RBLOCK: tl.constexpr")
        head = ["@triton.jit", f"def triton_{k.name}({', '.join(params)}):"]
        for span in k.spans:
            head.append(f"    # {comment(f'{span}: {span.text}')}")
        head.append(f"    xnumel = {k.xnumel}")
        if self.red:
            head += [
                f"    rnumel = {k.rnumel}",
                "    xindex = tl.program_id(0) * XBLOCK"
                " + tl.arange(0, XBLOCK)[:, None]",
                *self.xmask(),
            ]
            if self.persistent:  # the whole row in one block: no loop over it
                head += [
                    "    rindex = tl.arange(0, RBLOCK)[None, :]",
                    *self.rmask("    "),
                ]
            else:
                head.append("    rbase = tl.arange(0, RBLOCK)[None, :]")
        else:
            head += [
                "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)",
                *self.xmask(),
            ]
        self.lines = head
        n = 0
        segs = segments(k)
        if not self.persistent:
            self.eviction = _eviction(segs, k.rnumel)
        skip: set[int] = set()
        for i, seg in enumerate(segs):
            if i in skip:
                continue
            self.at = i
            if isinstance(seg, Loop):
                skip.update(self.loops(segs, i, n))
                n += 1
            elif isinstance(seg, Store):
                self.store(seg, "    ")
            else:
                self.stmt(seg, "    ")
        del c
        return "\n".join(self.lines) + "\n"


def _eviction(segs: list, rnumel) -> dict[str, dict[int, str]]:
    """For each load that more than one pass over the row makes, its L2 eviction
    hint in each: kept for a pass after, the first to go in the last (Note
    [Passes over a row]). Loops computed in one pass (`one_pass`) are one."""
    loops: dict[str, list[int]] = {}
    taken: set[int] = set()
    for i, seg in enumerate(segs):
        if isinstance(seg, Loop) and i not in taken:
            together = one_pass(segs, i, rnumel)[1]
            taken.update(together)
            for s in seg.body:
                if isinstance(s, Stmt) and s.op == "load":
                    loops.setdefault(s.name, []).append(i)
    return {
        name: {i: "evict_last" for i in at[:-1]} | {at[-1]: "evict_first"}
        for name, at in loops.items()
        if len(at) > 1
    }


def _total(reduce: str, value: str, floats: bool) -> str:
    """`value` ([XBLOCK, RBLOCK]) reduced along its rows: a float's max or min is
    NaN where the row holds one, as torch's; ints take Triton's own."""
    if reduce == "sum":
        return f"tl.sum({value}, 1)"
    if reduce == "prod":
        return f"tl.reduce({value}, 1, _product)"
    if floats:
        return f"tl.reduce({value}, 1, _{reduce}imum)"
    return f"tl.{reduce}({value}, 1)"


def _and(*conditions: str | bool) -> str:
    """The conditions given as text (False: none there), and-ed; "" for none."""
    parts = [c for c in conditions if isinstance(c, str)]
    return " & ".join(f"({c})" for c in parts) if len(parts) > 1 else "".join(parts)


def _group(expr: str) -> str:
    """Parenthesize a sum so it can follow `ptr +`."""
    return f"({expr})" if " + " in expr else expr


def render_kernel(k: Kernel, config: LaunchConfig | None = None) -> str:
    """The kernel's source for `config` (default: `launch_config`); a tuned kernel
    starts with its autotune note."""
    text = _Renderer(k, config or launch_config(k)).render()
    note = k.tuned.note if k.tuned is not None else ()
    if k.matmul is not None:
        note = k.matmul.note
    return "".join(f"# {line}\n" for line in note) + text


def _position_helper(name: str, better: str, torch_name: str) -> str:
    """argmax's (`>`) or argmin's (`<`) combine: the better value and its position,
    NaN the best, the first position among equal values."""
    which = "larger" if better == ">" else "smaller"
    return f"""
@triton.jit
def {name}(a, a_at, b, b_at):
    # like torch.{torch_name}: the {which} value and its position, NaN first,
    # the first position among equal values
    a_nan = a != a
    b_nan = b != b
    equal = (a == b) | (a_nan & b_nan)
    a_wins = (a {better} b) | (a_nan & ~b_nan) | (equal & (a_at < b_at))
    return tl.where(a_wins, a, b), tl.where(a_wins, a_at, b_at)
"""


HELPER_SOURCE = {
    "_argmax": _position_helper("_argmax", ">", "argmax"),
    "_argmin": _position_helper("_argmin", "<", "argmin"),
    "_tanh": """
@triton.jit
def _tanh(x):
    # tanh from exp, with a Taylor-accurate polynomial near zero (Cephes tanhf)
    ax = tl.abs(x)
    z = x * x
    small = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
              + 1.33314422036e-1) * z - 3.33332819422e-1) * z * x + x
    e = tl.exp(-2.0 * ax)
    large = (1.0 - e) / (1.0 + e)
    large = tl.where(x < 0, -large, large)
    return tl.where(ax < 0.625, small, large)
""",
    "_welford": """
@triton.jit
def _welford(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # two lanes' means and sums of squared deviations from them, joined
    n = n_a + n_b
    delta = mean_b - mean_a
    share_b = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    return mean_a + delta * share_b, m2_a + m2_b + delta * delta * n_a * share_b, n
""",
    "_maximum": """
@triton.jit
def _maximum(a, b):
    # like torch.maximum: NaN wins
    return tl.where(a != a, a, tl.where(a > b, a, b))
""",
    "_product": """
@triton.jit
def _product(a, b):
    return a * b
""",
    "_minimum": """
@triton.jit
def _minimum(a, b):
    # like torch.minimum: NaN wins
    return tl.where(a != a, a, tl.where(a < b, a, b))
""",
    "_round": """
@triton.jit
def _round(x):
    # round half to even, as torch.round: floor, then up past a half or at a half
    # to an odd floor; x - floor(x) is exact, and a zero keeps x's sign
    r = tl.floor(x)
    d = x - r
    odd = r - 2.0 * tl.floor(r * 0.5) == 1.0
    r = tl.where((d > 0.5) | ((d == 0.5) & odd), r + 1.0, r)
    return tl.where(r == 0.0, x * 0.0, r)
""",
    "_erfc": """
@triton.jit
def _erfc(x):
    # 1 - erf(x) where it keeps its digits (erfc >= 0.48); beyond, Numerical
    # Recipes' erfcc, t * exp(-z^2 + P(t)) with t = 1 / (1 + z / 2): relative
    # error < 1.2e-7, also where erfc underflows 1 - erf(x)
    z = tl.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    p = 0.17087277 * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    p = p * t - 1.26551223
    tail = t * tl.exp(p - z * z)
    tail = tl.where(x < 0, 2.0 - tail, tail)
    return tl.where(z < 0.5, 1.0 - tl.erf(x), tail)
""",
    "_hypot": """
@triton.jit
def _hypot(a, b):
    # sqrt(a^2 + b^2) without overflow or underflow: the larger times
    # sqrt(1 + (smaller / larger)^2); an infinity wins over NaN, as C's hypot
    a, b = tl.broadcast(a, b)
    x = tl.abs(a)
    y = tl.abs(b)
    hi = tl.where(x > y, x, y)
    lo = tl.where(x > y, y, x)
    r = lo / hi
    h = tl.where(hi == 0.0, hi, hi * tl.sqrt(1.0 + r * r))
    h = tl.where((x != x) | (y != y), x + y, h)
    return tl.where((x == float("inf")) | (y == float("inf")), float("inf"), h)
""",
    "_pow_int": """
@triton.jit
def _pow_int(a, b):
    # torch's integer pow: a negative exponent gives 1 ** b = 1, (-1) ** b = +-1
    # and 0 for other bases
    a, b = tl.broadcast(a, b)
    small = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
    return tl.where(b < 0, small, _pow_uint(a, b))
""",
    "_remainder": """
@triton.jit
def _remainder(a, b):
    # torch's remainder (Python's %): C's fmod, plus b where it is nonzero and of
    # the other sign than b; a zero keeps fmod's sign, a's
    r = libdevice.fmod(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    "_remainder_int": """
@triton.jit
def _remainder_int(a, b):
    # torch's integer remainder: `%` truncates, so plus b where it is nonzero and
    # of the other sign than b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    "_shift_left": """
@triton.jit
def _shift_left(a, b):
    # torch's <<: 0 for a negative shift or one past the width (the hardware would
    # take the shift modulo the width)
    inside = (b >= 0) & (b < a.dtype.primitive_bitwidth)
    return tl.where(inside, a << tl.where(inside, b, 0), 0)
""",
    "_shift_right": """
@triton.jit
def _shift_right(a, b):
    # torch's >>, arithmetic: a negative shift or one past the width fills with the
    # sign bit
    bits = a.dtype.primitive_bitwidth
    return a >> tl.where((b >= 0) & (b < bits), b, bits - 1)
""",
    "_pow_uint": """
@triton.jit
def _pow_uint(a, b):
    # a ** b for b >= 0: repeated squaring over b's bits, wrapping on overflow
    # (torch's pow of unsigned integers; of signed ones, `_pow_int`)
    a, b = tl.broadcast(a, b)
    r = a * 0 + 1
    x = a
    e = b
    for _ in range(b.dtype.primitive_bitwidth):
        r = tl.where((e & 1) != 0, r * x, r)
        x = x * x
        e = e >> 1
    return r
""",
    "_shift_right_uint": """
@triton.jit
def _shift_right_uint(a, b):
    # torch's >> of unsigned integers: 0 for a shift past the width
    inside = b < a.dtype.primitive_bitwidth
    return tl.where(inside, a >> tl.where(inside, b, 0), 0)
""",
    "_floor_divide": """
@triton.jit
def _floor_divide(a, b):
    # torch's floor division: (a - fmod(a, b)) / b, one less where fmod and b
    # differ in sign, rounded to the nearest integer; a zero takes the sign of
    # a / b, and division by zero is a / b
    # (Triton's % of floats is a - floor(a / b) * b, not fmod: 1 % 0.1 is 0)
    a, b = tl.broadcast(a, b)
    mod = libdevice.fmod(a, b)
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    q = tl.floor(div)
    q = tl.where(div - q > 0.5, q + 1.0, q)
    q = tl.where(div == 0.0, (a / b) * 0.0, q)
    return tl.where(b == 0, a / b, q)
""",
    "_floor_divide_int": """
@triton.jit
def _floor_divide_int(a, b):
    # integer division rounded toward negative infinity (// truncates)
    a, b = tl.broadcast(a, b)
    q = a // b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
""",
}


# Math functions `triton.language` lacks (`libdevice.pow`): Triton's libdevice, or
# its stand-ins in Triton's CPU interpreter (runtime_shim/libdevice.py)
LIBDEVICE_IMPORT = [
    "",
    "import runtime_shim.libdevice",
    "",
    "libdevice = runtime_shim.libdevice.load()",
    "",
]


def render_module(kernels, header: str) -> str:
    """A `*_triton.py` module holding every Triton kernel of one generated module."""
    return _module(header, [render_kernel(k) for k in kernels])


def kernel_module(k: Kernel, config: LaunchConfig, header: str) -> str:
    """A module holding one kernel rendered for `config`: a candidate to time."""
    return _module(header, [render_kernel(k, config)])


def _module(header: str, kernel_texts: list[str]) -> str:
    text = "\n".join(kernel_texts)
    used: set[str] = set()
    while True:  # the helpers the kernels call, and those the helpers call
        new = {h for h in TRITON_HELPERS if re.search(rf"\b{h}\b", text)} - used
        if not new:
            break
        used |= new
        text += "".join(HELPER_SOURCE[h] for h in new)
    helpers = [HELPER_SOURCE[h] for h in TRITON_HELPERS if h in used]
    parts = [header, "import triton", "import triton.language as tl", ""]
    if "libdevice." in text + "".join(helpers):
        parts[-1:] = LIBDEVICE_IMPORT
    parts += helpers
    for kernel_text in kernel_texts:
        parts += ["", kernel_text]
    return "\n".join(parts)
