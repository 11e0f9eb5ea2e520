"""The ONNX graph attnx.io.onnx builds: nodes, initializers and unique names for one
exported model (needs the ``onnx`` package, imported only when a graph is built)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..layers.sequence import LN_EPS


def _interleave(n_even: int, n_odd: int) -> list[int]:
    """Gather indices turning [e0.., o0..] into e0, o0, e1, o1, ..."""
    out = []
    for i in range(n_even):
        out.append(i)
        if i < n_odd:
            out.append(n_even + i)
    return out


def _tensor_attr(a: np.ndarray) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(a)


# ---- graph building ----------------------------------------------------------------
class _Graph:
    """Nodes, initializers and unique names for one exported model."""

    def __init__(self, dtype: np.dtype, opset: int) -> None:
        from onnx import helper

        self.dtype = np.dtype(dtype)
        self.opset = opset
        self.onnx_dtype = helper.np_dtype_to_tensor_dtype(self.dtype)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self._n = 0
        self._cache: dict[Any, str] = {}
        self._tables: dict[Any, tuple[str, str]] = {}

    def _name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type: str, inputs: list[str], name: str | None = None,
           **attrs: Any) -> str:
        from onnx import helper

        out = name or self._name(op_type)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def top_k_ascending(self, x: str, k: int) -> str:
        """x sorted ascending along its last axis of length k (TopK's values)."""
        from onnx import helper

        out, idx = self._name("TopK"), self._name("TopK_idx")
        self.nodes.append(helper.make_node("TopK", [x, self.const_i64([k])], [out, idx],
                                           name=out, axis=-1, largest=0, sorted=1))
        return out

    def const(self, a: np.ndarray, dtype: Any = None) -> str:
        from onnx import numpy_helper

        arr = np.ascontiguousarray(a, dtype=dtype or self.dtype)
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const_i64(self, values: list[int]) -> str:
        key = ("i64", tuple(values))
        if key not in self._cache:
            self._cache[key] = self.const(np.array(values, dtype=np.int64), np.int64)
        return self._cache[key]

    def scalar(self, v: float, dtype: Any = None) -> str:
        dt = np.dtype(dtype or self.dtype)
        key = ("scalar", dt.str, float(v))
        if key not in self._cache:
            self._cache[key] = self.const(np.array(v, dtype=dt), dt)
        return self._cache[key]

    def input(self, name: str, shape: list[Any], dtype: Any = None) -> str:
        from onnx import helper

        t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype or self.dtype))
        self.inputs.append(helper.make_tensor_value_info(name, t, shape))
        return name

    def output(self, name: str, shape: list[Any]) -> None:
        from onnx import helper

        self.outputs.append(helper.make_tensor_value_info(name, self.onnx_dtype, shape))

    # opset differences: ReduceMax / ReduceMean take axes as an input from opset 18
    def axes_input(self, axes: list[int]) -> list[str]:
        return [self.const_i64(axes)] if self.opset >= 18 else []

    def axes_attr(self, axes: list[int]) -> dict[str, Any]:
        return {} if self.opset >= 18 else {"axes": axes}

    # shapes and positions, computed from x at run time
    def seq_len(self, x: str) -> str:
        """(1,) int64: the T of x (B, T, ...)."""
        key = ("T", x)
        if key not in self._cache:
            self._cache[key] = self.op("Shape", [x], start=1, end=2)
        return self._cache[key]

    def positions(self, x: str, dtype: Any) -> str:
        """(T,) 0, 1, ..., T-1 in dtype."""
        dt = np.dtype(dtype)
        key = ("pos", x, dt.str)
        if key not in self._cache:
            t = self.op("Squeeze", [self.seq_len(x), self.const_i64([0])])
            self._cache[key] = self.op("Range", [self.scalar(0, dt), self.op(
                "Cast", [t], to=_onnx_type(dt)), self.scalar(1, dt)])
        return self._cache[key]

    def causal(self, x: str) -> str:
        """(T, T) bool: True where key j > query i."""
        key = ("causal", x)
        if key not in self._cache:
            pos = self.positions(x, np.int64)
            rows = self.op("Unsqueeze", [pos, self.const_i64([1])])
            self._cache[key] = self.op("Greater", [pos, rows])
        return self._cache[key]

    def _angles(self, x: str, freqs: np.ndarray) -> str:
        pos = self.op("Unsqueeze", [self.positions(x, np.float64), self.const_i64([1])])
        return self.op("Mul", [pos, self.const(freqs[None, :], np.float64)])

    def _cos_sin(self, ang: str) -> tuple[str, str]:
        # computed in float64 and rounded once, as attnx's own tables
        return (self.op("Cast", [self.op("Cos", [ang])], to=self.onnx_dtype),
                self.op("Cast", [self.op("Sin", [ang])], to=self.onnx_dtype))

    def rope_tables(self, x: str, d_head: int) -> tuple[str, str]:
        """cos, sin (T, d_head/2) of t * 10000^(-2i/d_head), as attention.rope_tables."""
        key = ("rope", x, d_head)
        if key not in self._tables:
            i = np.arange(d_head // 2, dtype=np.float64)
            self._tables[key] = self._cos_sin(self._angles(x, 10000.0 ** (-2.0 * i / d_head)))
        return self._tables[key]

    def sinusoidal(self, x: str, d: int) -> str:
        """(T, d): sin(t / 10000^(2i/d)) at column 2i, cos of the same at 2i + 1."""
        i2 = np.arange(0, d, 2, dtype=np.float64)
        cos, sin = self._cos_sin(self._angles(x, 1.0 / 10000.0 ** (i2 / d)))
        n_even, n_odd = len(i2), d // 2
        if n_odd < n_even:
            cos = self.op("Slice", [cos, self.const_i64([0]), self.const_i64([n_odd]),
                                    self.const_i64([1])])
        both = self.op("Concat", [sin, cos], axis=1)
        return self.op("Gather", [both, self.const_i64(_interleave(n_even, n_odd))], axis=1)

    def layernorm(self, x: str, gain: np.ndarray, bias: np.ndarray) -> str:
        return self.op("LayerNormalization", [x, self.const(gain), self.const(bias)],
                       axis=-1, epsilon=float(LN_EPS))

    def build(self, meta: dict[str, str]) -> Any:
        from onnx import helper

        graph = helper.make_graph(self.nodes, "attnx", self.inputs, self.outputs,
                                  initializer=self.inits)
        model = helper.make_model(graph, producer_name="attnx",
                                  opset_imports=[helper.make_opsetid("", self.opset)])
        helper.set_model_props(model, meta)
        return model


def _onnx_type(dt: np.dtype) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dt)))
