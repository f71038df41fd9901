package dev.tapeout.gradle;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.file.FileCollection;
import org.gradle.api.provider.Property;
import org.gradle.api.tasks.Classpath;
import org.gradle.api.tasks.Input;
import org.gradle.api.tasks.InputFiles;
import org.gradle.api.tasks.Internal;
import org.gradle.api.tasks.OutputDirectory;
import org.gradle.api.tasks.TaskAction;

/**
 * Exports the model to {@code <outputDir>/<moduleName>.mlir} and {@code .irpa} (or, with {@code maxArchiveBytes},
 * the shards of an archive set and its {@code .irpa.index.json}) in a forked JVM running
 * {@code dev.tapeout.ExportMain} on the project's runtime classpath. Every setting and the classpath are inputs,
 * so a second run is UP-TO-DATE and any change reruns it. A Kotlin exception becomes a build failure whose
 * message is the exception's message.
 */
public class ExportIrpaTask extends DefaultTask {
    private FileCollection classpath;
    private final Property<String> model = getProject().getObjects().property(String.class);
    private final Property<String> moduleName = getProject().getObjects().property(String.class);
    private final Property<File> outputDir = getProject().getObjects().property(File.class);
    private final Property<String> scope = getProject().getObjects().property(String.class);
    private final Property<Long> inlineBelowBytes = getProject().getObjects().property(Long.class);
    private final Property<String> packedConstants = getProject().getObjects().property(String.class);
    private final Property<String> halfConstants = getProject().getObjects().property(String.class);
    private final Property<Long> maxArchiveBytes = getProject().getObjects().property(Long.class);
    private final Property<String> maxHeapSize = getProject().getObjects().property(String.class);

    private FileCollection inputFiles;
    private java.util.Map<String, String> systemProperties = new java.util.LinkedHashMap<>();

    @Classpath
    public FileCollection getClasspath() { return classpath; }

    /** Files the model reads ({@code tapeout { inputFiles.from(…) }}): changing one reruns the export. */
    @InputFiles
    public FileCollection getInputFiles() { return inputFiles; }
    public void setInputFiles(FileCollection files) { this.inputFiles = files; }

    /** System properties of the export JVM ({@code tapeout { systemProperty 'k', 'v' }}). */
    @Input
    public java.util.Map<String, String> getSystemProperties() { return systemProperties; }
    public void setSystemProperties(java.util.Map<String, String> p) { this.systemProperties = p; }
    public void setClasspath(FileCollection classpath) { this.classpath = classpath; }

    @Internal public Property<String> getModelProperty() { return model; }
    @Internal public Property<String> getModuleNameProperty() { return moduleName; }
    @Internal public Property<File> getOutputDirProperty() { return outputDir; }
    @Internal public Property<String> getScopeProperty() { return scope; }
    @Internal public Property<Long> getInlineBelowBytesProperty() { return inlineBelowBytes; }
    @Internal public Property<String> getPackedConstantsProperty() { return packedConstants; }
    @Internal public Property<String> getHalfConstantsProperty() { return halfConstants; }
    @Internal public Property<Long> getMaxArchiveBytesProperty() { return maxArchiveBytes; }
    @Internal public Property<String> getMaxHeapSizeProperty() { return maxHeapSize; }

    @Input
    public String getModel() {
        if (!model.isPresent()) {
            throw new GradleException("tapeout { model = '…' } is not set: name the class that implements dev.tapeout.ModelProvider");
        }
        return model.get();
    }

    @Input public String getModuleName() { return moduleName.get(); }
    @Input public String getScope() { return scope.get(); }
    @Input public Long getInlineBelowBytes() { return inlineBelowBytes.get(); }
    @Input public String getMaxHeapSize() { return maxHeapSize.get(); }

    @Input
    public Long getMaxArchiveBytes() {
        long v = maxArchiveBytes.get();
        if (v < 0) {
            throw new GradleException("tapeout { maxArchiveBytes = " + v + " }: use 0 (one archive) or a positive size in bytes");
        }
        return v;
    }

    @Input
    public String getPackedConstants() { return oneOf("packedConstants", packedConstants.get(), "FAIL", "DEQUANTIZE", "KEEP"); }

    @Input
    public String getHalfConstants() { return oneOf("halfConstants", halfConstants.get(), "KEEP", "WIDEN"); }

    /** {@code value} upper-cased when it is one of {@code allowed}; otherwise a build error naming the setting. */
    private static String oneOf(String setting, String value, String... allowed) {
        String v = value.toUpperCase();
        for (String a : allowed) {
            if (a.equals(v)) return v;
        }
        String choices = allowed.length == 2 ? allowed[0] + " or " + allowed[1]
            : String.join(", ", java.util.Arrays.copyOf(allowed, allowed.length - 1)) + " or " + allowed[allowed.length - 1];
        throw new GradleException("tapeout { " + setting + " = '" + value + "' }: use " + choices);
    }

    @OutputDirectory
    public File getOutputDir() { return outputDir.get(); }

    @TaskAction
    public void export() throws IOException, InterruptedException {
        File java = new File(System.getProperty("java.home"), "bin/java");
        List<String> cmd = new ArrayList<>();
        cmd.add(java.getAbsolutePath());
        cmd.add("-Xmx" + getMaxHeapSize());
        for (java.util.Map.Entry<String, String> e : systemProperties.entrySet()) cmd.add("-D" + e.getKey() + "=" + e.getValue());
        cmd.add("-cp");
        cmd.add(classpath.getAsPath());
        cmd.add("dev.tapeout.ExportMain");
        cmd.add(getModel());
        cmd.add(getOutputDir().getAbsolutePath());
        cmd.add(getModuleName());
        cmd.add(getScope());
        cmd.add(String.valueOf(getInlineBelowBytes()));
        cmd.add(getPackedConstants());
        cmd.add(getHalfConstants());
        cmd.add(String.valueOf(getMaxArchiveBytes()));
        getLogger().info("tapeout: {}", cmd);

        ProcessBuilder pb = new ProcessBuilder(cmd);
        Process p = pb.start();
        List<String> errors = new ArrayList<>();
        Thread err = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (errors) { errors.add(line); }
                }
            } catch (IOException ignored) {
                // the process is gone; its exit code tells
            }
        });
        err.start();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) getLogger().lifecycle(line);
        }
        int rc = p.waitFor();
        err.join();
        if (rc != 0) {
            String message = null;
            for (String e : errors) {
                if (e.startsWith("tapeout: error: ")) message = e.substring("tapeout: error: ".length());
            }
            if (message == null) {
                message = "the export JVM exited with code " + rc + (errors.isEmpty() ? "" : ":\n" + String.join("\n", errors));
            }
            throw new GradleException(message);
        }
    }
}
