"""Writes the test graphs: tests/graphs/<name>.json, <name>.safetensors and <name>.test.json.

Deterministic (fixed seeds): run it again and `git diff` shows nothing. The graphs cover every op
the emitter lowers, each materialization policy, odd names, special constants, a dynamic batch
dimension, an MLP, a small CNN and a two-layer decoder-only transformer with tied embeddings.

    .venv/bin/python tests/graphs/make_graphs.py
"""
import json
import math
import pathlib
import struct

import numpy as np

HERE = pathlib.Path(__file__).parent
ST_DTYPE = {"float32": "F32", "float16": "F16", "int32": "I32", "int64": "I64", "uint8": "U8", "bool": "BOOL",
            "int8": "I8"}


def write_safetensors(path, tensors):
    """A valid safetensors file: the tensors back to back with no holes (the format forbids them), ordered by
    element size, largest first, as the safetensors writer does, so that each f32 tensor stays 4-byte aligned
    and is borrowed in place."""
    items = []
    for name, arr in tensors.items():
        if isinstance(arr, tuple):  # (bf16 bits as uint16, "BF16")
            data, dtype = arr[0].astype("<u2").tobytes(), arr[1]
            shape, width = list(arr[0].shape), 2
        else:
            data, dtype, shape = np.ascontiguousarray(arr).tobytes(), ST_DTYPE[str(arr.dtype)], list(arr.shape)
            width = arr.dtype.itemsize
        items.append((width, name, dtype, shape, data))
    items.sort(key=lambda t: -t[0])  # stable: equal widths keep their order
    header, blobs, offset = {}, [], 0
    for _, name, dtype, shape, data in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class G:
    """A tiny builder for the JSON graph format."""

    def __init__(self, name, seed, file=None):
        self.name, self.file, self.rng = name, file or name, np.random.default_rng(seed)
        self.tensors, self.nodes, self.outputs, self.weights = [], [], [], {}
        self.test = {"policy": {"inline_below": 4096}, "scope": "model", "packed": "fail"}
        self._n = 0

    def t(self, name, shape, dtype="f32", **extra):
        self.tensors.append({"name": name, "shape": shape, "dtype": dtype, **extra})
        return name

    def input(self, name, shape, dtype="f32"):
        return self.t(name, shape, dtype)

    def weight(self, name, arr, dtype=None, path=None, key=None, **data):
        if dtype is None:
            dtype = {"float32": "f32", "int32": "i32", "int64": "i64", "bool": "bool", "int8": "i8"}[str(arr.dtype)]
        key = key or name
        self.weights[key] = arr
        extra = {"data": {"safetensors": key, **data}}
        if path:
            extra["path"] = path
        shape = list(arr[0].shape) if isinstance(arr, tuple) else list(arr.shape)
        return self.t(name, shape, dtype, **extra)

    def rand(self, *shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def op(self, op, inputs, shape, dtype="f32", name=None, **attrs):
        self._n += 1
        out = self.t(name or f"t{self._n}", shape, dtype)
        node = {"op": op, "inputs": list(inputs), "outputs": [out]}
        if attrs:
            node["attrs"] = attrs
        self.nodes.append(node)
        return out

    def save(self, outputs):
        doc = {"format": "tapeout-graph/1", "name": self.name, "tensors": self.tensors, "nodes": self.nodes,
               "outputs": outputs}
        (HERE / f"{self.file}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        write_safetensors(HERE / f"{self.file}.safetensors", self.weights)
        (HERE / f"{self.file}.test.json").write_text(json.dumps(self.test, indent=1) + "\n")


def bf16(arr):
    bits = arr.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return (rounded, "BF16")


def q8_0(arr):
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize
    return quantize(arr.astype(np.float32), T.Q8_0).reshape(-1)


def elementwise_binary():
    g = G("elementwise_binary", 1)
    a, b = g.input("a", [2, 3]), g.input("b", [3])
    pa = g.op("abs", [a], [2, 3])
    one = g.weight("one", np.ones([3], np.float32))
    pos = g.op("add", [pa, one], [2, 3])
    outs = [g.op(op, [a, b], [2, 3]) for op in ("add", "sub", "mul", "div", "max", "min")]
    outs.append(g.op("pow", [pos, b], [2, 3]))
    g.save(outs)


def elementwise_unary():
    g = G("elementwise_unary", 2)
    x = g.input("x", [2, 4])
    ax = g.op("abs", [x], [2, 4])
    one = g.weight("one", np.ones([2, 4], np.float32))
    pos = g.op("add", [ax, one], [2, 4])
    outs = [g.op(op, [x], [2, 4]) for op in ("neg", "exp", "tanh", "sin", "cos")]
    outs += [g.op(op, [pos], [2, 4]) for op in ("log", "sqrt", "rsqrt")]
    g.save(outs + [ax])


def activations():
    g = G("activations", 3)
    x = g.input("x", [3, 5])
    g.save([g.op(op, [x], [3, 5]) for op in ("relu", "sigmoid", "gelu", "silu")])


def convert_cast():
    g = G("convert_cast", 4)
    x, i = g.input("x", [4]), g.input("i", [4], "i32")
    to_int = g.op("convert", [x], [4], "i32")
    to_bf = g.op("convert", [x], [4], "bf16")
    back = g.op("convert", [to_bf], [4], "f32")
    # `after`: `i` unchanged, ordered after `back` (an optimization barrier).
    ordered = g.op("after", [i, back], [4], "i32")
    # `after` is written by passes only: the export accepts it for this test of its lowering alone.
    g.test["pass_ops"] = True
    g.save([to_int, back, g.op("convert", [ordered], [4], "f32")])


def shape_ops():
    g = G("shape_ops", 5)
    x = g.input("x", [2, 3, 4])
    r = g.op("reshape", [x], [6, 4])
    t = g.op("transpose", [x], [4, 2, 3], perm=[2, 0, 1])
    tr = g.op("transpose", [r], [4, 6])
    c = g.op("concat", [x, x], [2, 6, 4], axis=1)
    s = g.op("slice", [x], [1, 2, 2], start=[1, 0, 0], limit=[2, 3, 4], stride=[1, 2, 2])
    v = g.input("v", [4])
    b = g.op("broadcast", [v], [3, 4])
    b2 = g.op("broadcast", [v], [4, 2], dims=[0])
    g.save([r, t, tr, c, s, b, b2])


def gather_embedding():
    g = G("gather_embedding", 6)
    table = g.weight("embed", g.rand(16, 4), path="model.embed.weight")
    ids = g.input("ids", [5], "i32")
    cols = g.input("cols", [2, 2], "i64")
    e = g.op("gather", [table, ids], [5, 4])
    e1 = g.op("gather", [table, cols], [16, 2, 2], axis=1)
    g.save([e, e1])


def matmul_batched():
    g = G("matmul_batched", 7)
    a, b = g.input("a", [2, 3, 4]), g.input("b", [2, 4, 5])
    w = g.weight("w", g.rand(4, 6))
    g.save([g.op("matmul", [a, b], [2, 3, 5]), g.op("matmul", [a, w], [2, 3, 6])])


def conv2d():
    g = G("conv2d", 8)
    x = g.input("x", [1, 4, 7, 7])
    w = g.weight("w", g.rand(6, 2, 3, 3, scale=0.3))
    bias = g.weight("bias", g.rand(6))
    w1 = g.weight("w1", g.rand(3, 4, 1, 1))
    y = g.op("conv2d", [x, w, bias], [1, 6, 4, 2], stride=[2, 2], padding=[1, 1, 0, 0], dilation=[1, 2], groups=2)
    y1 = g.op("conv2d", [x, w1], [1, 3, 7, 7])
    g.save([y, y1])


def pooling():
    g = G("pooling", 9)
    x = g.input("x", [1, 2, 6, 6])
    g.save([g.op("max_pool2d", [x], [1, 2, 3, 3], kernel=[2, 2]),
            g.op("avg_pool2d", [x], [1, 2, 2, 2], kernel=[3, 3], stride=[3, 3]),
            g.op("max_pool2d", [x], [1, 2, 3, 3], kernel=[3, 3], stride=[2, 2], padding=[1, 1])])


def reductions():
    g = G("reductions", 10)
    x = g.input("x", [2, 3, 4])
    g.save([g.op("reduce_sum", [x], [2, 4], axes=[1]),
            g.op("reduce_mean", [x], [2, 3, 1], axes=[-1], keepdims=True),
            g.op("reduce_max", [x], []),
            g.op("reduce_mean", [x], [3], axes=[0, 2]),
            # Over the leading axis: emitted as a contraction with ones (a leading extent of 2 and of 5).
            g.op("reduce_sum", [x], [3, 4], axes=[0]),
            g.op("reduce_sum", [g.input("y", [5, 3, 7])], [3, 7], axes=[0])])


def normalization():
    g = G("normalization", 11)
    x = g.input("x", [3, 8])
    gamma, beta = g.weight("gamma", g.rand(8)), g.weight("beta", g.rand(8))
    g.save([g.op("softmax", [x], [3, 8]), g.op("softmax", [x], [3, 8], axis=0),
            g.op("layer_norm", [x, gamma, beta], [3, 8], eps=1e-5), g.op("rms_norm", [x, gamma], [3, 8], eps=1e-6),
            g.op("layer_norm", [x], [3, 8])])


def attention():
    g = G("attention", 12)
    q, k, v = g.input("q", [2, 4, 8]), g.input("k", [2, 6, 8]), g.input("v", [2, 6, 3])
    mask = g.weight("mask", g.rand(4, 6))
    scores = g.input("scores", [2, 4, 4])
    g.save([g.op("sdpa", [q, k, v], [2, 4, 3], causal=True), g.op("sdpa", [q, k, v, mask], [2, 4, 3], scale=0.5),
            g.op("causal_mask", [scores], [2, 4, 4])])


def rope_tables(seq, dim, base=10000.0):
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.outer(np.arange(seq), inv)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope():
    g = G("rope", 13)
    x = g.input("x", [2, 5, 8])
    cos, sin = rope_tables(5, 8)
    c, s = g.weight("cos", cos), g.weight("sin", sin)
    g.save([g.op("rope", [x, c, s], [2, 5, 8])])


def iota_select_compare_clamp():
    g = G("iota_select_compare_clamp", 14)
    a, b = g.input("a", [3, 4]), g.input("b", [3, 4])
    it = g.op("iota", [], [3, 4], "i32", dim=1)
    itf = g.op("convert", [it], [3, 4], "f32")
    p = g.op("compare", [a, b], [3, 4], "bool", direction="GT")
    pi = g.op("compare", [it, it], [3, 4], "bool", direction="EQ")
    s = g.op("select", [p, a, itf], [3, 4])
    lo, hi = g.weight("lo", np.array(-0.5, np.float32)), g.weight("hi", np.array(0.5, np.float32))
    c = g.op("clamp", [a, lo, hi], [3, 4])
    c2 = g.op("clamp", [b], [3, 4], min=-1.0, max=0.25)
    g.save([s, c, c2, pi, it])


def logical_softcap_window():
    """Boolean and/or/not (bitwise on integers), and sdpa with Gemma 2's soft-cap and a sliding window shorter than
    the keys, with as many and with fewer queries than keys (a decode step's alignment), grouped-query."""
    g = G("logical_softcap_window", 32)
    a, b = g.input("a", [3, 4]), g.input("b", [4])
    zero = g.weight("zero", np.zeros(4, np.float32))
    pa = g.op("compare", [a, b], [3, 4], "bool", direction="GT")
    pb = g.op("compare", [b, zero], [4], "bool", direction="LT")
    both, either = g.op("and", [pa, pb], [3, 4], "bool"), g.op("or", [pa, pb], [3, 4], "bool")
    neither = g.op("not", [either], [3, 4], "bool")
    it = g.op("iota", [], [3, 4], "i32", dim=1)
    bits = g.weight("bits", np.array([6, 3, 5, 12], np.int32))
    iand, ior = g.op("and", [it, bits], [3, 4], "i32"), g.op("or", [it, bits], [3, 4], "i32")
    inot = g.op("not", [it], [3, 4], "i32")
    # Four queries: IREE 3.13's ROCm backend crashes on a static attention of five or six (test_gpu_compile.py).
    q, k, v = g.input("q", [1, 4, 4, 8]), g.input("k", [1, 2, 7, 8]), g.input("v", [1, 2, 7, 3])
    capped = g.op("sdpa", [q, k, v], [1, 4, 4, 3], causal=True, window=3, softcap=0.75)
    q1 = g.input("q1", [2, 4, 8])
    k1, v1 = g.input("k1", [2, 4, 8]), g.input("v1", [2, 4, 8])
    windowed = g.op("sdpa", [q1, k1, v1], [2, 4, 8], causal=True, window=1)
    g.save([both, either, neither, iand, ior, inot, capped, windowed])


def special_constants():
    g = G("special_constants", 15)
    x = g.input("x", [6])
    k = g.weight("specials", np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38], np.float32))
    splat = g.weight("splat", np.full([6], 2.5, np.float32))
    nan_splat = g.weight("nan_splat", np.full([2, 3], np.nan, np.float32))
    y = g.op("add", [x, k], [6])
    z = g.op("mul", [x, splat], [6])
    g.test["policy"] = "inline_all"
    g.save([y, z, k, nan_splat])


def integer_constants():
    g = G("integer_constants", 16)
    idx = g.weight("idx", np.array([3, 0, 2], np.int32))
    big = g.weight("big", np.array([2**40, -7, 0], np.int64))
    mask = g.weight("mask", np.array([True, False, True]))
    small = g.weight("small", np.array([-128, 5, 127], np.int8))
    table = g.input("table", [4, 2])
    x, y = g.input("x", [3]), g.input("y", [3])
    gth = g.op("gather", [table, idx], [3, 2])
    sel = g.op("select", [mask, x, y], [3])
    g.test["policy"] = "inline_all"
    g.save([gth, sel, big, small, g.op("convert", [small], [3], "i32")])


def mlp_layers(g, x, batch, dims, prefix):
    h = x
    for i, (din, dout) in enumerate(zip(dims, dims[1:])):
        w = g.weight(f"{prefix}{i}.w", g.rand(din, dout, scale=1 / math.sqrt(din)), path=f"model.{prefix}{i}.weight")
        b = g.weight(f"{prefix}{i}.b", g.rand(dout, scale=0.1), path=f"model.{prefix}{i}.bias")
        m = g.op("matmul", [h, w], [batch, dout])
        h = g.op("add", [m, b], [batch, dout])
        if i < len(dims) - 2:
            h = g.op("relu", [h], [batch, dout])
    return h


def external_policy():
    g = G("external_policy", 17)
    x = g.input("x", [2, 8])
    g.test["policy"] = "external_all"
    g.save([mlp_layers(g, x, 2, [8, 16, 4], "fc")])


def threshold_policy():
    g = G("threshold_policy", 18)
    x = g.input("x", [2, 8])
    g.test["policy"] = {"inline_below": 64}  # 16-float biases inline-equal (64 B) go external; 4-float bias inline
    g.save([mlp_layers(g, x, 2, [8, 16, 4], "fc")])


def tied_weights():
    g = G("tied_weights", 19)
    emb = g.weight("embed", g.rand(10, 6), path="model.embed_tokens.weight")
    ids = g.input("ids", [4], "i32")
    h = g.op("gather", [emb, ids], [4, 6])
    et = g.op("transpose", [emb], [6, 10])
    logits = g.op("matmul", [h, et], [4, 10])
    g.test["policy"] = "external_all"
    g.save([logits])


def odd_names():
    g = G('odd "module"/names', 20, file="odd_names")
    x = g.input('in"put\\0', [2, 3])
    w1 = g.weight("w1", g.rand(2, 3), path='model/layers.0::attn "q"\nproj', key="k1")
    w2 = g.weight("w2", g.rand(2, 3), path="0leading-digit.ünïcödé.权重", key="k2")
    w3 = g.weight("w3", g.rand(2, 3), path="main", key="k3")
    a = g.op("add", [x, w1], [2, 3], name="a/b::c")
    b = g.op("mul", [a, w2], [2, 3], name="résultat")
    c = g.op("sub", [b, w3], [2, 3], name="9\\out")
    g.test["policy"] = "external_all"
    g.save([c])


def dynamic_batch():
    g = G("dynamic_batch", 21)
    x = g.input("x", ["?", 4])
    w = g.weight("w", g.rand(4, 3), path="model.fc.weight")
    b = g.weight("b", g.rand(3), path="model.fc.bias")
    m = g.op("matmul", [x, w], ["?", 3])
    y = g.op("add", [m, b], ["?", 3])
    r = g.op("relu", [y], ["?", 3])
    g.test["policy"] = "external_all"
    g.test["dynamic"] = {"x": [5, 4]}
    g.save([r, g.op("sigmoid", [y], ["?", 3])])


def row_count_ops():
    """The ops that pick a product's form by a `?` row count without a branch (`--packed keep` writes them for a
    prefill's linear of a Q8_0 weight), at 5 rows: padded to 8; gated open and shut (a contraction over a `K` of 0 is
    zeros); placed (5 <= 8) and not placed (5 > 3)."""
    g = G("row_count_ops", 28)
    x = g.input("x", ["?", 4])
    w = g.weight("w", g.rand(6, 4), path="model.w")
    w2 = g.weight("w2", g.rand(4, 3), path="model.w2")
    p8 = g.op("pad_rows", [x], [8, 4], rows=8)
    open_rows = g.op("gate_rows", [w, x], ["?", 4], rows=8, few=True, axis=0)
    xk = g.op("gate_rows", [x, x], ["?", "?"], rows=8, few=False, axis=1)
    wk = g.op("gate_rows", [w2, x], ["?", 3], rows=8, few=False, axis=0)
    none = g.op("matmul", [xk, wk], ["?", 3])
    small = g.op("matmul", [p8, w2], [8, 3])
    placed = g.op("place_rows", [small, none], ["?", 3], rows=8)
    p3 = g.op("pad_rows", [x], [3, 4], rows=3)
    small3 = g.op("matmul", [p3, w2], [3, 3])
    kept = g.op("place_rows", [small3, none], ["?", 3], rows=3)
    g.test["policy"] = "external_all"
    g.test["dynamic"] = {"x": [5, 4]}
    # Ops and attributes only passes write: the export accepts them for this test of their lowering alone.
    g.test["pass_ops"] = True
    g.save([p8, open_rows, none, placed, kept, p3])


def grouped_columns():
    """`matmul` with the right side's columns in two dimensions (`grouped`: `[B.., M, K] x [B.., K, N, T]`, the
    few-rows product of 4-bit codes gated in groups of columns), unbatched and batched, with `?` rows (`M`) and
    with a `?` group count (`N`, gated open by 5 rows <= 8): IREE 3.13 rejects the unbatched `dot_general` with a
    `?` `N`."""
    g = G("grouped_columns", 29)
    x = g.input("x", ["?", 4])
    w = g.weight("w", g.rand(4, 2, 3), path="model.w")
    v = g.weight("v", g.rand(2, 4, 2, 3), path="model.v")
    a = g.weight("a", g.rand(2, 3, 4), path="model.a")
    rows = g.op("matmul", [x, w], ["?", 2, 3], grouped=True)
    p8 = g.op("pad_rows", [x], [8, 4], rows=8)
    wg = g.op("gate_rows", [w, x], [4, "?", 3], rows=8, few=True, axis=1)
    groups = g.op("matmul", [p8, wg], [8, "?", 3], grouped=True)
    vg = g.op("gate_rows", [v, x], [2, 4, "?", 3], rows=8, few=True, axis=2)
    batched = g.op("matmul", [a, vg], [2, 3, "?", 3], grouped=True)
    g.test["policy"] = "external_all"
    g.test["dynamic"] = {"x": [5, 4]}
    # Ops and attributes only passes write: the export accepts them for this test of their lowering alone.
    g.test["pass_ops"] = True
    g.save([rows, groups, batched])


def banded_rows():
    """`matmul` of rows with a weight in row bands (`banded`: `[.., K] x [N / T, K, T]`, a kept weight dequantized for
    a prefill), of a stored band set, of bands computed from a `[K, N]` weight (reshape, transpose: what
    `--packed keep` writes) and of HF's `[1, ?, K]` rows, and gated to a `K` of 0 at up to 8 rows (zeros)."""
    g = G("banded_rows", 30)
    x = g.input("x", ["?", 4])
    w = g.weight("w", g.rand(3, 4, 2), path="model.w")
    v = g.weight("v", g.rand(4, 6), path="model.v")
    stored = g.op("matmul", [x, w], ["?", 6], banded=True)
    split = g.op("reshape", [v], [4, 3, 2])
    bands = g.op("transpose", [split], [3, 4, 2], perm=[1, 0, 2])
    computed = g.op("matmul", [x, bands], ["?", 6], banded=True)
    x1 = g.op("reshape", [x], [1, "?", 4])
    hf = g.op("matmul", [x1, bands], [1, "?", 6], banded=True)
    xk = g.op("gate_rows", [x, x], ["?", "?"], rows=8, few=False, axis=1)
    wk = g.op("gate_rows", [bands, x], [3, "?", 2], rows=8, few=False, axis=1)
    gated = g.op("matmul", [xk, wk], ["?", 6], banded=True)
    g.test["policy"] = "external_all"
    g.test["dynamic"] = {"x": [5, 4]}
    # Ops and attributes only passes write: the export accepts them for this test of their lowering alone.
    g.test["pass_ops"] = True
    g.save([stored, computed, hf, gated])


def decode_words():
    """Narrow values in 32-bit words, as the Vulkan pass stores a narrow constant (docs/devices.md), each read back by
    `decode_words`: f16 and bf16 (with a NaN, infinities, a subnormal, -0), i8, u8, i16, i4 and i2 codes (signed, every
    value), then used as the pass uses them (a slice of the real values, a reshape, a convert); and `round_as`, how the
    Vulkan pass holds an f16 / bf16 value the program computes: an input rounded to each precision, kept f32."""
    g = G("decode_words", 31)
    x = g.input("x", [9])
    def words(raw):
        raw = raw + bytes(-len(raw) % 4)
        return np.frombuffer(raw, "<i4").copy()
    halves = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, 6.1e-5, 3e-7, -65504.0, 0.333], np.float16)
    bf = (np.array([1.5, -0.0, np.inf, np.nan, 1e-39, -3.0e38, 0.1], np.float32).view(np.uint32) >> 16).astype("<u2")
    nib = np.arange(-8, 8, dtype=np.int8)
    i4 = bytes(((nib[0::2] & 15) | ((nib[1::2] & 15) << 4)).astype(np.uint8))
    two = np.array([-2, -1, 0, 1] * 2, np.int8)
    i2 = bytes((((two[0::4] & 3) | ((two[1::4] & 3) << 2) | ((two[2::4] & 3) << 4) | ((two[3::4] & 3) << 6))
                .astype(np.uint8)))
    cases = [("f16", halves.tobytes(), 9, "f32"), ("bf16", bf.tobytes(), 7, "f32"),
             ("i8", np.arange(-128, 127, 37, dtype=np.int8).tobytes(), 7, "i32"),
             ("u8", np.array([0, 1, 128, 255, 7], np.uint8).tobytes(), 5, "i32"),
             ("i16", np.array([-32768, 32767, -1], "<i2").tobytes(), 3, "i32"),
             ("i4", i4, 16, "i32"), ("i2", i2, 8, "i32")]
    outs = []
    for kind, raw, n, to in cases:
        w = g.weight(f"{kind}_words", words(raw), path=f"model.{kind}.words")
        per = 32 // {"f16": 16, "bf16": 16, "i16": 16, "i8": 8, "u8": 8, "i4": 4, "i2": 2}[kind]
        count = len(words(raw)) * per
        d = g.op("decode_words", [w], [count], to, **{"from": kind})
        real = g.op("slice", [d], [n], to, start=[0], limit=[n]) if count != n else d
        outs.append(g.op("convert", [real], [n], "f32") if to == "i32" else real)
    for half in ("f16", "bf16"):
        outs.append(g.op("round_as", [x], [9]))
        g.nodes[-1]["attrs"] = {"dtype": half}  # (`dtype` is op()'s result type)
    g.test["policy"] = {"inline_below": 16}
    # An op only passes write: the export accepts it for this test of its lowering alone.
    g.test["pass_ops"] = True
    g.save(outs)


def dynamic_unit_dims():
    """A `?` batch against a weight of one column ([K, 1]) and one row ([1, N]): the two matmuls IREE 3.13 rejects
    as `dot_general`s (it folds their unit dimension into a dynamic reshape), lowered otherwise."""
    g = G("dynamic_unit_dims", 27)
    x = g.input("x", ["?", 4])
    w = g.weight("w", g.rand(4, 1), path="model.col.weight")
    v = g.weight("v", g.rand(1, 3), path="model.row.weight")
    m = g.op("matmul", [x, w], ["?", 1])
    y = g.op("matmul", [m, v], ["?", 3])
    g.test["policy"] = "external_all"
    g.test["dynamic"] = {"x": [5, 4]}
    g.save([m, y])


def mlp():
    g = G("mlp", 22)
    x = g.input("x", [4, 32])
    w0 = g.rand(32, 64, scale=0.2)
    g.weight("fc0.w", bf16(w0), dtype="bf16", path="model.fc0.weight")
    b0 = g.weight("fc0.b", g.rand(64, scale=0.1), path="model.fc0.bias")
    wq = g.rand(16, 64, scale=0.2)  # stored [out, in] as GGML does; used through a transpose
    g.weight("fc1.w", q8_0(wq), dtype="f32", path="model.fc1.weight", encoding="Q8_0")
    g.tensors[-1]["shape"] = [16, 64]
    m0 = g.op("matmul", [x, "fc0.w"], [4, 64])
    h = g.op("gelu", [g.op("add", [m0, b0], [4, 64])], [4, 64])
    wt = g.op("transpose", ["fc1.w"], [64, 16])
    y = g.op("matmul", [h, wt], [4, 16])
    g.test["policy"] = {"inline_below": 256}
    g.test["packed"] = "dequantize"
    g.save([y])


def half_weights():
    """bf16 and f16 weights in every op that consumes a weight: kept as stored by default, converted in the
    program; `tests/iree/test_graphs.py` also exports it widened and compares the two in IREE."""
    g = G("half_weights", 25)
    vocab, d, ff = 48, 16, 24
    ids = g.input("ids", [5], "i32")
    emb = g.weight("emb", bf16(g.rand(vocab, d, scale=0.5)), dtype="bf16", path="model.embed_tokens.weight")
    h = g.op("gather", [emb, ids], [5, d])  # embedding rows of a bf16 table
    norm = g.weight("norm", bf16(1 + g.rand(d, scale=0.1)), dtype="bf16", path="model.norm.weight")
    x = g.op("rms_norm", [h, norm], [5, d], eps=1e-6)
    up = g.weight("up", bf16(g.rand(d, ff, scale=0.3)), dtype="bf16", path="model.mlp.up.weight")  # [K, N]
    bias = g.weight("bias", g.rand(ff, scale=0.1).astype(np.float16), dtype="f16", path="model.mlp.up.bias")
    u = g.op("silu", [g.op("add", [g.op("matmul", [x, up], [5, ff]), bias], [5, ff])], [5, ff])
    down = g.weight("down", g.rand(d, ff, scale=0.3).astype(np.float16), dtype="f16", path="model.mlp.down.weight")
    y = g.op("matmul", [u, g.op("transpose", [down], [ff, d])], [5, d])  # [out, in], as PyTorch stores it
    ln_g = g.weight("ln_g", (1 + g.rand(d, scale=0.1)).astype(np.float16), dtype="f16", path="model.ln.weight")
    ln_b = g.weight("ln_b", bf16(g.rand(d, scale=0.1)), dtype="bf16", path="model.ln.bias")
    z = g.op("layer_norm", [y, ln_g, ln_b], [5, d], eps=1e-5)
    logits = g.op("matmul", [z, g.op("transpose", [emb], [d, vocab])], [5, vocab], name="logits")  # tied head
    img = g.input("img", [1, 2, 6, 6])
    k = g.weight("k", g.rand(3, 2, 3, 3, scale=0.3).astype(np.float16), dtype="f16", path="model.conv.weight")
    kb = g.weight("kb", bf16(g.rand(3, scale=0.1)), dtype="bf16", path="model.conv.bias")
    conv = g.op("conv2d", [img, k, kb], [1, 3, 4, 4], name="conv")
    g.test["policy"] = {"inline_below": 64}  # the small ones inline, the rest external
    g.save([logits, conv])


def small_cnn():
    g = G("small_cnn", 23)
    x = g.input("image", [2, 1, 8, 8])
    w = g.weight("conv.w", g.rand(4, 1, 3, 3, scale=0.5), path="model.conv.weight")
    b = g.weight("conv.b", g.rand(4, scale=0.1), path="model.conv.bias")
    c = g.op("conv2d", [x, w, b], [2, 4, 8, 8], padding=[1, 1])
    r = g.op("relu", [c], [2, 4, 8, 8])
    p = g.op("max_pool2d", [r], [2, 4, 4, 4], kernel=[2, 2])
    f = g.op("reshape", [p], [2, 64])
    fw = g.weight("fc.w", g.rand(64, 10, scale=0.1), path="model.fc.weight")
    logits = g.op("matmul", [f, fw], [2, 10])
    g.test["policy"] = {"inline_below": 1024}
    g.save([g.op("softmax", [logits], [2, 10])])


def transformer():
    g = G("transformer", 24)
    vocab, d, heads, hd, ff, seq = 32, 16, 2, 8, 32, 6
    ids = g.input("tokens", [seq], "i32")
    emb = g.weight("embed", g.rand(vocab, d, scale=0.5), path="model.embed_tokens.weight")
    cos, sin = rope_tables(seq, hd)
    c, s = g.weight("rope.cos", cos), g.weight("rope.sin", sin)
    h = g.op("gather", [emb, ids], [seq, d])
    for layer in range(2):
        p = f"model.layers.{layer}"
        n1 = g.weight(f"l{layer}.ln1", 1 + g.rand(d, scale=0.1), path=f"{p}.input_layernorm.weight")
        x = g.op("rms_norm", [h, n1], [seq, d], eps=1e-6)
        qkv = {}
        for name in ("q", "k", "v"):
            w = g.weight(f"l{layer}.{name}", g.rand(d, d, scale=0.3), path=f"{p}.self_attn.{name}_proj.weight")
            m = g.op("matmul", [x, w], [seq, d])
            r = g.op("reshape", [m], [seq, heads, hd])
            qkv[name] = g.op("transpose", [r], [heads, seq, hd], perm=[1, 0, 2])
        q = g.op("rope", [qkv["q"], c, s], [heads, seq, hd])
        k = g.op("rope", [qkv["k"], c, s], [heads, seq, hd])
        a = g.op("sdpa", [q, k, qkv["v"]], [heads, seq, hd], causal=True)
        at = g.op("transpose", [a], [seq, heads, hd], perm=[1, 0, 2])
        af = g.op("reshape", [at], [seq, d])
        wo = g.weight(f"l{layer}.o", g.rand(d, d, scale=0.3), path=f"{p}.self_attn.o_proj.weight")
        h = g.op("add", [h, g.op("matmul", [af, wo], [seq, d])], [seq, d])
        n2 = g.weight(f"l{layer}.ln2", 1 + g.rand(d, scale=0.1), path=f"{p}.post_attention_layernorm.weight")
        x = g.op("rms_norm", [h, n2], [seq, d], eps=1e-6)
        wg = g.weight(f"l{layer}.gate", g.rand(d, ff, scale=0.3), path=f"{p}.mlp.gate_proj.weight")
        wu = g.weight(f"l{layer}.up", g.rand(d, ff, scale=0.3), path=f"{p}.mlp.up_proj.weight")
        wd = g.weight(f"l{layer}.down", g.rand(ff, d, scale=0.3), path=f"{p}.mlp.down_proj.weight")
        gate = g.op("silu", [g.op("matmul", [x, wg], [seq, ff])], [seq, ff])
        up = g.op("matmul", [x, wu], [seq, ff])
        h = g.op("add", [h, g.op("matmul", [g.op("mul", [gate, up], [seq, ff]), wd], [seq, d])], [seq, d])
    nf = g.weight("norm", 1 + g.rand(d, scale=0.1), path="model.norm.weight")
    x = g.op("rms_norm", [h, nf], [seq, d], eps=1e-6)
    et = g.op("transpose", [emb], [d, vocab])
    logits = g.op("matmul", [x, et], [seq, vocab], name="logits")
    g.test["policy"] = {"inline_below": 512}
    g.save([logits])


def argmax_dynamic_slices():
    g = G("argmax_dynamic_slices", 27)
    x = g.input("x", [4, 6])
    r, c = g.input("row", [], "i32"), g.input("col", [], "i32")
    am = g.op("argmax", [x], [4], "i32", axis=1)
    am0 = g.op("argmax", [x], [6], "i64", axis=0)
    win = g.op("dynamic_slice", [x, r, c], [2, 3], sizes=[2, 3])
    cache = g.weight("cache", g.rand(5, 4))
    u = g.input("update", [2, 4])
    pos = g.input("pos", [], "i64")
    zero = g.weight("zero", np.array(0, np.int64))
    written = g.op("dynamic_update_slice", [cache, u, pos, zero], [5, 4])
    g.test["policy"] = "inline_all"
    g.save([am, am0, win, written])


ALL = [elementwise_binary, elementwise_unary, activations, convert_cast, shape_ops, gather_embedding, matmul_batched,
       conv2d, pooling, reductions, normalization, attention, rope, iota_select_compare_clamp, logical_softcap_window,
       special_constants,
       integer_constants, external_policy, threshold_policy, tied_weights, odd_names, dynamic_batch, dynamic_unit_dims,
       mlp, small_cnn, transformer, half_weights, argmax_dynamic_slices, row_count_ops,
       grouped_columns, banded_rows, decode_words]

if __name__ == "__main__":
    for make in ALL:
        make()
