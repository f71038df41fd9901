package dev.tapeout.gradle;

import java.io.File;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.gradle.api.Project;
import org.gradle.api.file.ConfigurableFileCollection;
import org.gradle.api.file.DirectoryProperty;
import org.gradle.api.provider.Property;

/**
 * One model to export: what {@code tapeout { }} configures for the project's model, and each entry of
 * {@code tapeout { models { tiny { … } } }}. A named model starts from the block's own settings (a setting
 * it does not make is the block's) and exports to {@code build/tapeout-<name>} as {@code <name>.mlir}.
 */
public class ModelSpec {
    private final String name;
    private final Property<String> model;
    private final Property<String> moduleName;
    private final DirectoryProperty outputDir;
    private final Property<String> scope;
    private final Property<Long> inlineBelowBytes;
    private final Property<String> packedConstants;
    private final Property<String> halfConstants;
    private final Property<Long> maxArchiveBytes;
    private final Property<String> maxHeapSize;
    private final ConfigurableFileCollection inputFiles;
    private final Map<String, String> systemProperties = new LinkedHashMap<>();
    private final List<String> jvmArgs = new ArrayList<>();
    private final List<String> args = new ArrayList<>();
    private final List<String> ireeTargets = new ArrayList<>();
    private final List<String> ireeFlags = new ArrayList<>();
    private final Property<String> ireeCpu;
    private final Property<String> ireeCpuFeatures;
    private final Property<String> ireeCompiler;
    // A plain field: Gradle 4.4.1's Property<Boolean> is false until set, and unset must mean "the block's".
    private Boolean tuning;

    /** The project's own model: the {@code tapeout { }} block. */
    ModelSpec(Project project) {
        this(project, "", null);
    }

    /** A named model whose unset settings are [parent]'s. */
    ModelSpec(Project project, String name, ModelSpec parent) {
        this.name = name;
        model = project.getObjects().property(String.class);
        moduleName = project.getObjects().property(String.class);
        outputDir = Gradle.directoryProperty(project);
        scope = project.getObjects().property(String.class);
        inlineBelowBytes = project.getObjects().property(Long.class);
        packedConstants = project.getObjects().property(String.class);
        halfConstants = project.getObjects().property(String.class);
        maxArchiveBytes = project.getObjects().property(Long.class);
        maxHeapSize = project.getObjects().property(String.class);
        inputFiles = project.files();
        ireeCpu = project.getObjects().property(String.class);
        ireeCpuFeatures = project.getObjects().property(String.class);
        ireeCompiler = project.getObjects().property(String.class);
        if (parent == null) {
            moduleName.set(project.getName().replaceAll("[^A-Za-z0-9_.-]", "_"));
            outputDir.set(KotlinPlugin.buildDir(project, "tapeout"));
            scope.set("model");
            inlineBelowBytes.set(4096L);
            packedConstants.set("FAIL");
            halfConstants.set("KEEP");
            maxArchiveBytes.set(0L);
            maxHeapSize.set("2g");
            ireeCpu.set("host");
            ireeCpuFeatures.set("");
        } else {
            model.set(parent.model);
            moduleName.set(name);
            outputDir.set(KotlinPlugin.buildDir(project, "tapeout-" + name));
            scope.set(parent.scope);
            inlineBelowBytes.set(parent.inlineBelowBytes);
            packedConstants.set(parent.packedConstants);
            halfConstants.set(parent.halfConstants);
            maxArchiveBytes.set(parent.maxArchiveBytes);
            maxHeapSize.set(parent.maxHeapSize);
            ireeCpu.set(parent.ireeCpu);
            ireeCpuFeatures.set(parent.ireeCpuFeatures);
        }
    }

    /** The entry's name in {@code models { }}; {@code ""} for the block itself. */
    public String getName() { return name; }

    /** The class that implements {@code dev.tapeout.ModelProvider}. */
    public Property<String> getModel() { return model; }
    /** The module name and the output files' stem. */
    public Property<String> getModuleName() { return moduleName; }
    /** Where the module and archive go. */
    public DirectoryProperty getOutputDir() { return outputDir; }
    /** The parameter scope of the external parameters ({@code --parameters=<scope>=<file>}). */
    public Property<String> getScope() { return scope; }
    /** Constants smaller than this are inline, the rest external parameters. */
    public Property<Long> getInlineBelowBytes() { return inlineBelowBytes; }
    /** {@code FAIL}, {@code DEQUANTIZE} or {@code KEEP}. */
    public Property<String> getPackedConstants() { return packedConstants; }
    /** {@code KEEP} or {@code WIDEN}. */
    public Property<String> getHalfConstants() { return halfConstants; }
    /** > 0: split the parameters over archives of at most this many bytes. */
    public Property<Long> getMaxArchiveBytes() { return maxArchiveBytes; }
    /** The export JVM's heap ({@code -Xmx}). */
    public Property<String> getMaxHeapSize() { return maxHeapSize; }
    /** Files the model reads (checkpoints, tokenizers): task inputs, so a change reruns the export. */
    public ConfigurableFileCollection getInputFiles() { return inputFiles; }
    /** System properties of the export JVM. */
    public Map<String, String> getSystemProperties() { return systemProperties; }
    /** Extra arguments of the export JVM ({@code -XX:…}). */
    public List<String> getJvmArgs() { return jvmArgs; }
    /** Arguments for {@code ModelProvider.buildTape(args)}. */
    public List<String> getArgs() { return args; }

    /** compileIree's targets: {@code llvm-cpu} (default), {@code vmvx}, {@code vulkan}, {@code cuda}, {@code hip}. */
    public List<String> getIreeTargets() { return ireeTargets; }
    /** compileIree's extra iree-compile flags. */
    public List<String> getIreeFlags() { return ireeFlags; }
    /** compileIree's {@code --iree-llvmcpu-target-cpu} ({@code host} by default; {@code generic} runs anywhere). */
    public Property<String> getIreeCpu() { return ireeCpu; }
    /** compileIree's {@code --iree-llvmcpu-target-cpu-features} ({@code +avx2,+fma}; empty: the CPU's own). */
    public Property<String> getIreeCpuFeatures() { return ireeCpuFeatures; }
    /** The iree-compile to run (default: found, see CompileIreeTask). */
    public Property<String> getIreeCompiler() { return ireeCompiler; }
    /** Whether the export writes the forms of the device {@code ireeTargets} names (unset: yes); {@code false}
     *  writes the portable lowering alone, with no tuning spec. A named model's unset value is the block's. */
    public Boolean getTuning() { return tuning; }

    /** Sets the export JVM's system property {@code name} ({@code System.getProperty(name)} in the model). */
    public void systemProperty(String key, Object value) { systemProperties.put(key, String.valueOf(value)); }
    /** Adds arguments of the export JVM. */
    public void jvmArgs(Object... values) { for (Object v : values) jvmArgs.add(String.valueOf(v)); }
    /** Adds arguments for the model's {@code buildTape(args)}. */
    public void args(Object... values) { for (Object v : values) args.add(String.valueOf(v)); }

    // Groovy `prop = value` assignments on Gradle versions without property assignment support.
    public void setModel(String v) { model.set(v); }
    public void setModuleName(String v) { moduleName.set(v); }
    public void setOutputDir(File v) { outputDir.set(v); }
    public void setScope(String v) { scope.set(v); }
    public void setInlineBelowBytes(long v) { inlineBelowBytes.set(v); }
    public void setPackedConstants(String v) { packedConstants.set(v); }
    public void setHalfConstants(String v) { halfConstants.set(v); }
    public void setMaxArchiveBytes(long v) { maxArchiveBytes.set(v); }
    public void setMaxHeapSize(String v) { maxHeapSize.set(v); }
    public void setJvmArgs(List<?> v) { jvmArgs.clear(); jvmArgs(v.toArray()); }
    public void setArgs(List<?> v) { args.clear(); args(v.toArray()); }
    public void setIreeTargets(List<?> v) { ireeTargets.clear(); for (Object o : v) ireeTargets.add(String.valueOf(o)); }
    public void setIreeFlags(List<?> v) { ireeFlags.clear(); for (Object o : v) ireeFlags.add(String.valueOf(o)); }
    public void setIreeCpu(String v) { ireeCpu.set(v); }
    public void setIreeCpuFeatures(String v) { ireeCpuFeatures.set(v); }
    public void setIreeCompiler(String v) { ireeCompiler.set(v); }
    public void setTuning(Boolean v) { tuning = v; }

    @Override
    public String toString() { return name.isEmpty() ? "tapeout { }" : "tapeout { models { " + name + " { } } }"; }
}
