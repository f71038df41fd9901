package dev.tapeout.gradle;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.tasks.Input;
import org.gradle.api.tasks.InputFile;
import org.gradle.api.tasks.InputFiles;
import org.gradle.api.tasks.Internal;
import org.gradle.api.tasks.OutputFile;
import org.gradle.api.tasks.TaskAction;

/**
 * Compiles one exported model ({@code <outputDir>/<moduleName>.mlir}) with IREE's {@code iree-compile} into
 * {@code <outputDir>/<moduleName>.vmfb}, beside its archive, for the targets of {@code tapeout { iree { } }}-style
 * settings ({@code ireeTargets}, {@code ireeCpu}, {@code ireeCpuFeatures}, {@code ireeFlags}), with the export's
 * tuning spec for an llvm-cpu target ({@link #getTuningSpecFiles()}). The module, the spec, the
 * flags and the compiler's version are inputs: a second run is UP-TO-DATE, a change to any reruns it. The vmfb is
 * written to a temporary file and renamed into place, so a failed compile leaves the last good one.
 *
 * <p>{@code iree-compile} is {@code ireeCompiler} if set, else {@code $TAPEOUT_IREE_COMPILE}, else the build's
 * {@code .venv/bin/iree-compile} (what {@code scripts/setup} installs: PyPI {@code iree-base-compiler==3.13.0}),
 * else the one on {@code PATH}.
 */
public class CompileIreeTask extends DefaultTask {
    private static final String TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path";
    private ModelSpec spec;
    private ModelSpec parent;
    private String compilerVersion;

    /** The model whose export this task compiles, and the block it inherits settings from (null for the block). */
    void setSpec(ModelSpec spec, ModelSpec parent) {
        this.spec = spec;
        this.parent = parent;
    }

    /** The settings this task reads. */
    @Internal
    public ModelSpec getSpec() { return spec; }

    private File outputDir() { return spec.getOutputDir().get().getAsFile(); }

    /** The exported module. */
    @InputFile
    public File getModuleFile() { return new File(outputDir(), spec.getModuleName().get() + ".mlir"); }

    /**
     * The tuning spec the export wrote beside the module ({@code <moduleName>.tuning.mlir}, when the module has
     * products IREE's CPU backend computes faster with it: a Q8_0 / Q4_0 weight kept packed, a bf16 or f16 weight in
     * row bands): passed to an llvm-cpu compile as {@code --iree-codegen-tuning-spec-path} unless {@code ireeFlags}
     * name a spec of their own. Empty when absent.
     */
    @InputFiles
    public List<File> getTuningSpecFiles() {
        File file = new File(outputDir(), spec.getModuleName().get() + ".tuning.mlir");
        return file.isFile() ? java.util.Collections.singletonList(file) : java.util.Collections.<File>emptyList();
    }

    /** The compiled module. */
    @OutputFile
    public File getVmfbFile() { return new File(outputDir(), spec.getModuleName().get() + ".vmfb"); }

    /** The iree-compile this task runs. */
    @Internal
    public File getCompiler() {
        String explicit = spec.getIreeCompiler().getOrNull();
        if (explicit == null && parent != null) explicit = parent.getIreeCompiler().getOrNull();
        if (explicit != null) return requireExecutable(new File(explicit), "tapeout { ireeCompiler = '" + explicit + "' }");
        String env = System.getenv("TAPEOUT_IREE_COMPILE");
        if (env != null && !env.isEmpty()) return requireExecutable(new File(env), "TAPEOUT_IREE_COMPILE=" + env);
        File venv = new File(getProject().getRootDir(), ".venv/bin/iree-compile");
        if (venv.canExecute()) return venv;
        String path = System.getenv("PATH");
        if (path != null) {
            for (String dir : path.split(File.pathSeparator)) {
                File candidate = new File(dir, "iree-compile");
                if (candidate.isFile() && candidate.canExecute()) return candidate;
            }
        }
        throw new GradleException("iree-compile not found (not in " + venv + " nor on PATH): install IREE's compiler "
            + "(pip install iree-base-compiler==3.13.0, which scripts/setup does into .venv), or set "
            + "tapeout { ireeCompiler = '/path/to/iree-compile' } or TAPEOUT_IREE_COMPILE");
    }

    private static File requireExecutable(File f, String where) {
        if (!f.isFile() || !f.canExecute()) throw new GradleException(where + ": " + f + " is not an executable file");
        return f;
    }

    /** {@code iree-compile --version}: a new compiler reruns the task. */
    @Input
    public String getCompilerVersion() throws IOException, InterruptedException {
        if (compilerVersion == null) {
            Result r = run(java.util.Arrays.asList(getCompiler().getPath(), "--version"));
            if (r.code != 0) throw new GradleException(getCompiler() + " --version failed (exit " + r.code + "):\n" + r.output);
            compilerVersion = r.output.trim();
        }
        return compilerVersion;
    }

    /** The flags: one target device per entry of {@code ireeTargets}, the CPU and its features, then {@code ireeFlags}. */
    @Input
    public List<String> getFlags() {
        List<String> targets = spec.getIreeTargets().isEmpty() && parent != null ? parent.getIreeTargets() : spec.getIreeTargets();
        if (targets.isEmpty()) targets = java.util.Collections.singletonList("llvm-cpu");
        String cpu = spec.getIreeCpu().getOrNull();
        String features = spec.getIreeCpuFeatures().getOrNull();
        List<String> flags = new ArrayList<>();
        flags.add("--iree-input-type=stablehlo");
        for (String t : targets) {
            switch (t) {
                case "llvm-cpu":
                case "vmvx":
                    flags.add("--iree-hal-target-device=local");
                    flags.add("--iree-hal-local-target-device-backends=" + t);
                    break;
                case "vulkan":
                case "vulkan-spirv":
                    flags.add("--iree-hal-target-device=vulkan");
                    break;
                case "cuda":
                    flags.add("--iree-hal-target-device=cuda");
                    break;
                case "hip":
                case "rocm":
                    flags.add("--iree-hal-target-device=hip");
                    break;
                default:
                    throw new GradleException(where() + " ireeTargets has '" + t + "': use llvm-cpu, vmvx, vulkan, cuda or hip");
            }
        }
        if (targets.contains("llvm-cpu")) {
            flags.add("--iree-llvmcpu-target-cpu=" + (cpu == null || cpu.isEmpty() ? "host" : cpu));
            if (features != null && !features.isEmpty()) flags.add("--iree-llvmcpu-target-cpu-features=" + features);
        }
        List<String> user = new ArrayList<>();
        if (parent != null) user.addAll(parent.getIreeFlags());
        user.addAll(spec.getIreeFlags());
        boolean ownSpec = false;
        for (String f : user) ownSpec |= f.startsWith(TUNING_SPEC_FLAG);
        List<File> tuning = getTuningSpecFiles();
        if (targets.contains("llvm-cpu") && !ownSpec && !tuning.isEmpty()) {
            flags.add(TUNING_SPEC_FLAG + "=" + tuning.get(0).getPath());
            // IREE 3.13 can deadlock loading a tuning spec while it configures executables on several threads
            // (the spec's loader holds a lock across a parallel verification; docs/performance.md): one thread.
            flags.add("--mlir-disable-threading");
        }
        flags.addAll(user);
        return flags;
    }

    private String where() {
        return spec.getName().isEmpty() ? "tapeout { }:" : "tapeout { models { " + spec.getName() + " { } } }:";
    }

    @TaskAction
    public void compile() throws IOException, InterruptedException {
        File vmfb = getVmfbFile();
        File tmp = new File(vmfb.getPath() + ".tmp");
        List<String> cmd = new ArrayList<>();
        cmd.add(getCompiler().getPath());
        cmd.addAll(getFlags());
        cmd.add(getModuleFile().getPath());
        cmd.add("-o");
        cmd.add(tmp.getPath());
        getLogger().info("tapeout: {}", cmd);
        Result r = run(cmd);
        if (r.code != 0) {
            Files.deleteIfExists(tmp.toPath());
            String[] lines = r.output.split("\n");
            StringBuilder shown = new StringBuilder();
            for (int i = 0; i < Math.min(lines.length, 40); i++) shown.append(lines[i]).append('\n');
            if (lines.length > 40) shown.append("… (").append(lines.length - 40).append(" more lines)\n");
            throw new GradleException("iree-compile failed on " + getModuleFile() + " (exit " + r.code + "):\n" + shown
                + "command: " + String.join(" ", cmd));
        }
        Files.move(tmp.toPath(), vmfb.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        getLogger().lifecycle("tapeout: compiled " + vmfb + " (" + vmfb.length() + " bytes)");
    }

    private static final class Result {
        final int code;
        final String output;
        Result(int code, String output) { this.code = code; this.output = output; }
    }

    private static Result run(List<String> cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (InputStream in = p.getInputStream()) {
            byte[] buf = new byte[8192];
            int n;
            while ((n = in.read(buf)) > 0) out.write(buf, 0, n);
        }
        return new Result(p.waitFor(), new String(out.toByteArray(), StandardCharsets.UTF_8));
    }
}
