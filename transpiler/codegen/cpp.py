"""Render kernels as C++ with OpenMP.

Each kernel is an `extern "C"` function taking one pointer per buffer (shapes are
static, so sizes are constants). Rows are split across threads with `omp parallel for`
when the kernel has enough work; inner loops carry `omp simd` so they vectorize. A
reduction kernel's `Loop`s become loops over `r` inside the row loop, long rows
reduced a chunk at a time; a loop whose index would need `r / n` (a group norm's
per-channel weight) runs as groups of `n`, as pointwise loops split at `x`. f16/bf16
are computed in float.

Note [Prefetching the next row]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A normalization reads its row once from memory (softmax's max, a mean) and then again
from L1 to compute (`exp`, GELU). Within one thread the two phases do not overlap: the
core waits for memory, then computes while memory idles. So the loop with the most
arithmetic after the first asks for the next row's cache lines, one
`__builtin_prefetch` per line, a chunk of the row at a time so that only a few misses
are in flight at once; by the time the next row starts, it is in L1. Softmax over
[2048, 1024] on two Xeon cores took 0.49 ms with the prefetch, 0.57 ms without.
Rows of more than `PREFETCH_ROW_MAX` bytes, which would push the current row out of
L1, are left to the hardware's L2 streamer. A prefetch never faults, so the one past
the last row needs no guard.

Note [Rows kept in an output]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A value that two loops over a row compute (softmax's `exp(x - max)`: summed in the
second, divided by the sum in the last) is kept in a row buffer on the stack where
the row is short enough (`ROW_BUFFER_MAX`), and otherwise would be computed again:
an exp per element twice over a 32K vocabulary. But the last loop writes a row of
an output, and until it does, that row's memory is free: so the first loop that
computes the value writes it there (`float* tmp3_row = out_ptr + 32768 * x;`) and
the last reads it back just before writing over it, as ATen's own softmax does.
That takes an output that the kernel stores once, at every element of the row, in
order along it (`_holds_row`), in the value's own type (a bf16 output would round
an f32 exp), and never reads; and a value that costs more to compute than to read
(`COSTLY` ops among those computing it). The row goes out to L2 and comes back, so
rows up to `OUTPUT_ROW_BYTES` (with their input, about an L2) qualify.
Softmax over [256, 32768] on two cores: 2.69 to 2.27 ms (eager 2.8); over [32,
262144] 2.74 to 2.37 ms.

Note [Lanes]
~~~~~~~~~~~~
`#pragma omp simd reduction(+:acc)` gives a loop one vector accumulator, and each
add waits for the one before: 3 to 4 cycles per vector, while a core can issue two
a cycle. On a row already in cache that chain is the whole cost (a mean over
[2048, 3136] ran at 0.75x eager's speed, which keeps four). So a long row's sums,
maxima and minima are kept in `LANE_BYTES` of lanes, `acc_lane[32]` for floats:
the loop goes over groups of 32 elements, and an inner `omp simd` loop over the
group adds element `l` to lane `l`. The compiler keeps the lanes in four vector
registers, four independent chains, and `lanes_sum` joins them after the row. It
does so only if it sees every lane set (`lanes_fill` unrolls); set by `std::fill_n`,
the lanes went through the stack on every group, slower than one accumulator.
A sum of a row longer than `LANE_DEPTH` elements per lane goes a chunk at a time
into `acc_part` lanes that then join the row's, so that no lane adds more than
`LANE_DEPTH` values to one total (rounding error grows with that length). Rows
shorter than `LANES_MIN_GROUPS` groups keep the single accumulator.

An argmax or argmin keeps lanes too, each lane its best value and that value's
first position, updated by selects rather than a branch so that the loop
vectorizes; `lanes_position` joins them, the earliest position among equal values
and a NaN before all (argmax over a 32000 vocabulary: 0.75x to 1.8x torch.compile,
from a scalar loop).

A row made of several dimensions that are not neighbours in memory (a batch norm's
(0, 2, 3)) reads `x_ptr[... + 32768 * (r / 256) + r % 256]`: a division and a
remainder per element, and loads the compiler cannot make one vector's. Where the
group of lanes never straddles those dimensions' edges (`split_index`), the
address is split: the group's part computed from its first element `r1`, once a
group, and the lane's part `+ l`: `x_ptr[... + 32768 * (r1 / 256) + 32 *
((r1 / 32) % 8) + l]` (x.sum((0, 2)) over [64, 128, 256]: 327 to 173 us).

Note [Remainders of short rows]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A row's `omp simd` reduction keeps each lane's partial result in an array that
GCC allocates on the stack. Where the row is not a whole number of vectors, GCC
reduces the elements left over into lane 0 of that array, in memory: a scalar
store, then a vector load of the same bytes, which cannot be forwarded from the
store and waits for it to reach the cache, on every row. For a long row that is
noise; for rows of 49 (a 7 x 7 pool's windows) it was most of the time: timm's
avgmax head over [32, 2048, 7, 7] took 0.74 ms, 0.36 ms with the row split. So a
short row of a static length is reduced as two loops: the vectorized one over
whole groups of `REMAINDER_GROUP_BYTES` (whole vectors on any x86 width, for the
smallest type loaded or accumulated), then the last elements in order into the
same accumulators. A row shorter than one group keeps the one loop.

Note [Scans in stages]
~~~~~~~~~~~~~~~~~~~~~~
A scan's running value waits for the element before, so the loop that computes it
is not vectorized, and with it went everything else computed per element: Mamba's
`exp(cumsum(softplus(dt + b) * A))`, an exp and a log1p before the scan and an exp
after, was one element at a time (19 ms over [1024, 1024] against torch.compile's
3.9 ms, which computes the scan in PyTorch between two vectorized kernels). Where
nothing but scans is reduced in the loop and no scan's input depends on another
scan, and there is math beyond loads, casts and stores (a scan of loaded values
is faster as the one loop of Note [Scans]: 2.2 against 2.7 ms over [2048, 2048] on
two cores), the row goes in stages of `SCAN_STAGE` elements, three loops each: the
statements the scans' inputs are computed from, vectorized, their inputs and the
values read later into arrays on the stack; the running values, in order, a group
of `SCAN_GROUP` at a time as the loop of Note [Scans] adds them; then the rest of
each element, vectorized, reading those arrays. The last elements, fewer than a
stage, go one by one.

Note [Column tiles]
~~~~~~~~~~~~~~~~~~~
A kernel reducing across rows (`x.sum(0)`, a mean over tokens of [B, T, C]) walks
a tile of neighbouring columns at a time, one accumulator per column in an array.
The tile is the widest that splits every index (up to `COLUMN_TILE_MAX` columns,
and `COLUMN_BYTES` of accumulators, half of L1): each element `r` of the tile is
one contiguous run of memory, as long as the row allows, which the prefetchers
stream. Narrow tiles read a few cache lines of each row and jump: with 32 or 64
columns of 768-float rows a masked mean over tokens ran at 0.3x to 0.6x
torch.compile, whose kernel steps one vector of columns down all the rows.
With the accumulators in L1, each added element costs a load and a store of its
accumulator besides its own load; so the tile takes `COLUMN_ROWS` elements of each
column per pass over its columns, in an inner loop the compiler unrolls, which
loads and stores each accumulator once per eight. The masked mean went from 1.9
ms to 0.4 ms (2.3x torch.compile), column statistics from 2.1 to 1.4 ms.
The widest tile is narrowed to leave `COLUMN_TILES_MIN` tiles (two threads' work:
a column sum of [4096, 2048] took 1.27 ms in one tile of 2048, 0.59 ms in two,
0.77 ms in four); where the columns are long enough, the split of Note [Split
reductions] gives a larger machine more tiles.

Note [Short inner loops]
~~~~~~~~~~~~~~~~~~~~~~~~
A pointwise kernel whose indices print without `/` and `%` only for an inner loop of
up to SHORT_INNER_MAX elements (an innermost dimension of 2: `fftshift` of a [5, 6,
2] tensor, a `roll` over its first and last dimensions) has inner loops of an
element or two, which the compiler unrolls whole (GCC does up to 16 iterations), and
it then vectorizes the outer loop: each value read from elements two apart, in the
order the statements read them. GCC 12.2 (Debian 12's, with AVX2) miscompiles that
loop where a condition on the outer index alone selects between such values (`x0 <
12 ? a[2 * x0 + 37] : 0` beside `a[2 * x0 + 36]`): it reads the pair in the wrong
order, and `fftshift` returned wrong values. Such a kernel is one flat loop instead,
its indices with `/` and `%`: every value read from consecutive elements. A short
inner loop with no such condition (the pieces of a `stack` along the last dimension,
constants within each part), or whose parts are each written once where the
condition holds and once where it does not (a pool's window rows, Note [Edges of
windows]), keeps its split.

Note [Edges of windows]
~~~~~~~~~~~~~~~~~~~~~~~
A pool's or a padded convolution window's loads are masked where the window
overhangs the input (`x1 >= 1 ? in[2 * x1 - 1] : 0`), and the compiler vectorizes a
masked load that is not contiguous not at all (AVX2 has masked moves, not masked
strided loads): a 3 x 3 max pool of stride 2 ran one element at a time, 19 ms
where all of torch.compile's ResNet stem took 11. A contiguous one it vectorizes
only in a simple loop: `sigmoid(F.pad(x, (1, 1, 1, 1)))` over [16, 128, 56, 56]
took 2.3 ms, twice eager's pad and sigmoid. So where the inner loop has a masked
load, it is split where the conditions on `x1` alone change value, which the
renderer computes for every `x1` (`x1 >= 1` splits 0 from 1..55), and within
each part those conditions are constants (the padded sigmoid: 0.6 ms). A mask
that then depends on the outer index alone (`oh >= 1`: the window's top row) is
taken out of the loop, which is written once where it holds and once where it
does not (at most `VERSIONS_MAX` copies).
What is left inside the loop is unmasked loads, vectorized: the pool's loop took
2.1 to 2.5 ms.

Note [Positions along the inner loop]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A gather by positions (Note [Positions as indices] in passes/schedule.py) whose
index along the inner loop is a function of `x1` alone, a reflect pad's source
column `63 - |63 - |x1 - 1||`, is a vector gather instruction per few elements:
`F.pad(x, (1, 1, 1, 1), mode="reflect")` of [4, 256, 64, 64] took 2 ms against
eager's 0.6. Such a function is affine in runs (`1 - x1`, then `x1 - 1`, then
62), which the renderer finds from its values at every `x1`: the loop is split
where a run ends, as at the edges of windows, and within each part the index
is the affine expression, so the load is contiguous (or reversed, or one
element) and vectorizes: 0.65 ms, a copy's time.

Note [Pieces along the inner loop]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A `cat` of computed values along the inner dimension is a `where` choosing among
its pieces by a condition on `x1` alone (Note [Data movement in kernels] in
passes/schedule.py); a vectorized loop computes every piece at every element and
keeps one. diffusers' timestep embedding, `cat([cos(t * f), sin(t * f)], -1)`
over [1024, 320], computed two exps, a sine and a cosine per element: 2.0 ms
against torch.compile's 0.6, which writes each piece into its slice of the
result. Such a loop is split where its conditions change value, as at the edges
of windows: each part computes its own piece alone (1.1 ms).

Note [Sines near zero]
~~~~~~~~~~~~~~~~~~~~~~
`sin_f32` and `cos_f32` (runtime_shim/kernels.h) reduce any float by pi / 2, from
2^23 on through a table indexed by the exponent; GCC does not vectorize that
table's loads on AVX2 (a gather is slow there), and they cost four fifths of the
time: 3.2 ns an element on one core, against 2.0 for eager's. `sin_near` reduces
in float, as accurately, below 2^17 only (0.6 ns). A loop in scalar code cannot
branch for one vector, so the kernel as a whole is run with `sin_near`, its loops
reducing `far |= far_trig(x)` over every argument; where one lies beyond (or
is inf or NaN) it runs again with `sin_f32`, writing over all it wrote. Only
pointwise kernels do this: they read nothing they write (the pointers are
`__restrict__`), so the second run's result is the one a single run would give.
Positions times frequencies, rotary's and timesteps', stay far below 2^17.

Note [Conversions of int64]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
AVX2 converts int32 to float and back, not int64: GCC leaves a loop with one such
conversion scalar whole. T5's relative position buckets (`log(d.float())` of an
int64 distance, then `.to(torch.long)`) ran at 1.9 ms over [512, 512], against
torch.compile's 1.1. The kernels convert with `i64_to_f32`, `f32_to_i64` and their
double twins (runtime_shim/kernels.h), exact, in a few integer and double
operations AVX2 has: the loop took 0.85 ms, and BERT's extended attention mask
(`(1.0 - mask.float()) * min` in a softmax's first pass) went from 4.4 to 3.5 ms.
With AVX-512 they are the casts. Integers known to fit in 32 bits are int32
already (Note [Integers in 32 bits]), converted as such.

Note [Doubles to float]
~~~~~~~~~~~~~~~~~~~~~~~
GCC 12 vectorizes the last two elements of a loop of fixed length as a pair (its
superword-level vectorizer, after the loop vectorizer has taken the rest) and
there takes `(double)(float)x` for x: `x.to(torch.float32).double() - x` over 22
doubles was 0 at the last two, whatever x, and so at any length of 4n + 2 or
4n + 3. A kernel with values of both types is compiled without that vectorizer
(`ROUNDS_DOUBLES`, runtime_shim/kernels.h); its loops are vectorized as before.

Note [Integers in 32 bits]
~~~~~~~~~~~~~~~~~~~~~~~~~~
Torch computes positions in int64, and AVX2 has no instruction converting int64 to
float or back: a loop that turns its index into a float position and that back
into a source pixel (bilinear interpolation, `(x1 + 0.5) * 0.5 - 0.5`) stays
scalar, and its loads of the four neighbours are then one at a time. Where a
kernel's integer values are known to fit in 32 bits (ir/value_ranges.py: computed
from positions and constants alone, each within bounds), they are `int32_t`, and
so are the constants they are computed with; conversions to and from float are
then one instruction over a vector. What needs int64 (a reduction, an op whose
other operand is wide, an int64 result) reads such a value converted back, and a
value read only so stays int64 (`_narrowed`). An address
made of such values and of loop positions, within 32 bits as a whole, is summed
in int32 when it changes along the vectorized loop, so that its loads are gathers
of 32-bit offsets, eight floats an instruction rather than four. On the AVX2 host
bilinear upsampling's kernel (4 x 256 x 64 x 64) took 12.3 ms in int64, 9.4 with
the conversions in int32 and 7.8 with the addresses too.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import re

import torch

from transpiler.codegen.indexing import (
    across_rows,
    column_tile,
    format_index,
    inner_split,
    size_text,
    split_index,
)
from transpiler.codegen.optable import (
    CPP,
    CPP_HELPERS,
    CPP_TYPED,
    CPP_TYPES,
    OPERATOR_STARTS,
    cpp_literal,
    op_text,
)
from transpiler.codegen.segments import Loop, Spread, segments, spread
from transpiler.ir.dynamic import dims_in, size
from transpiler.ir.ops import EXTREMA, compute_dtype
from transpiler.ir.program import (
    Const,
    CppSchedule,
    Index,
    Kernel,
    RowLoop,
    Stmt,
    Store,
    Term,
    operands,
)
from transpiler.ir.value_ranges import fits_int32, index_bounds, kernel_bounds
from transpiler.text import cpp_comment

PARALLEL_MIN = 1 << 15  # elements below which threads cost more than they save
ROW_BUFFER_MAX = 1 << 14  # widest row whose shared values are kept on the stack
OUTPUT_ROW_BYTES = 1 << 20  # ... in an output's row (Note [Rows kept in an output])
REDUCTION_CHUNK = 512  # elements of a row reduced into one partial result
COLUMN_TILE = 64  # neighbouring rows reduced together where no tile splits indices
COLUMN_TILE_MAX = 1024  # ... at most, where one does (Note [Column tiles])
COLUMN_BYTES = 16 << 10  # of a tile's accumulators: half of L1
COLUMN_TILES_MIN = 2  # tiles a kernel's columns make, where they can
COLUMN_ROWS = 8  # elements of each column a tile reduces per pass over its columns
COLUMN_CHUNK = 64  # elements of each column summed into one partial sum
ARG = ("argmax", "argmin")  # reductions to a position
CLAUSES = {"sum": "+", "prod": "*"}  # reductions by an operator: its OpenMP clause
LANE_BYTES = 128  # of a reduction's lanes: 4 AVX2 vectors (Note [Lanes])
LANES_MIN_GROUPS = 4  # rows shorter than 4 groups of lanes reduce in one vector
LANE_DEPTH = 128  # elements a lane sums before its chunk's part joins the row's
REMAINDER_GROUP_BYTES = 64  # a short row's vectorized part: whole AVX-512 vectors
# (Note [Remainders of short rows])
SCAN_GROUP = 8  # elements a scan adds up on their own before the row's carry
# (Note [Scans] in passes/schedule.py)
SCAN_STAGE = 64  # elements of a scan's row per pass of Note [Scans in stages]
_SINES = {"sin": "sin_near", "cos": "cos_near"}  # Note [Sines near zero]
PEELED_LOOPS_MAX = 4  # parts an inner loop is split into (Note [Edges of windows])
SHORT_INNER_MAX = 16  # inner loops GCC unrolls whole (Note [Short inner loops])
VERSIONS_MAX = 4  # copies of a part, one per value of its conditions on the row
# the integer and boolean ops whose value for each x1 the renderer computes
_FOLDED = {
    "ge": operator.ge,
    "gt": operator.gt,
    "le": operator.le,
    "lt": operator.lt,
    "eq": operator.eq,
    "ne": operator.ne,
    "logical_and": lambda a, b: bool(a) and bool(b),
    "logical_or": lambda a, b: bool(a) or bool(b),
    "logical_not": operator.not_,
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "rsub": lambda a, b: b - a,
    "abs": abs,
    "neg": operator.neg,
    "maximum": max,
    "minimum": min,
    "remainder": operator.mod,  # of integers, as torch's: the divisor's sign
    "floor_divide": operator.floordiv,
}
CACHE_LINE = 64  # bytes
PREFETCH_ROW_MAX = 16 << 10  # bytes of the next row that may join this one in L1
# ops that cost many vector instructions each: where the next row's prefetch goes
COSTLY = {"exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "gelu"}


def compute_type(dtype: torch.dtype) -> str:
    return CPP_TYPES[dtype]


def _input_type(dtype: torch.dtype) -> str:
    """The element type of an input's pointer: a bool's byte is read as `uint8_t`
    (0 or 1, as torch stores it), since GCC vectorizes no loop that loads `bool`
    from memory and then selects or converts a float by it (`where(mask, x, c)`:
    a scalar loop branching on the mask, 4.4 ms against eager's 3.1)."""
    return "uint8_t" if dtype == torch.bool else CPP_TYPES[dtype]


def _by_inverse(s: Stmt) -> bool:
    """Whether `s` is a floating division by a literal that is not a power of two
    (those the compiler multiplies by already, exactly) and whose reciprocal is a
    normal number of its type."""
    if s.op != "truediv" or not s.dtype.is_floating_point:
        return False
    d = s.args[1]
    if not isinstance(d, Const) or type(d.value) not in (int, float):
        return False
    if (
        not math.isfinite(d.value)
        or d.value == 0
        or math.frexp(d.value)[0] in (0.5, -0.5)
    ):
        return False
    info = torch.finfo(compute_dtype(s.dtype))
    return info.tiny <= abs(1 / d.value) <= info.max


def _converted(expr: str, src: torch.dtype, dst: torch.dtype) -> str:
    """`expr` of type `src` as `dst`'s compute type: a bool made a float is a
    select, since GCC vectorizes no loop converting one (see `_input_type`)."""
    t = compute_type(dst)
    if src == torch.bool and dst.is_floating_point:
        return f"{expr} ? {t}(1) : {t}(0)"
    if src == torch.int64 and t in ("float", "double"):  # Note [Conversions of int64]
        return f"i64_to_{'f32' if t == 'float' else 'f64'}({expr})"
    if src.is_floating_point and dst in (torch.int64, torch.uint8):
        # through int64 as torch converts to uint8: -2.5 is 254
        wide = f"f{'32' if compute_type(src) == 'float' else '64'}_to_i64({expr})"
        return f"static_cast<uint8_t>({wide})" if dst == torch.uint8 else wide
    return f"static_cast<{t}>({expr})"


def _narrowed(k: Kernel) -> Kernel:
    """`k` with its int64 values that fit in 32 bits declared `int32_t` (Note
    [Integers in 32 bits]). An op computes in 32 bits where all its integer
    operands are such values or constants that fit, and its result fits or is
    no integer; any other op reading one reads it converted back to int64 (a
    `cast` statement `<name>_i64` after it), as reductions and scans do. A value
    only ever read converted back stays int64."""
    bounds = kernel_bounds(k)
    stmts = [s for s in k.body if isinstance(s, Stmt)]
    narrow = {
        s.name
        for s in stmts
        if s.dtype == torch.int64
        and s.op not in ("load", "reduce", "scan")
        and fits_int32(bounds.get(s.name))
    }
    while True:
        rewritten, widened, used = _in_32_bits(k, narrow)
        if not widened - used:
            break
        narrow -= widened - used
    if not narrow:
        return k
    body: list[Stmt | Store] = []
    for s in k.body:
        if isinstance(s, Stmt):
            s = rewritten.get(s.name, s)
            if s.name in narrow:
                s = dataclasses.replace(s, dtype=torch.int32)
        body.append(s)
        if isinstance(s, Stmt) and s.name in widened:
            body.append(Stmt(f"{s.name}_i64", "cast", (s.name,), torch.int64, s.level))
    return dataclasses.replace(k, body=tuple(body))


def _in_32_bits(k: Kernel, narrow: set[str]):
    """For values `narrow` declared `int32_t`: the statements whose operands
    change (constants made int32, or narrow values read converted back), the
    values read converted back, and those read as they are (by an op in 32
    bits, a conversion, an address, a store)."""
    stmts = [s for s in k.body if isinstance(s, Stmt)]
    dtypes = {s.name: s.dtype for s in stmts}
    widened: set[str] = set()
    used = {t.var for s in stmts for t in _terms(s)} & narrow
    used |= {s.value for s in k.body if isinstance(s, Store)} & narrow
    rewritten: dict[str, Stmt] = {}
    for s in stmts:
        if s.op in ("cast", "load", "index"):  # any width converts, addresses
            if s.op == "cast" and s.dtype != torch.int64:
                used |= set(s.args) & narrow
            continue
        ints = {a for a in s.args if isinstance(a, str) and dtypes[a] == torch.int64}
        if not ints & narrow:
            continue
        consts = [a for a in s.args if isinstance(a, Const) and a.dtype == torch.int64]
        if (
            s.op not in ("reduce", "scan")
            and ints <= narrow
            and all(fits_int32((c.value, c.value)) for c in consts)
            and (s.name in narrow or s.dtype != torch.int64)
        ):  # in 32 bits: its constants too
            used |= ints
            args = tuple(
                Const(a.value, torch.int32) if a in consts else a for a in s.args
            )
        else:  # in 64: its narrow operands converted back
            widened |= ints & narrow
            args = tuple(f"{a}_i64" if a in narrow else a for a in s.args)
        rewritten[s.name] = dataclasses.replace(s, args=args)
    return rewritten, widened, used


def _bound(s: Stmt) -> str | None:
    """A float's max or min with a constant that is not NaN (a clamp's bound,
    always the second operand), as one select: a NaN value loses the comparison
    and stays, and of equal values the first is kept, as `max_nan` does with
    three selects. A loop of MobileNetV3's hard activations (four bounds an
    element) over data in L1: 131 ms with `max_nan`, 78 with one select."""
    bound = s.args[-1]
    if s.op not in ("maximum", "minimum") or not s.dtype.is_floating_point:
        return None
    if not isinstance(bound, Const) or bound.value != bound.value:
        return None
    return "{1} > {0} ? {1} : {0}" if s.op == "maximum" else "{1} < {0} ? {1} : {0}"


class _Renderer:
    """Writes a kernel as its schedule says; `schedule` makes the choices, with the
    same analyses of the kernel (which values a loop needs, what depends on the
    outer index alone, ...)."""

    def __init__(self, k: Kernel, plan: CppSchedule, near: bool = False):
        self.k = k
        self.plan = plan
        # Note [Sines near zero]: sines of float use `sin_near`, and note in
        # `far` an argument beyond its range
        self.near = near
        self.input_types = {a.param: a.dtype for a in k.inputs}  # what loads read
        self.lines: list[str] = []
        self.kept: set[str] = set(plan.kept)  # per-element values in a row buffer
        self.carried: set[str] = set()  # per-row values of a tile kept in arrays
        self.filled: set[str] = set()  # ... already written there for this row
        self.inner = plan.inner
        self.per_row = {
            s.name for s in k.body if isinstance(s, Stmt) and s.level == "x"
        }
        self.scaled: set[str] = set()  # divisions by a per-row value, in a loop
        self.inverted: set[str] = set()  # ... those values, with `_inv` declared
        self.r_split: tuple[int, int] | None = None  # (inner, rnumel) of a split loop
        # how a scan's value is written: "group" (its group's running value `_run`
        # plus the row's carry before the group), "carry" (into the carry alone,
        # element by element) or "column" (a tile's carries, one per column)
        self.scan_mode = "carry"
        self.row_loads = self._row_loads() if k.is_reduction else []
        # what statements become in one part of a split inner loop: a literal, or
        # another value's name (Note [Edges of windows]); those are not written
        self.known: dict[str, str] = {}
        self.written: set[str] = set()  # statements a helper call computed
        self.lanes: int | None = None  # in a loop over lanes from r1, a multiple
        # Note [Integers in 32 bits]: the bounds of values, those computed in int32,
        # and those that do not change along the vectorized loop being written
        self.bounds = kernel_bounds(k)
        self.narrow = {
            s.name
            for s in k.body
            if isinstance(s, Stmt) and s.dtype == torch.int32 and s.name in self.bounds
        }
        self.invariant: set[str] = self.per_row if k.is_reduction else set()

    def index(self, index: Index) -> str:
        ranges = {"x": self.k.xnumel, "r": self.k.rnumel}
        whole = index_bounds(index, self.bounds, ranges)
        if self.inner is not None:
            index = split_index(index, self.inner, self.k.xnumel, wrap=True)
            ranges |= {"x0": self.k.xnumel // self.inner, "x1": self.inner}
        if self.r_split is not None:  # in a loop over a row split in groups
            inner, rnumel = self.r_split
            index = split_index(index, inner, rnumel, True, "r")
            ranges |= {"r0": rnumel // inner, "r1": inner}
        names = {v: v for v in ranges}
        names |= {  # Note [Positions along the inner loop]
            t.var: re.sub(r"int64_t\{(-?\d+)\}", r"\1", self.known[t.var])
            for t in index.terms
            if t.var in self.known
        }
        if self.lanes is not None and _divides_r(index, self.k.rnumel):
            # Note [Lanes]: r is r1 + l; rather than `r / n` and `r % n`
            split = split_index(index, self.lanes, self.k.rnumel, True, "r")
            if split is not None:  # the group's part hoisted, the lane's affine
                index = _over_lanes(split, self.lanes)
                ranges |= {"r_group": self.k.rnumel, "l": self.lanes}
                names |= {"r_group": "r1", "l": "l"}
        gathered = {
            t.var
            for t in index.terms
            if t.var in self.narrow and t.var not in self.invariant | set(self.known)
        }
        narrow = [t for t in index.terms if t.var in self.narrow]
        wide = Index(index.offset, tuple(t for t in index.terms if t not in narrow))
        if not gathered or not wide.terms or not fits_int32(whole):
            return format_index(index, names, ranges, "/")
        # Note [Integers in 32 bits]: a gather's address summed in 32 bits
        return (
            f"static_cast<int32_t>({format_index(wide, names, ranges, '/')}) + "
            f"{format_index(Index(0, tuple(narrow)), names, ranges, '/')}"
        )

    def arg(self, a) -> str:
        if isinstance(a, Const):
            return cpp_literal(a.value, a.dtype)
        text = self.known.get(a, a)
        if a in self.narrow and text != a and text not in self.narrow:
            # an int64 literal or expression of x1 standing for an int32 value
            literal = re.fullmatch(r"int64_t\{(-?\d+)\}", text)
            return literal[1] if literal else f"static_cast<int32_t>({text})"
        return text

    def stmt(self, s: Stmt, ind: str) -> None:
        if s.name in self.known or s.name in self.written:
            return
        if s.op == "load":
            param, index, *within = s.args
            src = self.input_types[param]
            expr = f"{param}[{self.index(index)}]"
            if src == torch.bfloat16:
                expr = f"bf16_to_float({expr})"
            elif src != s.dtype:
                expr = _converted(expr, src, s.dtype)
            where = self.arg(within[0]) if within else "true"
            if where == "false":
                expr = f"{compute_type(s.dtype)}(0)"
            elif where != "true":  # read only there
                expr = f"{where} ? {expr} : {compute_type(s.dtype)}(0)"
        elif s.op == "index":  # a coordinate of the position
            expr = self.index(s.args[0])
        elif s.op == "cast":
            x = s.args[0]
            expr = _converted(x, self._operand_dtype(x), s.dtype)
        elif s.op == "scan":
            expr = self._scan(s, ind)
        elif s.name in self.scaled:
            expr = f"{self.arg(s.args[0])} * {s.args[1]}_inv"
        elif _by_inverse(s):  # a vector division costs ~20 multiplies: `x / 6` is
            # `x * (1 / 6)`, the constant folded, within an ulp (as Inductor's)
            d = s.args[1]
            one = cpp_literal(1.0, d.dtype)
            expr = f"{self.arg(s.args[0])} * ({one} / {self.arg(d)})"
        elif self.near and _near_sine(s):
            x = self.arg(s.args[0])
            self.lines.append(f"{ind}far |= far_trig({x});")
            expr = f"{_SINES[s.op]}({x})"
        else:
            text = _bound(s) or op_text(
                CPP, CPP_TYPED, s.op, self._operand_dtype(s.args[0])
            )
            expr = text.format(*(self.arg(a) for a in s.args))
        self.lines.append(f"{ind}{compute_type(s.dtype)} {s.name} = {expr};")

    def _scan(self, s: Stmt, ind: str) -> str:
        """Add (multiply) this element into the row's running value, as
        `scan_mode` says; the expression of the element's result."""
        x, op = s.args[0], _scan_op(s)
        t = compute_type(s.dtype)
        if self.scan_mode == "group":
            self.lines.append(f"{ind}{s.name}_run {op}= {x};")
            value = f"{s.name}_carry {op} {s.name}_run"
        elif self.scan_mode == "staged":  # computed in the stage's sequential loop
            value = f"{s.name}_val[r - r1]"
        else:
            carry = f"{s.name}_carry" + ("[x1]" if self.scan_mode == "column" else "")
            self.lines.append(f"{ind}{carry} {op}= {x};")
            value = carry
        return value if _scan_type(s) == t else f"static_cast<{t}>({value})"

    def store(self, s: Store, ind: str) -> None:
        value = self.arg(s.value)
        at = f"{s.buffer}[{self.index(s.index)}]"
        where = f"if ({self.arg(s.mask)}) " if s.mask is not None else ""
        same = s.dtype == self._dtype(s.value)
        if s.scatter == "add" and same:  # Note [Scatters] in passes/schedule.py
            self.lines.append(f"{ind}{where}{at} += {value};")
            return
        held = at
        if s.dtype == torch.bfloat16:
            held = f"bf16_to_float({at})"
        elif not same:
            held = _converted(at, s.dtype, self._dtype(s.value))
        if s.scatter == "add":  # in float, rounded back
            value = f"{held} + {value}"
        if s.scatter in EXTREMA:  # a NaN wins, and stays; of equals, the held
            value = f"{s.scatter[1:]}_nan({held}, {value})"
        if s.dtype == torch.bfloat16:
            value = f"float_to_bf16({value})"
        elif s.dtype != self._dtype(s.value):
            value = f"static_cast<{CPP_TYPES[s.dtype]}>({value})"
        self.lines.append(f"{ind}{where}{at} = {value};")

    def _dtype(self, name: str) -> torch.dtype:
        return next(
            s.dtype for s in self.k.body if isinstance(s, Stmt) and s.name == name
        )

    def _operand_dtype(self, a) -> torch.dtype:
        return a.dtype if isinstance(a, Const) else self._dtype(a)

    def _kept_rows(self, segs) -> tuple[set[str], dict[str, str]]:
        """Per-element values computed in more than one loop over the row (softmax's
        `exp(x - max)`): kept in a buffer on the stack, not recomputed, when a row
        is small enough; in a longer row, in the row of an output where one can
        hold it (Note [Rows kept in an output]), the value -> that output."""
        rnumel = self.k.rnumel
        if not isinstance(rnumel, int):
            return set(), {}
        shared = self._shared_rows(segs)
        if rnumel <= ROW_BUFFER_MAX:
            return shared, {}
        into = self._output_rows(shared)
        return set(into), into

    def _shared_rows(self, segs) -> set[str]:
        """The per-element values more than one loop over the row computes, but
        those that only feed others of them."""
        seen: dict[str, int] = {}
        for seg in segs:
            if isinstance(seg, Loop):
                for s in seg.body:
                    if isinstance(s, Stmt) and s.op not in ("load", "cast"):
                        seen[s.name] = seen.get(s.name, 0) + 1
        shared = {name for name, n in seen.items() if n > 1}
        users: dict[str, set[str]] = {name: set() for name in shared}
        for s in self.k.body:
            args = operands(s) if isinstance(s, Stmt) else (s.value,)
            for a in args:
                if a in users:
                    users[a].add(s.name if isinstance(s, Stmt) else "<store>")
        # a value only feeding other kept values need not be kept itself
        return {name for name in shared if users[name] - shared}

    def _output_rows(self, shared: set[str]) -> dict[str, str]:
        """The values of `shared` whose computation is worth keeping (a `COSTLY`
        op) that an output's row can hold until the last loop
        writes it: an output that the kernel stores once, per element, contiguous
        along the row, in the value's own type, and never reads; each value ->
        that output's parameter (Note [Rows kept in an output])."""
        k = self.k
        stmts = {s.name: s for s in k.body if isinstance(s, Stmt)}
        loaded = {s.args[0] for s in stmts.values() if s.op == "load"}
        stores: dict[str, list[Store]] = {}
        for s in k.body:
            if isinstance(s, Store):
                stores.setdefault(s.buffer, []).append(s)
        free = [
            found
            for param, (found, *more) in stores.items()
            if not more and param not in loaded and _holds_row(found, k.rnumel)
        ]
        into: dict[str, str] = {}
        for name in sorted(shared, key=lambda n: list(stmts).index(n)):
            value = stmts[name]
            if value.dtype not in (torch.float32, torch.float64):
                continue
            if k.rnumel * value.dtype.itemsize > OUTPUT_ROW_BYTES:
                continue
            if not _costly(name, stmts, shared):
                continue
            found = next((st for st in free if st.dtype == value.dtype), None)
            if found is not None:
                into[name] = found.buffer
                free.remove(found)
        return into

    def _prefetch_loop(self, segs) -> Loop | None:
        """Where a row is read more than once, the loop that does the most arithmetic
        after the first, which reads the row from memory: while it computes, the next
        row's input is fetched into cache (Note [Prefetching the next row])."""
        loops = [seg for seg in segs if isinstance(seg, Loop)]
        loads = self.row_loads
        if len(loops) < 2 or not loads or not isinstance(self.k.rnumel, int):
            return None
        if self.k.rnumel * sum(size for _, _, size in loads) > PREFETCH_ROW_MAX:
            return None  # it would push this row out; L2's streamer does better
        filled: set[str] = set()
        costs = []
        for loop in loops:
            cost = 0
            for s in loop.body:
                if isinstance(s, Stmt) and s.op not in ("load", "cast"):
                    if s.name not in filled:
                        cost += 8 if s.op in COSTLY else 1
            filled |= {s.name for s in loop.body if isinstance(s, Stmt)} & self.kept
            costs.append(cost)
        best = max(range(1, len(loops)), key=lambda i: costs[i])
        return None if _scans(loops[best]) else loops[best]

    def _row_loads(self) -> list[tuple[str, str, int]]:
        """(param, index of the next row, element size) of each load that walks a
        row contiguously at positions known before the row's loop."""
        names = {"x": "(x + 1)", "r": "r"}
        ranges = {"x": self.k.xnumel, "r": self.k.rnumel}
        out: list[tuple[str, str, int]] = []
        for s in self.k.body:
            if not (isinstance(s, Stmt) and s.op == "load"):
                continue
            param, index = s.args[:2]
            terms = {t.var: t for t in index.terms}
            r = terms.get("r")
            if "x" not in terms or r is None or (r.div, r.stride) != (1, 1):
                continue
            if set(terms) - {"x", "r"}:
                continue  # at a computed position: a gather's, known in the loop
            text = format_index(index, names, ranges, "/")
            size = self.input_types[param].itemsize
            entry = (param, text.replace("((x + 1))", "(x + 1)"), size)
            if entry not in out:
                out.append(entry)
        return out

    def _prefetch(self, first: str, end, ind: str) -> None:
        step = CACHE_LINE // min(size for _, _, size in self.row_loads)
        self.lines.append(f"{ind}for (int64_t r = {first}; r < {end}; r += {step}) {{")
        for param, index, _ in self.row_loads:
            self.lines.append(f"{ind}    __builtin_prefetch(&{param}[{index}]);")
        self.lines.append(f"{ind}}}")

    def _reciprocals(self, loop: Loop, ind: str) -> None:
        """`a / d` with `d` fixed for the row becomes `a * d_inv`, `d_inv` computed
        once before the loop (a vector division costs ~20 multiplies)."""
        for s in loop.body:
            if not (
                isinstance(s, Stmt) and s.op == "truediv" and s.dtype.is_floating_point
            ):
                continue
            d = s.args[1]
            if not (isinstance(d, str) and d in self.per_row):
                continue
            if d not in self.inverted:
                t = compute_type(s.dtype)
                self.lines.append(f"{ind}{t} {d}_inv = {t}(1) / {d};")
                self.inverted.add(d)
            self.scaled.add(s.name)

    def row_loop(self, loop: Loop, prefetch: bool) -> RowLoop:
        """How `loop` walks the row (for `schedule`): in groups where its indices
        split (a group norm's weights), a chunk at a time, in lanes."""
        rnumel = self.k.rnumel
        scans = [s for s in _scans(loop) if s.name in self._live(loop) - self.filled]
        if not loop.reductions and not scans:
            groups = self._row_split(loop)
            if groups is not None:
                return RowLoop(prefetch=prefetch, groups=groups)
        positions = [r for r in loop.reductions if r.reduce in ARG]
        reductions = [r for r in loop.reductions if r.reduce not in ARG]
        widths = [self._dtype(r.args[0]) for r in positions]
        lanes = 0 if scans else _lanes([r.dtype for r in reductions] + widths, rnumel)
        chunk = LANE_DEPTH * lanes if lanes and not prefetch else REDUCTION_CHUNK
        # with lanes, only a sum has a reason to go a chunk at a time
        sums = [r for r in reductions if r.reduce == "sum" or not lanes]
        chunked = bool(sums or prefetch) and not (
            (isinstance(rnumel, int) and rnumel <= chunk) or scans
        )
        return RowLoop(lanes, chunk, chunked, prefetch)

    def spread(self, loop: Loop) -> Spread | None:
        """`loop` with the correction after it as one `row_spread` call (Note
        [Variance]), where the loop computes nothing else and its values are a
        row in memory: their row buffer, or an input's contiguous row; None
        otherwise."""
        found = spread(loop, self.k, self.k.rnumel)
        if found is None or self._row_pointer(found.value) is None:
            return None
        if self._live(loop) - found.replaced != {found.value}:
            return None
        return found

    def _row_pointer(self, name: str) -> str | None:
        """Where the row of the per-element value `name` is in memory, as a C++
        pointer to its first element: its row buffer, or the row of an input it
        is loaded from unchanged (contiguous, of its computed type); None when
        it is neither."""
        if name in self.kept & self.filled:
            return f"{name}_row"
        s = next(s for s in self.k.body if getattr(s, "name", None) == name)
        if s.op != "load" or len(s.args) != 2 or not isinstance(self.k.rnumel, int):
            return None
        param, index = s.args
        src = self.input_types[param]
        if src != s.dtype or s.dtype not in (torch.float32, torch.float64):
            return None
        if not _along_row(index, self.k.rnumel):
            return None
        return self._row_start(param, index)

    def _output_row(self, param: str) -> str:
        """The current row of output `param`, which the kernel stores once along
        the row (`_holds_row`), as a C++ pointer to its first element."""
        (store,) = (
            s for s in self.k.body if isinstance(s, Store) and s.buffer == param
        )
        return self._row_start(param, store.index)

    def _row_start(self, param: str, index: Index) -> str:
        """A pointer to the element of `param` at `index` where `r` is 0."""
        start = Index(index.offset, tuple(t for t in index.terms if t.var != "r"))
        offset = self.index(start)
        return param if offset == "0" else f"{param} + {offset}"

    def row_spread(self, found: Spread, plan: RowLoop, ind: str) -> None:
        """The loop of `found` and the correction after it, as the helper's call;
        in lanes where the loop's plan has them."""
        if plan.prefetch:
            self.lines.append(f"{ind}// while computing, fetch the next row into cache")
            self._prefetch("0", self.k.rnumel, ind)
        t = compute_type(self._dtype(found.mean))
        lanes = f", {plan.lanes}" if plan.lanes else ""
        row = self._row_pointer(found.value)
        self.lines += [
            f"{ind}// the row's mean and the sum of squared deviations about it",
            f"{ind}auto [{found.mean}, {found.squares}] = "
            f"row_spread<{t}{lanes}>({row}, {self.k.rnumel}, {found.first});",
        ]
        self.written |= found.replaced

    def loop(self, loop: Loop, plan: RowLoop, ind: str) -> None:
        """A loop over `r`, vectorized: max/min reduce with `std::max`/`std::min`
        and remember separately whether a NaN went by, which then wins.

        A row longer than `REDUCTION_CHUNK` is reduced a chunk at a time, each chunk
        into its own `_part` accumulator that then joins the row's (a sum of a long
        row loses less to rounding). Within a chunk, a long row's sums, maxima and
        minima are kept in lanes: see Note [Lanes]."""
        rnumel = self.k.rnumel
        if plan.spread:
            self.row_spread(self.spread(loop), plan, ind)
            return
        into = dict(self.plan.kept_in)
        for s in loop.body:
            if isinstance(s, Stmt) and s.name in self.kept - self.filled:
                t = compute_type(s.dtype)
                if s.name in into:  # Note [Rows kept in an output]
                    row = self._output_row(into[s.name])
                    self.lines.append(
                        f"{ind}{t}* {s.name}_row = {row};  // until the row is written"
                    )
                else:
                    self.lines.append(f"{ind}{t} {s.name}_row[{rnumel}];")
        self._reciprocals(loop, ind)
        if plan.groups is not None:
            self._split_loop(loop, plan.groups, plan.prefetch, ind)
            return
        scans = [s for s in _scans(loop) if s.name in self._live(loop) - self.filled]
        positions = [r for r in loop.reductions if r.reduce in ARG]
        reductions = [r for r in loop.reductions if r.reduce not in ARG]
        lanes, prefetch, chunk, chunked = (
            plan.lanes,
            plan.prefetch,
            plan.chunk,
            plan.chunked,
        )
        for r in positions:
            t = compute_type(self._dtype(r.args[0]))
            if lanes:  # each lane's best value and its first position
                self._fill(f"{r.name}_best", t, lanes, "0", ind)
                self._fill(f"{r.name}_at", "int64_t", lanes, "-1", ind)
            else:
                self.lines.append(f"{ind}{t} {r.name}_best = 0;")
                self.lines.append(f"{ind}int64_t {r.name} = -1;")
        for r in reductions:
            t = compute_type(r.dtype)
            if lanes:
                self._fill(f"{r.name}_lane", t, lanes, _identity(r), ind)
            else:
                self.lines.append(f"{ind}{t} {r.name} = {_identity(r)};")
            if _tracks_nan(r):
                self.lines.append(f"{ind}int {r.name}_nan = 0;")
        for s in scans:
            t, one = _scan_type(s), _scan_identity(s)
            self.lines.append(f"{ind}{t} {s.name}_carry = {one};")
        outer, first, end = ind, "0", rnumel
        # where each reduction accumulates: a sum of a long row into its chunk's part
        acc = {r.name: f"{r.name}_lane" if lanes else r.name for r in reductions}
        parts = [r for r in reductions if r.reduce == "sum"] if chunked else []
        if prefetch:
            self.lines.append(f"{ind}// while computing, fetch the next row into cache")
        if chunked:
            first, end = self._chunks(ind, chunk)
            ind += "    "
            for r in parts:
                acc[r.name] = f"{r.name}_part"
                t = compute_type(r.dtype)
                if lanes:
                    self._fill(acc[r.name], t, lanes, "0", ind)
                else:
                    self.lines.append(f"{ind}{t} {acc[r.name]} = 0;")
        if prefetch:
            self._prefetch(first, end, ind)
        nan = [f" reduction(|:{r.name}_nan)" for r in reductions if _tracks_nan(r)]
        if lanes:
            whole = self._whole_groups(
                loop.reductions[0].name, first, end, lanes, chunk, ind
            )
            self.lines.append(
                f"{ind}for (int64_t r1 = {first}; r1 < {whole}; r1 += {lanes}) {{"
            )
            self.lines.append(f"{ind}    #pragma omp simd{''.join(nan)}")
            self.lines.append(f"{ind}    for (int64_t l = 0; l < {lanes}; ++l) {{")
            start = len(self.lines)
            aligned = isinstance(rnumel, int) and (not chunked or chunk % lanes == 0)
            self.lanes = lanes if aligned else None  # r1 a multiple of lanes
            self._loop_body(loop, positions, reductions, acc, "[l]", ind + "    ")
            self.lanes = None
            if any(re.search(r"\br\b", line) for line in self.lines[start:]):
                self.lines.insert(start, f"{ind}        int64_t r = r1 + l;")
            self.lines.append(f"{ind}}}")
            if whole != str(end):  # the last elements, fewer than a group
                self.lines.append(f"{ind}#pragma omp simd{''.join(nan)}")
                self.lines.append(f"{ind}for (int64_t r = {whole}; r < {end}; ++r) {{")
                self.lines.append(f"{ind}    int64_t l = r - {whole};")
                self._loop_body(loop, positions, reductions, acc, "[l]", ind)
            if parts:
                self.lines.append(f"{ind}#pragma omp simd")
                self.lines.append(f"{ind}for (int64_t l = 0; l < {lanes}; ++l) {{")
                for r in parts:
                    self.lines.append(f"{ind}    {r.name}_lane[l] += {r.name}_part[l];")
                self.lines.append(f"{ind}}}")
        else:
            clauses = [
                f" reduction({CLAUSES.get(r.reduce, r.reduce)}:{acc[r.name]})"
                for r in reductions
            ]
            if scans:
                self._scan_groups(loop, scans, positions, reductions, acc, ind)
            elif positions:  # a position is found in order: no vectors
                self.lines.append(f"{ind}for (int64_t r = {first}; r < {end}; ++r) {{")
                self._loop_body(loop, positions, reductions, acc, "", ind)
            else:
                rest = None if chunked else self._remainder(loop, reductions)
                whole = end if rest is None else rest
                self.lines.append(f"{ind}#pragma omp simd{''.join(clauses + nan)}")
                self.lines.append(
                    f"{ind}for (int64_t r = {first}; r < {whole}; ++r) {{"
                )
                self._loop_body(loop, positions, reductions, acc, "", ind)
                if rest is not None:
                    note = "(Note [Remainders of short rows])"
                    n = end - rest
                    self.lines.append(f"{ind}// the row's last {n}, in order {note}")
                    self.lines.append(
                        f"{ind}for (int64_t r = {rest}; r < {end}; ++r) {{"
                    )
                    self._loop_body(loop, positions, reductions, acc, "", ind)
            for r in parts:
                self._accumulate(r, r.name, acc[r.name], ind)
        self.filled |= {s.name for s in loop.body if isinstance(s, Stmt)} & self.kept
        if chunked:
            self.lines.append(f"{outer}}}")
        for r in positions:
            if lanes:
                largest = "true" if r.reduce == "argmax" else "false"
                fold = f"lanes_position({r.name}_best, {r.name}_at, {largest})"
                self.lines.append(f"{outer}int64_t {r.name} = {fold};")
        for r in reductions:
            if lanes:
                t = compute_type(r.dtype)
                fold = f"lanes_{r.reduce}({r.name}_lane)"
                self.lines.append(f"{outer}{t} {r.name} = {fold};")
            if _tracks_nan(r):
                self.lines.append(f"{outer}if ({r.name}_nan) {r.name} = NAN;")

    def _scan_groups(self, loop: Loop, scans, positions, reductions, acc, ind: str):
        """A loop computing scans, over groups of `SCAN_GROUP` elements: each
        scan adds up the group's elements on its own (`_run`), the row's carry
        added to each, and the group's total joins the carry after it, so that
        only one add per group waits for the one before (Note [Scans]); the
        last elements, fewer than a group, go into the carry one by one."""
        rnumel, step = self.k.rnumel, SCAN_GROUP
        stages = self._stages(loop, scans, positions, reductions)
        if stages is not None:
            step = SCAN_STAGE
        if isinstance(rnumel, int):
            whole = str(rnumel - rnumel % step)
        else:
            whole = f"{scans[0].name}_whole"
            self.lines.append(
                f"{ind}int64_t {whole} = {size_text(rnumel)} / {step} * {step};"
            )
        if whole != "0" and stages is not None:
            self._staged_groups(loop, scans, stages, whole, ind)
        elif whole != "0":
            self.lines.append(
                f"{ind}for (int64_t r1 = 0; r1 < {whole}; r1 += {step}) {{"
            )
            for s in scans:
                t, one = _scan_type(s), _scan_identity(s)
                self.lines.append(f"{ind}    {t} {s.name}_run = {one};")
            self.lines.append(f"{ind}    #pragma GCC unroll {step}")
            self.lines.append(f"{ind}    for (int64_t r = r1; r < r1 + {step}; ++r) {{")
            self.scan_mode = "group"
            self._loop_body(loop, positions, reductions, acc, "", ind + "    ")
            self.scan_mode = "carry"
            for s in scans:
                op = _scan_op(s)
                self.lines.append(f"{ind}    {s.name}_carry {op}= {s.name}_run;")
            self.lines.append(f"{ind}}}")
        if whole != str(rnumel):
            self.lines.append(f"{ind}for (int64_t r = {whole}; r < {rnumel}; ++r) {{")
            self._loop_body(loop, positions, reductions, acc, "", ind)

    # ---- Note [Scans in stages] ------------------------------------------------------

    def _stages(self, loop: Loop, scans, positions, reductions) -> set[str] | None:
        """The statements a scan's inputs are computed from (Note [Scans in
        stages]), where the loop can be staged and has math to vectorize: no
        other reduction, no scan feeding another, no scattering store, no value
        kept in a row buffer or narrowed to 32 bits among them; else None."""
        live = self._live(loop)
        if positions or reductions or self.kept & live:
            return None
        if any(s.scatter is not None for s in loop.body if isinstance(s, Store)):
            return None
        by_name = {s.name: s for s in loop.body if isinstance(s, Stmt)}
        before: set[str] = set()
        need = [a for s in scans for a in s.args if isinstance(a, str)]
        while need:
            name = need.pop()
            if name in before or name not in by_name:
                continue  # a per-row value, computed before the loop
            if by_name[name].op == "scan" or name in self.narrow:
                return None
            before.add(name)
            need.extend(operands(by_name[name]))
        work = [
            s
            for s in loop.body
            if isinstance(s, Stmt)
            and s.name in live
            and s.op not in ("load", "cast", "index", "scan")
        ]
        return before if work else None  # a scan of loaded values: one loop

    def _staged_groups(self, loop: Loop, scans, before: set[str], whole, ind: str):
        """Groups of `SCAN_STAGE` elements in three loops (Note [Scans in stages]):
        the scans' inputs, vectorized, into arrays; the running values, in order;
        the rest of each element, vectorized, from those arrays."""
        live = self._live(loop)
        body = [s for s in loop.body if not isinstance(s, Stmt) or s.name in live]
        after = [s for s in body if not (isinstance(s, Stmt) and s.name in before)]
        read_after: set[str] = set()
        for s in after:
            if isinstance(s, Store):
                read_after |= {s.value, *(t.var for t in s.index.terms)}
                read_after |= {s.mask} if s.mask else set()
            elif s.op != "scan":
                read_after |= set(operands(s))
        kept = [
            s for s in body if isinstance(s, Stmt) and s.name in before & read_after
        ]
        n, inner = SCAN_STAGE, ind + "    "
        self.lines.append(f"{ind}for (int64_t r1 = 0; r1 < {whole}; r1 += {n}) {{")
        for s in scans:
            t = compute_type(self._dtype(s.args[0]))
            self.lines.append(f"{inner}{t} {s.name}_in[{n}];")
        for s in kept:
            self.lines.append(f"{inner}{compute_type(s.dtype)} {s.name}_kept[{n}];")
        self.lines.append(f"{inner}#pragma omp simd")
        self.lines.append(f"{inner}for (int64_t r = r1; r < r1 + {n}; ++r) {{")
        for s in body:
            if isinstance(s, Stmt) and s.name in before:
                self.stmt(s, inner + "    ")
        for s in kept:
            self.lines.append(f"{inner}    {s.name}_kept[r - r1] = {s.name};")
        for s in scans:
            self.lines.append(
                f"{inner}    {s.name}_in[r - r1] = {self.arg(s.args[0])};"
            )
        self.lines.append(f"{inner}}}")
        for s in scans:
            self.lines.append(f"{inner}{_scan_type(s)} {s.name}_val[{n}];")
        group = SCAN_GROUP  # as in `_scan_groups`: one add per group waits
        self.lines.append(f"{inner}for (int64_t l1 = 0; l1 < {n}; l1 += {group}) {{")
        for s in scans:
            one = _scan_identity(s)
            self.lines.append(f"{inner}    {_scan_type(s)} {s.name}_run = {one};")
        self.lines.append(f"{inner}    #pragma GCC unroll {group}")
        self.lines.append(f"{inner}    for (int64_t l = l1; l < l1 + {group}; ++l) {{")
        for s in scans:
            op, run, carry = _scan_op(s), f"{s.name}_run", f"{s.name}_carry"
            self.lines.append(f"{inner}        {run} {op}= {s.name}_in[l];")
            self.lines.append(f"{inner}        {s.name}_val[l] = {carry} {op} {run};")
        self.lines.append(f"{inner}    }}")
        for s in scans:
            self.lines.append(f"{inner}    {s.name}_carry {_scan_op(s)}= {s.name}_run;")
        self.lines.append(f"{inner}}}")
        self.lines.append(f"{inner}#pragma omp simd")
        self.lines.append(f"{inner}for (int64_t r = r1; r < r1 + {n}; ++r) {{")
        for s in kept:
            t = compute_type(s.dtype)
            self.lines.append(f"{inner}    {t} {s.name} = {s.name}_kept[r - r1];")
        self.scan_mode = "staged"
        for s in after:
            (self.store if isinstance(s, Store) else self.stmt)(s, inner + "    ")
        self.scan_mode = "carry"
        self.lines.append(f"{inner}}}")
        self.lines.append(f"{ind}}}")

    def _row_split(self, loop: Loop) -> int | None:
        """The inner length of a split of `loop` over `r` that indexes without `/`
        or `%` (`inner_split`): a group norm's weights, `w[r / 1024]` for a row of
        8 groups, read once per group of 1024."""
        rnumel = self.k.rnumel
        if not isinstance(rnumel, int):
            return None
        live = self._live(loop)
        stmts = [s for s in loop.body if isinstance(s, Stmt) and s.name in live]
        indices = [i for s in stmts if (i := _index_of(s)) is not None]
        indices += [s.index for s in loop.body if isinstance(s, Store)]
        return inner_split(indices, rnumel, var="r", outer_min=1)

    def _split_loop(self, loop: Loop, inner: int, prefetch: bool, ind: str) -> None:
        """`loop` as groups `r0` of `inner` elements `r1`, what depends on the group
        alone computed once per group."""
        self.r_split = (inner, self.k.rnumel)
        live = self._live(loop)
        body = [s for s in loop.body if isinstance(s, Store) or s.name in live]
        # values kept in the row buffer are read or written per element there
        free = [s for s in body if not (isinstance(s, Stmt) and s.name in self.kept)]
        outer = self._outer_only(free, "r", set(self.per_row))
        groups = self.k.rnumel // inner
        if prefetch:
            self.lines.append(f"{ind}// while computing, fetch the next row into cache")
        self.lines.append(f"{ind}for (int64_t r0 = 0; r0 < {groups}; ++r0) {{")
        if prefetch:  # the next row's group
            self._prefetch(f"r0 * {inner}", f"r0 * {inner} + {inner}", ind + "    ")
        for s in body:
            if isinstance(s, Stmt) and s.name in outer:
                self.stmt(s, ind + "    ")
        self.lines.append(f"{ind}    #pragma omp simd")
        self.lines.append(f"{ind}    for (int64_t r1 = 0; r1 < {inner}; ++r1) {{")
        start = len(self.lines)
        self._loop_body(loop, [], [], {}, "", ind + "    ", skip=outer)
        if any(re.search(r"\br\b", line) for line in self.lines[start:]):
            self.lines.insert(start, f"{ind}        int64_t r = r0 * {inner} + r1;")
        self.lines.append(f"{ind}}}")
        self.filled |= {s.name for s in loop.body if isinstance(s, Stmt)} & self.kept
        self.r_split = None

    def _fill(self, name: str, t: str, lanes: int, value: str, ind: str) -> None:
        """Declare an array of `lanes` accumulators, each `value`."""
        self.lines.append(f"{ind}{t} {name}[{lanes}];")
        self.lines.append(f"{ind}lanes_fill({name}, {value});")

    def _remainder(self, loop: Loop, reductions) -> int | None:
        """Where a short row's vectorized loop of reductions stops, the rest of the
        row reduced in order after it; None for no split: a row of symbolic length,
        one shorter than a group, or of whole groups (Note [Remainders of short
        rows])."""
        rnumel = self.k.rnumel
        if not reductions or not isinstance(rnumel, int):
            return None
        loaded = [
            self.input_types[s.args[0]]
            for s in loop.body
            if isinstance(s, Stmt) and s.op == "load"
        ]
        sizes = [d.itemsize for d in loaded] + [
            _compute_bytes(r.dtype) for r in reductions
        ]
        group = REMAINDER_GROUP_BYTES // min(sizes)
        if rnumel < group or rnumel % group == 0:
            return None
        return rnumel - rnumel % group

    def _whole_groups(
        self, name: str, first: str, end, lanes: int, chunk: int, ind: str
    ) -> str:
        """Where the whole groups of `lanes` elements from `first` to `end` (a
        chunk of `chunk`, or the row) end; computed into `name_whole` if need be."""
        rnumel = self.k.rnumel
        if isinstance(rnumel, int) and rnumel <= chunk:
            return str(rnumel - rnumel % lanes)
        if isinstance(rnumel, int) and rnumel % lanes == 0:
            return str(end)  # every chunk is whole groups (`chunk` is too)
        whole = f"{name}_whole"
        groups = f"{end} / {lanes}" if first == "0" else f"({end} - {first}) / {lanes}"
        start = "" if first == "0" else f"{first} + "
        self.lines.append(f"{ind}int64_t {whole} = {start}{groups} * {lanes};")
        return whole

    def _loop_body(
        self, loop: Loop, positions, reductions, acc, lane: str, ind: str, skip=()
    ):
        """The statements of one element `r` of `loop` but those to `skip`, and
        its reductions into `acc` (indexed by `lane` where they are kept in
        lanes); closes the loop."""
        live = self._live(loop)
        for s in loop.body:
            if isinstance(s, Stmt) and (s.name not in live or s.name in skip):
                continue
            if isinstance(s, Stmt) and s.name in self.kept & self.filled:
                t = compute_type(s.dtype)
                self.lines.append(f"{ind}    {t} {s.name} = {s.name}_row[r];")
                continue
            (self.store if isinstance(s, Store) else self.stmt)(s, ind + "    ")
            if isinstance(s, Stmt) and s.name in self.kept:
                self.lines.append(f"{ind}    {s.name}_row[r] = {s.name};")
        for r in positions:
            if lane:
                self._lane_position(r, lane, ind + "    ")
            else:
                self._position(r, r.name, f"{r.name}_best", "r", ind + "    ")
        for r in reductions:
            self._accumulate(r, acc[r.name] + lane, r.args[0], ind + "    ")
            if _tracks_nan(r):
                x = r.args[0]
                self.lines.append(f"{ind}    {r.name}_nan |= {x} != {x};")
        self.lines.append(f"{ind}}}")

    # ---- Note [Reductions across rows] ---------------------------------------------

    def columns(self, parallel: bool) -> None:
        """A kernel reading its rows side by side (`x.sum(0)`; see `across_rows`)
        walks a tile of neighbouring rows at a time (Note [Column tiles]): each
        loop over `r` reads the tile's elements `r` (contiguous in memory) in an
        inner, vectorized loop over the rows `x1`, into one accumulator per row. A
        per-row value `v` lives in an array `v_col[x1]` for the tile."""
        k = self.k
        xnumel = k.xnumel
        ind = "        "
        if parallel:
            self.lines.append("    #pragma omp parallel for")
        if self.inner is not None:  # x = x0 * tile + x1, indexed without `/`, `%`
            tile = n = self.inner
            self.lines.append(
                f"    for (int64_t x0 = 0; x0 < {xnumel // tile}; ++x0) {{"
            )
        else:
            tile = min(COLUMN_TILE, size(xnumel))
            self.lines.append(
                f"    for (int64_t x0 = 0; x0 < {_cdiv(xnumel, tile)}; ++x0) {{"
            )
            n = "xn"
            self.lines.append(
                f"{ind}const int64_t xn = std::min<int64_t>({tile}, "
                f"{size_text(xnumel)} - x0 * {tile});"
            )
        parts: list = []  # loops, and lists of per-row statements between them
        for seg in segments(k):
            if isinstance(seg, Loop):
                parts.append(seg)
            elif parts and isinstance(parts[-1], list):
                parts[-1].append(seg)
            else:
                parts.append([seg])
        self.carried = set()  # per-row values read outside the part computing them
        for part in parts:
            if isinstance(part, Loop):
                self.carried.update(self._per_row_reads(part.body, set()))
            else:
                computed = {s.name for s in part if isinstance(s, Stmt)}
                self.carried.update(self._per_row_reads(part, computed))
        for part in parts:
            if isinstance(part, Loop):
                self._column_loop(part, tile, n, ind)
            else:
                self._column_pass(part, tile, n, ind)
        self.lines.append("    }")

    def column_tile(self) -> int | None:
        """The widest tile of columns (for `schedule`) that splits every index,
        within `COLUMN_BYTES` of accumulators and `COLUMN_TILES_MIN` tiles."""
        xnumel = self.k.xnumel
        most = min(COLUMN_TILE_MAX, COLUMN_BYTES // self._column_bytes())
        if isinstance(xnumel, int):  # two tiles at least, where they can be
            most = min(most, max(xnumel // COLUMN_TILES_MIN, 1))
        return column_tile(_indices(self.k), xnumel, most)

    def _column_bytes(self) -> int:
        """Bytes a tile keeps per row for its reductions: accumulators, partial
        sums, NaN flags and positions' best values."""
        total = 0
        for s in self.k.body:
            if isinstance(s, Stmt) and s.op == "scan":
                total += _compute_bytes(torch.float64)  # its carry
            if not (isinstance(s, Stmt) and s.op == "reduce"):
                continue
            total += _compute_bytes(s.dtype)
            if s.reduce == "sum":
                total += _compute_bytes(s.dtype)
            elif s.reduce in ARG:
                total += _compute_bytes(self._dtype(s.args[0]))
            elif _tracks_nan(s):
                total += 4
        return max(total, 1)

    def _per_row_reads(self, items, defined: set[str]) -> list[str]:
        """Per-row values `items` read that they do not compute themselves."""
        out: list[str] = []
        for s in items:
            args = operands(s) if isinstance(s, Stmt) else (s.value,)
            for a in args:
                if a in self.per_row and a not in defined:
                    if a not in out:
                        out.append(a)
        return out

    def _row_header(self, items, n, ind: str, defined: set[str]) -> None:
        self.lines.append(f"{ind}for (int64_t x1 = 0; x1 < {n}; ++x1) {{")
        if self.inner is None:
            self.lines.append(f"{ind}    const int64_t x = x0 * {COLUMN_TILE} + x1;")
        for a in self._per_row_reads(items, defined):
            t = compute_type(self._dtype(a))
            self.lines.append(f"{ind}    {t} {a} = {a}_col[x1];")

    def _column_pass(self, items, tile: int, n: str, ind: str) -> None:
        """Per-row statements and stores, for each row of the tile."""
        stmts = [s for s in items if isinstance(s, Stmt)]
        kept = [s for s in stmts if s.name in self.carried]
        for s in kept:
            self.lines.append(f"{ind}{compute_type(s.dtype)} {s.name}_col[{tile}];")
        self.lines.append(f"{ind}#pragma omp simd")
        self._row_header(items, n, ind, {s.name for s in stmts})
        for s in items:
            (self.store if isinstance(s, Store) else self.stmt)(s, ind + "    ")
        for s in kept:
            self.lines.append(f"{ind}    {s.name}_col[x1] = {s.name};")
        self.lines.append(f"{ind}}}")

    def _column_loop(self, loop: Loop, tile: int, n: str, ind: str) -> None:
        """A loop over `r` for the whole tile; sums long rows a chunk at a time
        into partial sums, as `loop` does, each group of `COLUMN_ROWS` summed on
        its own first."""
        rnumel = self.k.rnumel
        chunked = any(r.reduce == "sum" for r in loop.reductions) and not (
            isinstance(rnumel, int) and rnumel <= COLUMN_CHUNK
        )
        for r in loop.reductions:
            t = compute_type(r.dtype)
            self.lines.append(f"{ind}{t} {r.name}_col[{tile}];")
            if r.reduce in ARG:
                t = compute_type(self._dtype(r.args[0]))
                self.lines.append(f"{ind}{t} {r.name}_best[{tile}];")
            elif _tracks_nan(r):
                self.lines.append(f"{ind}int {r.name}_nan[{tile}];")
        scans = _scans(loop)
        for s in scans:  # each column's running value (Note [Scans])
            self.lines.append(f"{ind}{_scan_type(s)} {s.name}_carry[{tile}];")
        if loop.reductions or scans:
            self.lines.append(f"{ind}for (int64_t x1 = 0; x1 < {tile}; ++x1) {{")
            for s in scans:
                one = _scan_identity(s)
                self.lines.append(f"{ind}    {s.name}_carry[x1] = {one};")
            for r in loop.reductions:
                self.lines.append(f"{ind}    {r.name}_col[x1] = {_identity(r)};")
                if r.reduce in ARG:
                    self.lines.append(f"{ind}    {r.name}_best[x1] = 0;")
                elif _tracks_nan(r):
                    self.lines.append(f"{ind}    {r.name}_nan[x1] = 0;")
            self.lines.append(f"{ind}}}")
        acc = {r.name: f"{r.name}_col[x1]" for r in loop.reductions}
        outer, first, end = ind, "0", rnumel
        if chunked:
            first, end = self._chunks(ind, COLUMN_CHUNK)
            ind += "    "
            for r in loop.reductions:
                if r.reduce == "sum":
                    t = compute_type(r.dtype)
                    acc[r.name] = f"{r.name}_part[x1]"
                    self.lines.append(f"{ind}{t} {r.name}_part[{tile}] = {{}};")
        # COLUMN_ROWS elements of each column at a time (Note [Column tiles])
        step = COLUMN_ROWS
        last = f"r1 + {step}"
        whole = isinstance(rnumel, int) and rnumel % step == 0
        if not whole:
            last = f"std::min<int64_t>({last}, {end})"
        self.lines.append(
            f"{ind}for (int64_t r1 = {first}; r1 < {end}; r1 += {step}) {{"
        )
        live = self._live(loop)
        body = [s for s in loop.body if isinstance(s, Store) or s.name in live]
        self.lines.append(f"{ind}    #pragma omp simd")
        self._row_header(body + list(loop.reductions), n, ind + "    ", set())
        inner = ind + "            "
        sums = [r for r in loop.reductions if r.reduce == "sum"]
        for r in sums:  # the group's own sum first: a shorter chain of roundings
            t = compute_type(r.dtype)
            self.lines.append(f"{ind}        {t} {r.name}_group = 0;")
        self.lines.append(f"{ind}        #pragma GCC unroll {step}")
        self.lines.append(f"{ind}        for (int64_t r = r1; r < {last}; ++r) {{")
        self.scan_mode = "column"
        for s in body:
            (self.store if isinstance(s, Store) else self.stmt)(s, inner)
        self.scan_mode = "carry"
        for r in loop.reductions:
            if r.reduce in ARG:
                at, best = f"{r.name}_col[x1]", f"{r.name}_best[x1]"
                self._position(r, at, best, "r", inner)
                continue
            target = f"{r.name}_group" if r.reduce == "sum" else acc[r.name]
            self._accumulate(r, target, r.args[0], inner)
            if _tracks_nan(r):
                x = r.args[0]
                self.lines.append(f"{inner}{r.name}_nan[x1] |= {x} != {x};")
        self.lines.append(f"{ind}        }}")
        for r in sums:
            self._accumulate(r, acc[r.name], f"{r.name}_group", ind + "        ")
        self.lines += [f"{ind}    }}", f"{ind}}}"]
        if chunked:
            self.lines.append(f"{ind}for (int64_t x1 = 0; x1 < {n}; ++x1) {{")
            for r in loop.reductions:
                if r.reduce == "sum":
                    self.lines.append(f"{ind}    {r.name}_col[x1] += {acc[r.name]};")
            self.lines += [f"{ind}}}", f"{outer}}}"]
        if any(_tracks_nan(r) for r in loop.reductions):
            self.lines.append(f"{outer}for (int64_t x1 = 0; x1 < {n}; ++x1) {{")
            for r in loop.reductions:
                if _tracks_nan(r):
                    self.lines.append(
                        f"{outer}    if ({r.name}_nan[x1]) {r.name}_col[x1] = NAN;"
                    )
            self.lines.append(f"{outer}}}")

    def _chunks(self, ind: str, chunk: int = REDUCTION_CHUNK) -> tuple[str, str]:
        """Open a loop over the row's chunks; the first and end `r` of one."""
        rnumel = self.k.rnumel
        end = f"r0 + {chunk}"
        if not isinstance(rnumel, int) or rnumel % chunk:
            end = f"std::min<int64_t>({end}, {rnumel})"
        self.lines.append(f"{ind}for (int64_t r0 = 0; r0 < {rnumel}; r0 += {chunk}) {{")
        return "r0", end

    def _live(self, loop: Loop) -> set[str]:
        """The statements of `loop` that its stores and reductions need, where a
        value already kept in its row buffer is read from there, not recomputed."""
        reused = self.kept & self.filled
        need = {r.args[0] for r in loop.reductions}
        live: set[str] = set()
        for s in reversed(loop.body):
            if isinstance(s, Store):
                need.add(s.value)
            elif s.name in need:
                live.add(s.name)
                if s.name not in reused:
                    need.update(operands(s))
        return live

    def _position(self, r: Stmt, at: str, best: str, where: str, ind: str) -> None:
        """argmax / argmin: the first position of the largest (smallest) value, a
        NaN counting as the largest (smallest), as torch's do."""
        x, cmp = r.args[0], ">" if r.reduce == "argmax" else "<"
        nan_first = f"({x} != {x} && {best} == {best})"
        self.lines.append(f"{ind}if ({at} < 0 || {x} {cmp} {best} || {nan_first}) {{")
        self.lines.append(f"{ind}    {best} = {x};")
        self.lines.append(f"{ind}    {at} = {where};")
        self.lines.append(f"{ind}}}")

    def _lane_position(self, r: Stmt, lane: str, ind: str) -> None:
        """`_position` in lane `lane`, without branches (so that it vectorizes):
        a lane keeps the first position of its own largest (smallest) value."""
        x, cmp = r.args[0], ">" if r.reduce == "argmax" else "<"
        best, at = f"{r.name}_best{lane}", f"{r.name}_at{lane}"
        self.lines.append(
            f"{ind}bool {r.name}_take = ({at} < 0) | ({x} {cmp} {best}) | "
            f"(({x} != {x}) & ({best} == {best}));"
        )
        self.lines.append(f"{ind}{best} = {r.name}_take ? {x} : {best};")
        self.lines.append(f"{ind}{at} = {r.name}_take ? r : {at};")

    def _accumulate(self, r: Stmt, acc: str, x: str, ind: str) -> None:
        if r.reduce in CLAUSES:
            self.lines.append(f"{ind}{acc} {CLAUSES[r.reduce]}= {x};")
        else:
            self.lines.append(f"{ind}{acc} = std::{r.reduce}({acc}, {x});")

    def _outer_only(self, segs, var: str = "x", given=frozenset()) -> set[str]:
        """The statements of a loop split in two (`var` into `var0` and `var1`,
        the inner loop) that do not depend on `var1`: in a pointwise kernel a
        channel's coordinate, the piece of a `cat` it lies in, a per-channel
        weight; in a tile of columns, values of `r` alone; in a row's loop split
        at a group, the group's weight. None of their addresses varies along
        `var1`, nor any operand but those `given` (computed before the loop)."""
        inner, numel = (self.inner, self.k.xnumel) if var == "x" else self.r_split
        outer: set[str] = set()
        # addresses affine in x1 (Note [Positions along the inner loop])
        varying = {n for n, v in self.known.items() if re.search(rf"\b{var}1\b", v)}
        for s in segs:
            if not isinstance(s, Stmt):
                continue
            index = _index_of(s)
            if index is not None:
                if any(t.var in varying for t in index.terms):
                    continue
                split = split_index(index, inner, numel, True, var)
                if any(t.var == f"{var}1" for t in split.terms):
                    continue
            if all(a in outer or a in given for a in operands(s)):
                outer.add(s.name)
        return outer

    def _x1_values(self, segs) -> dict[str, tuple]:
        """The values, for each `x1`, of the inner loop's statements that depend on
        `x1` alone: its coordinates and the comparisons and arithmetic on them."""
        values: dict[str, tuple] = {}
        for s in segs:
            if not isinstance(s, Stmt):
                continue
            if s.op == "index":
                index = split_index(s.args[0], self.inner, self.k.xnumel, True)
                if index is None or any(t.var != "x1" for t in index.terms):
                    continue
                values[s.name] = tuple(
                    index.offset
                    + sum(t.stride * (x1 // t.div % t.mod) for t in index.terms)
                    for x1 in range(self.inner)
                )
            elif s.op in _FOLDED and all(
                isinstance(a, Const) or a in values for a in s.args
            ):
                columns = [
                    values[a] if isinstance(a, str) else (a.value,) * self.inner
                    for a in s.args
                ]
                if s.op in ("remainder", "floor_divide") and 0 in columns[1]:
                    continue  # by zero: eager raises, nothing to compute
                values[s.name] = tuple(_FOLDED[s.op](*v) for v in zip(*columns))
        return values

    def _fold(self, segs, fixed: dict[str, bool]) -> dict[str, str]:
        """What the loop's statements become where the conditions `fixed` hold:
        a literal, or the name of the value they then equal."""
        known = {name: "true" if v else "false" for name, v in fixed.items()}
        addresses = {t.var for s in segs for t in _terms(s)}
        dtypes = {s.name: s.dtype for s in self.k.body if isinstance(s, Stmt)}
        for s in segs:
            if not isinstance(s, Stmt) or s.name in known or s.name in addresses:
                continue
            a = [
                self.arg(x) if isinstance(x, Const) else known.get(x, x) for x in s.args
            ]
            same = [isinstance(x, Const) or dtypes.get(x) == s.dtype for x in s.args]
            if s.op in ("logical_and", "logical_or"):
                absorbing = "false" if s.op == "logical_and" else "true"
                neutral = "true" if s.op == "logical_and" else "false"
                if absorbing in a:
                    known[s.name] = absorbing
                elif a[0] == neutral and same[1]:
                    known[s.name] = a[1]
                elif a[1] == neutral and same[0]:
                    known[s.name] = a[0]
            elif s.op == "logical_not" and a[0] in ("true", "false"):
                known[s.name] = "false" if a[0] == "true" else "true"
            elif s.op == "where" and a[0] in ("true", "false"):
                pick = 1 if a[0] == "true" else 2
                if same[pick]:
                    known[s.name] = a[pick]
            elif s.op in ("maximum", "minimum") and s.dtype.is_floating_point:
                # max(v, -inf) is v, a NaN too: a window's edge left out
                bound = float("-inf" if s.op == "maximum" else "inf")
                for i in (0, 1):
                    if a[i] == cpp_literal(bound, s.dtype) and same[1 - i]:
                        known[s.name] = a[1 - i]
                        break
        return known

    def _masks(self, segs, known: dict[str, str]) -> list[str]:
        """The masks, as `known` leaves them, of the loop's masked loads (Note
        [Edges of windows]): contiguous in `x1` or not, they keep the loop from
        being vectorized whole."""
        masks = []
        for s in segs:
            if not (isinstance(s, Stmt) and s.op == "load" and len(s.args) > 2):
                continue
            mask = known.get(s.args[2], s.args[2])
            if mask not in ("true", "false") and mask not in masks:
                masks.append(mask)
        return masks

    def _outer_selects(self, segs, parts, outer: set[str]) -> bool:
        """Whether a loop of the split inner loop (`parts`, or the whole) keeps a
        condition on the outer index (Note [Short inner loops]): a mask or a
        `where` that `_version` does not take out of it, the loop being of one
        element or the copies too many."""
        for first, end, fixed in parts or [(0, self.inner, {})]:
            known = self._fold(segs, fixed)
            conditions = {m for m in self._masks(segs, known) if m in outer}
            conditions |= {
                known.get(s.args[0], s.args[0])
                for s in segs
                if isinstance(s, Stmt) and s.op == "where"
            } & outer
            if conditions and not _versioned(first, end, fixed, outer):
                return True
        return False

    def _peeled_parts(self, segs, outer: set[str]):
        """Where the inner loop has masked loads, the ranges of `x1` it is
        split into and the conditions constant in each (Note [Edges of windows]);
        None where it stays one loop."""
        if not isinstance(self.inner, int):
            return None
        values = self._x1_values(segs)
        addresses = self._x1_addresses(segs, values)
        if not (self._masks(segs, {}) or addresses or self._selects(segs, values)):
            return None
        used = {a for s in segs if isinstance(s, Stmt) for a in operands(s)}
        conditions = [
            n for n, v in values.items() if n in used and isinstance(v[0], bool)
        ]
        cuts = {0} | {
            x1
            for x1 in range(1, self.inner)
            if any(values[n][x1] != values[n][x1 - 1] for n in conditions)
        }
        for name in addresses:
            cuts |= _affine_cuts(values[name])
        if len(cuts) > PEELED_LOOPS_MAX:
            return None
        bounds = sorted(cuts) + [self.inner]
        parts = [
            (a, b, {n: values[n][a] for n in conditions})
            for a, b in itertools.pairwise(bounds)
        ]
        if len(parts) == 1:  # worth it only for a mask on the row to take out
            left = self._masks(segs, self._fold(segs, parts[0][2]))
            if not any(m in outer for m in left):
                return None
        return parts

    def _selects(self, segs, values: dict[str, tuple]) -> bool:
        """Whether a `where` of the loop picks between values computed in it by a
        condition on `x1` alone (`values`) that changes along the loop (the
        pieces of a `cat` of computed values: Note [Pieces along the inner
        loop])."""
        computed = {
            s.name
            for s in segs
            if isinstance(s, Stmt) and s.op not in ("index", "load")
        }
        return any(
            s.op == "where"
            and s.args[0] in values
            and len(set(values[s.args[0]])) > 1
            and any(a in computed for a in s.args[1:])
            for s in segs
            if isinstance(s, Stmt)
        )

    def _x1_addresses(self, segs, values: dict[str, tuple]) -> list[str]:
        """The integers of `x1` alone that loads are addressed by (a reflect pad's
        source column) and that are not affine in `x1` over the whole loop (Note
        [Positions along the inner loop])."""
        dtypes = {s.name: s.dtype for s in segs if isinstance(s, Stmt)}
        terms = {t.var for s in segs if isinstance(s, Stmt) for t in _terms(s)}
        return [
            name
            for name in sorted(terms & set(values))
            if not dtypes[name].is_floating_point
            and dtypes[name] != torch.bool
            and _affine_cuts(values[name]) != {0}
        ]

    def _affine_known(self, segs, first: int, end: int) -> dict[str, str]:
        """The integers of `x1` alone that address loads, as expressions affine in
        `x1` over `first..end` where they are (Note [Positions along the inner
        loop])."""
        values = self._x1_values(segs)
        known = {}
        for name in self._x1_addresses(segs, values):
            v = values[name][first:end]
            step = v[1] - v[0] if len(v) > 1 else 0
            if any(b - a != step for a, b in itertools.pairwise(v)):
                continue
            known[name] = _affine_text(v[0] - step * first, step)
        return known

    def _split_inner(self, segs, parts, outer: set[str]) -> None:
        """The inner loop as `parts`, each with its conditions on `x1` constant and
        written once for each value of the masks left that depend on the row."""
        self.lines.append("        // split where the conditions on x1 change value")
        for first, end, fixed in parts:
            self._version(segs, first, end, fixed, outer, "        ")

    def _version(self, segs, first, end, fixed, outer, ind: str, scoped=False):
        """The loop over `x1` from `first` to `end` where the conditions `fixed`
        hold, itself written twice if a mask on the row is left (`scoped`: in a
        branch of that `if`)."""
        known = self._fold(segs, fixed) | self._affine_known(segs, first, end)
        masks = [m for m in self._masks(segs, known) if m in outer]
        if masks and _versioned(first, end, fixed, outer):
            inner = ind + "    "
            self.lines.append(f"{ind}if ({masks[0]}) {{")
            self._version(
                segs, first, end, fixed | {masks[0]: True}, outer, inner, True
            )
            self.lines.append(f"{ind}}} else {{")
            self._version(
                segs, first, end, fixed | {masks[0]: False}, outer, inner, True
            )
            self.lines.append(f"{ind}}}")
            return
        self.known = known
        live = {known.get(s.value, s.value) for s in segs if isinstance(s, Store)}
        for s in reversed(segs):
            if isinstance(s, Stmt) and s.name in live:
                live |= {known.get(a, a) for a in operands(s)}
        # what the folded conditions leave depending on the row alone (a channel's
        # weight read under a mask that now holds) is computed before the loop
        names = {s.name for s in self.k.body if isinstance(s, Stmt)}
        settled = {n for n, v in known.items() if v in outer or v not in names}
        hoisted = self._outer_only(
            [s for s in segs if isinstance(s, Stmt) and s.name in live],
            given=outer | settled,
        ) - set(known)
        self.invariant = outer | hoisted
        if hoisted and not scoped:
            self.lines.append(f"{ind}{{")
            ind += "    "
        for seg in segs:
            if isinstance(seg, Stmt) and seg.name in hoisted:
                self.stmt(seg, ind)
        self.lines.append(f"{ind}{self._omp('simd')}")
        self.lines.append(f"{ind}for (int64_t x1 = {first}; x1 < {end}; ++x1) {{")
        for seg in segs:
            if isinstance(seg, Store):
                self.store(seg, ind + "    ")
            elif seg.name in live and seg.name not in hoisted:
                self.stmt(seg, ind + "    ")
        self.lines.append(f"{ind}}}")
        if hoisted and not scoped:
            self.lines.append(f"{ind[:-4]}}}")
        self.known = {}

    def render(self) -> str:
        k = self.k
        params = [
            f"const {_input_type(a.dtype)}* __restrict__ {a.param}" for a in k.inputs
        ]
        params += [f"{CPP_TYPES[a.dtype]}* __restrict__ {a.param}" for a in k.outputs]
        params += [f"int64_t {d}" for d in sorted(dims_in(k))]  # dynamic sizes
        lines = [f"// {cpp_comment(f'{span}: {span.text}')}" for span in k.spans]
        # Note [Doubles to float]
        rounds = " ROUNDS_DOUBLES" if _rounds_doubles(k) else ""
        lines.append(f'extern "C"{rounds} void cpp_{k.name}(')
        lines += [
            f"    {p}{',' if i < len(params) - 1 else ''}" for i, p in enumerate(params)
        ]
        lines.append(") {")
        if _computes_sines(k):  # Note [Sines near zero]
            near = _Renderer(k, self.plan, near=True)._body()
            anywhere = _Renderer(k, self.plan, near=False)._body()
            lines.append("    int32_t far = 0;  // an argument beyond sin_near's range")
            lines += near
            lines += ["    if (!far) {", "        return;", "    }"]
            lines += anywhere
            return "\n".join([*lines, "}"]) + "\n"
        self.lines = lines
        self._body()
        return "\n".join([*self.lines, "}"]) + "\n"

    def _omp(self, pragma: str) -> str:
        """`#pragma omp` and `pragma`, which reduces `far` in a kernel computing
        sines near zero (Note [Sines near zero])."""
        far = " reduction(|:far)" if self.near else ""
        return f"#pragma omp {pragma}{far}"

    def _body(self) -> list[str]:
        """The kernel's loops, appended to `lines`, which they are returned as."""
        k = self.k
        parallel = self.plan.parallel
        ind = "        "
        if across_rows(k):
            self.columns(parallel)
            return self.lines
        segs = segments(k)
        lines = self.lines
        if k.is_reduction:
            if parallel:
                lines.append("    #pragma omp parallel for")
            lines.append(f"    for (int64_t x = 0; x < {k.xnumel}; ++x) {{")
        elif self.inner is not None:
            # two loops, so that broadcasting and transposes index without `/`, `%`;
            # what depends on the outer index alone is computed once per inner loop
            if parallel:
                lines.append(f"    {self._omp('parallel for')}")
            lines.append(
                f"    for (int64_t x0 = 0; x0 < {k.xnumel // self.inner}; ++x0) {{"
            )
            outer = self._outer_only(segs)
            self.invariant = outer
            for seg in segs:
                if isinstance(seg, Stmt) and seg.name in outer:
                    self.stmt(seg, ind)
            segs = [s for s in segs if not (isinstance(s, Stmt) and s.name in outer)]
            if self.plan.parts is not None:
                parts = [(a, b, dict(fixed)) for a, b, fixed in self.plan.parts]
                self._split_inner(segs, parts, outer)
                self.lines.append("    }")
                return self.lines
            lines.append(f"        {self._omp('simd')}")
            lines.append(f"        for (int64_t x1 = 0; x1 < {self.inner}; ++x1) {{")
            ind += "    "
        else:
            simd = "parallel for simd" if parallel else "simd"
            if not _scatters(k):  # its adds (writes) may meet at one element
                lines.append(f"    {self._omp(simd)}")
            lines.append(f"    for (int64_t x = 0; x < {k.xnumel}; ++x) {{")
        plans = iter(self.plan.loops)
        for seg in segs:
            if isinstance(seg, Loop):
                self.loop(seg, next(plans), ind)
            elif isinstance(seg, Store):
                self.store(seg, ind)
            else:
                self.stmt(seg, ind)
        if self.inner is not None:
            self.lines.append("        }")
        self.lines.append("    }")
        return self.lines


def _holds_row(store: Store, rnumel: int) -> bool:
    """Whether `store` writes each element of a row to its own place, the row
    contiguous: one term of `r`, unscaled and not wrapping, no mask, no scatter."""
    if store.level != "r" or store.mask is not None or store.scatter is not None:
        return False
    return _along_row(store.index, rnumel)


def _along_row(index: Index, rnumel: int) -> bool:
    """Whether `index` goes through the row in order, one element at a time."""
    along = [t for t in index.terms if t.var == "r"]
    if [(t.div, t.stride) for t in along] != [(1, 1)]:
        return False
    mod = along[0].mod
    return isinstance(mod, int) and mod >= rnumel


def _costly(name: str, stmts: dict[str, Stmt], shared: set[str]) -> bool:
    """Whether computing `name` again, from the values not in `shared`, would take
    a `COSTLY` op (Note [Rows kept in an output])."""
    stack, seen = [name], set()
    while stack:
        n = stack.pop()
        if n in seen or n not in stmts:
            continue
        seen.add(n)
        if stmts[n].op in COSTLY:
            return True
        stack.extend(a for a in operands(stmts[n]) if a in shared)
    return False


def _rounds_doubles(k: Kernel) -> bool:
    """Whether `k` has values of both double and float (Note [Doubles to float])."""
    types = {compute_type(s.dtype) for s in k.body if isinstance(s, Stmt)}
    types |= {compute_type(compute_dtype(a.dtype)) for a in (*k.inputs, *k.outputs)}
    return {"double", "float"} <= types


def _computes_sines(k: Kernel) -> bool:
    """Whether `k` is a pointwise kernel that computes a sine or cosine of float
    (Note [Sines near zero])."""
    return not (k.is_reduction or across_rows(k) or _scatters(k)) and any(
        isinstance(s, Stmt) and _near_sine(s) for s in k.body
    )


def _near_sine(s: Stmt) -> bool:
    """Whether `s` is a sine or cosine computed in float (Note [Sines near zero])."""
    return s.op in _SINES and compute_type(s.dtype) == "float"


def _scatters(k: Kernel) -> bool:
    """Whether `k` adds into (or writes) elements at addresses that two positions
    may share (Note [Scatters])."""
    return any(isinstance(s, Store) and s.scatter is not None for s in k.body)


def _scatter_inner(k: Kernel) -> int | None:
    """The inner loop of scatter kernel `k` whose adds go to distinct elements:
    its indices and mask loaded per outer step (a row of an embedding's gradient,
    an expert's output), its inner positions those of other dimensions, whose
    addresses differ. Such a loop adds as one vector; the outer one stays in
    order, on one thread."""
    inner = inner_split(_indices(k), k.xnumel, outer_min=1)
    if inner is None:
        return None
    analysis = _Renderer(k, CppSchedule(False, inner))
    outer = analysis._outer_only(segments(k))
    for s in k.body:
        if isinstance(s, Store) and s.scatter is not None:
            loaded = [t.var for t in s.index.terms if t.var not in ("x", "r")]
            if not all(v in outer for v in loaded + [s.mask] if v is not None):
                return None
            split = split_index(s.index, inner, k.xnumel, True)
            strides = [t.stride for t in split.terms if t.var == "x1"]
            if not strides or 0 in strides:
                return None
    return inner


def _cdiv(n, d: int):
    return -(-n // d) if isinstance(n, int) else f"({size_text(n)} + {d - 1}) / {d}"


def _divides_r(index: Index, rnumel: int) -> bool:
    """Whether `index` reads the row's position through a division or a
    remainder: a row over several dimensions not neighbours in memory."""
    return any(
        t.var == "r" and (t.div != 1 or t.div * t.mod < rnumel) for t in index.terms
    )


def _over_lanes(split: Index, lanes: int) -> Index:
    """An index split at groups of `lanes` (`split_index`) over the loop's own
    variables: the group's terms over its first element `r1` (`r_group`), a
    multiple of `lanes`, which the compiler computes once a group; the lane's over
    `l`, affine, so that the lanes' loads are one vector's."""
    return Index(
        split.offset,
        tuple(
            (
                Term("r_group", t.div * lanes, t.mod, t.stride)
                if t.var == "r0"
                else Term("l", t.div, t.mod, t.stride) if t.var == "r1" else t
            )
            for t in split.terms
        ),
    )


def _index_of(s: Stmt) -> Index | None:
    """The index a statement addresses memory or computes with, if any."""
    if s.op == "load":
        return s.args[1]
    if s.op == "index":
        return s.args[0]
    return None


def _affine_cuts(values: tuple) -> set[int]:
    """Where a sequence is cut into runs, each affine (a constant step): the
    first position of each run, found from the left."""
    cuts, start, i = {0}, 0, 2
    while i < len(values):
        if values[i] - values[i - 1] != values[start + 1] - values[start]:
            cuts.add(i)
            start, i = i, i + 2
        else:
            i += 1
    return cuts


def _affine_text(offset: int, step: int) -> str:
    """`offset + step * x1`, as C++."""
    term = {0: "", 1: "x1", -1: "-x1"}.get(step, f"{step} * x1")
    if not term:
        return f"int64_t{{{offset}}}"
    if offset == 0:
        return term
    if term.startswith("-"):
        return f"{offset} - x1" if step == -1 else f"{offset} + {term}"
    return f"{term} + {offset}" if offset > 0 else f"{term} - {-offset}"


def _terms(s) -> tuple:
    """The index terms a statement or store addresses with."""
    index = s.index if isinstance(s, Store) else _index_of(s)
    return index.terms if index is not None else ()


def _indices(k: Kernel) -> list[Index]:
    stmts = [s for s in k.body if isinstance(s, Stmt)]
    loads = [_index_of(s) for s in stmts if s.op == "load"]
    loads += [_index_of(s) for s in stmts if s.op == "index"]
    return loads + [s.index for s in k.body if isinstance(s, Store)]


def render_kernel(k: Kernel) -> str:
    assert k.cpp is not None, f"{k.name} has no C++ schedule (`schedule`)"
    return _Renderer(_narrowed(k), k.cpp).render()


def _versioned(first: int, end: int, fixed, outer: set[str]) -> bool:
    """Whether the part of the inner loop from `first` to `end`, where conditions
    `fixed` hold, is written once for each value of a mask on the row left in it
    (Note [Edges of windows]): more than one element, within VERSIONS_MAX copies."""
    copies = 2 ** (len([n for n in fixed if n in outer]) + 1)
    return end - first > 1 and copies <= VERSIONS_MAX


def schedule(k: Kernel) -> CppSchedule:
    """How `k`'s C++ loops are written, every choice made here and kept on the
    kernel for the renderer: threads for enough work, the inner loop's length
    (a pointwise kernel's split, a tile of columns), the pieces a window's inner
    loop is split into, the values a row keeps on the stack, and for each loop
    over a row its lanes, chunks, groups and whether it prefetches the next."""
    k = _narrowed(k)  # as it is rendered
    if _scatters(k):  # Note [Scatters]: one add (write) after another
        return CppSchedule(False, _scatter_inner(k))
    parallel = size(k.xnumel) * size(k.rnumel) >= PARALLEL_MIN
    analysis = _Renderer(k, CppSchedule(parallel))  # nothing is written
    if across_rows(k):
        return CppSchedule(parallel, analysis.column_tile())
    segs = segments(k)
    if not k.is_reduction:
        inner = inner_split(_indices(k), k.xnumel)
        if inner is None:
            return CppSchedule(parallel)
        analysis.inner = inner
        outer = analysis._outer_only(segs)
        segs = [s for s in segs if not (isinstance(s, Stmt) and s.name in outer)]
        parts = analysis._peeled_parts(segs, outer)
        if inner <= SHORT_INNER_MAX and analysis._outer_selects(segs, parts, outer):
            return CppSchedule(parallel)  # Note [Short inner loops]
        if parts is not None:
            parts = tuple((a, b, tuple(fixed.items())) for a, b, fixed in parts)
        return CppSchedule(parallel, inner, parts=parts)
    kept, into = analysis._kept_rows(segs)
    analysis.kept = kept
    prefetch = analysis._prefetch_loop(segs)
    loops = []
    for loop in (seg for seg in segs if isinstance(seg, Loop)):
        plan = analysis.row_loop(loop, loop is prefetch)
        whole = not plan.chunked and plan.groups is None
        if whole and analysis.spread(loop) is not None:
            plan = dataclasses.replace(plan, spread=True)
        loops.append(plan)
        analysis.filled |= {s.name for s in loop.body if isinstance(s, Stmt)} & kept
    kept_in = tuple(sorted(into.items()))
    return CppSchedule(parallel, None, frozenset(kept), tuple(loops), kept_in=kept_in)


# Every file's first line of code: the helpers shared by all generated kernels
# (runtime_shim/kernels.h; runtime_shim.cpp puts its folder on the include path).
INCLUDE = '#include "runtime_shim/kernels.h"\n'


HELPER_SOURCE = {
    "sign_bit": """
// a float's sign bit (-0.0 and -NaN too), read from its bits: g++ 12 fails to
// compile std::signbit of a bf16 converted to float in a vectorized loop
template <typename T> static inline bool sign_bit(T x) {
    using U = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
    U bits;
    std::memcpy(&bits, &x, sizeof bits);
    return (bits >> (sizeof(T) * 8 - 1)) != 0;
}
""",
    "floor_mod": """
// torch's remainder (Python's %): fmod (for integers `%`, which truncates too),
// plus b where it is nonzero and of the other sign than b; a zero keeps a's sign
template <typename T> static inline T floor_mod(T a, T b) {
    T r;
    if constexpr (std::is_integral<T>::value) {
        r = a % b;
    } else {
        r = std::fmod(a, b);
    }
    return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}
""",
    "pow_int": """
// torch's integer pow: repeated squaring, wrapping on overflow; a negative
// exponent gives 1 ** b = 1, (-1) ** b = +-1 and 0 for other bases
template <typename T> static inline T pow_int(T a, T b) {
    if (b < 0) return a == 1 ? T(1) : (a == -1 ? (b % 2 != 0 ? T(-1) : T(1)) : T(0));
    T r = 1;
    for (; b != 0; b /= 2) {
        if (b & 1) r = wrap_mul(r, a);
        a = wrap_mul(a, a);
    }
    return r;
}
""",
    "shift_left": """
// torch's <<: on the unsigned bits (no undefined signed overflow), and 0 for a
// negative shift or one past the width (undefined in C++)
template <typename T> static inline T shift_left(T a, T b) {
    using U = typename std::make_unsigned<T>::type;
    if (b < 0 || b >= T(sizeof(T) * 8)) return T(0);
    return static_cast<T>(static_cast<U>(a) << b);
}
""",
    "shift_right": """
// torch's >>, arithmetic: a negative shift or one past the width (undefined in
// C++) fills with the sign bit
template <typename T> static inline T shift_right(T a, T b) {
    constexpr T bits = sizeof(T) * 8;
    return a >> ((b < 0 || b >= bits) ? bits - 1 : b);
}
""",
    "shift_right_uint": """
// torch's >> of unsigned integers: 0 for a shift past the width
template <typename T> static inline T shift_right_uint(T a, T b) {
    return b >= T(sizeof(T) * 8) ? T(0) : static_cast<T>(a >> b);
}
""",
    "floor_div": """
// torch's floor division: for integers, the quotient rounded toward negative
// infinity; for floats, (a - fmod(a, b)) / b, one less where fmod and b differ
// in sign, rounded to the nearest integer (a zero takes the sign of a / b, and
// division by zero is a / b)
template <typename T> static inline T floor_div(T a, T b) {
    if constexpr (std::is_integral<T>::value) {
        T q = a / b;
        T r = a % b;
        return (r != 0 && (r < 0) != (b < 0)) ? q - 1 : q;
    } else {
        if (b == 0) return a / b;
        T mod = std::fmod(a, b);
        T div = (a - mod) / b;
        if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
        if (div == 0) return std::copysign(T(0), a / b);
        T q = std::floor(div);
        return div - q > T(0.5) ? q + 1 : q;
    }
}
""",
    "lanes_fill": """
// a reduction's lanes (independent accumulators, whose adds overlap) set to its
// start; unrolled, so that the compiler keeps the lanes in vector registers
template <typename T, int L, typename V> static inline void lanes_fill(T (&v)[L], V x) {
    #pragma GCC unroll 64
    for (int l = 0; l < L; ++l) v[l] = T(x);
}
""",
    "lanes_sum": """
// a reduction's lanes joined
template <typename T, int L> static inline T lanes_sum(const T (&v)[L]) {
    T total = 0;
    #pragma omp simd reduction(+:total)
    for (int l = 0; l < L; ++l) total += v[l];
    return total;
}
""",
    "lanes_prod": """
// a product's lanes joined
template <typename T, int L> static inline T lanes_prod(const T (&v)[L]) {
    T total = 1;
    #pragma omp simd reduction(*:total)
    for (int l = 0; l < L; ++l) total *= v[l];
    return total;
}
""",
    "lanes_position": """
// the lanes of an argmax (`largest`) or argmin joined: the first position of the
// largest (smallest) value, a NaN counting as larger (smaller) than any other
template <typename T, int L>
static inline int64_t lanes_position(const T (&best)[L], const int64_t (&at)[L],
                                     bool largest) {
    T b = best[0];
    int64_t i = at[0];
    for (int l = 1; l < L; ++l) {
        if (at[l] < 0) continue;  // a lane no element reached
        T v = best[l];
        bool earlier = i < 0 || at[l] < i;
        bool take;
        if (v != v || b != b) {
            take = (v != v) && (b == b || earlier);
        } else {
            take = (largest ? v > b : v < b) || (v == b && earlier);
        }
        if (i < 0 || take) {
            b = v;
            i = at[l];
        }
    }
    return i;
}
""",
}
_LANES_EXTREMUM = """
// a reduction's lanes joined; a NaN is tracked beside them
template <typename T, int L> static inline T lanes_{m}(const T (&v)[L]) {{
    T m = v[0];
    #pragma omp simd reduction({m}:m)
    for (int l = 0; l < L; ++l) m = std::{m}(m, v[l]);
    return m;
}}
"""
HELPER_SOURCE |= {f"lanes_{m}": _LANES_EXTREMUM.format(m=m) for m in ("max", "min")}
LANE_HELPERS = (
    "lanes_fill",
    "lanes_sum",
    "lanes_prod",
    "lanes_max",
    "lanes_min",
    "lanes_position",
)


def render_file(kernels, header: str) -> str:
    texts = [render_kernel(k) for k in kernels]
    body = "\n".join(texts)
    used = [h for h in (*CPP_HELPERS, *LANE_HELPERS) if f"{h}(" in body]
    helpers = [HELPER_SOURCE[h] for h in used]
    return "\n".join([header, INCLUDE, *helpers, *texts])


def _lanes(dtypes: list[torch.dtype], rnumel) -> int:
    """How many lanes the reductions of a loop over `rnumel` elements keep (Note
    [Lanes]), given the types of their accumulators (of the values compared, for
    positions); 0 for none."""
    if not dtypes:
        return 0
    widest = max(d.itemsize for d in dtypes)
    lanes = LANE_BYTES // max(widest, 4)  # bool and int8 sums are kept as int
    if isinstance(rnumel, int) and rnumel < LANES_MIN_GROUPS * lanes:
        return 0
    return lanes


def _compute_bytes(dtype: torch.dtype) -> int:
    """The size of a value of `dtype` as kernels compute it (f16, bf16 in float)."""
    return 4 if dtype in (torch.float16, torch.bfloat16) else dtype.itemsize


def _identity(r: Stmt) -> str:
    """The value reduction `r` starts from: 0 for a sum, 1 for a product, -1 for a
    position, else the lowest (for max) or highest (for min) value of its type."""
    if r.reduce in OPERATOR_STARTS:
        return OPERATOR_STARTS[r.reduce]
    if r.reduce in ARG:
        return "-1"
    if r.dtype.is_floating_point:
        return "-INFINITY" if r.reduce == "max" else "INFINITY"
    limit = "lowest" if r.reduce == "max" else "max"
    return f"std::numeric_limits<{compute_type(r.dtype)}>::{limit}()"


def _scans(loop: Loop) -> list[Stmt]:
    return [s for s in loop.body if isinstance(s, Stmt) and s.op == "scan"]


def _scan_op(s: Stmt) -> str:
    """The C++ operator a scan accumulates with."""
    return "+" if s.reduce == "sum" else "*"


def _scan_identity(s: Stmt) -> str:
    """A scan's running value before the row's first element."""
    return "0" if s.reduce == "sum" else "1"


def _scan_type(s: Stmt) -> str:
    """What a scan's running value is kept in: double for floats and int64 for
    integers, as eager's CPU scans keep theirs."""
    return "double" if s.dtype.is_floating_point else "int64_t"


def _tracks_nan(r: Stmt) -> bool:
    """Whether a max or min remembers that a NaN went by (floats only)."""
    return r.reduce in ("max", "min") and r.dtype.is_floating_point
