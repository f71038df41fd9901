package dev.tapeout.gradle;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.file.FileCollection;
import org.gradle.api.tasks.Classpath;
import org.gradle.api.tasks.Input;
import org.gradle.api.tasks.InputFiles;
import org.gradle.api.tasks.Internal;
import org.gradle.api.tasks.OutputDirectory;
import org.gradle.api.tasks.TaskAction;

/**
 * Exports one model ({@link ModelSpec}) to {@code <outputDir>/<moduleName>.mlir} and {@code .irpa} (or, with
 * {@code maxArchiveBytes}, the shards of an archive set and its {@code .irpa.index.json}) in a forked JVM running
 * {@code dev.tapeout.ExportMain} on the project's runtime classpath, which reads the settings from a request
 * file and answers with a response file ({@link ExportExchange}). Every setting, the classpath and
 * {@code inputFiles} are inputs, and so are the files the model's tape read last time (checkpoints opened with
 * {@code SafeTensors.open}/{@code Gguf.open}, listed by ExportMain in {@code <moduleName>.inputs}): a second
 * run is UP-TO-DATE, any change reruns it. A failure in the model is a build failure with its message, and for an
 * exception the model's own top stack frames.
 */
public class ExportIrpaTask extends DefaultTask {
    private FileCollection classpath;
    private ModelSpec spec;
    private ModelSpec parent;

    public ExportIrpaTask() {
        // Checkpoints the tape read last time: an edited one makes the outputs stale.
        getOutputs().upToDateWhen(t -> readFilesUnchanged());
    }

    /** The model this task exports, and the block whose lists and files it adds to (null for the block itself). */
    void setSpec(ModelSpec spec, ModelSpec parent) {
        this.spec = spec;
        this.parent = parent;
    }

    @Classpath
    public FileCollection getClasspath() { return classpath; }
    public void setClasspath(FileCollection classpath) { this.classpath = classpath; }

    /** The settings this task reads. */
    @Internal
    public ModelSpec getSpec() { return spec; }

    @Input
    public String getModel() {
        if (!spec.getModel().isPresent()) {
            String where = spec.getName().isEmpty() ? "tapeout { model = '…' }" : "tapeout { models { " + spec.getName() + " { model = '…' } } }";
            throw new GradleException(where + " is not set: name the class that implements dev.tapeout.ModelProvider");
        }
        return spec.getModel().get();
    }

    @Input public String getModuleName() { return spec.getModuleName().get(); }
    @Input public String getScope() { return spec.getScope().get(); }
    @Input public Long getInlineBelowBytes() { return spec.getInlineBelowBytes().get(); }

    @Input
    public String getMaxHeapSize() {
        String v = spec.getMaxHeapSize().get();
        if (!v.matches("[0-9]+[kKmMgGtT]?")) {
            throw new GradleException("tapeout { maxHeapSize = '" + v + "' }: use a JVM heap size such as '512m' or '4g'");
        }
        return v;
    }

    @Input
    public Long getMaxArchiveBytes() {
        long v = spec.getMaxArchiveBytes().get();
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
    public String getPackedConstants() { return oneOf("packedConstants", spec.getPackedConstants().get(), Packed.values()).name(); }

    @Input
    public String getHalfConstants() { return oneOf("halfConstants", spec.getHalfConstants().get(), Half.values()).name(); }

    /**
     * The device the export writes for, from {@code ireeTargets} (what {@code compileIree} compiles it for):
     * {@code llvm-cpu} when that is the only target (the default), the target itself when there is one other
     * ({@code vulkan}, {@code cuda}, {@code rocm} for {@code hip}), and {@code portable} when there are several (one
     * module that every one of them compiles) or for {@code vmvx}.
     */
    @Input
    public String getExportTarget() {
        List<String> targets = spec.getIreeTargets().isEmpty() && parent != null ? parent.getIreeTargets() : spec.getIreeTargets();
        java.util.Set<String> devices = new java.util.LinkedHashSet<>();
        for (String t : targets) {
            switch (t) {
                case "llvm-cpu": devices.add("llvm-cpu"); break;
                case "vulkan": case "vulkan-spirv": devices.add("vulkan"); break;
                case "cuda": devices.add("cuda"); break;
                case "hip": case "rocm": devices.add("rocm"); break;
                case "vmvx": devices.add("portable"); break;
                default:
                    throw new GradleException(spec + " ireeTargets has '" + t + "': use llvm-cpu, vmvx, vulkan, cuda or hip");
            }
        }
        if (devices.isEmpty()) return "llvm-cpu";
        return devices.size() == 1 ? devices.iterator().next() : "portable";
    }

    /** Whether the target's own forms are written ({@code tuning = false}: the portable lowering alone, no spec). */
    @Input
    public Boolean getTuning() {
        Boolean own = spec.getTuning();
        if (own == null && parent != null) own = parent.getTuning();
        return own == null || own;
    }

    /** The block's, then the model's own. */
    @Input
    public Map<String, String> getSystemProperties() {
        Map<String, String> all = new LinkedHashMap<>();
        if (parent != null) all.putAll(parent.getSystemProperties());
        all.putAll(spec.getSystemProperties());
        return all;
    }

    @Input
    public List<String> getJvmArgs() {
        List<String> all = new ArrayList<>();
        if (parent != null) all.addAll(parent.getJvmArgs());
        all.addAll(spec.getJvmArgs());
        return all;
    }

    @Input
    public List<String> getArgs() { return spec.getArgs().isEmpty() && parent != null ? parent.getArgs() : spec.getArgs(); }

    /** {@code inputFiles}: the block's and the model's. */
    @InputFiles
    public FileCollection getInputFiles() { return parent == null ? spec.getInputFiles() : parent.getInputFiles().plus(spec.getInputFiles()); }

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

    @OutputDirectory
    public File getOutputDir() { return spec.getOutputDir().get().getAsFile(); }

    /** {@code <outputDir>/<moduleName>.inputs}, ExportMain's list of {@code size mtime path} of the files read. */
    private File readList() { return new File(getOutputDir(), getModuleName() + ".inputs"); }

    private boolean readFilesUnchanged() {
        File list = readList();
        if (!list.isFile()) return true;   // nothing recorded: the declared inputs decide
        try {
            for (String line : Files.readAllLines(list.toPath(), StandardCharsets.UTF_8)) {
                String[] f = line.split(" ", 3);
                if (f.length != 3) return false;
                File file = new File(f[2]);
                if (!unchangedSince(file, f)) {
                    getLogger().lifecycle("tapeout: " + file + " changed since the last export");
                    return false;
                }
            }
            return true;
        } catch (IOException | NumberFormatException e) {
            return false;
        }
    }

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
        Process p = new ProcessBuilder(cmd).start();
        List<String> stderr = new ArrayList<>();
        Thread err = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (stderr) { stderr.add(line); }
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
