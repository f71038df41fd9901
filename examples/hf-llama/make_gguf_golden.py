"""Writes the tiny llama.cpp GGUF files of examples/hf-llama (testdata/gguf-*) and transformers' logits for them.

    python make_gguf_golden.py LLAMA_CPP_DIR [OUT_DIR]      (default OUT_DIR: testdata/ beside this file)
    python make_gguf_golden.py LLAMA_CPP_DIR --checkpoint HF_DIR OUT_DIR

The second form does steps 2 and 3 below for an existing save_pretrained Llama directory (a tokenizer.model of
vocab_size pieces is written for the converter when it has none): OUT_DIR/gguf-<type>/{model.gguf,
golden.safetensors}, which `gradle :examples:hf-llama:verifyGguf -PhfLlama.gguf=OUT_DIR/gguf-q4_0/model.gguf`
checks (its goldens are read beside the file).

LLAMA_CPP_DIR holds llama.cpp's convert_hf_to_gguf.py with its conversion/ package and gguf-py/ (the sdist of
llama-cpp-python 0.3.36 has them under vendor/llama.cpp: `tar xzf llama_cpp_python-0.3.36.tar.gz` and pass
llama_cpp_python-0.3.36/vendor/llama.cpp). Run it with a Python that has torch, transformers, sentencepiece, PyPI
gguf and accelerate (transformers' GGUF loader needs both) and llama-cpp-python (llama.cpp's quantizer and its own
forward pass), e.g. the venv of make_golden.py plus
`pip install gguf sentencepiece accelerate llama-cpp-python==0.3.36`. Rerunning it reproduces the committed files
byte for byte (checked with transformers 5.24, torch 2.15, gguf 0.19, llama-cpp-python 0.3.36).
Like make_golden.py it is the oracle, run by hand, and its outputs are committed (torch is far too big for the
test venv).

What it does:
  1. A seeded random LlamaForCausalLM (SIZES: hidden 64, FFN 128, 2 layers, 4 query / 2 KV heads, head_dim 16,
     vocab 97; every weight row a multiple of 32, so whole Q4_0/Q8_0 blocks) saved with save_pretrained, with a
     sentencepiece tokenizer.model of exactly vocab_size pieces written here (the converter needs one; the model
     has no real vocabulary).
  2. llama.cpp's own converter (convert_hf_to_gguf.py, run unmodified with its own gguf-py) writes the F16 file
     and an F32 one; llama.cpp's quantizer (llama_cpp.llama_model_quantize, pure=True: every 2-D tensor, embedding
     and LM head included, in the one type) makes Q8_0 and Q4_0 from the F32 file. So the files have llama.cpp's
     names (token_embd, blk.N.attn_q, …, output_norm, output), its q/k rows permuted for its interleaved RoPE, and
     llama.* metadata.
  3. Goldens: transformers' forward in float32 on the weights its GGUF loader reads
     (`LlamaForCausalLM.from_pretrained(dir, gguf_file=…)`: PyPI gguf's dequantizer, q/k un-permuted back to HF's
     rotate_half layout), in make_golden.py's shape:
       prefill_a_tokens [7] i32, prefill_a_logits [7, vocab] f32, prefill_b_tokens [1] i32, prefill_b_logits [1, vocab],
       decode_tokens [STEPS] i32, decode_logits [STEPS, vocab] (greedy decode after prompt a, DynamicCache).
     Also llama.cpp's own logits for prompt a (F32 KV cache, every position): llamacpp_prefill_a_logits [7, vocab],
     recorded for comparison only (its matmuls round activations to the weight type's dot-product format, so it is
     not expected within 1e-4); the metadata holds its max abs difference from transformers.
Each output directory testdata/gguf-<type>/ holds model.gguf and golden.safetensors. The seed is the first of
SEED, SEED + 100, … for which every argmax in all three files' goldens leads the runner-up by MARGIN.
"""
import ctypes
import importlib.metadata
import inspect
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

STEPS = 5
MARGIN = 1e-2
SEED = 30
PROMPT_A = [3, 14, 15, 92, 65, 35, 89]
PROMPT_B = [42]
TYPES = ["f16", "q8_0", "q4_0"]
SIZES = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, max_position_embeddings=256, bos_token_id=1,
             eos_token_id=2, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


# --- a sentencepiece model of exactly vocab_size pieces, protobuf written by hand ----------------------------------

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, wire, payload):
    key = _varint(num << 3 | wire)
    if wire == 2:
        return key + _varint(len(payload)) + payload
    return key + payload


def tokenizer_model(vocab_size):
    """sentencepiece's ModelProto: <unk>, <s>, </s>, then filler pieces ▁t<i>; a unigram model."""
    # SentencePiece.Type: NORMAL 1, UNKNOWN 2, CONTROL 3 (no byte pieces: byte_fallback is off).
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"\u2581t{i}", -float(i), 1) for i in range(vocab_size - len(pieces))]
    out = b""
    for text, score, kind in pieces:
        p = _field(1, 2, text.encode()) + _field(2, 5, struct.pack("<f", score)) + _field(3, 0, _varint(kind))
        out += _field(1, 2, p)
    # TrainerSpec: model_type UNIGRAM (3), vocab_size (4), byte_fallback off; unk/bos/eos ids 0/1/2 are its defaults.
    out += _field(2, 2, _field(3, 0, _varint(1)) + _field(4, 0, _varint(vocab_size)))
    # NormalizerSpec: name identity (1), add_dummy_prefix (3), escape_whitespaces (5).
    out += _field(3, 2, _field(1, 2, b"identity") + _field(3, 0, _varint(1)) + _field(5, 0, _varint(1)))
    return out


# --- the checkpoint, the GGUF files -------------------------------------------------------------------------------

def randomize(model, seed):
    """make_golden.py's weights: norms near 1, embeddings randn, matrices with std 1/sqrt(fan-in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = 1 + 0.1 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=g)
            else:
                v = torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5
            p.copy_(v)


def convert(llama_cpp, hf_dir, out, outtype):
    env = dict(os.environ, PYTHONPATH=str(llama_cpp / "gguf-py"))
    r = subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", outtype,
                        "--outfile", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"convert_hf_to_gguf.py --outtype {outtype} failed ({r.returncode}):\n{r.stderr[-3000:]}")


def quantize(src, dst, ftype):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.pure = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {src} -> {dst} returned {rc}")


def gguf_files(llama_cpp, work, seed):
    hf = work / "hf"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**SIZES))
    randomize(model, seed)
    model.save_pretrained(hf, safe_serialization=True)
    (hf / "tokenizer.model").write_bytes(tokenizer_model(SIZES["vocab_size"]))
    (hf / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer", "add_bos_token": False}))
    import llama_cpp as lc
    files = {"f16": work / "f16.gguf", "q8_0": work / "q8_0.gguf", "q4_0": work / "q4_0.gguf"}
    convert(llama_cpp, hf, files["f16"], "f16")
    convert(llama_cpp, hf, work / "f32.gguf", "f32")
    quantize(work / "f32.gguf", files["q8_0"], lc.LLAMA_FTYPE_MOSTLY_Q8_0)
    quantize(work / "f32.gguf", files["q4_0"], lc.LLAMA_FTYPE_MOSTLY_Q4_0)
    return files


# --- the goldens --------------------------------------------------------------------------------------------------

def golden(model):
    """make_golden.py's: transformers in float32, two prefills and STEPS greedy decode steps with its DynamicCache."""
    # transformers' GGUF loader has already dequantized to the dtype asked for (float32); .float() is refused there.
    f32 = model.eval()
    assert all(p.dtype == torch.float32 for p in f32.parameters()), "the GGUF weights did not load as float32"
    out = {}
    with torch.no_grad():
        for tag, prompt in (("a", PROMPT_A), ("b", PROMPT_B)):
            out[f"prefill_{tag}_tokens"] = np.array(prompt, np.int32)
            out[f"prefill_{tag}_logits"] = f32(torch.tensor([prompt])).logits[0].numpy().astype(np.float32)
        kw = "cache" if "cache" in inspect.signature(f32.forward).parameters else "past_key_values"
        cache = DynamicCache(config=f32.config)
        last = f32(torch.tensor([PROMPT_A]), use_cache=True, **{kw: cache}).logits[0, -1]
        fed, rows = [], []
        for _ in range(STEPS):
            tok = int(last.argmax())
            fed.append(tok)
            last = f32(torch.tensor([[tok]]), use_cache=True, **{kw: cache}).logits[0, -1]
            rows.append(last.numpy().astype(np.float32))
        out["decode_tokens"] = np.array(fed, np.int32)
        out["decode_logits"] = np.stack(rows)
        full = f32(torch.tensor([PROMPT_A + fed])).logits[0, len(PROMPT_A):].numpy()
        assert np.abs(full - out["decode_logits"]).max() < 1e-4, "transformers' cache and full forward disagree"
    return out


def llamacpp_logits(path, tokens):
    """llama.cpp's own logits for every position of [tokens] (F32 KV cache, 2 threads), in a process of its own, so
    that a crash inside llama.cpp (see llamacpp_logits_here) is a failed step naming the file, not this script's death."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "logits.npy"
        subprocess.run([sys.executable, __file__, "--llamacpp-logits", str(path), str(out), ",".join(map(str, tokens))],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return np.load(out)


def llamacpp_logits_here(path, tokens):
    """llama.cpp's low-level API: one llama_decode of [tokens] at positions 0.. with logits for every one. Without
    llama.cpp's extra CPU buffer types (use_extra_bufts off: no repacked or AMX weights), which crashed (SIGSEGV in
    llama_decode) on the Q8_0 file of these tiny sizes on an AVX-512/AMX host."""
    import llama_cpp as lc
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    mp.use_extra_bufts = False
    model = lc.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise SystemExit(f"llama.cpp could not load {path}")
    cp = lc.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 64
    cp.n_threads = cp.n_threads_batch = 2
    cp.type_k = cp.type_v = lc.GGML_TYPE_F32
    ctx = lc.llama_init_from_model(model, cp)
    batch = lc.llama_batch_init(len(tokens), 0, 1)
    for i, tok in enumerate(tokens):
        batch.token[i] = tok
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = True
    batch.n_tokens = len(tokens)
    if lc.llama_decode(ctx, batch) != 0:
        raise SystemExit(f"llama_decode failed on {path}")
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    rows = [np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy() for i in range(len(tokens))]
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return np.stack(rows).astype(np.float32)


def margin(logits):
    top = np.sort(logits, axis=-1)[..., -2:]
    return float((top[..., 1] - top[..., 0]).min())


def main(llama_cpp, out_dir):
    for seed in range(SEED, SEED + 100 * 50, 100):
        work = pathlib.Path(tempfile.mkdtemp(prefix="gguf-golden-"))
        try:
            files = gguf_files(llama_cpp, work, seed)
            goldens = {}
            for kind, path in files.items():
                model = LlamaForCausalLM.from_pretrained(str(work), gguf_file=path.name, dtype=torch.float32)
                goldens[kind] = golden(model)
            if min(margin(g[k]) for g in goldens.values()
                   for k in ("prefill_a_logits", "prefill_b_logits", "decode_logits")) < MARGIN:
                continue
            for kind, path in files.items():
                g = goldens[kind]
                ours = llamacpp_logits(path, PROMPT_A)
                g["llamacpp_prefill_a_logits"] = ours
                diff = float(np.abs(ours - g["prefill_a_logits"]).max())
                d = out_dir / f"gguf-{kind}"
                d.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, d / "model.gguf")
                import llama_cpp as lc
                save_file(g, str(d / "golden.safetensors"), metadata={
                    "seed": str(seed), "transformers": __import__("transformers").__version__,
                    "torch": torch.__version__, "gguf": importlib.metadata.version("gguf"),
                    "llama_cpp_python": lc.__version__, "compute": "float32", "weights": kind,
                    "llamacpp_prefill_a_max_abs_diff": f"{diff:.3e}"})
                print(f"gguf-{kind}: seed {seed}, {(d / 'model.gguf').stat().st_size} bytes, decode tokens "
                      f"{g['decode_tokens'].tolist()}, llama.cpp prefill vs transformers max abs {diff:.3e}")
            return
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise SystemExit(f"no seed gave argmax margins of {MARGIN}")


def from_checkpoint(llama_cpp, checkpoint, out_dir):
    """The GGUF files and goldens of an existing save_pretrained Llama directory (no seed search, no margin check):
    out_dir/gguf-<type>/{model.gguf, golden.safetensors}, for `verifyGguf` on a checkpoint of real size."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="gguf-golden-"))
    try:
        hf = work / "hf"
        hf.mkdir()
        for f in ("config.json", "model.safetensors"):
            (hf / f).symlink_to((checkpoint / f).resolve())
        if (checkpoint / "tokenizer.model").is_file():
            (hf / "tokenizer.model").symlink_to((checkpoint / "tokenizer.model").resolve())
        else:
            vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
            (hf / "tokenizer.model").write_bytes(tokenizer_model(vocab))
            (hf / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer", "add_bos_token": False}))
        import llama_cpp as lc
        convert(llama_cpp, hf, work / "f16.gguf", "f16")
        convert(llama_cpp, hf, work / "f32.gguf", "f32")
        quantize(work / "f32.gguf", work / "q8_0.gguf", lc.LLAMA_FTYPE_MOSTLY_Q8_0)
        quantize(work / "f32.gguf", work / "q4_0.gguf", lc.LLAMA_FTYPE_MOSTLY_Q4_0)
        (work / "f32.gguf").unlink()
        for kind in TYPES:
            d = out_dir / f"gguf-{kind}"
            d.mkdir(parents=True, exist_ok=True)
            shutil.move(str(work / f"{kind}.gguf"), d / "model.gguf")
            g = golden(LlamaForCausalLM.from_pretrained(str(d), gguf_file="model.gguf", dtype=torch.float32))
            g["llamacpp_prefill_a_logits"] = llamacpp_logits(d / "model.gguf", PROMPT_A)
            diff = float(np.abs(g["llamacpp_prefill_a_logits"] - g["prefill_a_logits"]).max())
            save_file(g, str(d / "golden.safetensors"), metadata={"checkpoint": str(checkpoint), "compute": "float32",
                      "weights": kind, "llamacpp_prefill_a_max_abs_diff": f"{diff:.3e}"})
            print(f"{d}: {(d / 'model.gguf').stat().st_size} bytes, margin {margin(g['decode_logits']):.2e}, "
                  f"llama.cpp prefill vs transformers max abs {diff:.3e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[2] == "--checkpoint":
        from_checkpoint(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]))
        sys.exit(0)
    if len(sys.argv) == 5 and sys.argv[1] == "--llamacpp-logits":
        np.save(sys.argv[3], llamacpp_logits_here(sys.argv[2], [int(t) for t in sys.argv[4].split(",")]))
        sys.exit(0)
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(pathlib.Path(sys.argv[1]),
         pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else pathlib.Path(__file__).parent / "testdata")
