"""Attention and rotary embeddings through IREE: grouped-query `sdpa` (fewer k/v heads than q heads, never
materialized), causal with fewer queries than keys (a KV cache), masks, scales; `rope` in the rotate_half and
the interleaved (GPT-J / GGUF) forms with full and half cos/sin tables. Each graph is exported by tapeout,
compiled by iree-compile and run by iree-run-module, at two run-time sizes where a dimension is `?`, and compared
with the numpy interpreter (reference.py) and, for GQA, with an explicit numpy repeat_kv as transformers writes it.
Every case runs on Vulkan too (`--target vulkan`, lavapipe); their inputs and results are all f32."""
import math
import sys

import numpy as np
import pytest

from harness import DEVICES, ROOT, RUN_DEVICES, compile_and_run_iree, gradle_run, n, run, signature, t, write_graph

sys.path.insert(0, str(ROOT / "tests/graphs"))
import reference  # noqa: E402

D = "?"
RNG = np.random.default_rng(27)





def repeat_kv(x, groups):
    """transformers' repeat_kv: [B, KV, T, D] -> [B, KV * groups, T, D], each head repeated in place."""
    b, kv, tt, d = x.shape
    return np.broadcast_to(x[:, :, None], (b, kv, groups, tt, d)).reshape(b, kv * groups, tt, d)


def attention(q, k, v, mask=None, causal=False, scale=None, softcap=None, window=None):
    """transformers' eager attention (float64), k/v repeated to q's heads; Gemma 2's soft-cap on the scaled scores,
    and a sliding window as transformers' `sliding_window_overlay` (key j visible from position p when p - j < W)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, g), repeat_kv(v, g)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        s = s + mask
    if causal:
        S, T = s.shape[-2:]
        for i in range(S):
            for j in range(T):
                p = i + T - S
                if j > p or (window is not None and p - j >= window):
                    s[..., i, j] = -np.inf
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


MASK_2x1x3x7 = np.where(RNG.random((2, 1, 3, 7)) < 0.3, -1e9, 0.0).astype(np.float32)
MASK_3x7 = (0.5 * RNG.standard_normal((3, 7))).astype(np.float32)


def sdpa_case(b, h, kv, s, tt, d, dv, mask=None, **attrs):
    """q [b, h, s, d], k [b, kv, tt, d], v [b, kv, tt, dv]; `b`/`s`/`tt` may be "B"/"S"/"T" for `?` dims."""
    dims = lambda x: D if isinstance(x, str) else x  # noqa: E731
    tensors = [t("q", [dims(b), h, dims(s), d]), t("k", [dims(b), kv, dims(tt), d]), t("v", [dims(b), kv, dims(tt), dv])]
    inputs = ["q", "k", "v"]
    if mask is not None:
        tensors.append(t("mask", list(mask.shape), weight=mask))
        inputs.append("mask")
    tensors.append(t("y", [dims(b), h, dims(s), dv]))
    shapes = {"q": [b, h, s, d], "k": [b, kv, tt, d], "v": [b, kv, tt, dv]}
    return tensors, [n("sdpa", inputs, "y", **attrs)], shapes


# name: (tensors, nodes, {input: shape, "S"/"T" for run-time sizes})
CASES = {
    "gqa_h8_kv2": sdpa_case(1, 8, 2, 4, 6, 16, 16),
    "mha_h4_kv4_mask": sdpa_case(2, 4, 4, 3, 7, 8, 8, mask=MASK_2x1x3x7),
    "gqa_causal_s_below_t": sdpa_case(2, 4, 2, 3, 7, 8, 8, mask=MASK_3x7, causal=True),
    "gqa_odd_sizes_scale": sdpa_case(1, 6, 3, 5, 3, 5, 3, scale=0.3),
    "mqa_kv1_causal": sdpa_case(1, 4, 1, 5, 5, 4, 6, causal=True),
    "gqa_dynamic_prefill_causal": sdpa_case(1, 8, 2, "S", "S", 16, 16, causal=True),
    "gqa_dynamic_decode": sdpa_case(1, 8, 2, 1, "T", 16, 16, causal=True),
    "gqa_dynamic_batch_heads": sdpa_case(2, 6, 2, "S", "T", 4, 4),
    # Gemma 2 / Mistral: windows shorter than the run-time lengths (3 and 9, 6 and 17), a soft-cap.
    "gqa_window_softcap_static": sdpa_case(1, 4, 2, 5, 7, 8, 8, causal=True, window=3, softcap=1.5),
    "gqa_dynamic_prefill_window_softcap": sdpa_case(1, 8, 2, "S", "S", 16, 16, causal=True, window=4, softcap=0.5),
    "gqa_dynamic_decode_window": sdpa_case(1, 8, 2, 1, "T", 16, 16, causal=True, window=5),
    "mha_window_one": sdpa_case(2, 2, 2, "S", "T", 4, 4, causal=True, window=1),
    # HF's run-time batch B as well as run-time lengths (batched prefill).
    "gqa_dynamic_batch_window_softcap": sdpa_case("B", 8, 2, "S", "S", 16, 16, causal=True, window=3, softcap=2.0),
}


def with_mask_input(case, mask_shape):
    """`case` with an additive mask given at run time (a padding mask of a run-time size)."""
    tensors, nodes, shapes = case
    tensors = tensors[:-1] + [t("mask", [D if isinstance(x, str) else x for x in mask_shape])] + tensors[-1:]
    nodes = [dict(nodes[0], inputs=nodes[0]["inputs"] + ["mask"])]
    return tensors, nodes, {**shapes, "mask": mask_shape}


CASES["gqa_dynamic_mask_input_causal"] = with_mask_input(sdpa_case(2, 4, 2, "S", "T", 8, 8, causal=True), [2, 1, "S", "T"])
CASES["gqa_dynamic_decode_mask_input"] = with_mask_input(sdpa_case(1, 8, 2, 1, "T", 16, 16), [1, 1, 1, "T"])


def rope_case(x_shape, table_shape, **attrs):
    dims = lambda sh: [D if isinstance(x, str) else x for x in sh]  # noqa: E731
    tensors = [t("x", dims(x_shape)), t("c", dims(table_shape)), t("s", dims(table_shape)), t("y", dims(x_shape))]
    return tensors, [n("rope", ["x", "c", "s"], "y", **attrs)], {"x": x_shape, "c": table_shape, "s": table_shape}


ROPE_CASES = {
    "rope_half_rotate_full_table": rope_case([2, 3, 5, 8], [5, 8]),
    "rope_half_rotate_half_table": rope_case([2, 3, 5, 8], [2, 1, 5, 4]),
    "rope_interleaved_full_table": rope_case([2, 3, 5, 8], [5, 8], interleaved=True),
    "rope_interleaved_half_table": rope_case([2, 3, 5, 8], [5, 4], interleaved=True),
    "rope_dynamic_full_table": rope_case([1, 2, "S", 8], ["S", 8]),
    "rope_dynamic_half_table": rope_case([1, 2, "S", 8], [1, 1, "S", 4]),
    "rope_dynamic_interleaved_full": rope_case([1, 2, "S", 8], ["S", 8], interleaved=True),
    "rope_dynamic_interleaved_half": rope_case([1, 2, "S", 6], ["S", 3], interleaved=True),
}
CASES.update(ROPE_CASES)


def rope_oracle(x, c, s, interleaved):
    """Rotation of each pair written out element by element (not the reference's vectorised form): pairs
    (i, i + D/2) or (2i, 2i + 1); a full table gives each element its own angle entry, as transformers'
    apply_rotary_pos_emb does with cos = cat(freqs, freqs)."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    c, s = np.broadcast_to(c, x.shape[:-1] + (c.shape[-1],)), np.broadcast_to(s, x.shape[:-1] + (s.shape[-1],))
    y = np.empty_like(x)
    for i in range(d // 2):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        if c.shape[-1] == d:
            y[..., a] = x[..., a] * c[..., a] - x[..., b] * s[..., a]
            y[..., b] = x[..., b] * c[..., b] + x[..., a] * s[..., b]
        else:
            y[..., a] = x[..., a] * c[..., i] - x[..., b] * s[..., i]
            y[..., b] = x[..., b] * c[..., i] + x[..., a] * s[..., i]
    return y


def sizes_of(shapes):
    return {x for sh in shapes.values() for x in sh if isinstance(x, str)}


@pytest.mark.parametrize("device", RUN_DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_and_rope_compile_and_match_numpy(case, device, tapeout, tmp_path):
    device = DEVICES[device]
    tensors, nodes, shapes = CASES[case]
    g = write_graph(tmp_path, case, tensors, nodes, ["y"])
    out = tmp_path / "out"
    run(tapeout, "export", g, "--weights", tmp_path / f"{case}.safetensors", "-o", out, "--inline-below", "0",
        "--target", device.target)
    graph = reference.Graph(g, tmp_path / f"{case}.safetensors")
    order, _ = signature(out / f"{case}.mlir")
    runs = [{"S": 3, "T": 9, "B": 2}, {"S": 6, "T": 17, "B": 3}] if sizes_of(shapes) else [{}]
    for i, size in enumerate(runs):
        feeds = {name: RNG.standard_normal([size.get(x, x) for x in shapes[name]]).astype(np.float32)
                 for name in graph.inputs}
        work = tmp_path / f"run{i}"
        work.mkdir()
        (got,) = compile_and_run_iree(work, out / f"{case}.mlir", [out / f"{case}.irpa"], [feeds[k] for k in order],
                                      device=device)
        (want,) = graph.evaluate(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{case} at {size} on {device.name}")
        attrs = nodes[0]["attrs"]
        if nodes[0]["op"] == "sdpa":
            mask = feeds.get("mask", graph.weights.get("mask"))
            oracle = attention(feeds["q"], feeds["k"], feeds["v"], mask, attrs.get("causal", False), attrs.get("scale"),
                               attrs.get("softcap"), attrs.get("window"))
        else:
            oracle = rope_oracle(feeds["x"], feeds["c"], feeds["s"], attrs.get("interleaved", False))
        np.testing.assert_allclose(got, oracle, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{case} at {size} (oracle) on {device.name}")


def test_grouped_query_attention_does_not_copy_the_kv_heads(tapeout, tmp_path):
    """The GQA module reads k and v as they are: no broadcast or concatenation of the KV heads to H, and the
    products batch over the KV heads."""
    tensors, nodes, _ = CASES["gqa_h8_kv2"]
    g = write_graph(tmp_path, "gqa", tensors, nodes, ["y"])
    run(tapeout, "export", g, "--weights", tmp_path / "gqa.safetensors", "-o", tmp_path / "out")
    text = (tmp_path / "out/gqa.mlir").read_text()
    assert "tensor<1x8x6x16xf32>" not in text, "k/v repeated to 8 heads"
    assert "concatenate" not in text and "broadcast_in_dim %arg" not in text
    assert text.count("batching_dims = [0, 1] x [0, 1]") == 2


BAD = {
    "gqa_heads_do_not_divide": ([t("q", [1, 6, 4, 8]), t("k", [1, 4, 4, 8]), t("v", [1, 4, 4, 8]), t("y", [1, 6, 4, 8])],
                                [n("sdpa", ["q", "k", "v"], "y")], ["sdpa", "6 heads and k/v 4", "multiple"]),
    "sdpa_head_dims_differ": ([t("q", [1, 2, 4, 8]), t("k", [1, 2, 4, 6]), t("v", [1, 2, 4, 8]), t("y", [1, 2, 4, 8])],
                              [n("sdpa", ["q", "k", "v"], "y")], ["sdpa", "different head dimensions"]),
    "sdpa_mask_shape": ([t("q", [1, 2, 4, 8]), t("k", [1, 2, 5, 8]), t("v", [1, 2, 5, 8]), t("m", [4, 4]),
                         t("y", [1, 2, 4, 8])],
                        [n("sdpa", ["q", "k", "v", "m"], "y")], ["sdpa", "the mask [4x4] does not broadcast"]),
    "sdpa_one_sided_dynamic_heads": ([t("q", [1, D, 4, 8]), t("k", [1, 2, 4, 8]), t("v", [1, 2, 4, 8]),
                                      t("y", [1, D, 4, 8])],
                                     [n("sdpa", ["q", "k", "v"], "y")], ["sdpa", "give both a static head count"]),
    "sdpa_window_without_causal": ([t("q", [1, 2, 4, 8]), t("k", [1, 2, 4, 8]), t("v", [1, 2, 4, 8]), t("y", [1, 2, 4, 8])],
                                   [n("sdpa", ["q", "k", "v"], "y", window=2)], ["sdpa", "'window' needs causal = true"]),
    "sdpa_window_zero": ([t("q", [1, 2, 4, 8]), t("k", [1, 2, 4, 8]), t("v", [1, 2, 4, 8]), t("y", [1, 2, 4, 8])],
                         [n("sdpa", ["q", "k", "v"], "y", window=0, causal=True)], ["sdpa", "at least 1", "got 0"]),
    "sdpa_softcap_negative": ([t("q", [1, 2, 4, 8]), t("k", [1, 2, 4, 8]), t("v", [1, 2, 4, 8]), t("y", [1, 2, 4, 8])],
                              [n("sdpa", ["q", "k", "v"], "y", softcap=-1.0)], ["sdpa", "'softcap' must be a finite number above 0"]),
    "and_of_floats": ([t("q", [2, 3]), t("k", [2, 3]), t("y", [2, 3])], [n("and", ["q", "k"], "y")],
                      ["and", "bool (or integer, bitwise) operands, not f32", "compare"]),
    "rope_table_width": ([t("x", [1, 5, 8]), t("c", [5, 3]), t("s", [5, 3]), t("y", [1, 5, 8])],
                         [n("rope", ["x", "c", "s"], "y")], ["rope", "width 3", "must be 8 (full tables) or 4"]),
    "rope_odd_head_dim": ([t("x", [1, 5, 7]), t("c", [5, 7]), t("s", [5, 7]), t("y", [1, 5, 7])],
                          [n("rope", ["x", "c", "s"], "y")], ["rope", "even last dimension, got 7"]),
    "rope_table_rows": ([t("x", [1, 5, 8]), t("c", [4, 4]), t("s", [4, 4]), t("y", [1, 5, 8])],
                        [n("rope", ["x", "c", "s"], "y")], ["rope", "do not broadcast"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_attention_and_rope_shapes_are_refused_and_nothing_is_written(case, tapeout, tmp_path):
    tensors, nodes, needles = BAD[case]
    g = write_graph(tmp_path, case, tensors, nodes, ["y"])
    r = run(tapeout, "export", g, "--weights", tmp_path / f"{case}.safetensors", "-o", tmp_path / "out", check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    for needle in needles:
        assert needle in r.stderr, f"{needle!r} missing from {r.stderr}"
    assert not (tmp_path / "out" / f"{case}.mlir").exists(), "no MLIR is written"


# --- rotary(): cos/sin computed in the graph by the Kotlin library, against transformers' formulas -----------------

ROTARY_CASES = {
    # name: (Kotlin arguments after positions and headDim, head dim, positions shape ("S": run-time), interleaved)
    "rotary_default_static": ("theta = 10000.0", 8, [5], False, None),
    "rotary_default_dynamic": ("theta = 10000.0", 8, ["S"], False, None),
    "rotary_linear_batched_interleaved": ("theta = 10000.0, scaling = RopeScaling.Linear(4.0), interleaved = true", 16,
                                          [2, "S"], True, ("linear", 4.0)),
    "rotary_llama3": ("theta = 500000.0, scaling = RopeScaling.Llama3(8.0, 1.0, 4.0, 64)", 16, ["S"], False,
                      ("llama3", 8.0, 1.0, 4.0, 64)),
}

KOTLIN_CASES = '''
import dev.tapeout.*
import java.io.File

fun case(out: File, name: String, pos: LongArray, posType: DType, heads: Int, d: Int, rotary: ExecutionTape.(Tensor) -> Rotary) {
    val t = ExecutionTape()
    val p = t.input("pos", pos, posType)
    val r = t.rotary(p)
    val s = pos.last()
    val x = t.input("x", if (pos.size == 1) longArrayOf(1, heads.toLong(), s, d.toLong()) else longArrayOf(pos[0], heads.toLong(), s, d.toLong()))
    t.output("cos", r.cos)
    t.output("sin", r.sin)
    t.output("y", t.rope(x, r))
    t.toComputeGraph().export(out, name)
}

fun main(args: Array<String>) {
    val out = File(args[0])
%s
}
'''


def transformers_inv_freq(dim, base, scaling):
    """transformers' modeling_rope_utils, transcribed to numpy float32 (its torch tensors are float32)."""
    f = np.float32
    inv = f(1.0) / (f(base) ** (np.arange(0, dim, 2).astype(np.float32) / f(dim)))
    if scaling is None:
        return inv
    if scaling[0] == "linear":
        return inv / f(scaling[1])
    _, factor, low, high, old = scaling
    low_wavelen, high_wavelen = f(old / low), f(old / high)
    wavelen = f(2 * math.pi) / inv
    inv_llama = np.where(wavelen > low_wavelen, inv / f(factor), inv)
    smooth = (f(old) / wavelen - f(low)) / f(high - low)
    smoothed = (f(1) - smooth) * inv_llama / f(factor) + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_llama).astype(np.float32)


def transformers_cos_sin(positions, inv, interleaved):
    """The rotary embedding's forward: freqs = positions × inv_freq (float32), emb = cat(freqs, freqs) (GPT-J:
    each angle twice in a row), cos/sin of emb; [B, S] positions give [B, 1, S, D] (apply_rotary_pos_emb's unsqueeze)."""
    freqs = positions.astype(np.float32)[..., None] * inv
    emb = np.repeat(freqs, 2, axis=-1) if interleaved else np.concatenate([freqs, freqs], axis=-1)
    emb = emb.astype(np.float64)
    if positions.ndim == 2:
        emb = emb[:, None]
    return np.cos(emb), np.sin(emb)


def apply_rotary(x, cos, sin, interleaved):
    """transformers' apply_rotary_pos_emb (rotate_half) or the GPT-J rotate_every_two form."""
    x = x.astype(np.float64)
    if interleaved:
        rot = np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
    else:
        h = x.shape[-1] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rot * sin


@pytest.fixture(scope="module")
def rotary_modules(tmp_path_factory):
    """The ROTARY_CASES exported by the Kotlin library: its jar built by Gradle (as tests/gradle does), a small
    program compiled by the repository's kotlinc against it, run on the JVM with the JNI library."""
    import shutil
    gradle = shutil.which("gradle")
    if gradle is None:
        pytest.skip("gradle is installed by scripts/setup")
    gradle_run([gradle, "-c", "settings-gradle4.gradle", "--offline", "--no-daemon", "--quiet", ":jvm:jar"],
               cwd=ROOT, check=True, capture_output=True)
    kotlin = ROOT / "jvm/tools/node_modules/kotlin-compiler"
    classes = ROOT / "jvm/build/kotlinc/main"
    work = tmp_path_factory.mktemp("rotary")
    calls = []
    for name, (kwargs, d, pos, _, _) in ROTARY_CASES.items():
        dims = ", ".join("DYNAMIC" if x == "S" else f"{x}L" for x in pos)
        dtype = "DType.I64" if len(pos) == 2 else "DType.I32"
        calls.append(f'    case(out, "{name}", longArrayOf({dims}), {dtype}, 3, {d}) {{ p -> rotary(p, {d}, {kwargs}) }}')
    (work / "Cases.kt").write_text(KOTLIN_CASES % "\n".join(calls))
    cp = f"{classes}:{kotlin / 'lib/kotlin-stdlib.jar'}"
    run(kotlin / "bin/kotlinc", "-cp", cp, work / "Cases.kt", "-d", work / "classes")
    run("java", "-cp", f"{work / 'classes'}:{cp}", f"-Dtapeout.native.path={ROOT / 'target/release/libtapeout_jni.so'}",
        "CasesKt", work / "out")
    return work / "out"


@pytest.mark.parametrize("case", sorted(ROTARY_CASES))
def test_rotary_tables_computed_in_the_graph_match_transformers(case, rotary_modules, tmp_path):
    _, d, pos, interleaved, scaling = ROTARY_CASES[case]
    base = 500000.0 if scaling and scaling[0] == "llama3" else 10000.0
    inv = transformers_inv_freq(d, base, scaling)
    mlir = rotary_modules / f"{case}.mlir"
    text = mlir.read_text()
    assert ("?x" in text or "x?" in text or "tensor<?" in text) == ("S" in pos), "positions of a run-time length"
    sizes = [3, 7] if "S" in pos else [5]
    for i, s in enumerate(sizes):
        shape = [s if x == "S" else x for x in pos]
        # Positions as a KV cache sees them: a run of S starting at an offset (up to beyond the llama3 window).
        start = 0 if i == 0 else 1000
        positions = (start + np.arange(s))[None].repeat(shape[0], 0) + np.arange(shape[0])[:, None] * 5 \
            if len(shape) == 2 else start + np.arange(s)
        positions = positions.astype(np.int64 if len(shape) == 2 else np.int32)
        x = RNG.standard_normal((positions.shape[0] if len(shape) == 2 else 1, 3, s, d)).astype(np.float32)
        work = tmp_path / f"run{i}"
        work.mkdir()
        order, _ = signature(mlir)
        feeds = {"pos": positions, "x": x}
        cos, sin, y = compile_and_run_iree(work, mlir, [rotary_modules / f"{case}.irpa"], [feeds[k] for k in order],
                                           outputs=3)
        want_cos, want_sin = transformers_cos_sin(positions, inv, interleaved)
        # f32 angles up to ~1000 rad: cos/sin agree to a few f32 ulps of the angle.
        tol = 1e-5 if start == 0 else 2e-4
        np.testing.assert_allclose(cos, want_cos, atol=tol, err_msg=f"{case} cos at S={s}")
        np.testing.assert_allclose(sin, want_sin, atol=tol, err_msg=f"{case} sin at S={s}")
        np.testing.assert_allclose(y, apply_rotary(x, want_cos, want_sin, interleaved), atol=4 * tol,
                                   err_msg=f"{case} rope at S={s}")
