"""Writes jvm-transformers' llama.cpp GGUF files of the families other than Llama, and transformers' logits for them.

    python jvm-transformers/make_gguf_golden.py LLAMA_CPP_DIR [OUT_DIR [NAME ...]]   (OUT_DIR: testdata/ beside this file;
                                                                                 NAMEs: those models only)

LLAMA_CPP_DIR holds llama.cpp's convert_hf_to_gguf.py with its conversion/ package and gguf-py/ (as for
examples/hf-llama/make_gguf_golden.py: the sdist of llama-cpp-python 0.3.36 has them under vendor/llama.cpp). Run it
with the venv of make_golden.py (torch, transformers, sentencepiece, PyPI gguf); llama-cpp-python itself is not
needed: the files are F16, written by the converter alone (transformers' GGUF loader needs accelerate). Like make_golden.py it is the oracle, run by hand, its
outputs committed.

For each architecture (a seeded random transformers model of hidden 64, 2 layers, 4 query / 2 KV heads, head_dim 16,
FFN 128, vocab 97, saved with save_pretrained beside a sentencepiece tokenizer.model of vocab_size pieces, which the
converter needs):
  - gguf-qwen2-f16: Qwen2ForCausalLM (q/k/v biases), untied;
  - gguf-qwen3-f16: Qwen3ForCausalLM (q_norm/k_norm: llama.cpp's attn_q_norm/attn_k_norm), tied, head_dim 128:
                    transformers' GGUF loader does not read qwen3.attention.key_length and takes Qwen3Config's default
                    head_dim (128), so a file of another head size would not load as the model it is;
  - gguf-phi3-f16:  Phi3ForCausalLM (fused qkv_proj and gate_up_proj: llama.cpp's attn_qkv and ffn_up), untied;
  - gguf-gemma2-f16, gguf-gemma3-f16: Gemma2ForCausalLM / Gemma3ForCausalLM (6 layers), 2 query / 1 KV heads of
                    head_dim 256, sliding_window 4, tied, within what transformers' GGUF loader and llama.cpp agree
                    on (see models());
llama.cpp's converter (convert_hf_to_gguf.py, unmodified, --outtype f16) writes testdata/<name>/model.gguf, and the
goldens (make_golden.py's tensors) are transformers' forward in float32 on the weights its GGUF loader reads
(`AutoModelForCausalLM.from_pretrained(dir, gguf_file=…)`), checked to be those of the model that was written (its
matrices rounded to f16): a loader that mis-read the file fails the script instead of making wrong goldens. The seed is the first of SEED + 100·k whose every argmax
leads the runner-up by MARGIN.
"""
import json
import pathlib
import shutil
import sys
import tempfile

import torch
from safetensors.numpy import save_file
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples" / "hf-llama"))
from make_gguf_golden import MARGIN, convert, golden, margin, randomize, tokenizer_model  # noqa: E402

def _families():
    """This directory's make_golden.py (its randomize: Gemma's norms as offsets from 1), loaded under another name:
    it imports examples/hf-llama's make_golden.py by that name itself."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("families_make_golden", HERE / "make_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

SEED = 40
SIZES = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def models():
    """(name, class, config)."""
    yield "gguf-qwen2-f16", Qwen2ForCausalLM, Qwen2Config(**SIZES, tie_word_embeddings=False)
    yield "gguf-qwen3-f16", Qwen3ForCausalLM, Qwen3Config(**SIZES, head_dim=128, tie_word_embeddings=True)
    yield "gguf-phi3-f16", Phi3ForCausalLM, Phi3Config(**SIZES, tie_word_embeddings=False, pad_token_id=0)
    # Gemma: what transformers' GGUF loader and llama.cpp agree on. The loader reads neither the softcaps nor
    # query_pre_attn_scalar (Gemma2Config's defaults: 50, 30, 256) and llama.cpp scales by head_dim, so head_dim is
    # 256 and the softcaps are the defaults; the converter drops lm_head (tied); llama.cpp fixes Gemma 3's layer
    # pattern (every sixth layer full) and its sliding layers' RoPE base (10000), so 6 layers, no RoPE scaling.
    gemma = dict(SIZES, num_attention_heads=2, num_key_value_heads=1, head_dim=256, pad_token_id=0, sliding_window=4,
                 tie_word_embeddings=True)
    yield "gguf-gemma2-f16", Gemma2ForCausalLM, Gemma2Config(**gemma)
    yield "gguf-gemma3-f16", Gemma3ForCausalLM, Gemma3TextConfig(**dict(gemma, num_hidden_layers=6, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}))


def main(llama_cpp, out_dir):
    only = set(sys.argv[3:])
    for name, cls, config in models():
        if only and name not in only:
            continue
        for seed in range(SEED, SEED + 100 * 50, 100):
            work = pathlib.Path(tempfile.mkdtemp(prefix="gguf-golden-"))
            try:
                hf = work / "hf"
                torch.manual_seed(seed)
                model = cls(config)
                if config.model_type.startswith("gemma"):
                    _families().randomize(model, seed, gemma=True)
                else:
                    randomize(model, seed)
                with torch.no_grad():
                    for n, p in model.named_parameters():
                        if n.endswith(".bias"):
                            p.copy_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 1)))
                model.save_pretrained(hf, safe_serialization=True)
                (hf / "tokenizer.model").write_bytes(tokenizer_model(SIZES["vocab_size"]))
                (hf / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer", "add_bos_token": False}))
                gguf = work / "model.gguf"
                convert(llama_cpp, hf, gguf, "f16")
                loaded = AutoModelForCausalLM.from_pretrained(str(work), gguf_file=gguf.name, dtype=torch.float32)
                g = golden(loaded)
                # The loader must read back the model that was written (its matrices rounded to f16 as the file holds
                # them; vectors stay f32): otherwise the goldens would be of whatever the loader mis-read.
                with torch.no_grad():
                    for p in model.parameters():
                        if p.dim() >= 2:
                            p.copy_(p.half().float())
                written = golden(model)
                diff = max(float(abs(written[k] - g[k]).max()) for k in ("prefill_a_logits", "prefill_b_logits"))
                if diff > 1e-4:
                    raise SystemExit(f"{name}: transformers' GGUF loader reads another model than was written "
                                     f"(prefill logits differ by {diff:.2e}); config read: {loaded.config}")
                if min(margin(g[k]) for k in ("prefill_a_logits", "prefill_b_logits", "decode_logits")) < MARGIN:
                    continue
                d = out_dir / name
                d.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(gguf, d / "model.gguf")
                save_file(g, str(d / "golden.safetensors"), metadata={
                    "seed": str(seed), "transformers": __import__("transformers").__version__,
                    "torch": torch.__version__, "compute": "float32", "weights": "f16",
                    "loaded_as": type(loaded).__name__})
                print(f"{name}: seed {seed}, {(d / 'model.gguf').stat().st_size} bytes, loaded as {type(loaded).__name__}, "
                      f"decode tokens {g['decode_tokens'].tolist()}")
                break
            finally:
                shutil.rmtree(work, ignore_errors=True)
        else:
            raise SystemExit(f"{name}: no seed gave argmax margins of {MARGIN}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "testdata")
