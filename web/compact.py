"""Smaller ONNX files with the same arithmetic: weights stored in fp16, cast back to fp32 by the graph.

The tracer folds the tied generator's ``weight.T`` into a second copy of the embedding table; that copy is
replaced by a Transpose of the table. ONNX Runtime folds both the Casts and the Transpose into fp32
constants when it loads the graph, so the page computes in fp32 with fp16-rounded weights.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIN_CAST = 16  # smaller tensors (scalars, shapes) stay as they are


def _transposed_copies(inits: list) -> dict[str, str]:
    """name -> name of the 2-D initializer it is the transpose of."""
    by_bytes = {}
    for init in inits:
        if len(init.dims) == 2 and init.data_type == TensorProto.FLOAT:
            by_bytes.setdefault(numpy_helper.to_array(init).tobytes(), init.name)
    out = {}
    for init in inits:
        if len(init.dims) == 2 and init.data_type == TensorProto.FLOAT:
            twin = by_bytes.get(np.ascontiguousarray(numpy_helper.to_array(init).T).tobytes())
            if twin is not None and twin != init.name and twin not in out:  # keep one of each pair
                out[init.name] = twin
    return out


def store_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every float weight stored in fp16 (and no transposed copies)."""
    graph = model.graph
    twins = _transposed_copies(list(graph.initializer))
    casts, head, keep = [], [], []
    for init in graph.initializer:
        if init.name in twins:
            head.append(helper.make_node("Transpose", [twins[init.name]], [init.name], perm=[1, 0]))
            continue
        if init.data_type == TensorProto.FLOAT and int(np.prod(init.dims)) >= MIN_CAST:
            half = numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name + "_fp16")
            keep.append(half)
            casts.append(helper.make_node("Cast", [half.name], [init.name], to=TensorProto.FLOAT))
            continue
        keep.append(init)
    del graph.initializer[:]
    graph.initializer.extend(keep)
    nodes = casts + head + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model
