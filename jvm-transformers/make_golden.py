"""Writes the tiny checkpoints of jvm-transformers' parity check and transformers' own logits for them.

    python jvm-transformers/make_golden.py [OUT_DIR]        (default: testdata/ beside this file)

Run by hand in a venv of its own that has torch and transformers (not the project's .venv: see
examples/hf-llama/make_golden.py, whose golden() and margin() this script reuses, for why the outputs are committed).
For each model, testdata/<model>/ gets config.json and model.safetensors (or a sharded model.safetensors.index.json
and its shards) exactly as `save_pretrained` writes them, and golden.safetensors: transformers' float32 forward on
them (prefill of 7 and of 1 token, every position's logits; STEPS greedy decode steps with its DynamicCache), the
tensor names of examples/hf-llama's goldens. Every argmax leads the runner-up by MARGIN (a seed that fails is refused).

Each model has its family's distinguishing options on (hidden 64, 2 layers, vocab 97, 8 query heads over 2 KV heads,
head_dim 8, intermediate 176, unless said):
  - qwen3-f32:     Qwen3ForCausalLM, q_norm/k_norm per head, tied head, theta 1e6.
  - qwen3-bf16:    Qwen3ForCausalLM, bf16, attention_bias (q/k/v/o biases), untied, linear RoPE scaling (factor 4),
                   saved in shards (model.safetensors.index.json).
  - phi3-f32:      Phi3ForCausalLM, fused qkv_proj and gate_up_proj, untied.
  - phi3-bf16:     Phi3ForCausalLM, bf16, tied.
  - mistral-window-f32: MistralForCausalLM with sliding_window 4 (shorter than the 7-token prompt and the decode).
  - gemma2-f32:    Gemma2ForCausalLM, hidden 72 (sqrt(72) is not a bf16 value), sliding_window 4 on alternate layers,
                   attn_logit_softcapping 5 and final_logit_softcapping 3 (small enough to bite), query_pre_attn_scalar
                   32, tied.
  - gemma2-bf16:   the same in bf16, untied: embed_scale is sqrt(72) rounded to bf16 (8.5 against 8.485).
  - gemma3-f32:    Gemma3ForCausalLM (text), hidden 72, 3 layers [sliding, full, sliding], sliding_window 4, q/k norms,
                   rope_parameters nested by layer type (full: theta 1e6 with linear factor 8; sliding: theta 1e4),
                   final_logit_softcapping 4, tied.
  - gemma3-bf16:   the same in bf16, untied, without the softcap.

    python jvm-transformers/make_golden.py --batch       (batch goldens only: see BATCH_MODELS)

--batch leaves every checkpoint and golden.safetensors as they are and writes batch_golden.safetensors beside the
checkpoints of BATCH_MODELS (a Llama of examples/hf-llama, a sliding-window Mistral, and a bf16 Gemma 2 with its
alternating windows and softcaps): for a batch of 2 prompts
of 6 tokens and of 3 prompts of 5 (every row one length: the export has no padding mask), transformers' float32
prefill logits of every row and position, then STEPS greedy decode steps of the whole batch with one DynamicCache:
  batch<n>_tokens [n, L] i32, batch<n>_prefill_logits [n, L, vocab] f32,
  batch<n>_decode_tokens [STEPS, n] i32 (step i feeds row r decode_tokens[i, r], the argmax of its previous logits),
  batch<n>_decode_logits [STEPS, n, vocab] f32.
Each row is also checked here against transformers' own forward of that row alone (batch 1).
"""
import inspect
import json
import pathlib
import sys

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import (DynamicCache, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig,
                          MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples" / "hf-llama"))
from make_golden import MARGIN, STEPS, golden, margin  # noqa: E402

COMMON = dict(vocab_size=97, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
              intermediate_size=176, rms_norm_eps=1e-6, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
GEMMA = dict(COMMON, hidden_size=72, pad_token_id=0, query_pre_attn_scalar=32, sliding_window=4)


def models():
    """(name, seed base, dtype, class, config, shard size or None)."""
    yield "qwen3-f32", 11, torch.float32, Qwen3ForCausalLM, Qwen3Config(
        **COMMON, hidden_size=64, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), None
    yield "qwen3-bf16", 12, torch.bfloat16, Qwen3ForCausalLM, Qwen3Config(
        **COMMON, hidden_size=64, tie_word_embeddings=False, attention_bias=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}), "60KB"
    yield "phi3-f32", 13, torch.float32, Phi3ForCausalLM, Phi3Config(
        **COMMON, hidden_size=64, tie_word_embeddings=False, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), None
    yield "phi3-bf16", 14, torch.bfloat16, Phi3ForCausalLM, Phi3Config(
        **COMMON, hidden_size=64, tie_word_embeddings=True, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), None
    yield "mistral-window-f32", 15, torch.float32, MistralForCausalLM, MistralConfig(
        **COMMON, hidden_size=64, tie_word_embeddings=False, sliding_window=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), None
    gemma2 = dict(GEMMA, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    yield "gemma2-f32", 16, torch.float32, Gemma2ForCausalLM, Gemma2Config(**gemma2, tie_word_embeddings=True), None
    yield "gemma2-bf16", 17, torch.bfloat16, Gemma2ForCausalLM, Gemma2Config(**gemma2, tie_word_embeddings=False), None
    gemma3 = dict(GEMMA, num_hidden_layers=3, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                  rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    yield "gemma3-f32", 18, torch.float32, Gemma3ForCausalLM, Gemma3TextConfig(
        **gemma3, final_logit_softcapping=4.0, tie_word_embeddings=True), None
    yield "gemma3-bf16", 19, torch.bfloat16, Gemma3ForCausalLM, Gemma3TextConfig(**gemma3, tie_word_embeddings=False), None


def randomize(model, seed, gemma):
    """Seeded weights with some spread: norms near 1 (Gemma's as offsets near 0, it multiplies by 1 + w), biases
    small, matrices with std 1/sqrt(fan-in), embeddings std 1 (Gemma's 1/sqrt(hidden): it scales them back up)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = (0 if gemma else 1) + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.2 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if gemma else 1)
            else:
                v = torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5
            p.copy_(v.to(p.dtype))


HERE = pathlib.Path(__file__).resolve().parent
# Prompts per model: seeded draws (random.Random(7): the 25th, and the 23rd for Gemma 2, whose softcap of 3 squeezes
# the logits) whose every argmax leads by MARGIN.
PROMPTS = {2: [[78, 8, 53, 5, 41, 41], [83, 32, 13, 77, 70, 22]],
           3: [[87, 94, 79, 52, 44], [95, 66, 22, 39, 95], [82, 85, 21, 8, 94]]}
GEMMA2_PROMPTS = {2: [[9, 19, 4, 12, 83, 35], [58, 23, 10, 13, 88, 51]],
                  3: [[67, 88, 39, 79, 34], [91, 40, 8, 61, 26], [23, 37, 60, 3, 36]]}
BATCH_MODELS = ((HERE.parent / "examples" / "hf-llama" / "testdata" / "llama-f32", PROMPTS),
                (HERE / "testdata" / "mistral-window-f32", PROMPTS),
                (HERE / "testdata" / "gemma2-bf16", GEMMA2_PROMPTS))


def batch_golden(model, batches):
    """transformers' float32 forward of each of [batches] (size: prompts): prefill, then STEPS greedy steps of all rows."""
    f32 = model.float().eval()
    kw = "cache" if "cache" in inspect.signature(f32.forward).parameters else "past_key_values"
    out = {}
    with torch.no_grad():
        for n, prompts in batches.items():
            cache = DynamicCache(config=f32.config)
            r = f32(torch.tensor(prompts), use_cache=True, **{kw: cache})
            out[f"batch{n}_tokens"] = np.array(prompts, np.int32)
            out[f"batch{n}_prefill_logits"] = r.logits.numpy().astype(np.float32)
            last = r.logits[:, -1]
            fed, rows = [], []
            for _ in range(STEPS):
                tok = last.argmax(-1)
                fed.append(tok.numpy().astype(np.int32))
                r = f32(tok[:, None], use_cache=True, **{kw: cache})
                last = r.logits[:, -1]
                rows.append(last.numpy().astype(np.float32))
            out[f"batch{n}_decode_tokens"] = np.stack(fed)
            out[f"batch{n}_decode_logits"] = np.stack(rows)
            # Each row of the batch against the same row run alone: the batch changes nothing.
            for b, prompt in enumerate(prompts):
                seq = prompt + [int(t[b]) for t in fed]
                alone = f32(torch.tensor([seq])).logits[0].numpy()
                both = np.concatenate([out[f"batch{n}_prefill_logits"][b], out[f"batch{n}_decode_logits"][:, b]])
                assert np.abs(alone - both).max() < 1e-4, f"batch of {n}, row {b}: batched and alone disagree"
    return out


def main_batch():
    for d, batches in BATCH_MODELS:
        cfg = json.loads((d / "config.json").read_text())
        cls = getattr(__import__("transformers"), cfg["architectures"][0])
        # Loaded in the weights' own dtype, then computed in float32 (batch_golden), as golden() does: a bf16
        # checkpoint's dtype-bound buffers (Gemma's embed_scale) keep their rounded values.
        g = batch_golden(cls.from_pretrained(d, dtype=getattr(torch, cfg.get("dtype", "float32"))), batches)
        worst = min(margin(g[k]) for k in g if k.endswith("_logits"))
        if worst < MARGIN:
            raise SystemExit(f"{d.name}: a batch argmax leads by {worst} only (< {MARGIN}); pick other prompts")
        meta = {"transformers": __import__("transformers").__version__, "torch": torch.__version__, "compute": "float32"}
        save_file(g, str(d / "batch_golden.safetensors"), metadata=meta)
        print(f"{d.name}: margin {worst:.3g}, " + ", ".join(f"{k} {list(v.shape)}" for k, v in g.items()))


def main(out_dir):
    for name, base, dtype, cls, config, shard in models():
        d = out_dir / name
        d.mkdir(parents=True, exist_ok=True)
        gemma = config.model_type.startswith("gemma")
        for seed in range(base, base + 100 * 50, 100):
            for f in d.glob("model*.safetensors*"):
                f.unlink()
            torch.manual_seed(seed)
            model = cls(config).to(dtype)
            randomize(model, seed, gemma)
            kw = {"max_shard_size": shard} if shard else {}
            model.save_pretrained(d, safe_serialization=True, **kw)
            (d / "generation_config.json").unlink(missing_ok=True)
            loaded = cls.from_pretrained(d, dtype=dtype)
            scale = getattr(loaded.model.embed_tokens, "embed_scale", None)
            g = golden(loaded)
            if min(margin(g[k]) for k in ("prefill_a_logits", "prefill_b_logits", "decode_logits")) >= MARGIN:
                break
        else:
            raise SystemExit(f"{name}: no seed gave argmax margins of {MARGIN}")
        meta = {"seed": str(seed), "transformers": __import__("transformers").__version__, "torch": torch.__version__,
                "compute": "float32", "weights": str(dtype).removeprefix("torch.")}
        if scale is not None:
            meta["embed_scale"] = repr(float(scale))
        save_file(g, str(d / "golden.safetensors"), metadata=meta)
        cfg = json.loads((d / "config.json").read_text())
        files = sorted(f.name for f in d.glob("model*.safetensors*"))
        print(f"{name}: {files}, dtype {cfg.get('dtype')}, tied {cfg.get('tie_word_embeddings')}, "
              f"embed_scale {meta.get('embed_scale')}, decode tokens {g['decode_tokens'].tolist()}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--batch"]:
        main_batch()
        sys.exit(0)
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "testdata")
