import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * What every engine's main shares (tests/bench/jvm_engines.py compiles it beside each): the arguments, the timing
 * plan, /proc/self/status and the one JSON line printed at the end.
 *
 * Arguments (key=value): model=PATH threads=N seq=ID,ID,... (the token ids every prefill and decode reads, the same
 * for every engine) prompt=ID,... (the greedy prompt) steps=N (greedy steps) prefill=8,128 context=64 repeats=R
 * (timed calls per figure, after one untimed) logits=PATH (where the engine writes the prompt's last-position logits
 * as little-endian f32, when it exposes them).
 *
 * An engine implements prefill (a fresh cache, `n` tokens of seq, returns nothing timed beyond the call), a decode
 * run (prefill `context` tokens, then `repeats + 1` single-token steps on seq's next ids, each timed) and greedy
 * generation of `steps` tokens from `prompt`.
 */
abstract class Bench {
    final Map<String, String> args = new HashMap<>();
    final Map<String, Object> result = new java.util.LinkedHashMap<>();

    Bench(String engine, String[] argv) {
        for (String a : argv) {
            int eq = a.indexOf('=');
            if (eq < 1) throw new IllegalArgumentException("argument '" + a + "' is not key=value (see Bench.java)");
            args.put(a.substring(0, eq), a.substring(eq + 1));
        }
        result.put("engine", engine);
        result.put("java", System.getProperty("java.version"));
        result.put("jvm_start", status());
    }

    String arg(String key) {
        String v = args.get(key);
        if (v == null) throw new IllegalArgumentException("missing argument " + key + "=… (see Bench.java)");
        return v;
    }

    int intArg(String key) { return Integer.parseInt(arg(key)); }

    int[] ids(String key) {
        String v = arg(key);
        return v.isEmpty() ? new int[0] : Arrays.stream(v.split(",")).mapToInt(Integer::parseInt).toArray();
    }

    /** Loads the model (timed as load_ms). */
    abstract void load() throws Exception;

    /** One prefill of `tokens` into a fresh cache. */
    abstract void prefill(int[] tokens) throws Exception;

    /** Prefills `context` and returns the time of each of `steps` decode steps after it (ms), on `next`'s ids. */
    abstract double[] decodeSteps(int[] context, int[] next) throws Exception;

    /** Greedy ids of `steps` tokens after `prompt`; may also put greedy_text (engines that give only text). */
    abstract int[] greedy(int[] prompt, int steps) throws Exception;

    /** The prompt's last-position logits, or null where the engine does not expose them (say why in result). */
    abstract float[] promptLogits(int[] prompt) throws Exception;

    /** Runs the plan and exits (an engine's own non-daemon threads would keep the JVM alive); a failure exits 1. */
    void runAndExit() {
        int rc = 0;
        try {
            run();
        } catch (Throwable e) {
            System.err.println(result.get("engine") + ": failed: " + e);
            e.printStackTrace();
            rc = 1;
        } finally {
            try {
                close();
            } catch (Throwable e) {
                System.err.println(result.get("engine") + ": closing failed: " + e);
            }
        }
        System.out.flush();
        System.exit(rc);
    }

    /** Frees the engine (after the JSON line is out). */
    void close() throws Exception { }

    void run() throws Exception {
        int[] seq = ids("seq");
        int repeats = intArg("repeats");
        long t0 = System.nanoTime();
        load();
        result.put("load_ms", (System.nanoTime() - t0) / 1e6);
        result.put("after_load", status());

        Map<String, Object> prefills = new java.util.LinkedHashMap<>();
        for (String n : arg("prefill").split(",")) {
            int[] tokens = Arrays.copyOf(seq, Integer.parseInt(n));
            prefill(tokens); // untimed: the first call of a shape
            double[] t = new double[repeats];
            for (int i = 0; i < repeats; i++) {
                long s = System.nanoTime();
                prefill(tokens);
                t[i] = (System.nanoTime() - s) / 1e6;
            }
            prefills.put(n, summary(t));
        }
        result.put("prefill_ms", prefills);

        int context = intArg("context");
        int[] ctx = Arrays.copyOf(seq, context);
        int[] next = Arrays.copyOfRange(seq, context, context + repeats + 1);
        double[] steps = Arrays.copyOfRange(decodeSteps(ctx, next), 1, next.length);
        // The first step after a prefill is untimed, as every other figure's first call. The figure is the mean step
        // (an engine that streams, java-llama.cpp, hands over some tokens at once and others after a wait: only the
        // mean is its step time); the per-step summary beside it.
        result.put("decode_ms", Arrays.stream(steps).average().orElseThrow());
        result.put("decode_steps_ms", summary(steps));

        int[] prompt = ids("prompt");
        int[] g = greedy(prompt, intArg("steps"));
        if (g != null) result.put("greedy", g);
        float[] logits = promptLogits(prompt);
        if (logits != null) {
            ByteBuffer b = ByteBuffer.allocate(4 * logits.length).order(ByteOrder.LITTLE_ENDIAN);
            b.asFloatBuffer().put(logits);
            Files.write(Path.of(arg("logits")), b.array());
            result.put("logits", Map.of("path", arg("logits"), "count", logits.length));
        }
        result.put("end", status());
        // The marker lets the script find this line among an engine's own log lines on stdout.
        System.out.println("JVM_ENGINES " + json(result));
    }

    static Map<String, Object> summary(double[] t) {
        double[] s = t.clone();
        Arrays.sort(s);
        int n = s.length;
        double median = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        m.put("median", median);
        m.put("min", s[0]);
        m.put("n", n);
        return m;
    }

    /** VmHWM, VmRSS, RssAnon and RssFile of this process, in bytes. */
    static Map<String, Object> status() {
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                String[] kv = line.split(":\\s+");
                if (kv.length == 2 && List.of("VmHWM", "VmRSS", "RssAnon", "RssFile").contains(kv[0])) {
                    m.put(kv[0], Long.parseLong(kv[1].replace(" kB", "").trim()) * 1024);
                }
            }
        } catch (IOException e) {
            m.put("error", "/proc/self/status: " + e.getMessage());
        }
        return m;
    }

    static int argmax(float[] v) {
        int best = 0;
        for (int i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
        return best;
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c);
            }
            return b.append('"').toString();
        }
        if (o instanceof Double d) return d.isNaN() || d.isInfinite() ? "null" : String.format(Locale.ROOT, "%.6f", d);
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof int[] a) return json(Arrays.stream(a).boxed().toList());
        if (o instanceof Map<?, ?> m) {
            List<String> parts = new ArrayList<>();
            for (var e : m.entrySet()) parts.add(json(e.getKey().toString()) + ": " + json(e.getValue()));
            return "{" + String.join(", ", parts) + "}";
        }
        if (o instanceof List<?> l) {
            List<String> parts = new ArrayList<>();
            for (Object x : l) parts.add(json(x));
            return "[" + String.join(", ", parts) + "]";
        }
        return json(o.toString());
    }
}
