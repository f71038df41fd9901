"""Writes the tokenizer corpus test's fixtures: three tokenizer.json files trained with Hugging Face `tokenizers`, and
transformers' own encodings and decodings of a test corpus with each (the oracle jvm-generate's TokenizerCorpusTest
compares dev.tapeout.generate.Tokenizer with, token id for token id and string for string).

    /work/exp/hfvenv/bin/python jvm-generate/make_tokenizer_golden.py [--retrain] [OUT_DIR]
    (default: jvm-generate/src/test/resources/tokenizers)

Run it by hand in a venv with transformers and tokenizers (not the test venv: see examples/hf-llama/make_golden.py);
its outputs are committed. The trainers are not deterministic (the WordPiece and Unigram ones order tied candidates
differently from run to run), so a tokenizer.json already in OUT_DIR is kept and only its goldens are rewritten (the
same bytes on a rerun); --retrain trains all three again. For each tokenizer OUT_DIR/<name>/ holds
  - tokenizer.json: what `Tokenizer.save` writes,
  - golden.json: {"tokenizers": version, "transformers": version, "cases": [{"text", "ids" (add_special_tokens=True),
    "ids_plain" (add_special_tokens=False), "decoded" (decode(ids), special tokens kept), "decoded_skip"
    (skip_special_tokens=True)}]}, from `PreTrainedTokenizerFast(tokenizer_file=...)` with
    clean_up_tokenization_spaces=False (the tokenizer's own decoder alone, as the file defines it).

Tokenizers:
  - bpe-bytelevel: GPT-2-style byte-level BPE (ByteLevel pre-tokenizer and decoder, so every byte is encodable),
    a `<|bos|> $A` template and added special tokens <|endoftext|>, <|im_start|>, <|im_end|>.
  - wordpiece: BERT-style (BertNormalizer lowercasing and splitting CJK characters, BertPreTokenizer, WordPiece
    decoder with `##`), `[CLS] $A [SEP]`, [UNK] for what the vocabulary lacks.
  - unigram-metaspace: sentencepiece-like (NFKC, Metaspace `▁` with prepend_scheme "first", Unigram model, byte
    fallback off so unknown characters are <unk>), `<s> $A </s>`, plus an added special token <sep>.
"""
import json
import pathlib
import sys

import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

TRAIN = [
    "The quick brown fox jumps over the lazy dog.",
    "Tokenizers split text into pieces; models read the pieces as numbers.",
    "A decoder-only transformer predicts the next token from the ones before it.",
    "Hello, world! Hello again, world. Good morning and good night.",
    "Numbers like 3.14159, 2026 and 42 appear in text too.",
    "日本語の文章も少し含める。東京は大きな都市です。",
    "中文的句子也在这里，模型需要处理它们。",
    "Emoji are bytes as well: 🙂 🚀 🎉 and 👩‍💻 joined by a zero-width joiner.",
    "Café, naïve, résumé, jalapeño: accents precomposed and decomposed (cafe\u0301).",
    "Tabs\tand  double  spaces, and\nnewlines\n\nbetween paragraphs.",
    "def generate(prompt):\n    return model(prompt)\n",
] * 20

CORPUS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "",
    " ",
    "   leading and trailing spaces   ",
    "tabs\tbetween\twords\t\tand two",
    "line one\nline two\n\n\nfour newlines\r\nand a CRLF",
    "東京は大きな都市です。",
    "中文的句子也在这里，模型需要处理它们。",
    "한국어 문장은 훈련에 없었습니다",
    "emoji 🙂🚀🎉 and a family 👨‍👩‍👧 and a flag 🇯🇵",
    "combining marks: cafe\u0301 vs café, Z\u0351\u0352a\u0353l\u0354g\u0355o",
    "Ελληνικά και русский текст",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|><|endoftext|>",
    "[CLS] already special [SEP] inside [MASK] text",
    "<s>one</s><sep>two",
    "numbers 3.14159 and 1,000,000 and 0x1F",
    "def generate(prompt):\n    return model(prompt)\n",
    "unseen words: xylophone quixotic zygote",
    "ALL CAPS and MiXeD CaSe",
    "a" * 300,
    "punctuation!!! ??? ... --- ;;; (((",
    "\u200b zero width space and \u00a0 no-break space",
]

SPECIAL = {
    "bpe-bytelevel": ["<|bos|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    "unigram-metaspace": ["<unk>", "<s>", "</s>", "<sep>"],
}


def bpe_bytelevel():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL["bpe-bytelevel"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAIN, trainer)
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", pair="<|bos|> $A $B",
                                                       special_tokens=[("<|bos|>", bos)])
    return tok


def wordpiece():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=True, strip_accents=None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=500, special_tokens=SPECIAL["wordpiece"], show_progress=False)
    tok.train_from_iterator(TRAIN, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def unigram_metaspace():
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=SPECIAL["unigram-metaspace"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(TRAIN, trainer)
    s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                                       special_tokens=[("<s>", s), ("</s>", e)])
    return tok


def main(out, retrain):
    for name, make in (("bpe-bytelevel", bpe_bytelevel), ("wordpiece", wordpiece),
                       ("unigram-metaspace", unigram_metaspace)):
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        if retrain or not (d / "tokenizer.json").is_file():
            make().save(str(d / "tokenizer.json"))
        hf = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"), clean_up_tokenization_spaces=False)
        cases = []
        for text in CORPUS:
            ids = hf.encode(text, add_special_tokens=True)
            cases.append({
                "text": text,
                "ids": ids,
                "ids_plain": hf.encode(text, add_special_tokens=False),
                "decoded": hf.decode(ids, skip_special_tokens=False),
                "decoded_skip": hf.decode(ids, skip_special_tokens=True),
            })
        golden = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                  "special_tokens": SPECIAL[name], "cases": cases}
        (d / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"{name}: vocab {hf.vocab_size}, {sum(len(c['ids']) for c in cases)} tokens over {len(cases)} texts")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--retrain"]
    main(pathlib.Path(args[0]) if args else pathlib.Path(__file__).parent / "src/test/resources/tokenizers",
         "--retrain" in sys.argv[1:])
