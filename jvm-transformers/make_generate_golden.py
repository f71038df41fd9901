"""Writes the greedy generate() goldens of jvm-transformers' families, with transformers as the oracle.

    /work/exp/hfvenv/bin/python jvm-transformers/make_generate_golden.py

Run it by hand in a venv with torch and transformers (see examples/hf-llama/make_golden.py for why); its outputs are
committed. For each family's f32 checkpoint in testdata/ (the ones with its distinguishing options: Mistral's window
of 4, Gemma 2's softcaps and window, Gemma 3's nested rope_parameters and window, Qwen3's q/k norms, Phi-3's fused
projections; Qwen2 from its GGUF) it writes testdata/<dir>/generate.json: transformers' `generate(do_sample=False)` in float32 from a
prompt longer than the sliding window, with enough new tokens that prompt + generated spans several windows.

A tiny random model may fall into repeating one token, and an argmax that barely leads its runner-up would make the
comparison a coin toss; so prompts are drawn from a seeded generator until one gives NEW tokens of which at least
MIN_DISTINCT differ and whose every argmax leads the runner-up by MARGIN (each prompt passed over is printed). Where
no prompt of ATTEMPTS does (the tiny Qwen3 repeats one token after any prompt: its logits lead by 3 to 30), the
prompt with the most distinct tokens is kept and the golden says `"degenerate": true`.

It also writes testdata/mistral-window-f32/generate_text.json, the README's checkpoint → text example that
tests/gradle/test_publish_checkpoint_text.py runs: generate() from text with jvm-generate's 97-token tokenizer
(tiny97/tokenizer.json, the checkpoints' vocabulary size), the new tokens and their text as transformers'
PreTrainedTokenizerFast decodes them (skip_special_tokens=True). The prompt is 8 tokens, twice the window.
"""
import json
import pathlib

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

MARGIN = 1e-3
NEW = 12
PROMPT = 9
MIN_DISTINCT = 4
ATTEMPTS = 30
TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"
TOKENIZER = pathlib.Path(__file__).resolve().parent.parent / "jvm-generate/src/test/resources/generate/tiny97/tokenizer.json"
TEXT = ("mistral-window-f32", "the cat sat on the mat")
# gguf-qwen2-f16: Qwen2 (q/k/v biases, a tied head) has no save_pretrained checkpoint here, only llama.cpp's GGUF,
# which transformers reads with its GGUF loader (dequantized to float32, as make_gguf_golden.py checks it).
FAMILIES = ["qwen3-f32", "phi3-f32", "mistral-window-f32", "gemma2-f32", "gemma3-f32", "gguf-qwen2-f16"]


def run(model, prompt):
    """transformers' greedy generate(): the new tokens and the least lead of an argmax over the runner-up."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                             eos_token_id=None, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    top = np.sort(torch.stack(out.scores)[:, 0].numpy(), axis=-1)[:, -2:]
    return out.sequences[0, len(prompt):].tolist(), float((top[:, 1] - top[:, 0]).min())


def family(name, rng):
    gguf = {"gguf_file": "model.gguf"} if name.startswith("gguf-") else {}
    model = AutoModelForCausalLM.from_pretrained(TESTDATA / name, dtype=torch.float32, **gguf).eval()
    vocab = model.config.vocab_size
    window = getattr(model.config, "sliding_window", None)
    assert window is None or window < PROMPT, f"{name}: the prompt must be longer than the window {window}"
    best = None
    for attempt in range(ATTEMPTS):
        prompt = [1] + rng.integers(3, vocab, PROMPT - 1).tolist()
        tokens, margin = run(model, prompt)
        if margin < MARGIN:
            print(f"{name}: prompt {attempt} passed over: an argmax leads by {margin:.3g}")
            continue
        if best is None or len(set(tokens)) > len(set(best[1])):
            best = (prompt, tokens, margin)
        if len(set(tokens)) >= MIN_DISTINCT:
            break
        print(f"{name}: prompt {attempt} passed over: {len(set(tokens))} distinct tokens")
    assert best is not None, f"{name}: no prompt of {ATTEMPTS} gave argmaxes leading by {MARGIN}"
    prompt, tokens, margin = best
    print(f"{name}: prompt {prompt} -> {tokens} (margin {margin:.3g}, window {window})")
    return {"transformers": transformers.__version__, "torch": torch.__version__, "checkpoint": name,
            "sliding_window": window, "prompt": prompt, "max_new_tokens": NEW, "tokens": tokens,
            "min_margin": margin, "degenerate": len(set(tokens)) < MIN_DISTINCT}


def text():
    name, prompt = TEXT
    hf = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), clean_up_tokenization_spaces=False, bos_token="<s>",
                                 eos_token="</s>", unk_token="<unk>")
    model = AutoModelForCausalLM.from_pretrained(TESTDATA / name, dtype=torch.float32).eval()
    ids = hf(prompt).input_ids
    tokens, margin = run(model, ids)
    assert margin >= MARGIN and len(set(tokens)) >= MIN_DISTINCT, f"{name} on {prompt!r}: {tokens}, margin {margin}"
    assert len(ids) > model.config.sliding_window, f"{prompt!r} is not longer than the window"
    decoded = hf.decode(tokens, skip_special_tokens=True)
    print(f"{name} text: {prompt!r} {ids} -> {tokens} {decoded!r} (margin {margin:.3g})")
    return {"transformers": transformers.__version__, "checkpoint": name, "tokenizer": "tiny97/tokenizer.json",
            "prompt": prompt, "prompt_ids": ids, "max_new_tokens": NEW, "tokens": tokens, "text": decoded,
            "min_margin": margin}


def main():
    rng = np.random.default_rng(64)
    for name in FAMILIES:
        (TESTDATA / name / "generate.json").write_text(json.dumps(family(name, rng), indent=1) + "\n")
    (TESTDATA / TEXT[0] / "generate_text.json").write_text(json.dumps(text(), indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
