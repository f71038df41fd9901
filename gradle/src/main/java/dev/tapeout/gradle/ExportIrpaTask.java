package dev.tapeout.gradle;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import javax.inject.Inject;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.file.ConfigurableFileCollection;
import org.gradle.api.file.DirectoryProperty;
import org.gradle.api.file.FileCollection;
import org.gradle.api.file.ProjectLayout;
import org.gradle.api.model.ObjectFactory;
import org.gradle.api.provider.ListProperty;
import org.gradle.api.provider.Property;
import org.gradle.api.provider.Provider;
import org.gradle.api.provider.ProviderFactory;
import org.gradle.api.tasks.Classpath;
import org.gradle.api.tasks.Input;
import org.gradle.api.tasks.InputFiles;
import org.gradle.api.tasks.Internal;
import org.gradle.api.tasks.OutputFiles;
import org.gradle.api.tasks.TaskAction;

/**
 * Exports one model ({@link ModelSpec}) to {@code <outputDir>/<moduleName>.mlir} and {@code .irpa} (or, with
 * {@code maxArchiveBytes}, the shards of an archive set and its {@code .irpa.index.json}) in a forked JVM running
 * {@code dev.tapeout.ExportMain} on the project's runtime classpath, which reads the settings from a request
 * file and answers with a response file ({@link ExportExchange}). Every setting, the classpath and
 * {@code inputFiles} are inputs, and so are the files the model's tape read last time (checkpoints opened with
 * {@code SafeTensors.open}/{@code Gguf.open}, listed by ExportMain in {@code <moduleName>.inputs}): a second
 * run is UP-TO-DATE, any change reruns it. A failure in the model is a build failure with its message, and for an
 * exception the model's own top stack frames. The settings are the task's own properties, linked to the
 * {@code tapeout { }} block when it is configured ({@link #link}); the outputs are the exact files the export writes
 * ({@link #getExportedFiles()}), not the folder they share with {@code compileIree}'s vmfb; a cancelled build destroys
 * the export JVM.
 */
public class ExportIrpaTask extends DefaultTask {
    private final ConfigurableFileCollection classpath;
    private final ConfigurableFileCollection inputFiles;
    private final Property<String> model;
    private final Property<String> moduleName;
    private final DirectoryProperty outputDir;
    private final Property<String> scope;
    private final Property<Long> inlineBelowBytes;
    private final Property<String> packedConstants;
    private final Property<String> halfConstants;
    private final Property<Long> maxArchiveBytes;
    private final Property<String> maxHeapSize;
    private final Property<Boolean> tuning;
    private final Provider<Map<String, String>> systemProperties;
    private final ListProperty<String> jvmArgs;
    private final ListProperty<String> args;
    private final ListProperty<String> ireeTargets;
    private final Property<Boolean> hasNamedModels;
    private String where = "tapeout { }";

    /** A task whose settings are its own properties, linked to a {@link ModelSpec} by {@link #link}. */
    @Inject
    public ExportIrpaTask(ObjectFactory objects, ProjectLayout layout) {
        // project.files(): objects.fileCollection() is Gradle 5.3+; a constructor runs at configuration.
        classpath = getProject().files();
        inputFiles = getProject().files();
        model = objects.property(String.class);
        moduleName = objects.property(String.class);
        outputDir = Gradle.directoryProperty(objects, layout);
        scope = objects.property(String.class);
        inlineBelowBytes = objects.property(Long.class);
        packedConstants = objects.property(String.class);
        halfConstants = objects.property(String.class);
        maxArchiveBytes = objects.property(Long.class);
        maxHeapSize = objects.property(String.class);
        tuning = objects.property(Boolean.class);
        systemProperties = Gradle.stringMapProperty(objects);
        jvmArgs = Gradle.stringListProperty(objects);
        args = Gradle.stringListProperty(objects);
        ireeTargets = Gradle.stringListProperty(objects);
        hasNamedModels = objects.property(Boolean.class);
        hasNamedModels.set(false);
        // Checkpoints the tape read last time, and a set's shards (named by the export): an edited one makes the
        // outputs stale. The spec casts the task it is given rather than capture this one: it holds no state.
        getOutputs().upToDateWhen(t -> ((ExportIrpaTask) t).filesUnchanged());
        // With named models and no model of its own, the block's task only runs theirs.
        onlyIf(t -> ((ExportIrpaTask) t).model.isPresent() || !((ExportIrpaTask) t).hasNamedModels.get());
    }

    /**
     * Links this task's settings to {@code spec}'s, and where {@code spec} leaves one unset to {@code parent}'s (the
     * block, for a named model; null for the block itself): lazily, so a setting made after this call still counts,
     * and without holding either.
     */
    void link(ModelSpec spec, ModelSpec parent, ProviderFactory providers) {
        where = spec.where();
        model.set(spec.getModel());
        moduleName.set(spec.getModuleName());
        outputDir.set(spec.getOutputDir());
        scope.set(spec.getScope());
        inlineBelowBytes.set(spec.getInlineBelowBytes());
        packedConstants.set(spec.getPackedConstants());
        halfConstants.set(spec.getHalfConstants());
        maxArchiveBytes.set(spec.getMaxArchiveBytes());
        maxHeapSize.set(spec.getMaxHeapSize());
        inputFiles.from(spec.getInputFiles());
        if (parent != null) inputFiles.from(parent.getInputFiles());
        Provider<Map<String, String>> ownProps = spec.getSystemProperties();
        Provider<Map<String, String>> parentProps = parent == null ? null : parent.getSystemProperties();
        Gradle.setMap(systemProperties, providers.provider(() -> {
            Map<String, String> all = new LinkedHashMap<>();
            if (parentProps != null) all.putAll(parentProps.get());
            all.putAll(ownProps.get());
            return all;
        }));
        if (parent != null) jvmArgs.addAll(parent.getJvmArgs());
        jvmArgs.addAll(spec.getJvmArgs());
        args.set(ownOrParent(providers, spec.getArgs(), parent == null ? null : parent.getArgs()));
        ireeTargets.set(ownOrParent(providers, spec.getIreeTargets(), parent == null ? null : parent.getIreeTargets()));
        Provider<Boolean> ownTuning = spec.getTuning();
        Provider<Boolean> parentTuning = parent == null ? null : parent.getTuning();
        tuning.set(providers.provider(() -> {
            Boolean v = ownTuning.getOrNull();
            if (v == null && parentTuning != null) v = parentTuning.getOrNull();
            return v == null || v;
        }));
    }

    /** Marks the block's task as one that runs named models: without a model of its own, it has nothing to do. */
    void runsNamedModels() { hasNamedModels.set(true); }

    /** {@code own} unless it is empty, then {@code parent} (when there is one). */
    static Provider<List<String>> ownOrParent(ProviderFactory providers, Provider<List<String>> own, Provider<List<String>> parent) {
        return providers.provider(() -> own.get().isEmpty() && parent != null ? parent.get() : own.get());
    }

    /** The export JVM's classpath: the project's runtime classpath. */
    @Classpath
    public ConfigurableFileCollection getClasspath() { return classpath; }

    @Input
    public String getModel() {
        if (!model.isPresent()) {
            String at = where.equals("tapeout { }") ? "tapeout { model = '…' }" : where.replace("{ } } }", "{ model = '…' } } }");
            throw new GradleException(at + " is not set: name the class that implements dev.tapeout.ModelProvider");
        }
        return model.get();
    }

    @Input public String getModuleName() { return moduleName.get(); }
    @Input public String getScope() { return scope.get(); }
    @Input public Long getInlineBelowBytes() { return inlineBelowBytes.get(); }

    @Input
    public String getMaxHeapSize() {
        String v = maxHeapSize.get();
        if (!v.matches("[0-9]+[kKmMgGtT]?")) {
            throw new GradleException("tapeout { maxHeapSize = '" + v + "' }: use a JVM heap size such as '512m' or '4g'");
        }
        return v;
    }

    @Input
    public Long getMaxArchiveBytes() {
        long v = maxArchiveBytes.get();
        if (v < 0) {
            throw new GradleException("tapeout { maxArchiveBytes = " + v + " }: use 0 (one archive) or a positive size in bytes");
        }
        return v;
    }

    /** What to do with packed weights ({@code KEEP_ROW_BANDS}: kept, Q8_0 / Q4_0 codes in row bands of 32 rows). */
    public enum Packed { FAIL, DEQUANTIZE, KEEP, KEEP_ROW_BANDS }

    /** What to do with 16-bit weights. */
    public enum Half { KEEP, WIDEN }

    @Input
    public String getPackedConstants() { return oneOf("packedConstants", packedConstants.get(), Packed.values()).name(); }

    @Input
    public String getHalfConstants() { return oneOf("halfConstants", halfConstants.get(), Half.values()).name(); }

    /**
     * The device the export writes for, from {@code ireeTargets} (what {@code compileIree} compiles it for):
     * {@code llvm-cpu} when that is the only target (the default), the target itself when there is one other
     * ({@code vulkan}, {@code cuda}, {@code rocm} for {@code hip}), and {@code portable} when there are several (one
     * module that every one of them compiles) or for {@code vmvx}.
     */
    @Input
    public String getExportTarget() {
        java.util.Set<String> devices = new java.util.LinkedHashSet<>();
        for (String t : ireeTargets.get()) {
            switch (t) {
                case "llvm-cpu": devices.add("llvm-cpu"); break;
                case "vulkan": case "vulkan-spirv": devices.add("vulkan"); break;
                case "cuda": devices.add("cuda"); break;
                case "hip": case "rocm": devices.add("rocm"); break;
                case "vmvx": devices.add("portable"); break;
                default:
                    throw new GradleException(where + " ireeTargets has '" + t + "': use llvm-cpu, vmvx, vulkan, cuda or hip");
            }
        }
        if (devices.isEmpty()) return "llvm-cpu";
        return devices.size() == 1 ? devices.iterator().next() : "portable";
    }

    /** Whether the target's own forms are written ({@code tuning = false}: the portable lowering alone, no spec). */
    @Input
    public Boolean getTuning() { return tuning.get(); }

    /** The block's, then the model's own. */
    @Input
    public Map<String, String> getSystemProperties() { return systemProperties.get(); }

    /** The block's, then the model's own. */
    @Input
    public List<String> getJvmArgs() { return jvmArgs.get(); }

    /** The model's own, else the block's. */
    @Input
    public List<String> getArgs() { return args.get(); }

    /** {@code inputFiles}: the block's and the model's. */
    @InputFiles
    public FileCollection getInputFiles() { return inputFiles; }

    /** {@code value} as one of {@code allowed} (any case); otherwise a build error naming the setting and the choices. */
    private static <E extends Enum<E>> E oneOf(String setting, String value, E[] allowed) {
        for (E a : allowed) {
            if (a.name().equalsIgnoreCase(value)) return a;
        }
        StringBuilder choices = new StringBuilder();
        for (int i = 0; i < allowed.length; i++) {
            if (i > 0) choices.append(i == allowed.length - 1 ? " or " : ", ");
            choices.append(allowed[i].name());
        }
        throw new GradleException("tapeout { " + setting + " = '" + value + "' }: use " + choices);
    }

    /** Where the files go ({@code outputDir}); not an output itself: {@code compileIree} writes beside them. */
    @Internal
    public File getOutputDir() { return outputDir.get().getAsFile(); }

    /**
     * The files the export writes under names its settings fix: the module, its signature and tuning spec (when the
     * module has one), the list of files the tape read, and the archive, or for a set its index (the shards are named
     * by the export and tracked by {@link #WRITTEN}). Exact files, not {@code outputDir}: {@code compileIree} writes
     * its {@code .vmfb} beside them, and two tasks must not own one folder.
     */
    @OutputFiles
    public List<File> getExportedFiles() {
        File dir = getOutputDir();
        String m = getModuleName();
        List<File> files = new ArrayList<>();
        for (String suffix : new String[] {".mlir", ".signature.json", ".tuning.mlir", ".inputs"}) files.add(new File(dir, m + suffix));
        files.add(new File(dir, m + (getMaxArchiveBytes() > 0 ? ".irpa.index.json" : ".irpa")));
        return files;
    }

    /** {@code <outputDir>/<moduleName>.inputs}, ExportMain's list of {@code size mtime path} of the files read. */
    private File readList() { return new File(getOutputDir(), getModuleName() + ".inputs"); }

    /** Whether the files the tape read and the files the last export wrote are as they were then. */
    private boolean filesUnchanged() {
        return readFilesUnchanged() && unchanged(new File(getTemporaryDir(), WRITTEN), null);
    }

    /** Whether every file {@code list} records ({@code size mtime path} lines) is unchanged; true without a list. */
    private boolean unchanged(File list, String why) {
        if (!list.isFile()) return true;   // nothing recorded: the declared inputs decide
        try {
            for (String line : Files.readAllLines(list.toPath(), StandardCharsets.UTF_8)) {
                String[] f = line.split(" ", 3);
                if (f.length != 3) return false;
                File file = new File(f[2]);
                if (!unchangedSince(file, f)) {
                    if (why != null) getLogger().lifecycle("tapeout: " + file + " " + why);
                    return false;
                }
            }
            return true;
        } catch (IOException | NumberFormatException e) {
            return false;
        }
    }

    private boolean readFilesUnchanged() { return unchanged(readList(), "changed since the last export"); }

    @TaskAction
    public void export() throws IOException, InterruptedException {
        File java = new File(System.getProperty("java.home"), "bin/java");
        List<String> cmd = new ArrayList<>();
        cmd.add(java.getAbsolutePath());
        cmd.add("-Xmx" + getMaxHeapSize());
        cmd.add("-Dtapeout.maxHeapSize=" + getMaxHeapSize());
        cmd.addAll(getJvmArgs());
        for (Map.Entry<String, String> e : getSystemProperties().entrySet()) cmd.add("-D" + e.getKey() + "=" + e.getValue());
        cmd.add("-cp");
        cmd.add(classpath.getAsPath());
        Files.createDirectories(getOutputDir().toPath());
        cmd.add("dev.tapeout.ExportMain");
        File dir = getTemporaryDir();
        File requestFile = new File(dir, "export-request.properties");
        File responseFile = new File(dir, "export-response.properties");
        Files.deleteIfExists(responseFile.toPath());
        ExportExchange.Request request = new ExportExchange.Request();
        request.model = getModel();
        request.outputDir = getOutputDir();
        request.moduleName = getModuleName();
        request.scope = getScope();
        request.inlineBelowBytes = getInlineBelowBytes();
        request.packedConstants = getPackedConstants();
        request.halfConstants = getHalfConstants();
        request.exportTarget = getExportTarget();
        request.tuning = getTuning();
        request.maxArchiveBytes = getMaxArchiveBytes();
        request.args = getArgs();
        request.response = responseFile;
        request.write(requestFile);
        cmd.add(requestFile.getAbsolutePath());
        getLogger().info("tapeout: {} (request {})", cmd, requestFile);

        // stdout is the export's progress, shown as it comes; warnings and failures come in the response file.
        List<String> stderr = Collections.synchronizedList(new ArrayList<String>());
        int rc = Gradle.run(new ProcessBuilder(cmd), line -> getLogger().lifecycle(line), stderr::add);
        ExportExchange.Response response = ExportExchange.Response.read(responseFile);
        if (response != null) {
            for (String w : response.warnings) getLogger().warn("tapeout: warning: " + w);
        }
        if (rc == 0 && response != null && response.ok) {
            for (String f : response.outputs) {
                if (!new File(f).isFile()) throw new GradleException("the export JVM reported writing " + f + ", which is not there");
            }
            List<File> written = new ArrayList<>();
            for (String f : response.outputs) written.add(new File(f).getAbsoluteFile());
            written.add(readList().getAbsoluteFile());
            removeStaleOutputs(new File(dir, WRITTEN), written);
            return;
        }
        if (response != null && !response.ok && !response.errors.isEmpty()) {
            throw new GradleException(String.join("\n", response.errors));
        }
        StringBuilder message = new StringBuilder("the export JVM exited with code ").append(rc);
        if (response == null) message.append(" without a response");
        if (!stderr.isEmpty()) message.append(":\n").append(String.join("\n", stderr));
        throw new GradleException(message.toString());
    }

    /**
     * Whether {@code file} is still as {@code recorded} (a {@code size mtime path} line of the {@code .inputs} list or
     * of {@link #WRITTEN}, split in three) describes it: a file of that size and modification time. Throws
     * {@link NumberFormatException} when the recorded size or time is not a number.
     */
    private static boolean unchangedSince(File file, String[] recorded) {
        return file.isFile() && file.length() == Long.parseLong(recorded[0]) && file.lastModified() == Long.parseLong(recorded[1]);
    }

    /** The list of files the last successful export of this task wrote, in its temporary directory. */
    static final String WRITTEN = "written-outputs.txt";

    /**
     * Removes the files the previous export of this task wrote (listed in {@code record}, one {@code size mtime path}
     * line each) into the directory this export writes, that it did not write again: the outputs of an old
     * {@code moduleName}, or shards of another count. Only files this task wrote and that nobody changed since (same
     * size and modification time) are removed, never anything else; the outputs in another output directory (an
     * export per configuration, {@code -PtapeoutOut}) are left alone. Then {@code record} lists {@code written}.
     */
    static void removeStaleOutputs(File record, List<File> written) throws IOException {
        java.util.Set<String> now = new java.util.HashSet<>();
        java.util.Set<File> dirs = new java.util.HashSet<>();
        for (File f : written) {
            now.add(f.getPath());
            dirs.add(f.getAbsoluteFile().getParentFile());
        }
        if (record.isFile()) {
            for (String line : Files.readAllLines(record.toPath(), StandardCharsets.UTF_8)) {
                String[] f = line.split(" ", 3);
                if (f.length != 3 || now.contains(f[2])) continue;
                File old = new File(f[2]);
                if (!dirs.contains(old.getAbsoluteFile().getParentFile())) continue;
                try {
                    if (unchangedSince(old, f)) Files.delete(old.toPath());
                } catch (NumberFormatException ignored) {
                    // not a line this task wrote: leave the file alone
                }
            }
        }
        StringBuilder sb = new StringBuilder();
        for (File f : written) {
            if (f.isFile()) sb.append(f.length()).append(' ').append(f.lastModified()).append(' ').append(f.getPath()).append('\n');
        }
        File tmp = new File(record.getPath() + ".tmp");
        Files.write(tmp.toPath(), sb.toString().getBytes(StandardCharsets.UTF_8));
        Files.move(tmp.toPath(), record.toPath(), java.nio.file.StandardCopyOption.REPLACE_EXISTING,
            java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    }
}
