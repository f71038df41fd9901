package dev.tapeout.gradle;

import java.io.File;
import java.util.LinkedHashMap;
import java.util.Map;

import org.gradle.api.Project;
import org.gradle.api.file.ConfigurableFileCollection;
import org.gradle.api.provider.Property;

/**
 * The {@code tapeout { }} block:
 * <pre>
 * tapeout {
 *     model = 'com.example.MyModel'     // implements dev.tapeout.ModelProvider
 *     moduleName = 'my_model'           // default: the project name
 *     outputDir = file('build/tapeout') // default
 *     scope = 'model'                   // default
 *     inlineBelowBytes = 4096           // default: smaller constants are inline, the rest external
 *     packedConstants = 'FAIL'          // or 'DEQUANTIZE', or 'KEEP' (planes of codes and scales)
 *     halfConstants = 'KEEP'            // or 'WIDEN': f16/bf16 weights as stored, or widened to f32
 *     maxArchiveBytes = 0               // > 0: split the archive into files of at most this size (a set + index)
 *     maxHeapSize = '2g'                // heap of the export JVM
 *     systemProperty 'ckpt', file('w.safetensors').path  // -D for the export JVM (System.getProperty in the model)
 *     inputFiles.from('weights')        // files the model reads: changing one reruns exportIrpa
 * }
 * </pre>
 */
public class TapeoutExtension {
    private final Property<String> model;
    private final Property<String> moduleName;
    private final Property<File> outputDir;
    private final Property<String> scope;
    private final Property<Long> inlineBelowBytes;
    private final Property<String> packedConstants;
    private final Property<String> halfConstants;
    private final Property<Long> maxArchiveBytes;
    private final Property<String> maxHeapSize;
    private final ConfigurableFileCollection inputFiles;
    private final Map<String, String> systemProperties = new LinkedHashMap<>();

    public TapeoutExtension(Project project) {
        model = project.getObjects().property(String.class);
        moduleName = project.getObjects().property(String.class);
        moduleName.set(project.getName().replaceAll("[^A-Za-z0-9_.-]", "_"));
        outputDir = project.getObjects().property(File.class);
        outputDir.set(KotlinPlugin.buildDir(project, "tapeout"));
        scope = project.getObjects().property(String.class);
        scope.set("model");
        inlineBelowBytes = project.getObjects().property(Long.class);
        inlineBelowBytes.set(4096L);
        packedConstants = project.getObjects().property(String.class);
        packedConstants.set("FAIL");
        halfConstants = project.getObjects().property(String.class);
        halfConstants.set("KEEP");
        maxArchiveBytes = project.getObjects().property(Long.class);
        maxArchiveBytes.set(0L);
        maxHeapSize = project.getObjects().property(String.class);
        maxHeapSize.set("2g");
        inputFiles = project.files();
    }

    /** Files the model reads (checkpoints, tokenizers): task inputs, so changing one reruns the export. */
    public ConfigurableFileCollection getInputFiles() { return inputFiles; }

    /** System properties of the export JVM, in order. */
    public Map<String, String> getSystemProperties() { return systemProperties; }

    /** Sets the export JVM's system property {@code name} ({@code System.getProperty(name)} in the model). */
    public void systemProperty(String name, Object value) { systemProperties.put(name, String.valueOf(value)); }

    public Property<String> getModel() { return model; }
    public Property<String> getModuleName() { return moduleName; }
    public Property<File> getOutputDir() { return outputDir; }
    public Property<String> getScope() { return scope; }
    public Property<Long> getInlineBelowBytes() { return inlineBelowBytes; }
    public Property<String> getPackedConstants() { return packedConstants; }
    public Property<String> getHalfConstants() { return halfConstants; }
    public Property<Long> getMaxArchiveBytes() { return maxArchiveBytes; }
    public Property<String> getMaxHeapSize() { return maxHeapSize; }

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
}
