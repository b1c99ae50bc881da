"""``gp.jit``: a CUDA C++ kernel from source, compiled by NVRTC, callable on GPUArrays."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence

from .. import _env, _runtime
from .._errors import BackendError
from ..streams import current_stream_handle
from . import compiler, module, signature

# PYGPUKIT_DEPENDENT_LAUNCH=0 launches dependent_launch kernels normally (to compare, or to rule it out).
DEPENDENT_LAUNCH = _env.flag("PYGPUKIT_DEPENDENT_LAUNCH", True)


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    if type(value) is int and value >= 1:
        return value, 1, 1
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d < 1 for d in dims):
        raise ValueError(f"{what} dimensions must be >= 1, got {value!r}")
    return (*dims, 1, 1)[:3]  # type: ignore[return-value]


def _template_signature(source: str, expr: str) -> list[signature.Param]:
    """Parameters of a template kernel instantiation such as ``scale<float, 4>``,
    by substituting the template's type arguments into its parameter list."""
    name, _, targs = expr.partition("<")
    targs = targs.rsplit(">", 1)[0]
    no_comments = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    m = re.search(
        r"template\s*<([^{;]*?)>\s*__global__[^;{]*?\bvoid\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?" + re.escape(name) + r"\s*\(",
        no_comments,
    )
    if m is None:
        raise ValueError(f"no template kernel '{name}' found in the source; pass signature= explicitly")
    tparams = [p.strip().split()[-1] for p in signature._split_top_level(m.group(1))]
    values = [a.strip() for a in signature._split_top_level(targs)]
    depth, i = 1, m.end()
    while depth and i < len(no_comments):
        depth += {"(": 1, ")": -1}.get(no_comments[i], 0)
        i += 1
    plist = no_comments[m.end() : i - 1]
    for tp, val in zip(tparams, values):
        plist = re.sub(rf"\b{re.escape(tp)}\b", val, plist)
    return signature.parse_params(plist)


class JitKernel:
    """A kernel compiled at run time. Call it as ``kernel(grid, block, *args, stream=None, shared_mem=0)``.

    ``func`` is the kernel's name, or a name expression for a template
    instantiation (``"scale<float>"``). Parameter types are read from the
    source (or from ``signature="float* x, int n"``) and arguments are
    converted by them: GPUArray, int address or None for pointers, numbers
    for scalars. ``arch_suffix="a"`` compiles for the architecture-specific
    target (``sm_90a``: wgmma, setmaxnreg), which then runs on that exact
    architecture only.

    ``dependent_launch=True``: on SM 90+ the kernel is launched as a
    programmatic dependent launch, its blocks free to start while the previous
    kernel on the stream finishes; the kernel must then call
    ``pgk::wait_prior_grids()`` (``pgk/pdl.cuh``) in every thread before it
    reads anything earlier work wrote or writes anything.
    """

    def __init__(
        self,
        source: str,
        func: str,
        *,
        options: Sequence[str] = (),
        signature: str | None = None,
        name: str | None = None,
        arch_suffix: str = "",
        dependent_launch: bool = False,
    ) -> None:
        if not isinstance(source, str) or not isinstance(func, str):
            raise TypeError("jit(source, func): source and func must be str")
        if dependent_launch and "wait_prior_grids" not in source and "griddepcontrol.wait" not in source:
            raise ValueError(
                f"jit kernel {func}: dependent_launch=True needs a kernel that waits for the previous one "
                "(pgk::wait_prior_grids() or griddepcontrol.wait); this source has neither"
            )
        self.dependent_launch = bool(dependent_launch)
        self._dependent = self.dependent_launch and DEPENDENT_LAUNCH
        self.source = source
        self.func = func
        self.options = tuple(options)
        self.program_name = name or f"{func.partition('<')[0]}.cu"
        if arch_suffix not in ("", "a", "f"):
            raise ValueError(f"arch_suffix must be '', 'a' or 'f', got {arch_suffix!r}")
        self.arch_suffix = arch_suffix
        if signature is not None:
            params = _parse(signature)
        elif "<" in func:
            params = _template_signature(source, func)
        else:
            params = _find(source, func)
        self.params = params
        self._packer = _packer(params, func)
        self._fn: dict[int, int] = {}  # sm -> CUfunction

    def compile(self, sm: int | None = None) -> compiler.Binary:
        """Compile (or take from the disk cache) for compute capability ``sm``,
        default the current device's. Works without a GPU when NVRTC is installed."""
        if sm is None:
            rt = _runtime.get()
            if rt.backend != "cuda":
                raise BackendError(f"compile() needs sm= on the CPU backend ({rt.reason})")
            sm = rt.sm
        return compiler.compile_source(self.source, [self.func], sm, self.options, self.program_name, self.arch_suffix)

    def _function(self, rt: _runtime.Runtime) -> int:
        fn = self._fn.get(rt.sm)
        if fn is None:
            fn = self._fn[rt.sm] = module.get_function(self.compile(rt.sm), self.func)
        return fn

    def function(self) -> int:
        """The CUfunction handle on the current device (compiled or loaded on first use)."""
        return self._function(self._require_cuda())

    def launcher(self, grid: int | Sequence[int], block: int | Sequence[int], shared_mem: int = 0) -> Launch:
        """A launch of this kernel with fixed dimensions, for a plan to keep:
        ``launch(*args)`` packs the arguments by the kernel's signature and
        launches on the current stream (``launch.on(stream_handle, *args)`` on
        another). Dynamic shared memory above 48 KiB is opted into here."""
        return Launch(self, grid, block, shared_mem)

    def dependent(self, rt: _runtime.Runtime) -> bool:
        """Whether this kernel's launches on ``rt``'s device are programmatic
        dependent launches (the ``dependent`` argument of ``native.launch``)."""
        return self._dependent and rt.sm >= 90

    def attributes(self) -> dict:
        """Registers, shared/local memory and max threads per block of the compiled kernel."""
        rt = self._require_cuda()
        return dict(rt.native.function_attributes(self._function(rt)))

    def _require_cuda(self) -> _runtime.Runtime:
        rt = _runtime.get()
        if rt.backend != "cuda":
            raise BackendError(
                f"jit kernel {self.func} needs the CUDA backend; pygpukit is running on the CPU "
                f"simulation backend ({rt.reason}), where kernels cannot run"
            )
        return rt

    def __call__(self, grid, block, *args, stream=None, shared_mem: int = 0) -> None:
        rt = _runtime._runtime
        if rt is None or rt.backend != "cuda":
            rt = self._require_cuda()
        g = _dim3(grid, "grid")
        b = _dim3(block, "block")
        if b[0] * b[1] * b[2] > 1024:
            raise ValueError(f"block {b} has {b[0] * b[1] * b[2]} threads; the maximum is 1024")
        if type(shared_mem) is not int or shared_mem < 0:
            raise ValueError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
        packed = self._packer.pack(args)
        handle = stream.handle if stream is not None else current_stream_handle()
        fn = self._fn.get(rt.sm) or self._function(rt)
        if shared_mem > _DEFAULT_SMEM:
            _opt_in_shared_memory(rt, fn, shared_mem)
        rt.native.launch(fn, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem, handle, packed, self._dependent and rt.sm >= 90)

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.ctype} {p.name}" for p in self.params)
        return f"<pygpukit.jit kernel {self.func}({sig})>"


_DEFAULT_SMEM = 48 * 1024  # dynamic shared memory a kernel gets without opting in
_smem_set: dict[int, int] = {}  # CUfunction -> the most dynamic shared memory opted into


def _opt_in_shared_memory(rt: _runtime.Runtime, fn: int, nbytes: int) -> None:
    if _smem_set.get(fn, _DEFAULT_SMEM) < nbytes:
        most = rt.props.get("max_shared_memory_per_block_optin", 0)
        if nbytes > most:
            raise ValueError(f"shared_mem={nbytes} is more than this device gives one block ({most} bytes with the opt-in)")
        rt.native.function_set_max_dynamic_shared_memory(fn, nbytes)
        _smem_set[fn] = nbytes


class Launch:
    """One kernel at fixed grid, block and shared memory, bound to the device
    it was made on: the hot path of a planned op (see ``JitKernel.launcher``)."""

    __slots__ = ("_args", "_dependent", "_launch", "_pack", "kernel")

    def __init__(self, kernel: JitKernel, grid: int | Sequence[int], block: int | Sequence[int], shared_mem: int = 0) -> None:
        rt = kernel._require_cuda()
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        if b[0] * b[1] * b[2] > 1024:
            raise ValueError(f"block {b} has {b[0] * b[1] * b[2]} threads; the maximum is 1024")
        if type(shared_mem) is not int or shared_mem < 0:
            raise ValueError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
        fn = kernel._function(rt)
        if shared_mem > _DEFAULT_SMEM:
            _opt_in_shared_memory(rt, fn, shared_mem)
        self.kernel = kernel
        self._args = (fn, *g, *b, shared_mem)
        self._dependent = kernel.dependent(rt)
        self._launch = rt.native.launch
        self._pack: Callable[..., bytes] = kernel._packer.pack_args  # type: ignore[assignment]

    def __call__(self, *args: object) -> None:
        try:
            packed = self._pack(*args)
        except (TypeError, struct.error):
            packed = self.kernel._packer.pack(args)  # raises saying which argument, or how many were expected
        fn, gx, gy, gz, bx, by, bz, smem = self._args
        self._launch(fn, gx, gy, gz, bx, by, bz, smem, current_stream_handle(), packed, self._dependent)

    def on(self, stream: int, *args: object) -> None:
        """Launch on the stream with handle ``stream`` instead of the current one."""
        fn, gx, gy, gz, bx, by, bz, smem = self._args
        self._launch(fn, gx, gy, gz, bx, by, bz, smem, stream, self.kernel._packer.pack(args), self._dependent)

    @property
    def grid(self) -> tuple[int, int, int]:
        return self._args[1:4]  # type: ignore[return-value]

    @property
    def block(self) -> tuple[int, int, int]:
        return self._args[4:7]  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<pygpukit.jit launch {self.kernel.func} grid={self.grid} block={self.block} shared_mem={self._args[7]}>"


_parse = signature.parse_params
_find = signature.find_signature
_packer = signature.Packer


def jit(source: str, func: str, **kwargs) -> JitKernel:
    """Compile ``func`` from CUDA C++ ``source`` with NVRTC and return a callable kernel.

    Example::

        k = gp.jit(r'''
        extern "C" __global__ void scale(float* x, float a, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] *= a;
        }''', "scale")
        k((n + 255) // 256, 256, x, 2.0, n)
    """
    return JitKernel(source, func, **kwargs)
