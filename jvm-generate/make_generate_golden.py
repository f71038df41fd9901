"""Writes the goldens of jvm-generate's generate() and sampling tests, with transformers and numpy as the oracles.

    /work/exp/hfvenv/bin/python jvm-generate/make_generate_golden.py [OUT_DIR]
    (default: jvm-generate/src/test/resources/generate)

Run it by hand in a venv with torch and transformers (see examples/hf-llama/make_golden.py for why); its outputs are
committed. It writes
  - greedy.json: transformers' `generate(do_sample=False)` on examples/hf-llama/testdata/llama-f32 (the checkpoint the
    test exports and compiles twice, with a dynamic and a static cache): for each case the prompt, max_new_tokens,
    eos_token_id (null: none) and the new tokens. Every chosen token leads the runner-up by at least MARGIN in
    transformers' float32 logits (checked here), so an export within 1e-4 of them must choose the same tokens.
  - tiny97/tokenizer.json: a 97-token BPE (the checkpoint's vocabulary size; <unk>, <s>, </s> at 0, 1, 2 as the
    checkpoint's BOS 1 and EOS 2), lowercasing, Metaspace, `<s> $A`; and text.json: transformers' generate() from text
    prompts with it (greedy; `stop_strings` with the tokenizer for the stop-string cases), the new tokens and their
    text decoded with skip_special_tokens=True.
  - sampling.json: fixed float32 logits (seeded, vocabularies of odd sizes) and, for each (temperature, top_k,
    top_p), numpy's float64 sampling distribution: softmax(logits / temperature) restricted to the tokens top-k (every
    logit >= the k-th largest) and top-p (the smallest most-likely-first prefix whose probability reaches top_p; the
    first token always) keep, renormalized. The same sets are checked here against transformers' own
    TopKLogitsWarper and TopPLogitsWarper.
"""
import json
import pathlib
import sys

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

MARGIN = 1e-3
CHECKPOINT = pathlib.Path(__file__).resolve().parent.parent / "examples/hf-llama/testdata/llama-f32"
# (prompt, max_new_tokens, eos_token_id): the static export has 24 cache rows, so prompt + new - 1 <= 24 for those
# the test runs on both exports; the 40-token case runs on the dynamic one only.
GREEDY = [
    ([3, 14, 15, 92, 65, 35, 89], 16, None),
    ([42], 20, None),
    ([5, 8, 13, 21, 34, 55, 89, 44, 33, 77, 11, 60], 12, None),
    ([3, 14, 15, 92, 65, 35, 89], 40, None),
    # Stop tokens the greedy runs reach: the EOS (2) after 30 tokens, and 51 (as a stop id) after 7.
    ([3, 14, 15, 92, 65, 35, 89], 40, 2),
    ([1, 50, 60, 70], 21, 51),
]
SAMPLING = [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 5, 1.0), (1.3, 0, 0.9), (0.8, 10, 0.8), (1.0, 0, 0.5),
            (2.0, 3, 0.95), (1.0, 1, 1.0), (0.5, 50, 0.3)]


def min_margin(scores):
    """The least lead of an argmax over the runner-up in generate()'s per-step logits."""
    top = np.sort(torch.stack(scores)[:, 0].numpy(), axis=-1)[:, -2:]
    return float((top[:, 1] - top[:, 0]).min())


def greedy():
    model = LlamaForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.float32).eval()
    cases = []
    for prompt, new, eos in GREEDY:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new, min_new_tokens=0,
                                 eos_token_id=eos, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        tokens = out.sequences[0, len(prompt):].tolist()
        margin = min_margin(out.scores)
        assert margin >= MARGIN, f"prompt {prompt}: an argmax leads by only {margin}"
        cases.append({"prompt": prompt, "max_new_tokens": new, "eos_token_id": eos, "tokens": tokens,
                      "min_margin": margin})
        print(f"greedy {prompt[:4]}… +{new}: {len(tokens)} tokens, margin {margin:.3g}")
    return {"transformers": transformers.__version__, "torch": torch.__version__, "checkpoint": "llama-f32",
            "cases": cases}


TEXT = [("the cat sat on the mat", 12, None), ("a dog", 16, None), ("once upon a time", 20, 2),
        ("the cat sat on the mat", 24, None, "at")]
TRAIN = ["the cat sat on the mat", "a dog ran in the park", "once upon a time there was a tiny model",
         "models read tokens and write tokens", "the quick brown fox jumps over the lazy dog"] * 10


def tiny97(out):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.train_from_iterator(TRAIN, trainers.BpeTrainer(vocab_size=97, special_tokens=["<unk>", "<s>", "</s>"],
                                                       show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    assert tok.get_vocab_size() == 97, tok.get_vocab_size()
    (out / "tiny97").mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tiny97/tokenizer.json"))
    return PreTrainedTokenizerFast(tokenizer_file=str(out / "tiny97/tokenizer.json"), clean_up_tokenization_spaces=False,
                                   bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def text(out):
    hf = tiny97(out)
    model = LlamaForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.float32).eval()
    cases = []
    for prompt, new, eos, *stop in TEXT:
        ids = hf(prompt, return_tensors="pt").input_ids
        extra = dict(stop_strings=stop, tokenizer=hf) if stop else {}
        with torch.no_grad():
            out = model.generate(ids, do_sample=False, max_new_tokens=new, min_new_tokens=0, eos_token_id=eos,
                                 pad_token_id=0, output_scores=True, return_dict_in_generate=True, **extra)
        tokens = out.sequences[0, ids.shape[1]:].tolist()
        assert min_margin(out.scores) >= MARGIN, f"{prompt!r}: an argmax leads by less than {MARGIN}"
        cases.append({"prompt": prompt, "prompt_ids": ids[0].tolist(), "max_new_tokens": new, "eos_token_id": eos,
                      "stop_strings": stop, "tokens": tokens, "text": hf.decode(tokens, skip_special_tokens=True)})
        print(f"text {prompt!r} +{new}: {len(tokens)} tokens {cases[-1]['text']!r}")
    return {"transformers": transformers.__version__, "checkpoint": "llama-f32", "cases": cases}


def numpy_distribution(logits, temperature, top_k, top_p):
    x = logits.astype(np.float64) / temperature
    keep = np.ones(x.shape, bool)
    if 0 < top_k < x.size:
        keep &= x >= np.sort(x)[::-1][top_k - 1]
    if top_p < 1.0:
        p = np.where(keep, np.exp(x - x[keep].max()), 0.0)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        before = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
        nucleus = np.zeros(x.shape, bool)
        nucleus[order[before < top_p]] = True
        keep &= nucleus
    q = np.where(keep, np.exp(x - x[keep].max()), 0.0)
    return q / q.sum()


def transformers_kept(logits, temperature, top_k, top_p):
    s = torch.tensor(logits[None, :])
    s = TemperatureLogitsWarper(temperature)(None, s)
    if top_k > 0:
        s = TopKLogitsWarper(top_k)(None, s)
    if top_p < 1.0:
        s = TopPLogitsWarper(top_p)(None, s)
    return torch.isfinite(s[0]).numpy()


def sampling():
    rng = np.random.default_rng(64)
    rows = []
    for vocab, scale in ((97, 3.0), (1001, 2.0), (7, 1.0)):
        logits = (scale * rng.standard_normal(vocab)).astype(np.float32)
        cases = []
        for temperature, top_k, top_p in SAMPLING:
            p = numpy_distribution(logits, temperature, top_k, top_p)
            assert np.array_equal(p > 0, transformers_kept(logits, temperature, top_k, top_p)), \
                f"numpy and transformers keep different tokens: vocab {vocab}, {temperature, top_k, top_p}"
            cases.append({"temperature": temperature, "top_k": top_k, "top_p": top_p,
                          "kept": np.flatnonzero(p > 0).tolist(), "probabilities": p.tolist()})
        rows.append({"logits": [float(v) for v in logits], "cases": cases})
        print(f"sampling: vocab {vocab}, kept {[len(c['kept']) for c in cases]}")
    return {"numpy": np.__version__, "rows": rows}


def main(out):
    out.mkdir(parents=True, exist_ok=True)
    for name, make in (("greedy.json", greedy), ("sampling.json", sampling), ("text.json", lambda: text(out))):
        (out / name).write_text(json.dumps(make(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else
         pathlib.Path(__file__).parent / "src/test/resources/generate")
