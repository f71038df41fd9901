package dev.tapeout.generate

import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.api.io.TempDir
import java.io.File

/**
 * Tokenizer against transformers' PreTrainedTokenizerFast on the same tokenizer.json files: a byte-level BPE, a
 * WordPiece and a Metaspace Unigram (make_tokenizer_golden.py), over a corpus of CJK, Hangul and Greek text, emoji
 * with joiners and flags, combining marks, runs of spaces, tabs and newlines, and special tokens inside the text.
 */
class TokenizerCorpusTest {
    @Test
    fun `encode and decode equal transformers on the corpus`() {
        for (name in listOf("bpe-bytelevel", "wordpiece", "unigram-metaspace")) {
            val golden = Goldens.json("tokenizers/$name/golden.json")
            Tokenizer.open(Goldens.file("tokenizers/$name/tokenizer.json")).use { tok ->
                val cases = Goldens.objects(golden.getAsJsonArray("cases"))
                assertTrue(cases.size >= 20)
                for (c in cases) {
                    val text = c.get("text").asString
                    val what = "$name on \"${text.take(40)}\""
                    val ids = Goldens.ints(c.get("ids"))
                    assertArrayEquals(ids, tok.encode(text), "$what: ids")
                    assertArrayEquals(Goldens.ints(c.get("ids_plain")), tok.encode(text, addSpecialTokens = false), "$what: ids without special tokens")
                    assertEquals(c.get("decoded").asString, tok.decode(ids), "$what: decoded")
                    assertEquals(c.get("decoded_skip").asString, tok.decode(ids, skipSpecialTokens = true), "$what: decoded without special tokens")
                }
                for (s in golden.getAsJsonArray("special_tokens")) {
                    assertTrue(s.asString in tok.specialTokens, "$name: special token ${s.asString} in ${tok.specialTokens}")
                }
            }
        }
    }

    @Test
    fun `a special token inside text is its own id, and plain text never is`() {
        Tokenizer.open(Goldens.file("tokenizers/bpe-bytelevel/tokenizer.json")).use { tok ->
            val start = tok.specialTokens.getValue("<|im_start|>")
            val end = tok.specialTokens.getValue("<|im_end|>")
            val ids = tok.encode("<|im_start|>user<|im_end|>", addSpecialTokens = false)
            assertEquals(start, ids.first())
            assertEquals(end, ids.last())
            assertTrue(tok.encode("im_start user im_end", addSpecialTokens = false).none { it == start || it == end })
        }
    }

    @Test
    fun `tokenizer_config's bos and eos tokens are read from beside tokenizer json`(@TempDir dir: File) {
        Goldens.file("tokenizers/bpe-bytelevel/tokenizer.json").copyTo(File(dir, "tokenizer.json"))
        Tokenizer.open(dir).use { assertNull(it.bosTokenId) }
        File(dir, "tokenizer_config.json").writeText("""{"bos_token": "<|bos|>", "eos_token": {"content": "<|endoftext|>", "special": true}}""")
        Tokenizer.open(dir).use { tok ->
            // The ids the tokenizer itself gives these texts.
            assertEquals(tok.encode("<|bos|>", addSpecialTokens = false).single(), tok.bosTokenId)
            assertEquals(tok.encode("<|endoftext|>", addSpecialTokens = false).single(), tok.eosTokenId)
        }
        File(dir, "tokenizer_config.json").writeText("""{"eos_token": "<|nope|>"}""")
        val e = assertThrows<TokenizerException> { Tokenizer.open(dir) }
        assertTrue("<|nope|>" in e.message!! && "tokenizer_config.json" in e.message!!, e.message)
    }

    @Test
    fun `missing, malformed and unusable files and ids outside the vocabulary are typed errors`(@TempDir dir: File) {
        val missing = assertThrows<TokenizerException> { Tokenizer.open(File(dir, "nothing.json")) }
        assertTrue("nothing.json" in missing.message!!, missing.message)
        val empty = assertThrows<TokenizerException> { Tokenizer.open(dir) }
        assertTrue("tokenizer.json" in empty.message!!, empty.message)
        val broken = File(dir, "broken.json").apply { writeText("{\"model\": ") }
        assertEquals(broken, assertThrows<TokenizerException> { Tokenizer.open(broken) }.file)
        val noModel = File(dir, "nomodel.json").apply { writeText("""{"version": "1.0"}""") }
        assertTrue("model" in assertThrows<TokenizerException> { Tokenizer.open(noModel) }.message!!)
        // Valid JSON with a vocabulary that the tokenizers library itself rejects (an unknown model type).
        val alien = File(dir, "alien.json").apply { writeText("""{"model": {"type": "Alien", "vocab": {"a": 0}}}""") }
        val refused = assertThrows<TokenizerException> { Tokenizer.open(alien) }
        assertTrue("refused" in refused.message!!, refused.message)
        Tokenizer.open(Goldens.file("tokenizers/wordpiece/tokenizer.json")).use { tok ->
            val e = assertThrows<TokenizerException> { tok.decode(intArrayOf(5, tok.vocabSize)) }
            assertTrue("ids[1] is ${tok.vocabSize}" in e.message!!, e.message)
            assertThrows<TokenizerException> { tok.decode(intArrayOf(-1)) }
        }
        val closed = Tokenizer.open(Goldens.file("tokenizers/wordpiece/tokenizer.json")).also { it.close() }
        assertTrue("closed" in assertThrows<TokenizerException> { closed.encode("text") }.message!!)
        assertThrows<TokenizerException> { closed.decode(intArrayOf(5)) }
    }
}

/** Streamed text against transformers' decoding of the whole sequence, one id at a time. */
class TextStreamTest {
    @Test
    fun `pieces concatenate to transformers' text and never hold half a character`() {
        for (name in listOf("bpe-bytelevel", "wordpiece", "unigram-metaspace")) {
            val golden = Goldens.json("tokenizers/$name/golden.json")
            Tokenizer.open(Goldens.file("tokenizers/$name/tokenizer.json")).use { tok ->
                var split = 0
                for (c in Goldens.objects(golden.getAsJsonArray("cases"))) {
                    val stream = TextStream(tok, skipSpecialTokens = true)
                    val pieces = Goldens.ints(c.get("ids")).map { id ->
                        stream.push(id).also { if (stream.text.endsWith('\uFFFD')) split++ }
                    } + stream.flush()
                    val want = c.get("decoded_skip").asString
                    assertEquals(want, pieces.joinToString(""), "$name: streamed \"${c.get("text").asString.take(40)}\"")
                    // Byte-level BPE splits emoji and CJK characters over tokens: U+FFFD must not be streamed for them.
                    if ('\uFFFD' !in want) assertTrue(pieces.none { '\uFFFD' in it }, "$name: a piece held U+FFFD: $pieces")
                }
                if (name == "bpe-bytelevel") assertTrue(split > 0, "no id ended inside a character: the hold-back went untested")
            }
        }
    }
}
