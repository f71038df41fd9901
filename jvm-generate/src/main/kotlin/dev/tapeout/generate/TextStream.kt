package dev.tapeout.generate

/**
 * The text of generated ids as it grows: [push] takes the next id and returns the text it adds (empty while the text
 * ends inside a character whose bytes are not all generated yet, which decodes to U+FFFD), and [flush] what is left.
 * The pieces concatenate to [text], the decoding of all ids at once: decoders that look at neighbours (a Metaspace's
 * leading space, WordPiece's `##`) are decoded in context, as transformers' TextStreamer does.
 */
class TextStream(
    private val tokenizer: Tokenizer,
    /** Leave special tokens out of the text. */
    private val skipSpecialTokens: Boolean = true,
) {
    private val ids = ArrayList<Int>()
    private var emitted = 0

    /** The text of every id pushed so far. */
    var text: String = ""
        private set

    /** Adds `id` and returns the new text it completes (maybe empty). */
    fun push(id: Int): String {
        ids += id
        text = tokenizer.decode(ids.toIntArray(), skipSpecialTokens)
        if (text.endsWith('\uFFFD') || text.length <= emitted) return ""
        return text.substring(emitted).also { emitted = text.length }
    }

    /** The text not yet returned (a trailing U+FFFD of bytes that never completed a character). */
    fun flush(): String = if (text.length > emitted) text.substring(emitted).also { emitted = text.length } else ""
}
