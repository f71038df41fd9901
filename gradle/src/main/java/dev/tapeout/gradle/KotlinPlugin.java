package dev.tapeout.gradle;

import java.io.File;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

import org.gradle.api.Action;
import org.gradle.api.GradleException;
import org.gradle.api.Plugin;
import org.gradle.api.Project;
import org.gradle.api.Task;
import org.gradle.api.file.Directory;
import org.gradle.api.plugins.JavaPlugin;
import org.gradle.api.plugins.JavaPluginConvention;
import org.gradle.api.provider.Provider;
import org.gradle.api.tasks.SourceSet;
import org.gradle.api.tasks.SourceSetContainer;
import org.gradle.api.tasks.testing.Test;

/**
 * {@code dev.tapeout.kotlin}: Kotlin 2.x without the Kotlin Gradle plugin, on any Gradle from 4.4.1 to 9.
 * Applies {@code java}, compiles {@code src/main/kotlin} and {@code src/test/kotlin} with an external kotlinc
 * ({@code -PkotlinHome} or {@code KOTLIN_HOME}), adds the outputs to the source sets, and runs JUnit 5:
 * natively where {@code Test.useJUnitPlatform()} exists (4.6+), else through a generated JUnit 4 suite. Its tasks are
 * registered lazily ({@code tasks.register} where Gradle has it). In a build that applies the Kotlin Gradle plugin
 * (KGP) as well, KGP compiles the Kotlin sources and this plugin adds nothing: two compilers of one source folder
 * would put every class on the classpath twice.
 */
public class KotlinPlugin implements Plugin<Project> {
    static final String BRIDGE = "dev_tapeout_junit4bridge.AllJUnitPlatformTests";
    static final String KGP = "org.jetbrains.kotlin.jvm";

    @Override
    public void apply(Project project) {
        project.getPluginManager().apply(JavaPlugin.class);
        if (project.getPluginManager().hasPlugin(KGP)) {
            project.getLogger().info("dev.tapeout.kotlin: the Kotlin Gradle plugin compiles src/*/kotlin here");
            return;
        }
        File home = kotlinHome(project);
        project.getExtensions().getExtraProperties().set("kotlinHomeDir", home);
        SourceSetContainer sets = sourceSets(project);
        Provider<Directory> mainOut = project.getLayout().getBuildDirectory().dir("kotlinc/main");
        Provider<Directory> testOut = project.getLayout().getBuildDirectory().dir("kotlinc/test");
        compileTask(project, "compileKotlinc", "main", home, sets.getByName("main"), mainOut,
            project.provider(() -> Collections.<String>emptyList()));
        // Tests see the main code's `internal` declarations, as with the Kotlin Gradle plugin.
        compileTask(project, "compileTestKotlinc", "test", home, sets.getByName("test"), testOut,
            project.provider(() -> Collections.singletonList("-Xfriend-paths=" + mainOut.get().getAsFile().getAbsolutePath())));
        Gradle.configure(project, "test", Test.class, testTask -> {
            testTask.setTestClassesDirs(testTask.getTestClassesDirs().plus(project.files(asFile(testOut))));
            junitPlatform(project, testTask, sets.getByName("test"));
        });
        // KGP applied after this plugin: it compiles, these tasks stand aside.
        project.getPluginManager().withPlugin(KGP, applied -> {
            for (String name : new String[] {"compileKotlinc", "compileTestKotlinc"}) {
                Gradle.configure(project, name, KotlinCompile.class, t -> t.setEnabled(false));
            }
        });
    }

    private static void compileTask(Project project, String name, String set, File home, SourceSet sourceSet,
                                    Provider<Directory> out, Provider<List<String>> freeArgs) {
        Object task = Gradle.register(project, name, KotlinCompile.class, t -> {
            t.setGroup("build");
            t.setDescription("Compiles src/" + set + "/kotlin with " + home + "/bin/kotlinc");
            t.setKotlinHome(home);
            t.setSource(project.fileTree("src/" + set + "/kotlin").matching(p -> p.include("**/*.kt")));
            t.setClasspath(sourceSet.getCompileClasspath());
            t.getDestinationDirectory().set(out);
            t.freeArgs(freeArgs);
        });
        Map<String, Object> builtBy = new HashMap<>();
        builtBy.put("builtBy", task);
        sourceSet.getOutput().dir(builtBy, asFile(out));
    }

    /** {@code dir} as what file notations accept on every Gradle: a Callable, resolved when the files are needed. */
    private static Callable<File> asFile(Provider<Directory> dir) {
        return () -> dir.get().getAsFile();
    }

    /** layout.buildDirectory exists from 4.1 to 9 (getBuildDir is deprecated in 8.3). Read now: for old Gradle only. */
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
        String home = p != null ? p.toString() : Gradle.environmentVariable(project.getProviders(), "KOTLIN_HOME").getOrNull();
        if (home == null || home.isEmpty()) {
            throw new GradleException("set -PkotlinHome=<kotlinc distribution> (or kotlinHome=... in gradle.properties) "
                + "or the environment variable KOTLIN_HOME. A Gradle daemon started before KOTLIN_HOME was exported may "
                + "not see it: stop it (gradle --stop) or pass -PkotlinHome");
        }
        return project.getRootProject().file(home);
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
        Task gen = project.getTasks().create("generateJUnit4Bridge");   // Gradle < 4.6 has no tasks.register
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
        Gradle.configure(project, test.getCompileJavaTaskName(), Task.class, t -> t.dependsOn(gen));
    }
}
