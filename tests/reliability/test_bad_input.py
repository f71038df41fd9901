"""The bad-input matrix (docs/reliability.md): every hostile file gets its typed error from the real `tapeout`
binary, with exit code 1, under `ulimit -v` of 512 MiB and a 10 s time limit — never a crash, a hang or an
allocation sized by the file's claims."""
import json
import struct
import subprocess

import pytest

ULIMIT_KIB = 512 * 1024


def limited(*args):
    cmd = " ".join(f"'{a}'" for a in args)
    return subprocess.run(["bash", "-c", f"ulimit -v {ULIMIT_KIB}; exec {cmd}"], capture_output=True, text=True,
                          timeout=10)


@pytest.fixture(scope="module")
def good_irpa(tapeout, tmp_path_factory):
    d = tmp_path_factory.mktemp("irpa")
    (d / "w.bin").write_bytes(b"\x01" * 48)
    (d / "b.bin").write_bytes(b"\x02" * 12)
    subprocess.run([str(tapeout), "pack", "-o", str(d / "good.irpa"), "weight=" + str(d / "w.bin"),
                    "--splat", "s=f32:1.5:4", "bias=" + str(d / "b.bin")], check=True, capture_output=True)
    return (d / "good.irpa").read_bytes()


def u64(b, at, v):
    b[at:at + 8] = struct.pack("<Q", v)


# entry 0 (DATA "weight") at 96: size@96 type@104 name@116 storage@156; entry 1 (SPLAT "s") at 176: len@236
# pattern_len@260; entry 2 (DATA "bias") at 272: name@292, storage@332.
IRPA_CASES = {
    "bad magic": (lambda b: b.__setitem__(0, ord("X")), "IRPA file magic missing or invalid"),
    "version major 1": (lambda b: b.__setitem__(4, 1), "IRPA version 1.0 not supported"),
    "version minor 1": (lambda b: b.__setitem__(6, 1), "IRPA version 0.1 not supported"),
    "header size 40 (SKaiNET)": (lambda b: b.__setitem__(8, 40), "expected to be exactly 88 bytes but was reported as 40"),
    "chained archive": (lambda b: u64(b, 16, 4096), "chained archives are not supported"),
    "entry count overstated": (lambda b: u64(b, 32, 4), "does not hold exactly the 4 entries"),
    "entry count 2^64-1": (lambda b: u64(b, 32, 2**64 - 1), "the count exceeds what the table can hold"),
    "DATA entry size 60": (lambda b: u64(b, 96, 60), "entry_size 60 is invalid for a DATA entry"),
    "entry type 3 (EXTERNAL)": (lambda b: b.__setitem__(104, 3), "entry type 3 is not supported"),
    "name past metadata": (lambda b: u64(b, 124, 1000), "metadata segment reference out of range"),
    "storage past segment": (lambda b: u64(b, 156, 4096), "storage segment reference out of range"),
    "storage length 2^64-1": (lambda b: u64(b, 164, 2**64 - 1), "storage segment reference out of range"),
    "overlapping entries": (lambda b: u64(b, 332, 16), "overlap in the storage segment"),
    "duplicate keys": (lambda b: (u64(b, 292, 0), u64(b, 300, 6)), "share the key \"weight\""),
    "invalid UTF-8 key": (lambda b: b.__setitem__(348, 0xFF), "key is not valid UTF-8"),  # metadata starts at 348
    "splat pattern length 0": (lambda b: b.__setitem__(260, 0), "splat pattern length 0 is invalid"),
    "splat pattern length 3": (lambda b: b.__setitem__(260, 3), "splat pattern length 3 is invalid"),
    "splat pattern length 17": (lambda b: b.__setitem__(260, 17), "splat pattern length 17 is invalid"),
    "empty file": (lambda b: b.__delitem__(slice(0, None)), "shorter than the 88-byte IRPA header"),
}


@pytest.mark.parametrize("case", sorted(IRPA_CASES))
def test_irpa_bad_input(case, tapeout, good_irpa, tmp_path):
    mutate, needle = IRPA_CASES[case]
    b = bytearray(good_irpa)
    mutate(b)
    f = tmp_path / "bad.irpa"
    f.write_bytes(bytes(b))
    r = limited(tapeout, "verify", f)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr
    assert "panicked" not in r.stderr


def test_irpa_truncated_at_every_segment_boundary(tapeout, good_irpa, tmp_path):
    hdr = good_irpa
    ent, meta, stor = (struct.unpack_from("<QQ", hdr, o) for o in (40, 56, 72))
    cuts = {88, ent[0] + 1, meta[0], meta[0] + 3, stor[0], stor[0] + stor[1] - 1, 87, 0}
    for cut in sorted(cuts):
        f = tmp_path / f"cut{cut}.irpa"
        f.write_bytes(hdr[:cut])
        r = limited(tapeout, "verify", f)
        assert r.returncode == 1 and "not a valid IRPA archive" in r.stderr, (cut, r.stderr)


def gguf(tensor_count=1, kv_count=0, dims=(32,), ggml_type=0, offset=0, data=b"\0" * 128, key_len=None):
    b = b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count)
    name = b"w"
    b += struct.pack("<Q", key_len if key_len is not None else len(name)) + name
    b += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    b += struct.pack("<IQ", ggml_type, offset)
    b += b"\0" * ((-len(b)) % 32)
    return b + data


GGUF_CASES = {
    "absurd tensor count": (gguf(tensor_count=2**63), "tensor count 9223372036854775808 is more than the file can hold"),
    "absurd metadata count": (gguf(kv_count=2**62), "metadata count 4611686018427387904 is more than the file can hold"),
    "absurd dims": (gguf(dims=(2**40, 2**40)), "overflows 64 bits"),
    "five dims": (gguf(dims=(1, 1, 1, 1, 1)), "at most 4"),
    "data past the end": (gguf(dims=(1 << 20,)), "run past the end"),
    "name length 2^64-1": (gguf(key_len=2**64 - 1), "needs 18446744073709551615 bytes, but the file ends at"),
    "unknown type": (gguf(ggml_type=99), "GGML type 99 is not supported"),
}


def safetensors(header: bytes, claimed_len=None, data=b""):
    return struct.pack("<Q", claimed_len if claimed_len is not None else len(header)) + header + data


ST_CASES = {
    "2^40-byte header claim": (safetensors(b"{}", claimed_len=2**40), "header too large"),
    "header past the end": (safetensors(b"{}", claimed_len=4096), "invalid header length"),
    "not JSON": (safetensors(b"{nope"), "invalid JSON in header"),
    "offsets past the data": (safetensors(json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode(), data=b"\0" * 8), "not fully covered"),
    "size disagrees with shape": (safetensors(json.dumps({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}).encode(), data=b"\0" * 16), "invalid shape, data type, or offset"),
    "shape overflows": (safetensors(json.dumps({"a": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}).encode()), "overflow computing buffer size"),
    "two tensors over the same bytes": (safetensors(json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}).encode(), data=b"\0" * 4), "invalid offset for tensor"),
}


@pytest.mark.parametrize("suffix, case", [(".gguf", c) for c in sorted(GGUF_CASES)] +
                         [(".safetensors", c) for c in sorted(ST_CASES)])
def test_importer_bad_input(suffix, case, tapeout, tmp_path):
    data, needle = (GGUF_CASES if suffix == ".gguf" else ST_CASES)[case]
    f = tmp_path / f"bad{suffix}"
    f.write_bytes(data)
    r = limited(tapeout, "convert", f, "-o", tmp_path / "out.irpa")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr
    assert not (tmp_path / "out.irpa").exists()
