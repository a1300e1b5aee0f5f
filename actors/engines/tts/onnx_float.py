"""Turn a dynamically quantized (int8/uint8) ONNX model back into a float32 one, in memory.

Kokoro's int8 model was reported ~2x slower on CPUs without VNNI; ``dequantize`` builds the
float32 variant at load time (nothing written or downloaded) so the engine can time both and
keep the faster. Uses only ``onnx`` and ``numpy``.

Every weight is dequantized as ``(w - zero_point) * scale`` (per-tensor or per-channel, as the
graph says) into a float32 initializer, and these patterns (those of onnxruntime's
``quantize_dynamic``) are replaced by plain float ops that keep the original output names:

* ``DynamicQuantizeLinear(x) -> MatMulInteger(., W) -> Cast -> Mul(., x_scale * w_scale)``
  becomes ``MatMul(x, W)`` (w_scale per tensor or per output column);
* ``DynamicQuantizeLinear(x) -> ConvInteger(., W) [-> Add(., quantized bias)] -> Cast -> Mul``
  becomes ``Conv(x, W[, B])`` with the same attributes (pads, strides, group, dilations ...),
  and the float bias instead of its re-quantized (floored) copy;
* ``Gather(quantized table, idx) -> DequantizeLinear`` becomes ``Gather(float table, idx)``, and
  ``DequantizeLinear`` of a constant weight becomes a float initializer;
* ``DynamicQuantizeLSTM`` (com.microsoft; weights stored transposed, [dirs, in, 4*hidden])
  becomes a standard ``LSTM``.

Nodes, initializers and value_info left unused are then removed and the result is checked with
``onnx.checker``. Not converted, left as they are (the model still runs, that part stays
quantized): any other quantized op (QLinear*, MatMulIntegerToFloat, DynamicQuantizeMatMul,
QAttention, ...), and any match whose pieces are not as expected (scale or zero point not an
initializer, per-axis Gather tables, blocked DequantizeLinear, scale shapes that do not
broadcast as described). Ops inside subgraphs (If/Loop bodies) are not visited.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["dequantize"]


def dequantize(model_bytes: bytes) -> bytes:
    """Return the float32 equivalent of the quantized model ``model_bytes`` (both serialized)."""
    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    prod = {o: n for n in graph.node for o in n.output if o}
    made: dict[tuple, str] = {}

    def const(name: str) -> np.ndarray | None:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    def src(name: str, op: str) -> onnx.NodeProto | None:
        node = prod.get(name)
        return node if node is not None and node.op_type == op else None

    def float_weight(w: str, zp: str, scale: str, shape_s, post=None) -> str | None:
        """Name of a float32 initializer (w - zp) * scale; shape_s(size, w): the scale's shape."""
        key = (w, zp, scale)
        if key not in made:
            q, z, s = const(w), const(zp) if zp else np.zeros(1, np.int8), const(scale)
            if q is None or z is None or s is None or q.dtype not in (np.int8, np.uint8) or \
                    shape_s(s.size, q) is None or shape_s(z.size, q) is None:
                return None
            f = (q.astype(np.float32) - z.astype(np.float32).reshape(shape_s(z.size, q))) \
                * s.astype(np.float32).reshape(shape_s(s.size, q))
            f = post(f) if post else f
            made[key] = name = f"{w}_dequantized_f32_{len(made)}"
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(f), name))
        return made[key]

    def axis_shape(axis: int):  # scale shape: one value, or one per index along `axis`
        def shape(size: int, q: np.ndarray):
            if size == 1:
                return ()
            if size == q.shape[axis]:
                return [size if i == axis % q.ndim else 1 for i in range(q.ndim)]
            return None
        return shape

    def scaled_op(mul: onnx.NodeProto) -> onnx.NodeProto | None:
        """Float MatMul/Conv for Mul(Cast(MatMulInteger|ConvInteger[+bias]), x_scale*w_scale)."""
        for cast_out, s_name in (mul.input, mul.input[::-1]):
            cast, s_mul = src(cast_out, "Cast"), src(s_name, "Mul")
            if cast is None or s_mul is None or TensorProto.FLOAT not in (
                    a.i for a in cast.attribute if a.name == "to"):
                continue
            add, op = src(cast.input[0], "Add"), prod.get(cast.input[0])
            bias = None
            if add is not None:  # ConvInteger + Reshape(Cast(Floor(Div(bias, S)))) -> int32
                op = prod.get(add.input[0])
                chain = src(add.input[1], "Reshape")
                for kind in ("Cast", "Floor", "Div"):
                    chain = chain and src(chain.input[0], kind)
                b = chain and const(chain.input[0])
                if b is None or chain.input[1] != s_name or b.ndim != 1:
                    continue
                bias = chain.input[0]
            if op is None or op.op_type not in ("MatMulInteger", "ConvInteger") or (
                    bias and op.op_type != "ConvInteger"):
                continue
            dql = src(op.input[0], "DynamicQuantizeLinear")
            if dql is None or len(op.input) < 3 or op.input[2] != dql.output[2]:
                continue
            others = [x for x in s_mul.input if x != dql.output[1]]
            if len(others) != 1 or others[0] not in inits:
                continue
            zp = op.input[3] if len(op.input) > 3 else ""
            conv = op.op_type == "ConvInteger"
            w = float_weight(op.input[1], zp, others[0], axis_shape(0 if conv else -1))
            if w is not None:
                new = helper.make_node("Conv" if conv else "MatMul", [dql.input[0], w] + (
                    [bias] if bias else []), list(mul.output), mul.name)
                new.attribute.extend(op.attribute)  # Conv: pads, strides, group, dilations...
                return new
        return None

    def dequant_linear(dq: onnx.NodeProto) -> onnx.NodeProto | None:
        if len(dq.input) < 2 or any(a.name == "block_size" for a in dq.attribute):
            return None
        zp = dq.input[2] if len(dq.input) > 2 else ""
        gather = src(dq.input[0], "Gather")
        if gather is not None:  # per-tensor only: an axis would index the gathered output
            w = float_weight(gather.input[0], zp, dq.input[1],
                             lambda size, q: () if size == 1 else None)
            if w is None:
                return None
            new = helper.make_node("Gather", [w, gather.input[1]], list(dq.output), dq.name)
            new.attribute.extend(gather.attribute)
            return new
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        w = float_weight(dq.input[0], zp, dq.input[1], axis_shape(axis))
        return w and helper.make_node("Identity", [w], list(dq.output), dq.name)

    def lstm(node: onnx.NodeProto) -> onnx.NodeProto | None:
        """DynamicQuantizeLSTM -> LSTM; its W, R are [dirs, in, 4*hidden], LSTM's [dirs, 4h, in]."""
        def shape(size: int, q: np.ndarray):  # one scale per direction, or per direction and gate
            return {1: (), q.shape[0]: (q.shape[0], 1, 1),
                    q.shape[0] * q.shape[2]: (q.shape[0], 1, q.shape[2])}.get(size)
        ins = list(node.input) + [""] * (12 - len(node.input))
        weights = [float_weight(ins[i], ins[j + 1], ins[j], shape, lambda f: f.transpose(0, 2, 1))
                   for i, j in ((1, 8), (2, 10))]
        if None in weights:
            return None
        inputs = [ins[0], *weights, *ins[3:8]]
        while inputs[-1] == "":
            inputs.pop()
        new = helper.make_node("LSTM", inputs, list(node.output), node.name)
        new.attribute.extend(node.attribute)
        return new

    rules = {("", "Mul"): scaled_op, ("", "DequantizeLinear"): dequant_linear,
             ("com.microsoft", "DynamicQuantizeLSTM"): lstm}
    for i, node in enumerate(graph.node):
        rule = rules.get((node.domain, node.op_type))
        new = rule(node) if rule else None
        if new is not None:
            graph.node[i].CopyFrom(new)  # same place, same outputs: order stays topological

    # Drop what no longer feeds an output: the quantizing subgraphs and the int8 weights.
    needed, keep = {o.name for o in graph.output}, []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    for field, items in ((graph.node, keep[::-1]), (graph.initializer, graph.initializer),
                         (graph.value_info, graph.value_info)):
        items = [x for x in items if field is graph.node or x.name in needed]
        del field[:]
        field.extend(items)
    onnx.checker.check_model(model)
    return model.SerializeToString()
