"""Launch Triton kernels for less host time than `kernel[grid](...)` costs.

`JITFunction.run` redoes its bookkeeping on every launch: it binds the arguments,
computes the specialization key (dtype and 16-byte alignment of each pointer, whether
each int is 1 or a multiple of 16), looks the compiled kernel up, checks globals, and
only then calls the compiled kernel's launcher. For small tensors that is most of the
cost of a call.

`TritonKernel` takes the first launch of each specialization through that path, keeps
the compiled kernel it returns, and launches later calls with the same
specialization straight through the compiled kernel's launcher, with the same
arguments `JITFunction.run` passes it. Anything it does not recognise (an older Triton,
the interpreter, launch hooks set by a profiler) takes `JITFunction.run` every time.

Note [Pointers as integers]
---------------------------
The launcher accepts a pointer argument as a tensor or as an integer address. For a
tensor it calls `data_ptr()` and asks the CUDA driver whether the address is device
memory (`cuPointerGetAttribute`), a driver call per tensor per launch; an integer it
takes as is. `TritonKernel` reads each tensor's address anyway (Triton specializes on
its 16-byte alignment), so it passes the integer, and keeps the device check in its
cache key instead: a CPU tensor is a specialization of its own, which takes the
`JITFunction.run` path and gets Triton's own error.

Note [torch's launcher]
-----------------------
Triton's launcher is a Python function around a C one: it allocates scratch space,
resolves hooks and unpacks its arguments on every call, about half of a launch's
host time. CUDA builds of torch ship a C++ launcher of compiled Triton kernels,
`torch._C._StaticCudaLauncher`, which `torch.compile` launches its own kernels
through. Later launches go through it where it exists, with the function Triton
already loaded: the same kernel, given the arguments Triton's launcher would pass
less the constexprs Triton compiled in (those its signature calls "constexpr", and
ints specialized as constants), pointers as addresses, and a null pointer for each
scratch buffer the kernel's ABI has but does not use. A kernel that needs more than
that keeps Triton's launcher: launch attributes (clusters, PDL, cooperative grids),
scratch space it uses, an argument type the launcher does not know. So does one
whose first such launch raises. torch.compile makes the same choices
(`StaticallyLaunchedCudaKernel` in `torch._inductor.runtime`; not imported here,
since importing it imports the compiler).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import torch

__all__ = ["TritonKernel", "TritonKernels"]

_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})

try:  # what Triton's own driver calls for the current device and stream
    _current_device = torch._C._cuda_getDevice
    _current_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - torch without CUDA bindings
    _current_device = None
    _current_stream = None


def _runtime_knobs():
    """`triton.knobs.runtime` (Triton >= 3.4), whose launch hooks profilers set;
    None where launches must go through `JITFunction.run`."""
    try:
        from triton import knobs
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None, None
    return getattr(knobs, "runtime", None), JITFunction


class TritonKernel:
    """`kernel[grid](*args, **constexprs_and_options)`, launched cheaply after the
    first call of each specialization."""

    def __init__(self, fn):
        self.fn = fn
        self.knobs, jit = _runtime_knobs()
        self.fast = (
            self.knobs is not None
            and _current_stream is not None
            and isinstance(fn, jit)
            and hasattr(fn, "arg_names")
        )
        self.compiled: dict[tuple, tuple] = {}

    def __getitem__(self, grid):
        return partial(self.launch, grid)

    def launch(self, grid, *args, **kwargs):
        knobs = self.knobs
        if (
            not self.fast
            or _installed(knobs.launch_enter_hook)
            or _installed(knobs.launch_exit_hook)
        ):
            return self.fn[grid](*args, **kwargs)
        device = _current_device()
        key = [device]
        values = []  # tensors as their addresses: see Note [Pointers as integers]
        for a in args:
            if isinstance(a, torch.Tensor):
                address = a.data_ptr()
                key.append((a.dtype, a.is_cuda, address % 16 == 0))
                values.append(address)
            else:
                key.append(_specialization(a))
                values.append(a)
        key = (*key, *kwargs.items())
        hit = self.compiled.get(key)
        if hit is None:
            kernel = self.fn[grid](*args, **kwargs)
            self._remember(key, kernel, len(args), kwargs)
            return kernel
        run, function, metadata, names, static = hit
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        stream = _current_stream(device)
        if static is not None:
            try:
                static(function, grid[0], g1, g2, stream, values)
                return None
            except Exception:  # see Note [torch's launcher]: keep Triton's
                self.compiled[key] = (run, function, metadata, names, None)
        values += [kwargs[n] for n in names]
        run(grid[0], g1, g2, stream, function, metadata, None, None, None, *values)
        return None

    def _remember(self, key, kernel, positional: int, kwargs) -> None:
        """Keep what `JITFunction.run` passed to the launcher of `kernel`: its
        arguments in signature order, constexprs included (Triton >= 3.4)."""
        if hasattr(kernel, "result"):  # a compile future
            kernel = kernel.result()
        names = tuple(self.fn.arg_names[positional:])
        try:
            run, function = kernel.run, kernel.function
            metadata = kernel.packed_metadata
        except AttributeError:
            self.fast = False
            return
        if set(names) - set(kwargs) or set(kwargs) - set(names) - _OPTIONS:
            self.fast = False  # defaults or unknown keywords: leave it to Triton
            return
        static = _static_launch(kernel, positional)
        self.compiled[key] = (run, function, metadata, names, static)


def _static_launch(kernel, positional: int):
    """`launch(function, grid0, grid1, grid2, stream, positional_values)` through
    torch's launcher for `kernel`, or None: see Note [torch's launcher]."""
    launcher = getattr(torch._C, "_StaticCudaLauncher", None)
    if launcher is None or torch.version.hip is not None:
        return None
    try:
        metadata, src = kernel.metadata, kernel.src
        names = src.fn.arg_names
        signature = {_position(k, names): t for k, t in src.signature.items()}
        constants = {_position(k, names) for k in getattr(src, "constants", {})}
        warps, shared = metadata.num_warps, getattr(kernel, "shared", metadata.shared)
        plain = (
            getattr(metadata, "num_ctas", 1) == 1
            and not getattr(metadata, "launch_pdl", False)
            and not getattr(metadata, "launch_cooperative_grid", False)
            and not getattr(kernel.run, "gsan_enabled", False)
            and not getattr(metadata, "tensordesc_meta", None)
        )
        scratch = tuple(
            getattr(metadata, f"{kind}_scratch_size")
            for kind in ("global", "profile")
            if hasattr(metadata, f"{kind}_scratch_size")
        )
    except AttributeError:  # not the compiled kernel this knows
        return None
    keep = [i for i in sorted(signature) if signature[i] != "constexpr"]
    keep = [i for i in keep if i not in constants]
    types = "".join(_arg_type(signature[i]) for i in keep)
    if not plain or any(scratch) or "?" in types or any(i >= positional for i in keep):
        return None  # launch attributes, scratch space, an unknown type, or a
        # run-time argument passed by keyword: Triton's launcher knows them
    types += "O" * len(scratch)  # null pointers, as Triton passes when unused
    nulls = (None,) * len(scratch)
    if keep == list(range(positional)):
        keep = None  # every positional argument, in order
    launch_kernel = launcher._launch_kernel

    def launch(function, grid0, grid1, grid2, stream, values):
        args = values if keep is None else [values[i] for i in keep]
        launch_kernel(
            function, grid0, grid1, grid2, warps, shared, types, (*args, *nulls),
            stream,
        )  # fmt: skip

    return launch


# Triton's type of a kernel argument -> the code of torch's launcher
_ARG_TYPES = {
    "i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l",
    "u1": "I", "u8": "B", "u16": "H", "u32": "I", "u64": "K",
    "fp16": "f", "bf16": "f", "fp32": "f", "f32": "f", "fp64": "d",
}  # fmt: skip


def _arg_type(triton_type: str) -> str:
    """The code of torch's launcher for an argument of `triton_type`: "O" for a
    pointer (a tensor or an address), "?" for a type it does not take."""
    return "O" if triton_type.startswith("*") else _ARG_TYPES.get(triton_type, "?")


def _position(key, names) -> int:
    """An argument's position from a key of Triton's signature or constants: its
    name, its index, or a tuple holding its index (Triton 3.3)."""
    if isinstance(key, str):
        return names.index(key)
    return key[0] if isinstance(key, tuple) else key


def _installed(hook) -> bool:
    """Whether a launch hook is set: None, or an empty `HookChain` (Triton >= 3.5
    keeps one, empty, where earlier versions had None), is not."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or len(calls) > 0


def _specialization(value):
    """What Triton specializes a non-tensor kernel argument on."""
    if isinstance(value, bool) or not isinstance(value, int):
        return type(value)
    return int, value == 1, value % 16 == 0, -(2**31) <= value < 2**31


class TritonKernels:
    """A module's Triton kernels, each wrapped in a `TritonKernel` on first use."""

    def __init__(self, module: ModuleType):
        self._module = module

    def __getattr__(self, name: str) -> TritonKernel:
        kernel = TritonKernel(getattr(self._module, name))
        setattr(self, name, kernel)
        return kernel
