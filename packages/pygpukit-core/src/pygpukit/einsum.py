"""einsum with NumPy's subscript language, rewritten into existing operations.

Supported: explicit ``->`` output and the implicit output (labels seen once, in
ASCII order, after the ``...`` dimensions), ``...`` broadcasting, repeated labels
in one operand (a diagonal: a strided view, no copy), labels summed away, size-1
dimensions broadcasting against the same label elsewhere (as NumPy does), and
NumPy's sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.

How: operands are converted to the result dtype (NumPy's promotion); a label
found in one operand only and not in the output is summed at once (gp.sum);
then operands are contracted two at a time: left to right by default; the pair
with the smallest result first with ``optimize=True``, "greedy" or "optimal"
(both greedy); or along an explicit ``["einsum_path", (i, j), ...]`` as
numpy.einsum_path returns. A pair becomes a broadcasting multiply when no
label is summed (outer and elementwise products), a multiply and a sum when
nothing but shared labels remains (dot products), else a batched
(batch, m, k) @ (batch, k, n) matmul; the result is a transposed view in the
output order. Accumulation is the matmul's and sum's: float32 for the 16-bit
floats, float64 for float64, 64-bit integers for integers.
"""

from __future__ import annotations

import math
import operator
import string
from typing import Any

import numpy as np

from . import _dtypes
from .array import GPUArray
from .creation import from_numpy
from .linalg import matmul
from .reductions import sum as gsum
from .streams import on_stream

Label = str | int  # a letter, or the position of a broadcast dimension under "..."

_NO_ELLIPSIS = "but no '...' ellipsis provided to broadcast the extra dimensions."


@on_stream
def einsum(subscripts: Any, *operands: Any, optimize: Any = False) -> GPUArray:
    """Evaluate the Einstein summation ``subscripts`` over ``operands`` (GPUArrays,
    or NumPy arrays, scalars and sequences, copied over), as numpy.einsum."""
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists((subscripts, *operands))
    if not operands:
        raise ValueError("must specify the einstein sum subscripts string and at least one operand")
    arrays = [o if isinstance(o, GPUArray) else _host_operand(o) for o in operands]
    inputs, output = _parse(subscripts, [a.ndim for a in arrays])
    sizes = _label_sizes(inputs, arrays)
    dt = _dtypes.result_type(*arrays)
    items = [_diagonal(a.astype(dt, copy=False), labels) for a, labels in zip(arrays, inputs)]
    items = [(_broadcast(x, labels, sizes), labels) for x, labels in items]
    out_set = set(output)
    items = [_sum_out(x, labels, out_set | _others(items, i), dt) for i, (x, labels) in enumerate(items)]
    path = _path(items, output, sizes, optimize)
    path += [(0, 1)] * (len(items) - 1 - sum(len(step) - 1 for step in path))  # what an explicit path left over
    for step in path:
        picked = [items[i] for i in step]
        items = [item for i, item in enumerate(items) if i not in step]
        x, labels = picked[0]
        for q, (y, ly) in enumerate(picked[1:], start=2):
            x, labels = _contract(x, labels, y, ly, out_set | _others(items, -1) | _others(picked[q:], -1), dt)
        items.append((x, labels))
    ((x, labels),) = items
    x, labels = _sum_out(x, labels, out_set, dt)
    return x.transpose([labels.index(lb) for lb in output])


def _host_operand(obj: Any) -> GPUArray:
    """A NumPy array, scalar or nested sequence copied over (0-d stays 0-d)."""
    host = np.array(obj, order="C")
    if host.dtype == object:
        raise TypeError(f"einsum: cannot convert {type(obj).__name__} to a GPUArray")
    return from_numpy(host)


# -- parsing --------------------------------------------------------------------


def _from_sublists(args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """NumPy's sublist form (op0, sublist0, op1, sublist1, ..., [sublist_out]) as a subscripts string."""
    pairs = args[: len(args) - len(args) % 2]
    terms = [_sublist(s) for s in pairs[1::2]]
    out = "->" + _sublist(args[-1]) if len(args) % 2 else ""
    return ",".join(terms) + out, tuple(pairs[0::2])


def _sublist(sub: Any) -> str:
    chars = []
    for s in sub:
        if s is Ellipsis:
            chars.append("...")
            continue
        try:
            i = operator.index(s)
        except TypeError:
            raise TypeError("each subscript must be either an integer or an ellipsis") from None
        if not 0 <= i < 52:
            raise ValueError("subscript is not within the valid range [0, 52)")
        chars.append(string.ascii_uppercase[i] if i < 26 else string.ascii_lowercase[i - 26])
    return "".join(chars)


def _term(term: str, where: str) -> tuple[str, str | None]:
    """(letters before "...", letters after it or None without an ellipsis)."""
    if "." in term:
        before, sep, after = term.partition("...")
        if not sep or "." in before or "." in after:
            raise ValueError(f"einstein sum subscripts string contains a '.' that is not part of an ellipsis ('...') in {where}")
    else:
        before, after = term, None
    for c in before + (after or ""):
        if c not in string.ascii_letters:
            raise ValueError(f"invalid subscript '{c}' in einstein sum subscripts string, subscripts must be letters")
    return before, after


def _parse(subscripts: str, ndims: list[int]) -> tuple[list[list[Label]], list[Label]]:
    """Labels of every input and of the output; the dimensions under "..." get the
    labels 0 .. E-1, right-aligned (E: the most any operand has)."""
    s = subscripts.replace(" ", "")
    if "->" in s:
        ins, out_term = s.split("->", 1)
    elif "-" in s:
        raise ValueError("einstein sum subscript string does not contain proper '->' output specified")
    else:
        ins, out_term = s, None
    terms = ins.split(",")
    if len(ndims) > len(terms):
        raise ValueError("more operands provided to einstein sum function than specified in the subscripts string")
    if len(ndims) < len(terms):
        raise ValueError("fewer operands provided to einstein sum function than specified in the subscripts string")
    parsed = []
    for i, (term, nd) in enumerate(zip(terms, ndims)):
        before, after = _term(term, f"operand {i}")
        n = len(before) + len(after or "")
        if n > nd:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts for operand {i}")
        if after is None and n < nd:
            raise ValueError(f"operand has more dimensions than subscripts given in einstein sum, {_NO_ELLIPSIS}")
        parsed.append((before, after, nd - n))
    e = max(ell for _, _, ell in parsed)
    inputs: list[list[Label]] = [[*before, *range(e - ell, e), *(after or "")] for before, after, ell in parsed]
    letters = [c for before, after, _ in parsed for c in before + (after or "")]
    if out_term is None:  # implicit: the broadcast dimensions, then the labels seen once, sorted
        return inputs, [*range(e), *sorted(c for c in set(letters) if letters.count(c) == 1)]
    before, after = _term(out_term, "the output")
    seen: set[str] = set()
    for c in before + (after or ""):
        if c not in letters:
            raise ValueError(f"einstein sum subscripts string included output subscript '{c}' which never appeared in an input")
        if c in seen:
            raise ValueError(f"einstein sum subscripts string includes output subscript '{c}' multiple times")
        seen.add(c)
    if after is None and e:
        raise ValueError(f"output has more dimensions than subscripts given in einstein sum, {_NO_ELLIPSIS}")
    return inputs, [*before, *(range(e) if after is not None else ()), *(after or "")]


def _name(label: Label) -> str:
    return label if isinstance(label, str) else "..."


def _label_sizes(inputs: list[list[Label]], arrays: list[GPUArray]) -> dict[Label, int]:
    """The size of every label: equal within an operand; across operands equal or 1 (broadcast)."""
    sizes: dict[Label, int] = {}
    for i, (labels, a) in enumerate(zip(inputs, arrays)):
        mine: dict[Label, int] = {}
        for lb, d in zip(labels, a.shape):
            if lb in mine and mine[lb] != d:
                raise ValueError(f"dimensions in operand {i} for collapsing index '{_name(lb)}' don't match ({mine[lb]} != {d})")
            mine[lb] = d
        for lb, d in mine.items():
            have = sizes.get(lb, 1)
            if d != have and 1 not in (d, have):
                raise ValueError(
                    f"operands could not be broadcast together: subscript '{_name(lb)}' has size {have} in one operand "
                    f"and {d} in operand {i}"
                )
            sizes[lb] = d if have == 1 else have
    return sizes


# -- rewriting ------------------------------------------------------------------


def _diagonal(x: GPUArray, labels: list[Label]) -> tuple[GPUArray, list[Label]]:
    """A repeated label takes the diagonal: one axis whose stride is the sum of the repeated axes' strides."""
    if len(set(labels)) == len(labels):
        return x, labels
    order: list[Label] = []
    shape: dict[Label, int] = {}
    strides: dict[Label, int] = {}
    for lb, d, st in zip(labels, x.shape, x.strides):
        if lb not in shape:
            order.append(lb)
            shape[lb], strides[lb] = d, 0
        strides[lb] += st
    return x._view(tuple(shape[lb] for lb in order), tuple(strides[lb] for lb in order)), order


def _broadcast(x: GPUArray, labels: list[Label], sizes: dict[Label, int]) -> GPUArray:
    """Size-1 dimensions whose label is longer elsewhere become stride-0 views of that length."""
    shape = tuple(sizes[lb] for lb in labels)
    if shape == x.shape:
        return x
    return x._view(shape, tuple(0 if d != n else st for d, n, st in zip(x.shape, shape, x.strides)))


def _others(items: list[tuple[GPUArray, list[Label]]], skip: int) -> set[Label]:
    """The labels of every item except items[skip]."""
    return {lb for i, (_, labels) in enumerate(items) if i != skip for lb in labels}


def _sum_out(x: GPUArray, labels: list[Label], keep: set[Label], dt: Any) -> tuple[GPUArray, list[Label]]:
    axes = tuple(i for i, lb in enumerate(labels) if lb not in keep)
    if not axes:
        return x, labels
    return gsum(x, axis=axes, dtype=dt), [lb for lb in labels if lb in keep]


def _contract(a: GPUArray, la: list[Label], b: GPUArray, lb: list[Label], keep: set[Label], dt: Any) -> tuple[GPUArray, list[Label]]:
    """Contract two operands; the result keeps the labels in ``keep`` (needed later)."""
    a, la = _sum_out(a, la, keep | set(lb), dt)
    b, lb = _sum_out(b, lb, keep | set(la), dt)
    batch = [lab for lab in la if lab in lb and lab in keep]
    inner = [lab for lab in la if lab in lb and lab not in keep]
    af = [lab for lab in la if lab not in lb]
    bf = [lab for lab in lb if lab not in la]
    if not inner:  # outer or elementwise product: align the axes and broadcast
        x = a.transpose([la.index(lab) for lab in batch + af])
        y = b.transpose([lb.index(lab) for lab in batch + bf])
        x = x.reshape(*x.shape, *([1] * len(bf)))
        y = y.reshape(*y.shape[: len(batch)], *([1] * len(af)), *y.shape[len(batch) :])
        return x * y, batch + af + bf
    if not af and not bf:  # dot products: multiply, then sum the shared labels
        x = a.transpose([la.index(lab) for lab in batch + inner])
        y = b.transpose([lb.index(lab) for lab in batch + inner])
        return gsum(x * y, axis=tuple(range(len(batch), len(batch) + len(inner))), dtype=dt), batch

    def dims(x: GPUArray, labels: list[Label], group: list[Label]) -> list[int]:
        return [x.shape[labels.index(lab)] for lab in group]

    nb = math.prod(dims(a, la, batch))
    m, k, n = math.prod(dims(a, la, af)), math.prod(dims(a, la, inner)), math.prod(dims(b, lb, bf))
    x = a.transpose([la.index(lab) for lab in batch + af + inner]).reshape(nb, m, k)
    y = b.transpose([lb.index(lab) for lab in batch + inner + bf]).reshape(nb, k, n)
    out = matmul(x, y).reshape(*dims(a, la, batch), *dims(a, la, af), *dims(b, lb, bf))
    return out, batch + af + bf


# -- contraction order ----------------------------------------------------------


def _path(items: list[tuple[GPUArray, list[Label]]], output: list[Label], sizes: dict[Label, int], optimize: Any) -> list[tuple[int, ...]]:
    """Steps over the item list: each takes the items at the given positions,
    contracts them in that order and appends the result at the end (NumPy's
    einsum_path convention)."""
    n = len(items)
    if isinstance(optimize, (list, tuple)):
        if not optimize or optimize[0] != "einsum_path":
            raise TypeError(f"Did not understand the path: {optimize}")
        return [tuple(operator.index(i) for i in step) for step in optimize[1:]]
    if optimize is False or n < 3:
        return [(0, 1), *[(n - 2 - i, 0) for i in range(n - 2)]] if n > 1 else []
    if optimize is not True and optimize not in ("greedy", "optimal"):
        raise TypeError(f"Did not understand the path: {optimize}")
    labels = [set(lb) for _, lb in items]
    steps: list[tuple[int, ...]] = []
    while len(labels) > 1:
        best: tuple[int, int, int, int] | None = None
        for i in range(len(labels)):
            for j in range(i + 1, len(labels)):
                keep = set(output).union(*(s for q, s in enumerate(labels) if q not in (i, j)))
                both = labels[i] | labels[j]
                size = math.prod(sizes[lb] for lb in both & keep)
                cost = math.prod(sizes[lb] for lb in both)
                if best is None or (size, cost) < best[:2]:
                    best = (size, cost, i, j)
        assert best is not None
        _, _, i, j = best
        steps.append((i, j))
        merged = (labels[i] | labels[j]) & set(output).union(*(s for q, s in enumerate(labels) if q not in (i, j)))
        labels = [s for q, s in enumerate(labels) if q not in (i, j)] + [merged]
    return steps
