"""Smaller ONNX files with the same graph: weights stored in fp16 or int8, turned back into fp32 by the graph.

- fp16: every float weight becomes an fp16 initializer with a Cast to fp32 in front.
- int8: every weight matrix becomes int8 with one fp32 scale per output channel (symmetric, max |w| / 127:
  per vocabulary row for the embedding table, per output column for a MatMul's weight), dequantized by a
  Cast and a Mul; vectors (biases, norms) are stored in fp16.

Either way ONNX Runtime folds these constant subgraphs into fp32 weights when it loads the graph, so the
page computes in fp32; only the stored weights are rounded. The tracer folds the tied generator's
``weight.T`` into a second copy of the embedding table; that copy is replaced by a Transpose of the table.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIN_CAST = 16  # smaller tensors (scalars, shapes) stay as they are
PRECISIONS = ("fp16", "int8")


def _transposed_copies(inits: list, tables: set[str]) -> dict[str, str]:
    """name -> name of the 2-D initializer it is the transpose of. Of each pair the Gather's table is kept
    (so that the encoder's and the decoder's tables are the same bytes, stored once by share_weights)."""
    by_bytes = {}
    for init in inits:
        if len(init.dims) == 2 and init.data_type == TensorProto.FLOAT:
            by_bytes.setdefault(numpy_helper.to_array(init).tobytes(), init.name)
    out = {}
    for init in sorted(inits, key=lambda i: i.name in tables):  # copies of tables first
        if len(init.dims) == 2 and init.data_type == TensorProto.FLOAT and init.name not in tables:
            twin = by_bytes.get(np.ascontiguousarray(numpy_helper.to_array(init).T).tobytes())
            if twin is not None and twin != init.name and twin not in out:  # keep one of each pair
                out[init.name] = twin
    return out


def quantize_int8(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 with one scale per index along ``axis``: (q, scale), w ≈ q * scale (broadcast)."""
    other = 1 - axis
    peak = np.abs(w).max(axis=other, keepdims=True)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def _gathered(graph) -> set[str]:
    """Initializers read as a Gather's table (their rows are the output channels)."""
    return {n.input[0] for n in graph.node if n.op_type == "Gather"}


def _dequantize(init, axis: int) -> tuple[list, list]:
    """(initializers, nodes) that rebuild fp32 ``init`` from int8 and its scales."""
    q, scale = quantize_int8(numpy_helper.to_array(init), axis)
    q_init = numpy_helper.from_array(q, init.name + "_int8")
    s_init = numpy_helper.from_array(scale, init.name + "_scale")
    cast = helper.make_node("Cast", [q_init.name], [init.name + "_q"], to=TensorProto.FLOAT)
    mul = helper.make_node("Mul", [init.name + "_q", s_init.name], [init.name])
    return [q_init, s_init], [cast, mul]


def _to_fp16(init) -> tuple[list, list]:
    half = numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name + "_fp16")
    return [half], [helper.make_node("Cast", [half.name], [init.name], to=TensorProto.FLOAT)]


def store(model: onnx.ModelProto, precision: str = "fp16") -> onnx.ModelProto:
    """``model`` with its float weights stored at ``precision`` (and no transposed copies)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    graph = model.graph
    tables = _gathered(graph)
    twins = _transposed_copies(list(graph.initializer), tables)
    front, head, keep = [], [], []
    for init in graph.initializer:
        if init.name in twins:
            head.append(helper.make_node("Transpose", [twins[init.name]], [init.name], perm=[1, 0]))
            continue
        if init.data_type != TensorProto.FLOAT or int(np.prod(init.dims)) < MIN_CAST:
            keep.append(init)
            continue
        if precision == "int8" and len(init.dims) == 2:
            inits, nodes = _dequantize(init, 0 if init.name in tables else 1)
        else:
            inits, nodes = _to_fp16(init)
        keep += inits
        front += nodes
    del graph.initializer[:]
    graph.initializer.extend(keep)
    nodes = front + head + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


def store_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    return store(model, "fp16")


WEIGHTS = "weights.bin"  # one direction's weights, shared by its two graphs
MIN_SHARED = 1024        # bytes: smaller initializers stay inside their graph
ALIGN = 64


def share_weights(models: list[onnx.ModelProto], location: str = WEIGHTS) -> bytes:
    """Move the graphs' large initializers into one external file, each distinct tensor once (the encoder
    and the decoder hold the same embedding table: it is fetched once). Returns the file's bytes; the
    models then point into it (ONNX external data: location, offset, length)."""
    blob, where = bytearray(), {}
    for model in models:
        for init in model.graph.initializer:
            raw = numpy_helper.to_array(init).tobytes()
            if len(raw) < MIN_SHARED:
                continue
            key = (init.data_type, raw)  # each initializer keeps its own dims: a reshaped copy is the same bytes
            if key not in where:
                blob.extend(b"\0" * (-len(blob) % ALIGN))
                where[key] = len(blob)
                blob.extend(raw)
            for field in ("raw_data", "float_data", "int32_data", "int64_data"):
                init.ClearField(field)
            init.data_location = TensorProto.EXTERNAL
            del init.external_data[:]
            for k, v in (("location", location), ("offset", str(where[key])), ("length", str(len(raw)))):
                init.external_data.add(key=k, value=v)
    return bytes(blob)


def borrow_weights(model: onnx.ModelProto, others: list[onnx.ModelProto]) -> onnx.ModelProto:
    """``model``'s large initializers that one of ``others`` holds as a float32 vector or matrix (as it is or
    transposed, in any shape, or cast to float64 where ``model`` computes in float64) rebuilt from a copy of
    that tensor by Transpose, Reshape and Cast nodes, so that share_weights stores its bytes once."""
    have = {}
    for other in others:
        for init in other.graph.initializer:
            if init.data_type == TensorProto.FLOAT and len(init.dims) in (1, 2):
                a = numpy_helper.to_array(init)
                have.setdefault(a.tobytes(), (a, False))
                if a.ndim == 2:
                    have.setdefault(np.ascontiguousarray(a.T).tobytes(), (a, True))
    kept, nodes, added = [], [], []
    for init in model.graph.initializer:
        a = numpy_helper.to_array(init)
        as32 = a.astype(np.float32) if a.dtype in (np.float32, np.float64) else None
        found = have.get(as32.tobytes()) if as32 is not None and a.nbytes >= MIN_SHARED else None
        if found is None or not np.array_equal(as32.astype(a.dtype), a):
            kept.append(init)
            continue
        matrix, transposed = found
        name = f"{init.name}_borrowed"
        shape = numpy_helper.from_array(np.array(a.shape, np.int64), name + "_shape")
        added += [numpy_helper.from_array(matrix, name), shape]
        x = name
        if transposed:
            nodes.append(helper.make_node("Transpose", [x], [name + "_t"], perm=[1, 0]))
            x = name + "_t"
        cast = a.dtype == np.float64
        nodes.append(helper.make_node("Reshape", [x, name + "_shape"], [name + "_r" if cast else init.name]))
        if cast:
            nodes.append(helper.make_node("Cast", [name + "_r"], [init.name], to=TensorProto.DOUBLE))
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept + added)
    old = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes + old)
    return model
