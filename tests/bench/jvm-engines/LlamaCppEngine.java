import de.kherud.llama.InferenceParameters;
import de.kherud.llama.LlamaIterator;
import de.kherud.llama.LlamaModel;
import de.kherud.llama.LlamaOutput;
import de.kherud.llama.ModelParameters;
import de.kherud.llama.args.CacheType;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * java-llama.cpp (de.kherud:llama, llama.cpp's server code through JNI, its natives in the jar) on a GGUF file.
 * KV cache in f32 (as tests/bench/llamacpp.py and the f32 caches of tapeout's exports), one slot, `threads` for both
 * generation and batch. Every request is a token-id prompt (the server's JSON "prompt" as an array of ids: set in
 * InferenceParameters' parameter map, which has no setter for it) with the prompt cache off, so that each prefill runs.
 *
 * What its API gives: text, and the probabilities of sampled tokens; no token ids and no logits. So the greedy
 * tokens come back as text, one piece per streamed step: the script compares them with transformers' ids decoded by
 * this model's own detokenizer (expect=ID,... gives them; each id decoded alone, as the server streams a token), and
 * there are no logits to compare (result "logits_unavailable" says so). Its log stays on: the script reads from it
 * which llama.cpp build the jar carries and the CPU features that build uses (a few lines per request, none per token).
 */
public class LlamaCppEngine extends Bench {
    LlamaModel model;

    LlamaCppEngine(String[] argv) { super("java-llama.cpp", argv); }

    public static void main(String[] argv) throws Exception { new LlamaCppEngine(argv).runAndExit(); }

    @Override
    void load() {
        int threads = intArg("threads");
        ModelParameters p = new ModelParameters().setModel(arg("model")).setThreads(threads).setThreadsBatch(threads)
            .setCtxSize(1024).setParallel(1).setCacheTypeK(CacheType.F32).setCacheTypeV(CacheType.F32).setGpuLayers(0);
        model = new LlamaModel(p);
        result.put("kv_cache", "f32");
    }

    InferenceParameters request(int[] prompt, int predict) throws Exception {
        InferenceParameters q = new InferenceParameters("").setNPredict(predict).setCachePrompt(false)
            .setTemperature(0f).setTopK(1).setRepeatPenalty(1f).setIgnoreEos(true);
        Field f = q.getClass().getSuperclass().getDeclaredField("parameters");
        f.setAccessible(true);
        @SuppressWarnings("unchecked")
        Map<String, String> map = (Map<String, String>) f.get(q);
        map.put("prompt", Arrays.stream(prompt).mapToObj(Integer::toString).collect(Collectors.joining(",", "[", "]")));
        return q;
    }

    /** A prefill: the prompt evaluated and one token sampled from its last position (no decode step after it). */
    @Override
    void prefill(int[] tokens) throws Exception {
        model.complete(request(tokens, 1));
    }

    @Override
    double[] decodeSteps(int[] context, int[] next) throws Exception {
        // The engine picks the tokens it decodes (greedy); the time of a step does not depend on which. Its server
        // streams: a token whose text is an incomplete UTF-8 sequence comes out with the next one, so the outputs
        // are not one per step. Every step gets the mean: the time from the first token (the prefill's) to the
        // last, over the decode steps between them.
        LlamaIterator it = model.generate(request(context, next.length + 1)).iterator();
        it.next(); // the prefill and the first token
        long s = System.nanoTime();
        while (it.hasNext()) it.next();
        double[] t = new double[next.length];
        Arrays.fill(t, (System.nanoTime() - s) / 1e6 / next.length);
        return t;
    }

    @Override
    int[] greedy(int[] prompt, int steps) throws Exception {
        List<String> pieces = new ArrayList<>();
        LlamaIterator it = model.generate(request(prompt, steps)).iterator();
        while (it.hasNext()) {
            LlamaOutput o = it.next();
            if (!o.text.isEmpty()) pieces.add(o.text);
        }
        result.put("greedy_text", pieces);
        if (args.containsKey("expect")) {
            List<String> expected = new ArrayList<>();
            for (int id : ids("expect")) expected.add(model.decode(new int[] {id}));
            result.put("expected_text", expected);
        }
        return null;
    }

    @Override
    void close() {
        if (model != null) model.close();
    }

    @Override
    float[] promptLogits(int[] prompt) {
        result.put("logits_unavailable", "java-llama.cpp 4.1.0 returns text and sampled tokens' probabilities (LlamaOutput), no logits");
        return null;
    }
}
