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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runtime_shim.warn import warn_once

__all__ = [
    "CaptureFailed",
    "CudaGraphError",
    "CudaGraphRunner",
    "CudaGraphs",
    "cuda_graph",
]

ATTRIBUTE = "_transpile_cuda_graphs"  # where an instance keeps its runners

Reads = Callable[[Any], tuple[torch.Tensor, ...]]


class CudaGraphs(dict):
    """An owner's runners, by variant function. Copies start empty: a copied module
    has tensors of its own, so it captures graphs of its own."""

    def __copy__(self) -> CudaGraphs:
        return CudaGraphs()

    def __deepcopy__(self, memo: dict) -> CudaGraphs:
        return CudaGraphs()

    def __reduce__(self):
        return (CudaGraphs, ())


def cuda_graph(owner: Any, fn: Callable, reads: Reads | None = None) -> CudaGraphRunner:
    """The runner of `fn` for `owner` (the module instance, or for a function target
    the exported function), made on first use and kept in `owner.__dict__`."""
    graphs = owner.__dict__.get(ATTRIBUTE)
    if graphs is None:
        graphs = owner.__dict__[ATTRIBUTE] = CudaGraphs()
    runner = graphs.get(fn)
    if runner is None:
        runner = graphs[fn] = CudaGraphRunner(fn, owner, reads)
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.disabled is not None:
            return self.fn(*args, **kwargs)
        values = (*args, *kwargs.values())
        key = self._key_of(values)
        if key != self._key:
            return self._capture(args, kwargs, key)
        for static, i in zip(self._static, self._positions):
            value = values[i]
            if value is not static:
                static.copy_(value)
        self._replay()
        return self._outputs

    def _key_of(self, values: tuple) -> tuple:
        """Devices of the tensor arguments, addresses of what the graph reads (a
        module's variant takes the instance first: `reads(instance)`)."""
        devices = tuple(v.get_device() for v in values if isinstance(v, torch.Tensor))
        if self.reads is None:
            return devices
        return devices, tuple(map(torch.Tensor.data_ptr, self.reads(values[0])))

    def _capture(self, args: tuple, kwargs: dict, key: tuple) -> Any:
        self._key = self._outputs = self._replay = None  # the old graph goes first
        values = (*args, *kwargs.values())
        self._positions = [
            i for i, v in enumerate(values) if isinstance(v, torch.Tensor)
        ]
        self._static = [values[i].clone() for i in self._positions]
        static_values = list(values)
        for i, static in zip(self._positions, self._static):
            static_values[i] = static
        static_args = tuple(static_values[: len(args)])
        static_kwargs = dict(zip(kwargs, static_values[len(args) :]))
        try:
            outputs, replay = self._record(
                lambda: self.fn(*static_args, **static_kwargs)
            )
        except CaptureFailed as err:
            return self._disable(f"capture failed: {err}", args, kwargs)
        self.captures += 1
        mine = {t.untyped_storage().data_ptr() for t in self._static}
        if any(t.untyped_storage().data_ptr() in mine for t in _tensors(outputs)):
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
            try:
                with torch.cuda.graph(graph):  # a private memory pool of its own
                    outputs = run()
            except RuntimeError as err:  # a host sync, say: not capturable
                raise CaptureFailed(str(err).splitlines()[0]) from err
        return outputs, graph.replay

    @property
    def static_inputs(self) -> list[torch.Tensor]:
        """The graph's input buffers, in argument order: a caller may fill one and pass
        it, which saves its copy."""
        return list(self._static)


class CudaGraphError(ValueError):
    """A CUDA graph asked for where it cannot be: arguments not on one CUDA device."""


class CaptureFailed(RuntimeError):
    """The variant ran but could not be captured (it synchronizes with the host)."""
