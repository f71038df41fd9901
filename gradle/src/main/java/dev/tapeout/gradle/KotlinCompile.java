package dev.tapeout.gradle;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;

import javax.inject.Inject;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.file.DirectoryProperty;
import org.gradle.api.file.FileCollection;
import org.gradle.api.file.FileTree;
import org.gradle.api.file.ProjectLayout;
import org.gradle.api.model.ObjectFactory;
import org.gradle.api.provider.ListProperty;
import org.gradle.api.provider.Provider;
import org.gradle.api.tasks.Classpath;
import org.gradle.api.tasks.Input;
import org.gradle.api.tasks.InputFiles;
import org.gradle.api.tasks.Internal;
import org.gradle.api.tasks.OutputDirectory;
import org.gradle.api.tasks.PathSensitive;
import org.gradle.api.tasks.PathSensitivity;
import org.gradle.api.tasks.SkipWhenEmpty;
import org.gradle.api.tasks.TaskAction;

/**
 * Compiles Kotlin sources with an external kotlinc distribution (the npm package kotlin-compiler),
 * started with {@link ProcessBuilder}: the one process API that Gradle 4.4.1 and 9 share for plugin code (destroyed
 * with its children when the build is cancelled, see {@link Gradle#run}).
 * Not incremental: the output directory is cleared first, so deleted sources leave no stale classes.
 */
public class KotlinCompile extends DefaultTask {
    private FileTree source;
    private FileCollection classpath;
    private final DirectoryProperty destinationDirectory;
    private File kotlinHome;
    private String jvmTarget = "1.8";
    private final ListProperty<String> freeArgs;

    /** A task with no sources yet; {@link KotlinPlugin} configures it. */
    @Inject
    public KotlinCompile(ObjectFactory objects, ProjectLayout layout) {
        destinationDirectory = Gradle.directoryProperty(objects, layout);
        freeArgs = Gradle.stringListProperty(objects);
    }

    /** The {@code .kt} files. */
    @InputFiles @SkipWhenEmpty @PathSensitive(PathSensitivity.RELATIVE)
    public FileTree getSource() { return source; }
    /** Sets the {@code .kt} files. */
    public void setSource(FileTree source) { this.source = source; }

    /** What the sources compile against. */
    @Classpath
    public FileCollection getClasspath() { return classpath; }
    /** Sets what the sources compile against. */
    public void setClasspath(FileCollection classpath) { this.classpath = classpath; }

    /** Where the classes go, as a lazy property (the build folder may move after the plugin is applied). */
    @Internal("the output is getDestinationDir()")
    public DirectoryProperty getDestinationDirectory() { return destinationDirectory; }

    /** Where the classes go, read when the task runs. */
    @OutputDirectory
    public File getDestinationDir() { return destinationDirectory.get().getAsFile(); }

    /** The kotlinc distribution. */
    @Internal("tracked through getCompilerVersion()")
    public File getKotlinHome() { return kotlinHome; }
    /** Sets the kotlinc distribution. */
    public void setKotlinHome(File kotlinHome) { this.kotlinHome = kotlinHome; }

    /** The distribution's build.txt, so a different compiler reruns the task. */
    @Input
    public String getCompilerVersion() throws IOException {
        File buildTxt = new File(kotlinHome, "build.txt");
        return buildTxt.isFile()
            ? new String(Files.readAllBytes(buildTxt.toPath()), StandardCharsets.UTF_8).trim()
            : kotlinHome.getPath();
    }

    /** kotlinc's {@code -jvm-target}. */
    @Input
    public String getJvmTarget() { return jvmTarget; }
    /** Sets kotlinc's {@code -jvm-target}. */
    public void setJvmTarget(String jvmTarget) { this.jvmTarget = jvmTarget; }

    /** More kotlinc arguments. */
    @Input
    public List<String> getFreeArgs() { return freeArgs.get(); }
    /** Sets more kotlinc arguments ({@code compileKotlinc.freeArgs = ['-language-version', '2.0']}). */
    public void setFreeArgs(List<String> values) { Gradle.setList(freeArgs, Gradle.strings(values)); }
    /** Sets more kotlinc arguments, lazily. */
    void freeArgs(Provider<List<String>> values) { freeArgs.set(values); }

    @TaskAction
    public void compile() throws IOException, InterruptedException {
        File kotlinc = new File(kotlinHome, "bin/kotlinc");
        if (!kotlinc.canExecute()) {
            throw new GradleException("kotlinc not found at " + kotlinc
                + ": run scripts/setup (npm ci --prefix jvm/tools), or set -PkotlinHome=<dir> or KOTLIN_HOME");
        }
        File destinationDir = getDestinationDir();
        deleteTree(destinationDir);
        Files.createDirectories(destinationDir.toPath());

        List<String> args = new ArrayList<>();
        args.add("-d");
        args.add(destinationDir.getAbsolutePath());
        args.add("-jvm-target");
        args.add(jvmTarget);
        args.add("-no-stdlib");   // the stdlib is on the classpath, so tests run on the same one
        args.add("-no-reflect");
        StringBuilder cp = new StringBuilder();
        for (File f : classpath.getFiles()) {
            if (!f.exists()) continue;   // kotlinc warns about missing entries
            if (cp.length() > 0) cp.append(File.pathSeparatorChar);
            cp.append(f.getAbsolutePath());
        }
        if (cp.length() > 0) {
            args.add("-classpath");
            args.add(cp.toString());
        }
        args.addAll(getFreeArgs());
        for (File f : source.getFiles()) args.add(f.getAbsolutePath());

        File argFile = new File(getTemporaryDir(), "kotlinc.args");
        List<String> lines = new ArrayList<>();
        for (String a : args) lines.add('"' + a.replace("\\", "\\\\").replace("\"", "\\\"") + '"');
        Files.write(argFile.toPath(), lines, StandardCharsets.UTF_8);

        ProcessBuilder pb = new ProcessBuilder(kotlinc.getAbsolutePath(), "@" + argFile.getAbsolutePath());
        pb.environment().put("JAVA_OPTS", "-Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1");
        int rc = Gradle.run(pb, line -> getLogger().lifecycle(line), null);
        if (rc != 0) throw new GradleException("kotlinc failed (exit code " + rc + "); its messages are above");
    }

    private static void deleteTree(File f) {
        File[] children = f.listFiles();
        if (children != null) for (File c : children) deleteTree(c);
        f.delete();
    }
}
