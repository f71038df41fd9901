"""Writes jvm-transformers' llama.cpp GGUF files of the families other than Llama, and transformers' logits for them.

    python jvm-transformers/make_gguf_golden.py LLAMA_CPP_DIR [OUT_DIR]      (default OUT_DIR: testdata/ beside this file)

LLAMA_CPP_DIR holds llama.cpp's convert_hf_to_gguf.py with its conversion/ package and gguf-py/ (as for
examples/hf-llama/make_gguf_golden.py: the sdist of llama-cpp-python 0.3.36 has them under vendor/llama.cpp). Run it
with the venv of make_golden.py (torch, transformers, sentencepiece, PyPI gguf); llama-cpp-python itself is not
needed: the files are F16, written by the converter alone. Like make_golden.py it is the oracle, run by hand, its
outputs committed.

For each architecture (a seeded random transformers model of hidden 64, 2 layers, 4 query / 2 KV heads, head_dim 16,
FFN 128, vocab 97, saved with save_pretrained beside a sentencepiece tokenizer.model of vocab_size pieces, which the
converter needs):
  - gguf-qwen2-f16: Qwen2ForCausalLM (q/k/v biases), untied;
  - gguf-qwen3-f16: Qwen3ForCausalLM (q_norm/k_norm: llama.cpp's attn_q_norm/attn_k_norm), tied, head_dim 128:
                    transformers' GGUF loader does not read qwen3.attention.key_length and takes Qwen3Config's default
                    head_dim (128), so a file of another head size would not load as the model it is;
  - gguf-phi3-f16:  Phi3ForCausalLM (fused qkv_proj and gate_up_proj: llama.cpp's attn_qkv and ffn_up), untied;
llama.cpp's converter (convert_hf_to_gguf.py, unmodified, --outtype f16) writes testdata/<name>/model.gguf, and the
goldens (make_golden.py's tensors) are transformers' forward in float32 on the weights its GGUF loader reads
(`AutoModelForCausalLM.from_pretrained(dir, gguf_file=…)`). The seed is the first of SEED + 100·k whose every argmax
leads the runner-up by MARGIN.
"""
import json
import pathlib
import shutil
import sys
import tempfile

import torch
from safetensors.numpy import save_file
from transformers import (AutoModelForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples" / "hf-llama"))
from make_gguf_golden import MARGIN, convert, golden, margin, randomize, tokenizer_model  # noqa: E402

SEED = 40
SIZES = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def models():
    """(name, class, config)."""
    yield "gguf-qwen2-f16", Qwen2ForCausalLM, Qwen2Config(**SIZES, tie_word_embeddings=False)
    yield "gguf-qwen3-f16", Qwen3ForCausalLM, Qwen3Config(**SIZES, head_dim=128, tie_word_embeddings=True)
    yield "gguf-phi3-f16", Phi3ForCausalLM, Phi3Config(**SIZES, tie_word_embeddings=False, pad_token_id=0)


def main(llama_cpp, out_dir):
    for name, cls, config in models():
        for seed in range(SEED, SEED + 100 * 50, 100):
            work = pathlib.Path(tempfile.mkdtemp(prefix="gguf-golden-"))
            try:
                hf = work / "hf"
                torch.manual_seed(seed)
                model = cls(config)
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
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "testdata")
