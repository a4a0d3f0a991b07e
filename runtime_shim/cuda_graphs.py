"""CUDA graphs for generated variants (`cuda_graphs = true`): capture once, replay.

The analogue of `torch.compile(mode="reduce-overhead")`, simplified. A generated
`forward` whose variant has CUDA graphs on calls, after its guards passed,

    runtime_shim.cuda_graph(self, _cuda_0, _reads_cuda_0)(self, x)

and the runner for (this instance, this variant), kept on the instance, does:

- first call: copies the tensor arguments into static buffers of its own, runs the
  variant once on a side stream (Triton compiles its kernels, cuBLAS initializes),
  captures it into a `torch.cuda.CUDAGraph` with a private memory pool, replays it
  and returns the outputs of the capture;
- later calls: copies each tensor argument into its static buffer (no copy when the
  caller passes that very buffer), replays, and returns the same output tensors.
  Outputs are overwritten by the next call: clone one to keep it.
- re-captures when what the graph reads in place moved: a parameter or buffer's
  `data_ptr()` (after `module.to(...)`, `load_state_dict(..., assign=True)`), or the
  device of an argument.

Guards decide *whether* the variant runs; the runner only decides whether its graph
is still valid. A variant the runner cannot capture (capture raises, or an output is
an argument's memory) runs without a graph, with a one-time warning.

A variant that branches on tensor data cannot be one graph: the branch reads its
condition on the host. `runtime_shim.cuda_graph_tree` runs it as a tree of graphs,
one per straight-line segment between the branches, like torch.compile's cudagraph
trees around a graph break; see Note [CUDA graph trees] at `CudaGraphTree`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from runtime_shim.warn import warn_once

__all__ = [
    "CaptureFailed",
    "CudaGraphError",
    "CudaGraphRunner",
    "CudaGraphTree",
    "CudaGraphs",
    "cuda_graph",
    "cuda_graph_tree",
]

ATTRIBUTE = "_transpile_cuda_graphs"  # where an instance keeps its runners

Reads = Callable[[Any], tuple[torch.Tensor, ...]]


class CudaGraphs(dict):
    """An owner's runners, by variant function. Copies start empty: a copied module
    has tensors of its own, so it captures graphs of its own."""

    def __reduce__(self):  # copy, deepcopy and pickle alike
        return (CudaGraphs, ())


def cuda_graph(owner: Any, fn: Callable, reads: Reads | None = None) -> CudaGraphRunner:
    """The runner of `fn` for `owner` (the module instance, or for a function target
    the exported function), made on first use and kept in `owner.__dict__`."""
    return _runner(CudaGraphRunner, owner, fn, reads)


def cuda_graph_tree(
    owner: Any, fn: Callable, reads: Reads | None = None
) -> CudaGraphTree:
    """`cuda_graph` for a variant that branches on tensor data: `fn(graphs, *args)`
    runs each of its segments through `graphs.run` (see `CudaGraphTree`)."""
    return _runner(CudaGraphTree, owner, fn, reads)


def _runner(cls: type, owner: Any, fn: Callable, reads: Reads | None) -> Any:
    graphs = owner.__dict__.get(ATTRIBUTE)
    if graphs is None:
        graphs = owner.__dict__[ATTRIBUTE] = CudaGraphs()
    runner = graphs.get(fn)
    if runner is None:
        runner = graphs[fn] = cls(fn, owner, reads)
    return runner


def _tensors(values: Any) -> list[torch.Tensor]:
    """The tensors of nested tuples/lists/dicts, in order."""
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (tuple, list)):
        return [t for v in values for t in _tensors(v)]
    if isinstance(values, dict):
        return [t for v in values.values() for t in _tensors(v)]
    return []


class CudaGraphRunner:
    """One variant of one owner, captured into a CUDA graph and replayed.

    `fn(*args, **kwargs)` is the variant; `reads(owner)` the parameters and buffers
    it reads (the graph holds their addresses). `_record` is the only CUDA-specific
    step: tests replace it to check the rest on CPU.
    """

    SHARES_POOL = False  # each graph has a private memory pool of its own

    def __init__(self, fn: Callable, owner: Any, reads: Reads | None = None) -> None:
        self.fn = fn
        self.name = getattr(fn, "__qualname__", repr(fn))
        self.reads = reads
        self.owner_type = type(owner).__qualname__
        self.captures = 0  # how many times it captured (re-captures included)
        self.disabled: str | None = None  # why it runs without a graph, if it does
        self._key: tuple | None = None  # what the graph was captured for
        self._static: list[torch.Tensor] = []  # the static copies of the arguments
        self._positions: list[int] = []  # where they are in args + kwargs values
        self._outputs: Any = None
        self._replay: Callable[[], None] | None = None
        self._pool: Any = None  # the memory pool graphs share (CudaGraphTree)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.disabled is not None:
            return self.run_without_graph(*args, **kwargs)
        values = (*args, *kwargs.values())
        key = self._key_of(values)
        if key != self._key:
            return self._capture(args, kwargs, key)
        self._refill(values)
        self._replay()
        return self._outputs

    def _key_of(self, values: tuple) -> tuple:
        """Devices of the tensor arguments, addresses of what the graph reads (a
        module's variant takes the instance first: `reads(instance)`)."""
        devices = tuple(v.get_device() for v in values if isinstance(v, torch.Tensor))
        if self.reads is None:
            return devices
        return devices, tuple(map(torch.Tensor.data_ptr, self.reads(values[0])))

    def _stage(self, values: tuple) -> None:
        """New static buffers: a copy of each tensor argument."""
        self._positions = [
            i for i, v in enumerate(values) if isinstance(v, torch.Tensor)
        ]
        self._static = [values[i].clone() for i in self._positions]

    def _refill(self, values: tuple) -> None:
        """Copy the tensor arguments into the static buffers; a caller that filled
        one and passed it saves its copy."""
        for static, i in zip(self._static, self._positions):
            if values[i] is not static:
                static.copy_(values[i])

    def _on_static(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`args` and `kwargs` with the static buffers in place of the tensors."""
        values = [*args, *kwargs.values()]
        for i, static in zip(self._positions, self._static):
            values[i] = static
        return tuple(values[: len(args)]), dict(zip(kwargs, values[len(args) :]))

    def _aliases_input(self, outputs: Any) -> bool:
        """Whether an output is (a view of) a static buffer: the next call's copy
        would overwrite it."""
        mine = {t.untyped_storage().data_ptr() for t in self._static}
        return any(t.untyped_storage().data_ptr() in mine for t in _tensors(outputs))

    def _capture(self, args: tuple, kwargs: dict, key: tuple) -> Any:
        self._key = self._outputs = self._replay = None  # the old graph goes first
        self._stage((*args, *kwargs.values()))
        static_args, static_kwargs = self._on_static(args, kwargs)
        try:
            outputs, replay = self._record(
                lambda: self.fn(*static_args, **static_kwargs)
            )
        except CaptureFailed as err:
            return self._disable(f"capture failed: {err}", args, kwargs)
        self.captures += 1
        if self._aliases_input(outputs):
            return self._disable("an output is an argument's memory", args, kwargs)
        self._key, self._outputs, self._replay = key, outputs, replay
        replay()  # capture records the work; this runs it for this call
        return outputs

    def _disable(self, why: str, args: tuple, kwargs: dict) -> Any:
        self.disabled = why
        self._static, self._outputs, self._replay = [], None, None
        warn_once(
            f"cuda_graphs:{self.owner_type}:{self.name}",
            f"{self.owner_type}: {self.name} runs without a CUDA graph: {why}",
        )
        return self.run_without_graph(*args, **kwargs)

    def run_without_graph(self, *args: Any, **kwargs: Any) -> Any:
        """The variant on the caller's arguments, captured or replayed nothing."""
        return self.fn(*args, **kwargs)

    def _record(self, run: Callable[[], Any]) -> tuple[Any, Callable[[], None]]:
        """Warm up `run` on a side stream, capture it; return (outputs, replay)."""
        devices = {t.device for t in self._static}
        if not devices and torch.cuda.is_available():  # no tensor arguments
            devices = {torch.device("cuda", torch.cuda.current_device())}
        if len(devices) != 1 or next(iter(devices)).type != "cuda":
            where = ", ".join(sorted(str(d) for d in devices)) or "no CUDA device"
            raise CudaGraphError(
                f"{self.owner_type}: {self.name}: a CUDA graph needs its tensor "
                f"arguments on one CUDA device, not {where}"
            )
        (device,) = devices
        with torch.cuda.device(device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()  # compiles Triton kernels, initializes cuBLAS: not capturable
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:  # pool None: a private memory pool of its own
                with torch.cuda.graph(graph, pool=self._pool):
                    outputs = run()
            except RuntimeError as err:  # a host sync, say: not capturable
                raise CaptureFailed(str(err).splitlines()[0]) from err
        if self.SHARES_POOL and self._pool is None:
            self._pool = graph.pool()  # later graphs allocate from this one's pool
        return outputs, graph.replay

    @property
    def static_inputs(self) -> list[torch.Tensor]:
        """The graph's input buffers, in argument order: a caller may fill one and pass
        it, which saves its copy."""
        return list(self._static)


class CudaGraphTree(CudaGraphRunner):
    """A variant that branches on tensor data, as one CUDA graph per segment.

    Note [CUDA graph trees]
    ~~~~~~~~~~~~~~~~~~~~~~~
    The generated code splits such a variant at each branch into straight-line
    segment functions, and `fn(graphs, *args)` (the variant) calls them through
    `graphs.run(segment, *args)` with the Python `if` between them:

        addmm, gt = graphs.run(_cuda_1_seg0, self, x)
        if gt:  # a host sync: reads the condition that graph 0 wrote
            return graphs.run(_cuda_1_seg1, self, x, addmm)
        else:
            return graphs.run(_cuda_1_seg2, self, x, addmm)

    - A call copies its tensor arguments into static buffers (as CudaGraphRunner),
      then runs `fn` on them. Each segment is captured on its first use, so a path
      no input takes is never captured, and replayed after.
    - A segment's arguments are static buffers or earlier segments' outputs: the
      same tensors on every call, at the addresses its graph captured, so nothing
      is copied between segments. Every graph of the tree allocates from one memory
      pool; what a later segment reads stays alive, held by the segment that made
      it. The graphs run one after another on one stream, so a later capture may
      reuse what an earlier one freed.
    - The caller gets the outputs of the last segment (or of an earlier one it
      returns): graph buffers, overwritten by the next call, as for one graph.
    - Re-capture: when what the graphs read in place moved (see CudaGraphRunner),
      every graph goes, with its pool: later segments read earlier ones' outputs.
    - A segment that cannot be captured, or an output that is an argument's memory,
      turns the graphs off for good: the call runs again on the caller's arguments,
      every segment run as it is (`run_without_graph`), with a one-time warning.
    """

    SHARES_POOL = True

    def __init__(self, fn: Callable, owner: Any, reads: Reads | None = None) -> None:
        super().__init__(fn, owner, reads)
        self._segments: dict[Callable, _Segment] = {}  # captured, by function
        self._new = False  # a segment was captured in this call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.disabled is not None:
            return self.run_without_graph(*args, **kwargs)
        values = (*args, *kwargs.values())
        key = self._key_of(values)
        if key != self._key:
            self._reset(values, key)
        else:
            self._refill(values)
        static_args, static_kwargs = self._on_static(args, kwargs)
        self._new = False
        try:
            outputs = self.fn(self, *static_args, **static_kwargs)
        except _TurnOff as off:
            return self._disable(str(off), args, kwargs)
        if self._new and self._aliases_input(outputs):
            return self._disable("an output is an argument's memory", args, kwargs)
        return outputs

    def run(self, segment: Callable, *args: Any) -> Any:
        """`segment(*args)` as its graph: captured on first use, then replayed."""
        seg = self._segments.get(segment)
        if seg is None:
            return self._capture_segment(segment, args)
        for static, i in zip(seg.tensors, seg.positions):
            if args[i] is not static:  # not from generated code: kept right anyway
                static.copy_(args[i])
        seg.replay()
        return seg.outputs

    def _reset(self, values: tuple, key: tuple) -> None:
        """Drop every graph and the pool; new static buffers for the arguments."""
        self._segments, self._pool = {}, None
        self._stage(values)
        self._key = key

    def _capture_segment(self, segment: Callable, args: tuple) -> Any:
        try:
            outputs, replay = self._record(lambda: segment(*args))
        except CaptureFailed as err:
            name = getattr(segment, "__name__", repr(segment))
            raise _TurnOff(f"capture of {name} failed: {err}") from err
        self.captures += 1
        self._new = True
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        tensors = [args[i] for i in positions]
        self._segments[segment] = _Segment(outputs, replay, tensors, positions)
        replay()  # capture records the work; this runs it for this call
        return outputs

    def _disable(self, why: str, args: tuple, kwargs: dict) -> Any:
        self._segments, self._pool, self._key = {}, None, None
        return super()._disable(why, args, kwargs)

    def run_without_graph(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(DIRECT, *args, **kwargs)

    @property
    def segments(self) -> list[str]:
        """The names of the segments captured, in the order they were."""
        return [getattr(s, "__name__", repr(s)) for s in self._segments]


@dataclass(frozen=True)
class _Segment:
    """A captured segment: its graph's outputs, how to replay it, and the tensors it
    was captured reading (at `positions` of its arguments)."""

    outputs: Any
    replay: Callable[[], None]
    tensors: list[torch.Tensor]
    positions: list[int]


class _Direct:
    """Stands for a CudaGraphTree that is off: runs each segment as it is."""

    @staticmethod
    def run(segment: Callable, *args: Any) -> Any:
        return segment(*args)


DIRECT = _Direct()


class _TurnOff(Exception):
    """Raised through the generated variant when a segment cannot be captured."""


class CudaGraphError(ValueError):
    """A CUDA graph asked for where it cannot be: arguments not on one CUDA device."""


class CaptureFailed(RuntimeError):
    """The variant ran but could not be captured (it synchronizes with the host)."""
