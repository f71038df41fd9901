"""`tapeout convert` and GGUF/safetensors weights, judged by the libraries that wrote the files
(PyPI gguf and safetensors) and by IREE's own `iree-convert-parameters` on the same inputs."""
import json

import numpy as np
import pytest
import iree.runtime as rt
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

from harness import compile_and_run_iree, iree_tool, run, transposes_of

RNG = np.random.default_rng(7)


def bf16_bits(a):
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_gguf(path, with_bf16=True):
    rng = np.random.default_rng(7)
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 2)
    w.add_string("general.name", "tiny")
    w.add_tensor("token_embd.weight", rng.standard_normal((8, 64)).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(64).astype(np.float16))
    if with_bf16:
        w.add_tensor("blk.0.ffn_up.weight", bf16_bits(rng.standard_normal((4, 64))), raw_dtype=T.BF16)
    w.add_tensor("blk.0.attn_q.weight", quantize(rng.standard_normal((16, 64)).astype(np.float32), T.Q8_0),
                 raw_dtype=T.Q8_0)
    w.add_tensor("blk.1.attn_q.weight", quantize(rng.standard_normal((16, 64)).astype(np.float32), T.Q4_0),
                 raw_dtype=T.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "model.gguf")


def entries(path):
    idx = rt.ParameterIndex()
    idx.load(str(path))
    return {k: (bytes(e.file_view), e.metadata) for k, e in idx.items()}


def test_gguf_convert_keeps_bytes_as_stored(tapeout, gguf_file, tmp_path):
    out = tmp_path / "out.irpa"
    run(tapeout, "convert", gguf_file, "-o", out)
    reader = GGUFReader(str(gguf_file))
    got = entries(out)
    assert list(got) == [t.name for t in reader.tensors], "file order, names as keys"
    for t in reader.tensors:
        assert got[t.name][0] == t.data.tobytes(), t.name
    md = json.loads(got["blk.0.attn_q.weight"][1].decode().removeprefix("TENSORv0:"))
    assert md == {"dtype": "f32", "shape": [16, 64], "encoding": "Q8_0"}


def test_gguf_dequantize_matches_gguf_bit_for_bit(tapeout, gguf_file, tmp_path):
    out = tmp_path / "deq.irpa"
    run(tapeout, "convert", gguf_file, "-o", out, "--dequantize")
    reader = GGUFReader(str(gguf_file))
    got = entries(out)
    for t in reader.tensors:
        want = dequantize(t.data, t.tensor_type).astype("<f4") if t.tensor_type != T.F32 else t.data
        ours = np.frombuffer(got[t.name][0], dtype="<f4")
        assert ours.size == int(np.prod(t.shape)), t.name
        assert np.array_equal(ours.view("<u4"), np.ascontiguousarray(want).reshape(-1).view("<u4")), t.name
    md = json.loads(got["blk.1.attn_q.weight"][1].decode().removeprefix("TENSORv0:"))
    assert md == {"dtype": "f32", "shape": [16, 64], "from": "Q4_0"}


def test_keep_dtype_include_exclude_rename(tapeout, gguf_file, tmp_path):
    out = tmp_path / "sel.irpa"
    run(tapeout, "convert", gguf_file, "-o", out, "--dequantize", "--keep-dtype", "--include", "blk.*",
        "--exclude", "*.attn_q.weight", "--rename", "blk.0.ffn_up.weight=model.layers.0.mlp.up_proj.weight")
    got = entries(out)
    assert list(got) == ["blk.0.attn_norm.weight", "model.layers.0.mlp.up_proj.weight"]
    assert len(got["blk.0.attn_norm.weight"][0]) == 64 * 2, "f16 kept as stored"
    r = run(tapeout, "convert", gguf_file, "-o", out, "--rename", "nope=x", check=False)
    assert r.returncode == 1 and "--rename names \"nope\"" in r.stderr, r.stderr


def test_same_tensor_bytes_as_iree_convert_parameters(tapeout, tmp_path):
    # IREE 3.13's GGUF parser does not know BF16 (type 30), so its copy of the file has none.
    gguf_file = write_gguf(tmp_path / "no_bf16.gguf", with_bf16=False)
    ours, theirs = tmp_path / "ours.irpa", tmp_path / "theirs.irpa"
    run(tapeout, "convert", gguf_file, "-o", ours)
    run(iree_tool("iree-convert-parameters"), f"--parameters={gguf_file}", f"--output={theirs}")
    a, b = entries(ours), entries(theirs)
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k][0] == b[k][0], k


def test_bf16_gguf_that_iree_refuses_converts_with_tapeout(tapeout, gguf_file, tmp_path):
    r = run(iree_tool("iree-convert-parameters"), f"--parameters={gguf_file}", f"--output={tmp_path / 'x.irpa'}",
            check=False)
    assert r.returncode != 0 and "GGML tensor type 30 not supported" in r.stderr
    run(tapeout, "convert", gguf_file, "-o", tmp_path / "ours.irpa")
    assert len(entries(tmp_path / "ours.irpa")) == 5


def test_safetensors_convert_is_byte_identical(tapeout, tmp_path):
    from safetensors.numpy import save_file
    tensors = {
        "w.f32": RNG.standard_normal((3, 5)).astype(np.float32),
        "w.f16": RNG.standard_normal(7).astype(np.float16),
        "ids.i64": np.arange(6, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "q.i8": np.array([-3, 4], dtype=np.int8),
        "t.i32": np.array([1, -2, 3], dtype=np.int32),
        "u.u8": np.array([250, 1], dtype=np.uint8),
    }
    st = tmp_path / "w.safetensors"
    save_file(tensors, str(st))
    ours, theirs = tmp_path / "ours.irpa", tmp_path / "theirs.irpa"
    run(tapeout, "convert", st, "-o", ours)
    run(iree_tool("iree-convert-parameters"), f"--parameters={st}", f"--output={theirs}")
    a, b = entries(ours), entries(theirs)
    assert sorted(a) == sorted(tensors)
    for k, arr in tensors.items():
        assert a[k][0] == arr.tobytes(), k
        assert a[k][0] == b[k][0], k
    run(tapeout, "convert", st, "-o", ours, "--dequantize")
    assert np.array_equal(np.frombuffer(entries(ours)["w.f16"][0], "<f4"), tensors["w.f16"].astype(np.float32))


def test_a_graph_takes_packed_weights_from_gguf_and_runs_in_iree(tapeout, gguf_file, tmp_path):
    graph = {
        "format": "tapeout-graph/1", "name": "gguf_proj",
        "tensors": [
            {"name": "x", "shape": [2, 64], "dtype": "f32"},
            {"name": "wq", "shape": [16, 64], "dtype": "f32", "path": "blk.0.attn_q.weight",
             "data": {"tensor": "blk.0.attn_q.weight"}},
            {"name": "norm", "shape": [64], "dtype": "f16", "data": {"tensor": "blk.0.attn_norm.weight"}},
            {"name": "wt", "shape": [64, 16], "dtype": "f32"},
            {"name": "xn", "shape": [2, 64], "dtype": "f32"},
            {"name": "y", "shape": [2, 16], "dtype": "f32"},
        ],
        "nodes": [
            {"op": "mul", "inputs": ["x", "norm"], "outputs": ["xn"]},
            {"op": "transpose", "inputs": ["wq"], "outputs": ["wt"]},
            {"op": "matmul", "inputs": ["xn", "wt"], "outputs": ["y"]},
        ],
        "outputs": ["y"],
    }
    (tmp_path / "g.json").write_text(json.dumps(graph))
    r = run(tapeout, "export", tmp_path / "g.json", "--weights", gguf_file, "-o", tmp_path / "out", check=False)
    assert r.returncode == 1 and "Q8_0" in r.stderr and "pass --packed dequantize" in r.stderr, r.stderr
    run(tapeout, "export", tmp_path / "g.json", "--weights", gguf_file, "-o", tmp_path / "out", "--packed",
        "dequantize", "--inline-below", "0")
    # Dequantized and written in row bands of 8 ([16 / 8, 64, 8]): the module contracts it as stored (one linalg.generic).
    text = (tmp_path / "out/gguf_proj.mlir").read_text()
    assert not transposes_of(text, "blk.0.attn_q.weight") and "tensor<2x64x8xf32>" in text, text
    md = json.loads(entries(tmp_path / "out/gguf_proj.irpa")["blk.0.attn_q.weight"][1].decode()[len("TENSORv0:"):])
    assert (md["from"], md["transposed_from"], md["shape"]) == ("Q8_0", [16, 64], [2, 64, 8]), md
    run(iree_tool("iree-compile"), tmp_path / "out/gguf_proj.mlir", "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic",
        "-o", tmp_path / "m.vmfb")
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run(iree_tool("iree-run-module"), f"--module={tmp_path / 'm.vmfb'}", "--function=main",
        f"--parameters=model={tmp_path / 'out/gguf_proj.irpa'}", f"--input=@{tmp_path / 'x.npy'}",
        f"--output=@{tmp_path / 'y.npy'}")
    reader = GGUFReader(str(gguf_file))
    t = {t.name: t for t in reader.tensors}
    wq = dequantize(t["blk.0.attn_q.weight"].data, T.Q8_0).astype(np.float64).reshape(16, 64)
    norm = t["blk.0.attn_norm.weight"].data.astype(np.float64)
    want = ((x * norm) @ wq.T).astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-6)


def _aligned_safetensors(path, tensors):
    """A safetensors file whose data section starts 64-aligned (the header padded with a metadata string), with
    each tensor's absolute offset in the file."""
    import struct
    from safetensors.numpy import save_file
    for pad in range(64):
        save_file(tensors, str(path), metadata={"pad": "x" * pad})
        raw = path.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        if (8 + n) % 64 == 0:
            header = json.loads(raw[8:8 + n])
            return {k: 8 + n + v["data_offsets"][0] for k, v in header.items() if k != "__metadata__"}
    raise AssertionError("no padding gives a 64-aligned data section")


def _iree_starts(path):
    out = run(iree_tool("iree-dump-parameters"), f"--parameters=model={path}").stdout
    cells = [[c.strip() for c in line.split("|")] for line in out.splitlines()]
    return {c[3].strip("`"): int(c[0]) for c in cells if len(c) == 4 and c[3].startswith("`")}


def test_tensors_copied_from_a_checkpoint_keep_their_offset_modulo_64_kib(tapeout, tmp_path):
    """convert and export copy a tensor kept as stored file to file (the kernel's copy_file_range); one of 8 MiB
    or more starts at its offset in the checkpoint modulo 64 KiB, where that copy is fastest. IREE reads the bytes
    and runs the module on them."""
    w = RNG.standard_normal((1024, 2304)).astype(np.float32)  # 9 MiB, [in, out]: x @ w as stored
    b = RNG.standard_normal(2304).astype(np.float32)
    st = tmp_path / "w.safetensors"
    offsets = _aligned_safetensors(st, {"b": b, "w": w})
    phase = 64 << 10
    assert offsets["w"] % 64 == 0 and offsets["w"] % phase != 0

    run(tapeout, "convert", st, "-o", tmp_path / "c.irpa")
    run(tapeout, "convert", st, "-o", tmp_path / "iree.irpa", "--iree-placement")
    starts, iree = _iree_starts(tmp_path / "c.irpa"), _iree_starts(tmp_path / "iree.irpa")
    assert starts["w"] % phase == offsets["w"] % phase, (starts, offsets)
    assert iree["w"] - iree["b"] == -(-b.nbytes // 64) * 64, "--iree-placement: the next 64-byte boundary"
    assert iree["w"] % phase != offsets["w"] % phase, "the two placements differ for this file"
    assert entries(tmp_path / "c.irpa")["w"][0] == w.tobytes()

    graph = {
        "format": "tapeout-graph/1", "name": "proj",
        "tensors": [
            {"name": "x", "shape": [2, 1024], "dtype": "f32"},
            {"name": "w", "shape": [1024, 2304], "dtype": "f32", "data": {"tensor": "w"}},
            {"name": "b", "shape": [2304], "dtype": "f32", "data": {"tensor": "b"}},
            {"name": "xw", "shape": [2, 2304], "dtype": "f32"},
            {"name": "y", "shape": [2, 2304], "dtype": "f32"},
        ],
        "nodes": [
            {"op": "matmul", "inputs": ["x", "w"], "outputs": ["xw"]},
            {"op": "add", "inputs": ["xw", "b"], "outputs": ["y"]},
        ],
        "outputs": ["y"],
    }
    (tmp_path / "g.json").write_text(json.dumps(graph))
    run(tapeout, "export", tmp_path / "g.json", "--weights", st, "-o", tmp_path / "out", "--inline-below", "0")
    starts = _iree_starts(tmp_path / "out/proj.irpa")
    assert starts["w"] % phase == offsets["w"] % phase, (starts, offsets)
    x = RNG.standard_normal((2, 1024)).astype(np.float32)
    (y,) = compile_and_run_iree(tmp_path, tmp_path / "out/proj.mlir", [tmp_path / "out/proj.irpa"], [x])
    want = (x.astype(np.float64) @ w + b).astype(np.float32)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
