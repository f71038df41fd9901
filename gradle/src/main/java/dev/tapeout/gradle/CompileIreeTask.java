package dev.tapeout.gradle;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

import javax.inject.Inject;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.file.DirectoryProperty;
import org.gradle.api.file.ProjectLayout;
import org.gradle.api.model.ObjectFactory;
import org.gradle.api.provider.ListProperty;
import org.gradle.api.provider.Property;
import org.gradle.api.provider.Provider;
import org.gradle.api.provider.ProviderFactory;
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
 * tuning spec for an llvm-cpu target ({@link #getTuningSpecFiles()}). The module, the spec and the flags are
 * inputs, the vmfb its one output, and the compiler (its path and {@code --version}) is recorded by each compile and
 * compared before the next: a second run is UP-TO-DATE, a change to any reruns it. The vmfb is written to a
 * temporary file and renamed into place, so a failed compile leaves the last good one. The settings are the task's
 * own properties, linked to the {@code tapeout { }} block when it is configured; nothing reads the project when it
 * runs.
 *
 * <p>{@code iree-compile} is {@code ireeCompiler} if set, else {@code $TAPEOUT_IREE_COMPILE}, else the build's
 * {@code .venv/bin/iree-compile} (what {@code scripts/setup} installs: PyPI {@code iree-base-compiler==3.13.0}),
 * else the one on {@code PATH}.
 */
public class CompileIreeTask extends DefaultTask {
    private static final String TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path";
    /** The compiler and its {@code --version} of the last compile, in the task's temporary folder. */
    private static final String COMPILER_STAMP = "compiler.txt";
    private final Property<String> model;
    private final Property<String> moduleName;
    private final DirectoryProperty outputDir;
    private final ListProperty<String> ireeTargets;
    private final ListProperty<String> ireeFlags;
    private final Property<String> ireeCpu;
    private final Property<String> ireeCpuFeatures;
    private final Property<String> ireeCompiler;
    private final Property<String> compilerFromEnvironment;
    private final Property<Boolean> hasNamedModels;
    private File venvCompiler;
    private String where = "tapeout { }:";

    /** A task whose settings are its own properties, linked to a {@link ModelSpec} by {@link #link}. */
    @Inject
    public CompileIreeTask(ObjectFactory objects, ProjectLayout layout) {
        model = objects.property(String.class);
        moduleName = objects.property(String.class);
        outputDir = Gradle.directoryProperty(objects, layout);
        ireeTargets = Gradle.stringListProperty(objects);
        ireeFlags = Gradle.stringListProperty(objects);
        ireeCpu = objects.property(String.class);
        ireeCpuFeatures = objects.property(String.class);
        ireeCompiler = objects.property(String.class);
        compilerFromEnvironment = objects.property(String.class);
        hasNamedModels = objects.property(Boolean.class);
        hasNamedModels.set(false);
        venvCompiler = new File(layout.getProjectDirectory().getAsFile(), ".venv/bin/iree-compile");
        // A new compiler reruns the task: its --version, asked when the task would otherwise be UP-TO-DATE, against
        // the one the last compile recorded (not an @Input, whose getter Gradle calls whenever it fingerprints).
        getOutputs().upToDateWhen(t -> ((CompileIreeTask) t).compilerUnchanged());
        onlyIf(t -> ((CompileIreeTask) t).model.isPresent() || !((CompileIreeTask) t).hasNamedModels.get());
    }

    /**
     * Links this task's settings to {@code spec}'s, and where {@code spec} leaves one unset to {@code parent}'s (null
     * for the block itself), lazily and without holding either; {@code rootDir} is where {@code .venv/bin} is looked
     * for.
     */
    void link(ModelSpec spec, ModelSpec parent, ProviderFactory providers, File rootDir) {
        where = spec.where() + ":";
        model.set(spec.getModel());
        moduleName.set(spec.getModuleName());
        outputDir.set(spec.getOutputDir());
        ireeTargets.set(ExportIrpaTask.ownOrParent(providers, spec.getIreeTargets(), parent == null ? null : parent.getIreeTargets()));
        if (parent != null) ireeFlags.addAll(parent.getIreeFlags());
        ireeFlags.addAll(spec.getIreeFlags());
        ireeCpu.set(spec.getIreeCpu());
        ireeCpuFeatures.set(spec.getIreeCpuFeatures());
        Provider<String> own = spec.getIreeCompiler();
        Provider<String> inherited = parent == null ? null : parent.getIreeCompiler();
        ireeCompiler.set(providers.provider(() -> own.isPresent() ? own.get() : inherited == null ? null : inherited.getOrNull()));
        compilerFromEnvironment.set(Gradle.environmentVariable(providers, "TAPEOUT_IREE_COMPILE"));
        venvCompiler = new File(rootDir, ".venv/bin/iree-compile");
    }

    /** Marks the block's task as one that runs named models: without a model of its own, it has nothing to do. */
    void runsNamedModels() { hasNamedModels.set(true); }

    private File outputDir() { return outputDir.get().getAsFile(); }

    /** The exported module. */
    @InputFile
    public File getModuleFile() { return new File(outputDir(), moduleName.get() + ".mlir"); }

    /**
     * The tuning spec the export wrote beside the module ({@code <moduleName>.tuning.mlir}, when the module has
     * products IREE's CPU backend computes faster with it: a Q8_0 / Q4_0 weight kept packed, a bf16 or f16 weight in
     * row bands): passed to an llvm-cpu compile as {@code --iree-codegen-tuning-spec-path} unless {@code ireeFlags}
     * name a spec of their own. Empty when absent.
     */
    @InputFiles
    public List<File> getTuningSpecFiles() {
        File file = new File(outputDir(), moduleName.get() + ".tuning.mlir");
        return file.isFile() ? java.util.Collections.singletonList(file) : java.util.Collections.<File>emptyList();
    }

    /** The compiled module, beside the archive. */
    @OutputFile
    public File getVmfbFile() { return new File(outputDir(), moduleName.get() + ".vmfb"); }

    /** The iree-compile this task runs. */
    @Internal
    public File getCompiler() {
        String explicit = ireeCompiler.getOrNull();
        if (explicit != null) return requireExecutable(new File(explicit), "tapeout { ireeCompiler = '" + explicit + "' }");
        String env = compilerFromEnvironment.getOrNull();
        if (env != null && !env.isEmpty()) return requireExecutable(new File(env), "TAPEOUT_IREE_COMPILE=" + env);
        if (venvCompiler.canExecute()) return venvCompiler;
        String path = System.getenv("PATH");
        if (path != null) {
            for (String dir : path.split(File.pathSeparator)) {
                File candidate = new File(dir, "iree-compile");
                if (candidate.isFile() && candidate.canExecute()) return candidate;
            }
        }
        throw new GradleException("iree-compile not found (not in " + venvCompiler + " nor on PATH): install IREE's compiler "
            + "(pip install iree-base-compiler==3.13.0, which scripts/setup does into .venv), or set "
            + "tapeout { ireeCompiler = '/path/to/iree-compile' } or TAPEOUT_IREE_COMPILE");
    }

    private static File requireExecutable(File f, String where) {
        if (!f.isFile() || !f.canExecute()) throw new GradleException(where + ": " + f + " is not an executable file");
        return f;
    }

    /** {@code <compiler path>\n<its --version>}. */
    private String compilerIdentity() throws IOException, InterruptedException {
        File compiler = getCompiler();
        StringBuilder out = new StringBuilder();
        int rc = Gradle.run(new ProcessBuilder(compiler.getPath(), "--version"), line -> out.append(line).append('\n'), null);
        if (rc != 0) throw new GradleException(compiler + " --version failed (exit " + rc + "):\n" + out);
        return compiler.getPath() + "\n" + out.toString().trim();
    }

    /** Whether the compiler is the one the last compile recorded (false when none is recorded). */
    private boolean compilerUnchanged() {
        File stamp = new File(getTemporaryDir(), COMPILER_STAMP);
        if (!stamp.isFile()) return false;
        try {
            return new String(Files.readAllBytes(stamp.toPath()), StandardCharsets.UTF_8).equals(compilerIdentity());
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** The flags: one target device per entry of {@code ireeTargets}, the CPU and its features, then {@code ireeFlags}. */
    @Input
    public List<String> getFlags() {
        List<String> targets = ireeTargets.get();
        if (targets.isEmpty()) targets = java.util.Collections.singletonList("llvm-cpu");
        String cpu = ireeCpu.getOrNull();
        String features = ireeCpuFeatures.getOrNull();
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
                    throw new GradleException(where + " ireeTargets has '" + t + "': use llvm-cpu, vmvx, vulkan, cuda or hip");
            }
        }
        if (targets.contains("llvm-cpu")) {
            flags.add("--iree-llvmcpu-target-cpu=" + (cpu == null || cpu.isEmpty() ? "host" : cpu));
            if (features != null && !features.isEmpty()) flags.add("--iree-llvmcpu-target-cpu-features=" + features);
        }
        List<String> user = ireeFlags.get();
        boolean ownSpec = false;
        for (String f : user) ownSpec |= f.startsWith(TUNING_SPEC_FLAG);
        List<File> tuning = getTuningSpecFiles();
        if (targets.contains("llvm-cpu") && !ownSpec && !tuning.isEmpty()) {
            flags.add(TUNING_SPEC_FLAG + "=" + tuning.get(0).getPath());
            // IREE 3.13 can deadlock loading a tuning spec while it configures executables on several threads
            // (the spec's loader holds a lock across a parallel verification): one thread.
            flags.add("--mlir-disable-threading");
        }
        flags.addAll(user);
        return flags;
    }

    @TaskAction
    public void compile() throws IOException, InterruptedException {
        File vmfb = getVmfbFile();
        File tmp = new File(vmfb.getPath() + ".tmp");
        String compiler = compilerIdentity();
        List<String> cmd = new ArrayList<>();
        cmd.add(getCompiler().getPath());
        cmd.addAll(getFlags());
        cmd.add(getModuleFile().getPath());
        cmd.add("-o");
        cmd.add(tmp.getPath());
        getLogger().info("tapeout: {}", cmd);
        StringBuilder output = new StringBuilder();
        int rc = Gradle.run(new ProcessBuilder(cmd), line -> output.append(line).append('\n'), null);
        if (rc != 0) {
            Files.deleteIfExists(tmp.toPath());
            String[] lines = output.toString().split("\n");
            StringBuilder shown = new StringBuilder();
            for (int i = 0; i < Math.min(lines.length, 40); i++) shown.append(lines[i]).append('\n');
            if (lines.length > 40) shown.append("… (").append(lines.length - 40).append(" more lines)\n");
            throw new GradleException("iree-compile failed on " + getModuleFile() + " (exit " + rc + "):\n" + shown
                + "command: " + String.join(" ", cmd));
        }
        Files.move(tmp.toPath(), vmfb.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        Files.write(new File(getTemporaryDir(), COMPILER_STAMP).toPath(), compiler.getBytes(StandardCharsets.UTF_8));
        getLogger().lifecycle("tapeout: compiled " + vmfb + " (" + vmfb.length() + " bytes)");
    }
}
