"""An independent numpy interpreter of the tapeout JSON graph format (docs/graph-format.md).

It shares no code with tapeout: weights are read with its own safetensors parser, BF16 is widened
with numpy bit operations and Q8_0 is decoded with PyPI gguf. The IREE gate compares IREE's results
for tapeout's exported module against `evaluate` here. Arithmetic is float64, cast to the declared
dtype at the end of every op.
"""
import json
import math
import struct

import numpy as np

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32, "i8": np.int8, "i16": np.int16,
      "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}
ST = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "u1", "U16": "<u2", "U32": "<u4",
      "U64": "<u8", "I8": "i1", "BOOL": "?", "BF16": "<u2"}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=ST[info["dtype"]]).reshape(info["shape"])
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def to_bf16(x):
    """f32 to bf16 (to nearest, ties to even), read back as f32; a NaN stays a quiet NaN of its sign (the carry of
    the rounding would turn some NaN payloads into an infinity or a zero)."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    nan = (bits & 0xFFFF0000) | 0x00400000
    return np.where(np.isnan(x), nan, rounded).astype(np.uint32).view(np.float32)


class Graph:
    def __init__(self, json_path, st_path):
        self.doc = json.load(open(json_path))
        self.specs = {t["name"]: t for t in self.doc["tensors"]}
        st = read_safetensors(st_path)
        self.weights = {}
        for t in self.doc["tensors"]:
            data = t.get("data")
            if not data:
                continue
            arr = st[data["safetensors"]]
            if data.get("encoding") == "Q8_0":
                from gguf import GGMLQuantizationType as T
                from gguf.quants import dequantize
                arr = dequantize(arr.reshape(1, -1), T.Q8_0).reshape([int(d) for d in t["shape"]]).astype(np.float32)
            if arr.dtype == np.float16:
                arr = arr.astype(np.float32)  # a 16-bit weight is an exact f32 value to the program
            self.weights[t["name"]] = arr
        produced = {o for n in self.doc["nodes"] for o in n["outputs"]}
        used = [i for n in self.doc["nodes"] for i in n["inputs"]] + self.doc["outputs"]
        self.inputs = list(dict.fromkeys(u for u in used if u not in produced and u not in self.weights))

    def evaluate(self, feeds):
        env = {**{k: np.asarray(v) for k, v in self.weights.items()}, **feeds}
        for node in self.doc["nodes"]:
            out = node["outputs"][0]
            spec = self.specs[out]
            args = [env[i] for i in node["inputs"]]
            y = OPS[node["op"]](args, node.get("attrs", {}), spec)
            y = np.asarray(y)
            if spec["dtype"] == "bf16":
                y = to_bf16(y)
            else:
                y = y.astype(NP[spec["dtype"]])
            env[out] = y
        return [env[o] for o in self.doc["outputs"]]


def f64(a):
    return np.asarray(a, dtype=np.float64)


def sigmoid(x):
    return 1 / (1 + np.exp(-f64(x)))


def softmax(x, axis):
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def static_shape(spec, like=None):
    return [int(d) if d not in (None, "?") else like.shape[i] for i, d in enumerate(spec["shape"])]


def conv2d(a, at, spec):
    x, w = f64(a[0]), f64(a[1])
    sh, sw = at.get("stride", [1, 1])
    dh, dw = at.get("dilation", [1, 1])
    pad = at.get("padding", [0, 0])
    pt, pb, pl, pr = (pad[0], pad[0], pad[1], pad[1]) if len(pad) == 2 else pad
    groups = at.get("groups", 1)
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, o, oh, ow))
    og = o // groups
    for gi in range(groups):
        xs = x[:, gi * cg:(gi + 1) * cg]
        ws = w[gi * og:(gi + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                y[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if len(a) > 2:
        y += f64(a[2])[None, :, None, None]
    return y


def pool(a, at, spec, kind):
    x = f64(a[0])
    kh, kw = at.get("kernel", [2, 2])
    sh, sw = at.get("stride", [kh, kw])
    pad = at.get("padding", [0, 0])
    pt, pb, pl, pr = (pad[0], pad[0], pad[1], pad[1]) if len(pad) == 2 else pad
    fill = -np.inf if kind == "max" else 0.0
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    win = np.stack([x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] for i in range(kh) for j in range(kw)])
    return win.max(axis=0) if kind == "max" else win.sum(axis=0) / (kh * kw)


def norm(a, at, rms):
    x = f64(a[0])
    eps = at.get("eps", 1e-6 if rms else 1e-5)
    xc = x if rms else x - x.mean(axis=-1, keepdims=True)
    y = xc / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    if len(a) > 1:
        y = y * f64(a[1])
    if len(a) > 2:
        y = y + f64(a[2])
    return y


def causal(s, window=None):
    """Query i (at position i + T - S) sees keys j <= i + T - S, and with a window only the `window` latest of them."""
    s = f64(s).copy()
    S, T = s.shape[-2:]
    pos = np.arange(S)[:, None] + (T - S)
    keep = pos >= np.arange(T)[None, :]
    if window is not None:
        keep &= pos - np.arange(T)[None, :] < window
    return np.where(keep, s, -np.inf)


def sdpa(a, at, spec):
    """Attention over the last two dimensions; with fewer k/v heads than q heads (the dimension before S), each
    k/v head serves consecutive query heads, as transformers' repeat_kv copies them."""
    q, k, v = f64(a[0]), f64(a[1]), f64(a[2])
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        groups = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    scale = at.get("scale", 1 / math.sqrt(q.shape[-1]))
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    if "softcap" in at:
        s = np.tanh(s / at["softcap"]) * at["softcap"]
    if len(a) > 3:
        s = s + f64(a[3])
    if at.get("causal", False):
        s = causal(s, at.get("window"))
    return softmax(s, -1) @ v


def rope(a, at, spec):
    """Each pair (p, q) of x becomes (p cos - q sin, q cos + p sin): pairs (i, i + D/2) by default (rotate_half),
    (2i, 2i + 1) with `interleaved`. A full table (width D) is used element by element, x cos + rotate(x) sin; a
    half table (width D/2) holds one angle per pair."""
    x, c, s = f64(a[0]), f64(a[1]), f64(a[2])
    d = x.shape[-1]
    if at.get("interleaved", False):
        p, q = x[..., 0::2], x[..., 1::2]

        def join(u, w):
            return np.stack(np.broadcast_arrays(u, w), axis=-1).reshape(*np.broadcast_shapes(u.shape, w.shape)[:-1], d)
    else:
        p, q = x[..., :d // 2], x[..., d // 2:]

        def join(u, w):
            u, w = np.broadcast_arrays(u, w)
            return np.concatenate([u, w], axis=-1)
    if c.shape[-1] == d // 2 and d > 2:
        return join(p * c - q * s, q * c + p * s)
    return x * c + join(-q, p) * s


def broadcast(a, at, spec):
    # With a second operand (`like`) the result has its shape, `?` dimensions included.
    out = list(np.shape(a[1])) if len(a) > 1 else static_shape(spec)
    x = np.asarray(a[0])
    dims = at.get("dims", list(range(len(out) - x.ndim, len(out))))
    shape = [1] * len(out)
    for i, d in enumerate(dims):
        shape[d] = x.shape[i]
    return np.broadcast_to(x.reshape(shape), out)


def reduce(a, at, fn):
    x = f64(a[0])
    axes = tuple(at.get("axes", range(x.ndim)))
    return fn(x, axis=axes, keepdims=at.get("keepdims", False))


def clamp(a, at, spec):
    if len(a) == 3:
        return np.clip(f64(a[0]), f64(a[1]), f64(a[2]))
    return np.clip(f64(a[0]), at.get("min", -np.inf), at.get("max", np.inf))


def iota(a, at, spec):
    if a:  # a reference operand: the 1-D indices 0..n of its dimension `axis`
        return np.arange(np.shape(a[0])[at.get("axis", 0)])
    shape = static_shape(spec)
    dim = at.get("dim", 0)
    return np.broadcast_to(np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))]), shape)


def dynamic_slice(a, at, spec):
    x = np.asarray(a[0])
    sizes = at["sizes"]
    starts = [min(max(int(o), 0), d - n) for o, d, n in zip(a[1:], x.shape, sizes)]
    return x[tuple(slice(s, s + n) for s, n in zip(starts, sizes))]


def dynamic_update_slice(a, at, spec):
    x, u = np.array(a[0]), np.asarray(a[1])
    starts = [min(max(int(o), 0), d - n) for o, d, n in zip(a[2:], x.shape, u.shape)]
    x[tuple(slice(s, s + n) for s, n in zip(starts, u.shape))] = u
    return x


def pad_rows(a, at, spec):
    x = np.asarray(a[0])
    flat, rows = x.reshape(-1, x.shape[-1]), at["rows"]
    out = np.zeros((rows, x.shape[-1]), x.dtype)
    n = min(flat.shape[0], rows)
    out[:n] = flat[:n]
    return out


def banded(a):
    """`x [.., K]` times a weight in row bands `[N / T, K, T]`: column `n` of the `[K, N]` weight is band `n // T`,
    column `n % T`."""
    w = f64(a[1])
    return f64(a[0]) @ w.transpose(1, 0, 2).reshape(w.shape[1], w.shape[0] * w.shape[2])


def gate_rows(a, at, spec):
    t, like = np.asarray(a[0]), np.asarray(a[1])
    few = int(np.prod(like.shape[:-1])) <= at["rows"]
    return t if few == at.get("few", True) else t.take(range(0), axis=at.get("axis", 0))


def place_rows(a, at, spec):
    small, base = np.asarray(a[0]), np.asarray(a[1])
    flat = base.reshape(-1, base.shape[-1]).copy()
    p, n = flat.shape
    if p <= at["rows"] and small.shape[1] >= n:
        flat[:] = small[:p, :n]
    return flat.reshape(base.shape)


def decode_words(a, at, spec):
    """i32 words read as the narrow values of `from` they hold, lowest bits first (little-endian), widened: f32 for
    f16 / bf16 (numpy's and the bit-level widening), i32 for integers (sign-extended unless unsigned)."""
    raw = np.asarray(a[0], "<i4").tobytes()
    kind = at["from"]
    if kind == "f16":
        return np.frombuffer(raw, "<f2").astype(np.float32)
    if kind == "bf16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    if kind in ("i16", "u16", "i8", "u8"):
        return np.frombuffer(raw, {"i16": "<i2", "u16": "<u2", "i8": "i1", "u8": "u1"}[kind]).astype(np.int32)
    bits = {"i4": 4, "i2": 2}[kind]
    u = np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little").reshape(-1, bits)
    v = (u * (1 << np.arange(bits))).sum(axis=1).astype(np.int32)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v).astype(np.int32)


def round_as(a, at, spec):
    """f32 rounded to f16 (numpy) or bf16 (to nearest even, NaN kept) precision, still f32."""
    x = np.asarray(a[0], np.float32)
    if at["dtype"] == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    return to_bf16(x)


CMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}

OPS = {
    "add": lambda a, at, s: f64(a[0]) + f64(a[1]),
    "sub": lambda a, at, s: f64(a[0]) - f64(a[1]),
    "mul": lambda a, at, s: f64(a[0]) * f64(a[1]),
    "div": lambda a, at, s: f64(a[0]) / f64(a[1]),
    "pow": lambda a, at, s: np.power(f64(a[0]), f64(a[1])),
    "max": lambda a, at, s: np.maximum(f64(a[0]), f64(a[1])),
    "min": lambda a, at, s: np.minimum(f64(a[0]), f64(a[1])),
    "neg": lambda a, at, s: -f64(a[0]),
    "abs": lambda a, at, s: np.abs(f64(a[0])),
    "after": lambda a, at, s: a[0],
    "exp": lambda a, at, s: np.exp(f64(a[0])),
    "log": lambda a, at, s: np.log(f64(a[0])),
    "sqrt": lambda a, at, s: np.sqrt(f64(a[0])),
    "rsqrt": lambda a, at, s: 1 / np.sqrt(f64(a[0])),
    "tanh": lambda a, at, s: np.tanh(f64(a[0])),
    "sin": lambda a, at, s: np.sin(f64(a[0])),
    "cos": lambda a, at, s: np.cos(f64(a[0])),
    "sigmoid": lambda a, at, s: sigmoid(a[0]),
    "relu": lambda a, at, s: np.maximum(f64(a[0]), 0),
    "silu": lambda a, at, s: f64(a[0]) * sigmoid(a[0]),
    "gelu": lambda a, at, s: 0.5 * f64(a[0]) * (1 + np.tanh(math.sqrt(2 / math.pi) * (f64(a[0]) + 0.044715 * f64(a[0]) ** 3))),
    "convert": lambda a, at, s: np.trunc(a[0]) if s["dtype"] in ("i8", "i16", "i32", "i64") else a[0],
    "broadcast": broadcast,
    "reshape": lambda a, at, s: np.reshape(a[0], [int(d) if d not in (None, "?") else -1 for d in s["shape"]]),
    "transpose": lambda a, at, s: np.transpose(a[0], at.get("perm")),
    "concat": lambda a, at, s: np.concatenate(a, axis=at.get("axis", 0)),
    "slice": lambda a, at, s: a[0][tuple(slice(b, None if e == -1 else e, st) for b, e, st in
                                         zip(at["start"], at["limit"], at.get("stride", [1] * len(at["start"]))))],
    "gather": lambda a, at, s: np.take(a[0], a[1], axis=at.get("axis", 0)),
    "matmul": lambda a, at, s: (banded(a) if at.get("banded") else
                                np.einsum("...mk,...knt->...mnt", f64(a[0]), f64(a[1])) if a[1].ndim == a[0].ndim + 1
                                else f64(a[0]) @ f64(a[1])),
    "conv2d": conv2d,
    "max_pool2d": lambda a, at, s: pool(a, at, s, "max"),
    "avg_pool2d": lambda a, at, s: pool(a, at, s, "avg"),
    "reduce_sum": lambda a, at, s: reduce(a, at, np.sum),
    "reduce_mean": lambda a, at, s: reduce(a, at, np.mean),
    "reduce_max": lambda a, at, s: reduce(a, at, np.max),
    "softmax": lambda a, at, s: softmax(a[0], at.get("axis", -1)),
    "layer_norm": lambda a, at, s: norm(a, at, False),
    "rms_norm": lambda a, at, s: norm(a, at, True),
    "causal_mask": lambda a, at, s: causal(a[0]),
    "sdpa": sdpa,
    "rope": rope,
    "iota": iota,
    "select": lambda a, at, s: np.where(a[0], a[1], a[2]),
    "and": lambda a, at, s: a[0] & a[1],
    "or": lambda a, at, s: a[0] | a[1],
    "not": lambda a, at, s: ~a[0],
    "compare": lambda a, at, s: CMP[at["direction"]](a[0], a[1]),
    "clamp": clamp,
    "dynamic_slice": dynamic_slice,
    "dynamic_update_slice": dynamic_update_slice,
    "argmax": lambda a, at, s: np.argmax(a[0], axis=at.get("axis", -1)),
    "pad_rows": pad_rows,
    "decode_words": decode_words,
    "round_as": round_as,
    "gate_rows": gate_rows,
    "place_rows": place_rows,
}
