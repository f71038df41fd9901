package dev.tapeout.gradle;

import java.io.File;
import java.util.List;
import java.util.Map;

import org.gradle.api.file.ConfigurableFileCollection;
import org.gradle.api.file.DirectoryProperty;
import org.gradle.api.file.ProjectLayout;
import org.gradle.api.model.ObjectFactory;
import org.gradle.api.provider.ListProperty;
import org.gradle.api.provider.Property;
import org.gradle.api.provider.Provider;

/**
 * One model to export: what {@code tapeout { }} configures for the project's model, and each entry of
 * {@code tapeout { models { tiny { … } } }}. A named model starts from the block's own settings (a setting
 * it does not make is the block's) and exports to {@code build/tapeout-<name>} as {@code <name>.mlir}. Every
 * setting is a lazy property: the tasks link theirs to these when they are configured, and read values only when
 * they run.
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
    private final Provider<Map<String, String>> systemProperties;
    private final ListProperty<String> jvmArgs;
    private final ListProperty<String> args;
    private final ListProperty<String> ireeTargets;
    private final ListProperty<String> ireeFlags;
    private final Property<String> ireeCpu;
    private final Property<String> ireeCpuFeatures;
    private final Property<String> ireeCompiler;
    // "true"/"false" as a String: Gradle 4.4.1's Property<Boolean> is false until set, and unset must mean "the block's".
    private final Property<String> tuning;

    /**
     * A model's settings: the block's ({@code parent} null, defaults for {@code projectName}) or a named model's,
     * whose unset settings are {@code parent}'s.
     */
    ModelSpec(ObjectFactory objects, ProjectLayout layout, ConfigurableFileCollection inputFiles, String projectName,
              String name, ModelSpec parent) {
        this.name = name;
        model = objects.property(String.class);
        moduleName = objects.property(String.class);
        outputDir = Gradle.directoryProperty(objects, layout);
        scope = objects.property(String.class);
        inlineBelowBytes = objects.property(Long.class);
        packedConstants = objects.property(String.class);
        halfConstants = objects.property(String.class);
        maxArchiveBytes = objects.property(Long.class);
        maxHeapSize = objects.property(String.class);
        this.inputFiles = inputFiles;
        systemProperties = Gradle.stringMapProperty(objects);
        jvmArgs = Gradle.stringListProperty(objects);
        args = Gradle.stringListProperty(objects);
        ireeTargets = Gradle.stringListProperty(objects);
        ireeFlags = Gradle.stringListProperty(objects);
        ireeCpu = objects.property(String.class);
        ireeCpuFeatures = objects.property(String.class);
        ireeCompiler = objects.property(String.class);
        tuning = objects.property(String.class);
        if (parent == null) {
            moduleName.set(projectName.replaceAll("[^A-Za-z0-9_.-]", "_"));
            outputDir.set(layout.getBuildDirectory().dir("tapeout"));
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
            outputDir.set(layout.getBuildDirectory().dir("tapeout-" + name));
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
    /** {@code FAIL}, {@code DEQUANTIZE}, {@code KEEP} or {@code KEEP_ROW_BANDS}. */
    public Property<String> getPackedConstants() { return packedConstants; }
    /** {@code KEEP} or {@code WIDEN}. */
    public Property<String> getHalfConstants() { return halfConstants; }
    /** > 0: split the parameters over archives of at most this many bytes. */
    public Property<Long> getMaxArchiveBytes() { return maxArchiveBytes; }
    /** The export JVM's heap ({@code -Xmx}). */
    public Property<String> getMaxHeapSize() { return maxHeapSize; }
    /** Files the model reads (checkpoints, tokenizers): task inputs, so a change reruns the export. */
    public ConfigurableFileCollection getInputFiles() { return inputFiles; }
    /** System properties of the export JVM: a {@code MapProperty} where Gradle has one (5.1+), else a {@code Property<Map>}. */
    public Provider<Map<String, String>> getSystemProperties() { return systemProperties; }
    /** Extra arguments of the export JVM ({@code -XX:…}). */
    public ListProperty<String> getJvmArgs() { return jvmArgs; }
    /** Arguments for {@code ModelProvider.buildTape(args)}. */
    public ListProperty<String> getArgs() { return args; }

    /** compileIree's targets: {@code llvm-cpu} (default), {@code vmvx}, {@code vulkan}, {@code cuda}, {@code hip}. */
    public ListProperty<String> getIreeTargets() { return ireeTargets; }
    /** compileIree's extra iree-compile flags. */
    public ListProperty<String> getIreeFlags() { return ireeFlags; }
    /** compileIree's {@code --iree-llvmcpu-target-cpu} ({@code host} by default; {@code generic} runs anywhere). */
    public Property<String> getIreeCpu() { return ireeCpu; }
    /** compileIree's {@code --iree-llvmcpu-target-cpu-features} ({@code +avx2,+fma}; empty: the CPU's own). */
    public Property<String> getIreeCpuFeatures() { return ireeCpuFeatures; }
    /** The iree-compile to run (default: found, see CompileIreeTask). */
    public Property<String> getIreeCompiler() { return ireeCompiler; }
    /** Whether the export writes the forms of the device {@code ireeTargets} names (unset: yes); {@code false}
     *  writes the portable lowering alone, with no tuning spec. A named model's unset value is the block's. */
    public Provider<Boolean> getTuning() { return tuning.map(Boolean::valueOf); }

    /** Sets the export JVM's system property {@code name} ({@code System.getProperty(name)} in the model). */
    public void systemProperty(String key, Object value) { Gradle.put(systemProperties, key, String.valueOf(value)); }
    /** Adds arguments of the export JVM. */
    public void jvmArgs(Object... values) { for (Object v : values) jvmArgs.add(String.valueOf(v)); }
    /** Adds arguments for the model's {@code buildTape(args)}. */
    public void args(Object... values) { for (Object v : values) args.add(String.valueOf(v)); }

    // Groovy `prop = value` assignments on Gradle versions without property assignment support.
    /** {@code model = '…'}. */
    public void setModel(String v) { model.set(v); }
    /** {@code moduleName = '…'}. */
    public void setModuleName(String v) { moduleName.set(v); }
    /** {@code outputDir = file('…')}. */
    public void setOutputDir(File v) { outputDir.set(v); }
    /** {@code scope = '…'}. */
    public void setScope(String v) { scope.set(v); }
    /** {@code inlineBelowBytes = n}. */
    public void setInlineBelowBytes(long v) { inlineBelowBytes.set(v); }
    /** {@code packedConstants = '…'}. */
    public void setPackedConstants(String v) { packedConstants.set(v); }
    /** {@code halfConstants = '…'}. */
    public void setHalfConstants(String v) { halfConstants.set(v); }
    /** {@code maxArchiveBytes = n}. */
    public void setMaxArchiveBytes(long v) { maxArchiveBytes.set(v); }
    /** {@code maxHeapSize = '…'}. */
    public void setMaxHeapSize(String v) { maxHeapSize.set(v); }
    /** {@code jvmArgs = [...]}: replaces the list. */
    public void setJvmArgs(List<?> v) { Gradle.setList(jvmArgs, Gradle.strings(v)); }
    /** {@code args = [...]}: replaces the list. */
    public void setArgs(List<?> v) { Gradle.setList(args, Gradle.strings(v)); }
    /** {@code ireeTargets = [...]}. */
    public void setIreeTargets(List<?> v) { Gradle.setList(ireeTargets, Gradle.strings(v)); }
    /** {@code ireeFlags = [...]}. */
    public void setIreeFlags(List<?> v) { Gradle.setList(ireeFlags, Gradle.strings(v)); }
    /** {@code ireeCpu = '…'}. */
    public void setIreeCpu(String v) { ireeCpu.set(v); }
    /** {@code ireeCpuFeatures = '…'}. */
    public void setIreeCpuFeatures(String v) { ireeCpuFeatures.set(v); }
    /** {@code ireeCompiler = '…'}. */
    public void setIreeCompiler(String v) { ireeCompiler.set(v); }
    /** {@code tuning = true/false}. */
    public void setTuning(Boolean v) { tuning.set(v == null ? null : v.toString()); }

    /** How the build script names this model, for messages. */
    String where() { return name.isEmpty() ? "tapeout { }" : "tapeout { models { " + name + " { } } }"; }

    @Override
    public String toString() { return where(); }
}
