package dev.tapeout.gradle;

import java.io.File;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;

import org.gradle.api.Action;
import org.gradle.api.GradleException;
import org.gradle.api.Plugin;
import org.gradle.api.Project;
import org.gradle.api.Task;
import org.gradle.api.plugins.JavaPlugin;
import org.gradle.api.plugins.JavaPluginConvention;
import org.gradle.api.tasks.SourceSet;
import org.gradle.api.tasks.SourceSetContainer;
import org.gradle.api.tasks.testing.Test;

/**
 * {@code dev.tapeout.kotlin}: Kotlin 2.x without the Kotlin Gradle plugin, on any Gradle from 4.4.1 to 9.
 * Applies {@code java}, compiles {@code src/main/kotlin} and {@code src/test/kotlin} with an external kotlinc
 * ({@code -PkotlinHome} or {@code KOTLIN_HOME}), adds the outputs to the source sets, and runs JUnit 5:
 * natively where {@code Test.useJUnitPlatform()} exists (4.6+), else through a generated JUnit 4 suite.
 */
public class KotlinPlugin implements Plugin<Project> {
    static final String BRIDGE = "dev_tapeout_junit4bridge.AllJUnitPlatformTests";

    @Override
    public void apply(Project project) {
        project.getPluginManager().apply(JavaPlugin.class);
        File home = kotlinHome(project);
        project.getExtensions().getExtraProperties().set("kotlinHomeDir", home);
        SourceSetContainer sets = sourceSets(project);
        KotlinCompile main = compileTask(project, "compileKotlinc", "main", home, sets.getByName("main"));
        KotlinCompile test = compileTask(project, "compileTestKotlinc", "test", home, sets.getByName("test"));
        // Tests see the main code's `internal` declarations, as with the Kotlin Gradle plugin.
        test.setFreeArgs(Collections.singletonList("-Xfriend-paths=" + main.getDestinationDir().getAbsolutePath()));
        Test testTask = (Test) project.getTasks().getByName("test");
        testTask.setTestClassesDirs(testTask.getTestClassesDirs().plus(project.files(test.getDestinationDir())));
        junitPlatform(project, testTask, sets.getByName("test"));
    }

    private static KotlinCompile compileTask(Project project, String name, String set, File home, SourceSet sourceSet) {
        KotlinCompile t = project.getTasks().create(name, KotlinCompile.class);
        t.setGroup("build");
        t.setDescription("Compiles src/" + set + "/kotlin with " + home + "/bin/kotlinc");
        t.setKotlinHome(home);
        t.setSource(project.fileTree("src/" + set + "/kotlin").matching(p -> p.include("**/*.kt")));
        t.setClasspath(project.files(sourceSet.getCompileClasspath()));
        t.setDestinationDir(buildDir(project, "kotlinc/" + set));
        Map<String, Object> builtBy = new HashMap<>();
        builtBy.put("builtBy", t);
        sourceSet.getOutput().dir(builtBy, t.getDestinationDir());
        return t;
    }

    /** layout.buildDirectory exists from 4.1 to 9 (getBuildDir is deprecated in 8.3). */
    static File buildDir(Project project, String path) {
        return project.getLayout().getBuildDirectory().dir(path).get().getAsFile();
    }

    /** The sourceSets container; Gradle 9 has no conventions, 4.4.1 only has the JavaPluginConvention. */
    static SourceSetContainer sourceSets(Project project) {
        SourceSetContainer ext = project.getExtensions().findByType(SourceSetContainer.class);
        return ext != null ? ext : Legacy.sourceSets(project);
    }

    /** Loaded only on old Gradle: JavaPluginConvention is gone in Gradle 9. */
    private static final class Legacy {
        static SourceSetContainer sourceSets(Project project) {
            return project.getConvention().getPlugin(JavaPluginConvention.class).getSourceSets();
        }
    }

    static File kotlinHome(Project project) {
        Object p = project.findProperty("kotlinHome");
        String home = p != null ? p.toString() : environment(project, "KOTLIN_HOME");
        if (home == null || home.isEmpty()) {
            throw new GradleException("set -PkotlinHome=<kotlinc distribution> (or kotlinHome=... in gradle.properties) "
                + "or the environment variable KOTLIN_HOME. A Gradle daemon started before KOTLIN_HOME was exported may "
                + "not see it: stop it (gradle --stop) or pass -PkotlinHome");
        }
        return project.getRootProject().file(home);
    }

    /**
     * The environment variable {@code name} as this build's client has it: {@code providers.environmentVariable}
     * where Gradle has it (6.1 and later, read per build), else the process environment (which a daemon took when
     * it started).
     */
    static String environment(Project project, String name) {
        try {
            Object providers = Project.class.getMethod("getProviders").invoke(project);
            Object provider = providers.getClass().getMethod("environmentVariable", String.class).invoke(providers, name);
            Object value = provider.getClass().getMethod("getOrNull").invoke(provider);
            return value == null ? null : value.toString();
        } catch (ReflectiveOperationException | RuntimeException e) {
            return System.getenv(name);
        }
    }

    private static void junitPlatform(Project project, Test testTask, SourceSet test) {
        for (Method m : Test.class.getMethods()) {
            if (m.getName().equals("useJUnitPlatform") && m.getParameterCount() == 0) {
                try {
                    m.invoke(testTask);
                } catch (ReflectiveOperationException e) {
                    throw new GradleException("useJUnitPlatform failed", e);
                }
                return;
            }
        }
        // Gradle < 4.6: a JUnit 4 suite that runs every Jupiter test on the test classpath.
        testTask.useJUnit();
        File dir = buildDir(project, "generated/junit4bridge");
        Task gen = project.getTasks().create("generateJUnit4Bridge");
        gen.getInputs().property("bridge", BRIDGE);
        gen.getOutputs().dir(dir);
        gen.doLast(new Action<Task>() {   // an anonymous class: lambda actions are never UP-TO-DATE on 4.4.1
            @Override
            public void execute(Task t) {
                int dot = BRIDGE.lastIndexOf('.');
                File f = new File(dir, BRIDGE.replace('.', '/') + ".java");
                f.getParentFile().mkdirs();
                String src = "package " + BRIDGE.substring(0, dot) + ";\n"
                    + "@SuppressWarnings(\"deprecation\")\n"
                    + "@org.junit.runner.RunWith(org.junit.platform.runner.JUnitPlatform.class)\n"
                    + "@org.junit.platform.suite.api.SelectPackages(\"\")\n"
                    + "public class " + BRIDGE.substring(dot + 1) + " {}\n";
                try {
                    Files.write(f.toPath(), Collections.singletonList(src), StandardCharsets.UTF_8);
                } catch (IOException e) {
                    throw new GradleException("cannot write " + f, e);
                }
            }
        });
        test.getJava().srcDir(dir);
        project.getTasks().getByName(test.getCompileJavaTaskName()).dependsOn(gen);
    }
}
