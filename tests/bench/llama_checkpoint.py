"""A Llama checkpoint for the decode benchmark of issue 30: seeded random weights, a tokenizer llama.cpp accepts.

    .bench-venv/bin/python tests/bench/llama_checkpoint.py OUT [--layers 8] [--hidden 1024] [--ffn 2816]
        [--vocab 32000] [--heads 16] [--kv-heads 4] [--seed 0]

Writes OUT/ with transformers' `save_pretrained` (config.json, generation_config.json, model.safetensors in bf16)
and a tokenizer: a sentencepiece `tokenizer.model` of exactly `vocab` pieces (<unk>, <s>, </s>, the 256 byte pieces
<0x00>..<0xFF>, then filler pieces), with tokenizer_config.json and special_tokens_map.json, so that llama.cpp's
convert_hf_to_gguf.py converts the directory unmodified. head_dim is 64 (hidden must be a multiple of 64 * heads).

The weights are those of the issue's checkpoint with the default sizes (seed 0): LlamaForCausalLM built from the
config, then every 1-D parameter 1 + 0.1 * randn and every matrix randn / sqrt(in), in that order, cast to bf16.
Prints one JSON object (the directory, the parameter count, the config).
"""
import argparse
import json
import pathlib
import sys

HEAD_DIM = 64


def sentencepiece_model(vocab_size):
    """A BPE sentencepiece model with exactly `vocab_size` pieces, byte fallback on (Llama's tokenizer layout)."""
    from sentencepiece import sentencepiece_model_pb2 as spm

    specials = 3 + 256
    if vocab_size < specials + 1:
        raise SystemExit(f"llama_checkpoint: --vocab {vocab_size} is too small: the tokenizer needs <unk>, <s>, </s>, "
                         f"256 byte pieces and '▁', so at least {specials + 1}")
    m = spm.ModelProto()
    t = m.trainer_spec
    t.model_type = spm.TrainerSpec.BPE
    t.vocab_size = vocab_size
    t.byte_fallback = True
    t.unk_id, t.bos_id, t.eos_id, t.pad_id = 0, 1, 2, -1
    t.unk_piece, t.bos_piece, t.eos_piece = "<unk>", "<s>", "</s>"
    n = m.normalizer_spec
    n.name = "identity"
    n.add_dummy_prefix = True
    n.remove_extra_whitespaces = False
    n.escape_whitespaces = True

    def add(piece, kind, score=0.0):
        p = m.pieces.add()
        p.piece, p.type, p.score = piece, kind, score

    P = spm.ModelProto.SentencePiece
    add("<unk>", P.UNKNOWN)
    add("<s>", P.CONTROL)
    add("</s>", P.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", P.BYTE)
    # Filler: '▁', printable ASCII, then '▁' + ASCII letter pairs, then numbered pieces '▁<i>', ranked by score (BPE).
    letters = [chr(c) for c in range(33, 127)]
    filler = ["▁"] + letters + ["▁" + c for c in letters]
    filler += ["▁" + a + b for a in letters for b in letters]
    i = 0
    while len(filler) < vocab_size - specials:
        filler.append(f"▁<{i}>")  # 4+ characters: never one of the pairs above
        i += 1
    for rank, piece in enumerate(filler[:vocab_size - specials]):
        add(piece, P.NORMAL, -float(rank))
    assert len(m.pieces) == vocab_size
    return m


def write_tokenizer(out, vocab_size, max_positions):
    (out / "tokenizer.model").write_bytes(sentencepiece_model(vocab_size).SerializeToString())
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": True,
        "add_eos_token": False,
        "add_prefix_space": True,
        "legacy": True,
        "model_max_length": max_positions,
        "clean_up_tokenization_spaces": False,
        **special,
        "added_tokens_decoder": {
            str(i): {"content": tok, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": True}
            for i, tok in enumerate(["<unk>", "<s>", "</s>"])
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def make_model(args):
    """The issue's model (/tmp/mk.py's recipe): same construction and the same order of random draws."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, head_dim=HEAD_DIM, max_position_embeddings=2048,
                      rms_norm_eps=1e-5, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, torch_dtype=torch.bfloat16)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for _, p in m.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    return m.to(torch.bfloat16), cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.hidden != args.heads * HEAD_DIM:
        ap.error(f"--hidden {args.hidden} must be --heads {args.heads} x head_dim {HEAD_DIM} = "
                 f"{args.heads * HEAD_DIM} (the issue's layout): change --hidden or --heads")
    if args.heads % args.kv_heads:
        ap.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads} (GQA)")
    try:
        import sentencepiece  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"llama_checkpoint: {e.name} is not importable from {sys.executable}: run this with "
                         f".bench-venv/bin/python (made by `scripts/setup bench`)")
    model, cfg = make_model(args)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    write_tokenizer(args.out, args.vocab, cfg.max_position_embeddings)
    print(json.dumps({"checkpoint": str(args.out), "parameters": sum(p.numel() for p in model.parameters()),
                      "layers": args.layers, "hidden": args.hidden, "ffn": args.ffn, "vocab": args.vocab,
                      "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": HEAD_DIM, "seed": args.seed}))


if __name__ == "__main__":
    main()
