package dev.tapeout.gradle;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;

import org.gradle.api.DefaultTask;
import org.gradle.api.GradleException;
import org.gradle.api.file.FileCollection;
import org.gradle.api.file.FileTree;
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
 * started with {@link ProcessBuilder}: the one process API that Gradle 4.4.1 and 9 share for plugin code.
 * Not incremental: the output directory is cleared first, so deleted sources leave no stale classes.
 */
public class KotlinCompile extends DefaultTask {
    private FileTree source;
    private FileCollection classpath;
    private File destinationDir;
    private File kotlinHome;
    private String jvmTarget = "1.8";
    private List<String> freeArgs = new ArrayList<>();

    @InputFiles @SkipWhenEmpty @PathSensitive(PathSensitivity.RELATIVE)
    public FileTree getSource() { return source; }
    public void setSource(FileTree source) { this.source = source; }

    @Classpath
    public FileCollection getClasspath() { return classpath; }
    public void setClasspath(FileCollection classpath) { this.classpath = classpath; }

    @OutputDirectory
    public File getDestinationDir() { return destinationDir; }
    public void setDestinationDir(File destinationDir) { this.destinationDir = destinationDir; }

    @Internal("tracked through getCompilerVersion()")
    public File getKotlinHome() { return kotlinHome; }
    public void setKotlinHome(File kotlinHome) { this.kotlinHome = kotlinHome; }

    /** The distribution's build.txt, so a different compiler reruns the task. */
    @Input
    public String getCompilerVersion() throws IOException {
        File buildTxt = new File(kotlinHome, "build.txt");
        return buildTxt.isFile()
            ? new String(Files.readAllBytes(buildTxt.toPath()), StandardCharsets.UTF_8).trim()
            : kotlinHome.getPath();
    }

    @Input
    public String getJvmTarget() { return jvmTarget; }
    public void setJvmTarget(String jvmTarget) { this.jvmTarget = jvmTarget; }

    @Input
    public List<String> getFreeArgs() { return freeArgs; }
    public void setFreeArgs(List<String> freeArgs) { this.freeArgs = freeArgs; }

    @TaskAction
    public void compile() throws IOException, InterruptedException {
        File kotlinc = new File(kotlinHome, "bin/kotlinc");
        if (!kotlinc.canExecute()) {
            throw new GradleException("kotlinc not found at " + kotlinc
                + ": run scripts/setup (npm ci --prefix jvm/tools), or set -PkotlinHome=<dir> or KOTLIN_HOME");
        }
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
        args.addAll(freeArgs);
        for (File f : source.getFiles()) args.add(f.getAbsolutePath());

        File argFile = new File(getTemporaryDir(), "kotlinc.args");
        List<String> lines = new ArrayList<>();
        for (String a : args) lines.add('"' + a.replace("\\", "\\\\").replace("\"", "\\\"") + '"');
        Files.write(argFile.toPath(), lines, StandardCharsets.UTF_8);

        ProcessBuilder pb = new ProcessBuilder(kotlinc.getAbsolutePath(), "@" + argFile.getAbsolutePath());
        pb.redirectErrorStream(true);
        pb.environment().put("JAVA_OPTS", "-Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1");
        Process p = pb.start();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) getLogger().lifecycle(line);
        }
        int rc = p.waitFor();
        if (rc != 0) throw new GradleException("kotlinc failed (exit code " + rc + "); its messages are above");
    }

    private static void deleteTree(File f) {
        File[] children = f.listFiles();
        if (children != null) for (File c : children) deleteTree(c);
        f.delete();
    }
}
