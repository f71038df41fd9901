import com.github.tjake.jlama.model.AbstractModel;
import com.github.tjake.jlama.model.ModelSupport;
import com.github.tjake.jlama.model.functions.SampleOutput;
import com.github.tjake.jlama.safetensors.DType;
import com.github.tjake.jlama.tensor.AbstractTensor;
import com.github.tjake.jlama.tensor.KvBufferCache;
import com.github.tjake.jlama.tensor.operations.TensorOperationsProvider;
import com.github.tjake.jlama.util.PhysicalCoreExecutor;
import java.io.File;
import java.lang.reflect.Field;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Optional;

/**
 * jlama (com.github.tjake:jlama-core, pure Java on the Vector API) on a transformers checkpoint directory
 * (config.json, model.safetensors, tokenizer.json). Extra argument: working=F32|BF16 (jlama's working memory type,
 * default F32) and quant=I8|F32|BF16 (its working quantization type, default I8: what jlama's README loads with;
 * activations are quantized to that type for the matrix products). Threads: PhysicalCoreExecutor.overrideThreadCount.
 *
 * Logits: jlama's getLogits() returns softmax probabilities, so the raw logits are computed here the way it computes
 * them (its output norm, then its dot products with the output weights), without the softmax.
 */
public class JlamaEngine extends Bench {
    AbstractModel model;
    KvBufferCache caches;
    SampleOutput sampleOutput;
    int vocab;
    int dim;

    JlamaEngine(String[] argv) { super("jlama", argv); }

    public static void main(String[] argv) throws Exception { new JlamaEngine(argv).runAndExit(); }

    @Override
    void load() throws Exception {
        PhysicalCoreExecutor.overrideThreadCount(intArg("threads"));
        DType working = DType.valueOf(args.getOrDefault("working", "F32"));
        DType quant = DType.valueOf(args.getOrDefault("quant", "I8"));
        result.put("working_dtype", working.toString());
        result.put("working_quant_dtype", quant.toString());
        model = ModelSupport.loadModel(new File(arg("model")), working, quant);
        caches = new KvBufferCache(model);
        Field f = AbstractModel.class.getDeclaredField("sampleOutput");
        f.setAccessible(true);
        sampleOutput = (SampleOutput) f.get(model);
        vocab = model.getConfig().vocabularySize;
        dim = model.getConfig().embeddingLength;
        result.put("tensor_operations", TensorOperationsProvider.get().name());
    }

    /** A prefill into a fresh cache; returns every position's hidden state (the caller closes it). */
    AbstractTensor forwardPrompt(int[] tokens, KvBufferCache.KvBuffer kv) {
        return model.batchForward(tokens, 0, kv);
    }

    @Override
    void prefill(int[] tokens) {
        try (KvBufferCache.KvBuffer kv = caches.getEphemeralKvBuffer()) {
            AbstractTensor out = forwardPrompt(tokens, kv);
            // The last position's logits, as generate() computes them after its prefill.
            try (AbstractTensor last = out.slice(out.shape().first() - 1)) {
                logits(last);
            }
            out.close();
        }
    }

    float[] logits(AbstractTensor hidden) {
        try (AbstractTensor embedding = sampleOutput.getOutputLayerNorm().forward(hidden);
             AbstractTensor logits = model.makeDenseTensor(1, vocab)) {
            com.github.tjake.jlama.math.VectorMath.pchunk(0, vocab, (start, size) ->
                TensorOperationsProvider.get().dotProductChunk(logits, embedding, sampleOutput.getOutputLogitsWeights(), 0, dim, start, size));
            float[] r = new float[vocab];
            logits.getMemorySegment().asByteBuffer().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(r);
            return r;
        }
    }

    @Override
    double[] decodeSteps(int[] context, int[] next) {
        double[] t = new double[next.length];
        try (KvBufferCache.KvBuffer kv = caches.getEphemeralKvBuffer()) {
            forwardPrompt(context, kv).close();
            int pos = context.length;
            for (int i = 0; i < next.length; i++) {
                long s = System.nanoTime();
                try (AbstractTensor out = model.forward(next[i], pos + i, kv, Optional.empty())) {
                    logits(out);
                }
                kv.incrementContextPosition();
                t[i] = (System.nanoTime() - s) / 1e6;
            }
        }
        return t;
    }

    @Override
    int[] greedy(int[] prompt, int steps) {
        int[] ids = new int[steps];
        try (KvBufferCache.KvBuffer kv = caches.getEphemeralKvBuffer()) {
            AbstractTensor out = forwardPrompt(prompt, kv);
            float[] l;
            try (AbstractTensor last = out.slice(out.shape().first() - 1)) {
                l = logits(last);
            }
            out.close();
            for (int i = 0; i < steps; i++) {
                ids[i] = argmax(l);
                if (i + 1 == steps) break;
                try (AbstractTensor h = model.forward(ids[i], prompt.length + i, kv, Optional.empty())) {
                    l = logits(h);
                }
                kv.incrementContextPosition();
            }
        }
        return ids;
    }

    @Override
    float[] promptLogits(int[] prompt) {
        try (KvBufferCache.KvBuffer kv = caches.getEphemeralKvBuffer()) {
            AbstractTensor out = forwardPrompt(prompt, kv);
            try (AbstractTensor last = out.slice(out.shape().first() - 1)) {
                return logits(last);
            } finally {
                out.close();
            }
        }
    }
}
