"""Writes the tiny Hugging Face checkpoints of examples/hf-llama and transformers' own logits for them.

    python make_golden.py [OUT_DIR]        (default: testdata/ beside this file)

Run it in a venv of its own, outside the repository, that has torch and transformers:

    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors numpy
    /tmp/hfvenv/bin/python examples/hf-llama/make_golden.py

Why the outputs are committed rather than made by the tests: torch from PyPI is ~3 GB of CUDA wheels (the
CPU-only build is on another index, which this project's machines do not reach), far too much for the test venv
(.venv, scripts/setup). So this script is the oracle, run by hand when the models or the transformers version
change, and its outputs are checked in: for each model, testdata/<model>/
  - config.json, model.safetensors: exactly what `save_pretrained` writes (the Kotlin model reads these),
  - golden.safetensors: transformers' forward pass on them (float32 compute):
      prefill_a_tokens [7] i32, prefill_a_logits [7, vocab] f32   (prefill of a 7-token prompt, every position)
      prefill_b_tokens [1] i32, prefill_b_logits [1, vocab] f32   (prefill of a 1-token prompt)
      decode_tokens [STEPS] i32, decode_logits [STEPS, vocab] f32 (greedy decode after prompt a with transformers'
          DynamicCache: step i feeds decode_tokens[i], the argmax of the previous logits, and gets decode_logits[i])
Rerunning it reproduces the same tensors and values (seeded, CPU); golden.safetensors' header may list its
metadata in another order, so compare values (safetensors.numpy.load_file), not bytes. Each model's tensors are a
few hundred KB. The weights are seeded random values (not transformers' init, whose
0.02 std makes nearly flat logits): every argmax in the golden file leads the runner-up by at least MARGIN, so an
implementation within 1e-4 of these logits must pick the same tokens (checked here; a seed that fails is refused).

Models (8 query heads, 2 KV heads, head_dim 8, vocab 97, hidden 64, 2 layers, intermediate 176):
  - llama-f32:  LlamaForCausalLM, float32, default RoPE (theta 10000), untied head.
  - llama-bf16: LlamaForCausalLM, bfloat16 weights, Llama-3 RoPE scaling (factor 8, low/high freq factors 1/4,
                original context 64, so with head_dim 8 the four frequencies fall in all three bands: kept, smoothed,
                divided). Goldens: transformers run in float32 on the bf16 weights (model.float()), so the check
                compares f32 compute on identical weight values.
  - qwen2-f32:  Qwen2ForCausalLM, float32, q/k/v biases, tied LM head (no lm_head.weight stored), theta 1e6.
  - mistral-bf16: MistralForCausalLM, bfloat16 weights, no sliding window (Llama's layers under Mistral's names
                and config), theta 1e6; goldens in float32 as for llama-bf16.
"""
import inspect
import json
import pathlib
import sys

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import (DynamicCache, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

STEPS = 5
MARGIN = 1e-2
PROMPT_A = [3, 14, 15, 92, 65, 35, 89]
PROMPT_B = [42]

COMMON = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
              intermediate_size=176, rms_norm_eps=1e-6, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)


def models():
    yield "llama-f32", 1, torch.float32, LlamaForCausalLM, LlamaConfig(
        **COMMON, head_dim=8, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    yield "llama-bf16", 2, torch.bfloat16, LlamaForCausalLM, LlamaConfig(
        **COMMON, head_dim=8, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    yield "qwen2-f32", 3, torch.float32, Qwen2ForCausalLM, Qwen2Config(
        **COMMON, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    yield "mistral-bf16", 4, torch.bfloat16, MistralForCausalLM, MistralConfig(
        **COMMON, head_dim=8, tie_word_embeddings=False, sliding_window=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def randomize(model, seed):
    """Seeded weights with some spread: norms near 1, biases small, matrices with std 1/sqrt(fan-in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = 1 + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.2 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=g)
            else:
                v = torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5
            p.copy_(v.to(p.dtype))


def margin(logits):
    top = np.sort(logits, axis=-1)[..., -2:]
    return float((top[..., 1] - top[..., 0]).min())


def golden(model):
    """transformers' forward in float32: two prefills and STEPS greedy decode steps with its DynamicCache."""
    f32 = model.float().eval()
    out = {}
    with torch.no_grad():
        for tag, prompt in (("a", PROMPT_A), ("b", PROMPT_B)):
            ids = torch.tensor([prompt])
            out[f"prefill_{tag}_tokens"] = np.array(prompt, np.int32)
            out[f"prefill_{tag}_logits"] = f32(ids).logits[0].numpy().astype(np.float32)
        # transformers 5.x names the cache argument `cache` (4.x: `past_key_values`).
        kw = "cache" if "cache" in inspect.signature(f32.forward).parameters else "past_key_values"
        cache = DynamicCache(config=f32.config)
        r = f32(torch.tensor([PROMPT_A]), use_cache=True, **{kw: cache})
        last = r.logits[0, -1]
        fed, rows = [], []
        for _ in range(STEPS):
            tok = int(last.argmax())
            fed.append(tok)
            r = f32(torch.tensor([[tok]]), use_cache=True, **{kw: cache})
            last = r.logits[0, -1]
            rows.append(last.numpy().astype(np.float32))
        out["decode_tokens"] = np.array(fed, np.int32)
        out["decode_logits"] = np.stack(rows)
        # The cache path against a plain forward of the whole sequence: transformers agrees with itself.
        full = f32(torch.tensor([PROMPT_A + fed])).logits[0, len(PROMPT_A):].numpy()
        assert np.abs(full - out["decode_logits"]).max() < 1e-4, "transformers' cache and full forward disagree"
    return out


def main(out_dir):
    for name, base, dtype, cls, config in models():
        d = out_dir / name
        d.mkdir(parents=True, exist_ok=True)
        # The first seed base, base + 100, ... whose every argmax leads by MARGIN (deterministic).
        for seed in range(base, base + 100 * 50, 100):
            torch.manual_seed(seed)
            model = cls(config).to(dtype)
            randomize(model, seed)
            model.save_pretrained(d, safe_serialization=True)
            (d / "generation_config.json").unlink(missing_ok=True)
            # Reload what was saved, as a user would, so the goldens are of the committed bytes.
            g = golden(cls.from_pretrained(d, dtype=dtype))
            if min(margin(g[k]) for k in ("prefill_a_logits", "prefill_b_logits", "decode_logits")) >= MARGIN:
                break
        else:
            raise SystemExit(f"{name}: no seed gave argmax margins of {MARGIN}")
        save_file(g, str(d / "golden.safetensors"), metadata={"seed": str(seed),
            "transformers": __import__("transformers").__version__, "torch": torch.__version__,
            "compute": "float32", "weights": str(dtype).removeprefix("torch.")})
        size = (d / "model.safetensors").stat().st_size
        cfg = json.loads((d / "config.json").read_text())
        print(f"{name}: {size} bytes, dtype {cfg.get('dtype')}, tied {cfg.get('tie_word_embeddings')}, "
              f"decode tokens {g['decode_tokens'].tolist()}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "testdata")
