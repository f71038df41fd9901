import dev.tapeout.iree.IreeDType;
import dev.tapeout.iree.IreeDevice;
import dev.tapeout.iree.IreeFunction;
import dev.tapeout.iree.IreeInstance;
import dev.tapeout.iree.IreeModule;
import dev.tapeout.iree.IreeParam;
import dev.tapeout.iree.IreeParameters;
import dev.tapeout.iree.IreeResults;
import dev.tapeout.iree.IreeValue;
import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Ours: a tapeout export (examples/hf-llama's AutoModelForCausalLM: prefill(input_ids) and decode(input_ids,
 * past_key_<i>, past_value_<i>) with transformers' DynamicCache, prefill's logits the last position's) compiled by
 * iree-compile, served in this process by dev.tapeout.iree with `threads` workers and its batch waits on (as
 * examples/tiny-llm's ServeBench). model=VMFB, archive=IRPA. The KV cache stays on the device between steps, as
 * dev.tapeout.generate's Generator keeps it; each step reads its logits back to the host (the argmax needs them).
 */
public class TapeoutEngine extends Bench {
    IreeInstance instance;
    IreeDevice device;
    IreeModule module;
    IreeFunction prefill;
    IreeFunction decode;
    boolean i64;

    TapeoutEngine(String[] argv) { super("tapeout", argv); }

    public static void main(String[] argv) throws Exception {
        new TapeoutEngine(argv).runAndExit();
    }

    @Override
    void close() {
        if (module != null) module.close();
        if (device != null) device.close();
        if (instance != null) instance.close();
    }

    @Override
    void load() {
        instance = new IreeInstance();
        device = instance.device("local-task", intArg("threads"));
        device.setBatchWaits(!"off".equals(args.getOrDefault("batch_waits", "on")));
        module = IreeModule.load(device, new File(arg("model")), List.of(IreeParameters.archive(new File(arg("archive")))));
        prefill = module.function("prefill");
        decode = module.function("decode");
        i64 = prefill.getInputs().get(0).getDtype() == IreeDType.I64;
        result.put("batch_waits", device.getBatchWaits());
    }

    IreeValue ids(int[] tokens) {
        if (i64) {
            long[] l = new long[tokens.length];
            for (int i = 0; i < l.length; i++) l[i] = tokens[i];
            return module.value(l, 1, tokens.length);
        }
        return module.value(tokens, 1, tokens.length);
    }

    static float[] lastRow(IreeValue logits) {
        long[] shape = logits.getShape();
        int vocab = (int) shape[shape.length - 1];
        float[] all = logits.toFloatArray();
        return java.util.Arrays.copyOfRange(all, all.length - vocab, all.length);
    }

    /** Prefill: returns [logits of the last position] and leaves the caches in `cache` (the caller closes them). */
    float[] prefill(int[] tokens, List<IreeValue> cache) {
        IreeResults out;
        try (IreeValue in = ids(tokens)) {
            out = prefill.call(in);
        }
        float[] logits;
        try (IreeValue l = out.get(0)) {
            logits = lastRow(l);
        }
        if (cache != null) cache.addAll(out.subList(1, out.size()));
        else out.close();
        return logits;
    }

    /** One decode step on `token`, the caches replaced by the new ones (the old closed). */
    float[] step(int token, List<IreeValue> cache) {
        Map<String, IreeValue> byName = new HashMap<>();
        IreeValue in = ids(new int[] {token});
        byName.put("input_ids", in);
        for (int i = 0; i < cache.size() / 2; i++) {
            byName.put("past_key_" + i, cache.get(2 * i));
            byName.put("past_value_" + i, cache.get(2 * i + 1));
        }
        List<IreeParam> inputs = decode.getInputs();
        IreeValue[] call = new IreeValue[inputs.size()];
        for (int i = 0; i < call.length; i++) {
            call[i] = byName.get(inputs.get(i).getName());
            if (call[i] == null) throw new IllegalStateException("decode's argument " + inputs.get(i).getName() + " is not one this harness passes: " + decode);
        }
        IreeResults out;
        try {
            out = decode.call(call);
        } finally {
            in.close();
        }
        for (IreeValue v : cache) v.close();
        cache.clear();
        cache.addAll(out.subList(1, out.size()));
        try (IreeValue l = out.get(0)) {
            return lastRow(l);
        }
    }

    @Override
    void prefill(int[] tokens) {
        prefill(tokens, null);
    }

    @Override
    double[] decodeSteps(int[] context, int[] next) {
        List<IreeValue> cache = new ArrayList<>();
        try {
            prefill(context, cache);
            double[] t = new double[next.length];
            for (int i = 0; i < next.length; i++) {
                long s = System.nanoTime();
                step(next[i], cache);
                t[i] = (System.nanoTime() - s) / 1e6;
            }
            return t;
        } finally {
            for (IreeValue v : cache) v.close();
        }
    }

    @Override
    int[] greedy(int[] prompt, int steps) {
        List<IreeValue> cache = new ArrayList<>();
        try {
            int[] ids = new int[steps];
            float[] l = prefill(prompt, cache);
            for (int i = 0; i < steps; i++) {
                ids[i] = argmax(l);
                if (i + 1 < steps) l = step(ids[i], cache);
            }
            return ids;
        } finally {
            for (IreeValue v : cache) v.close();
        }
    }

    @Override
    float[] promptLogits(int[] prompt) {
        return prefill(prompt, null);
    }
}
