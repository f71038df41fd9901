package dev.tapeout.gradle;

import java.io.File;

import org.gradle.api.Plugin;
import org.gradle.api.Project;
import org.gradle.api.file.ConfigurableFileCollection;
import org.gradle.api.file.FileCollection;
import org.gradle.api.provider.ProviderFactory;

/**
 * {@code dev.tapeout}: the {@code tapeout { }} extension and the {@code exportIrpa} task, plus one task
 * {@code exportIrpa<Name>} per entry of {@code tapeout { models { } }}, which {@code exportIrpa} runs too; and
 * likewise {@code compileIree} / {@code compileIree<Name>}, which compile each export with iree-compile to a
 * {@code .vmfb} beside its archive. The tasks are registered lazily and link their own properties to the
 * extension's when they are configured: no task holds the extension, and no value is read before a task runs.
 * The export runs on the {@code main} source set's runtime classpath, whoever compiles it (the Kotlin Gradle plugin,
 * {@code dev.tapeout.kotlin}, or Java).
 */
public class TapeoutPlugin implements Plugin<Project> {
    @Override
    public void apply(Project project) {
        TapeoutExtension ext = project.getExtensions().create("tapeout", TapeoutExtension.class, project);
        ProviderFactory providers = project.getProviders();
        File rootDir = project.getRootDir();
        // The main source set's runtime classpath, live: whatever compiles into it, whenever the java plugin comes.
        ConfigurableFileCollection runtime = project.files();
        project.getPluginManager().withPlugin("java",
            applied -> runtime.from(KotlinPlugin.sourceSets(project).getByName("main").getRuntimeClasspath()));
        Gradle.register(project, "exportIrpa", ExportIrpaTask.class, task -> {
            task.setDescription("Exports the model to <outputDir>/<moduleName>.mlir + .irpa (StableHLO + IREE parameters)"
                + " and every model of tapeout { models { } }");
            task.setGroup("tapeout");
            task.link(ext, null, providers);
            useClasspath(task, runtime);
        });
        Gradle.register(project, "compileIree", CompileIreeTask.class, task -> {
            task.setDescription("Compiles the exported module with iree-compile to <outputDir>/<moduleName>.vmfb, and every model of tapeout { models { } }");
            task.setGroup("tapeout");
            task.link(ext, null, providers, rootDir);
            task.dependsOn("exportIrpa");
        });
        ext.getModels().all(spec -> {
            String export = taskName(spec);
            String compile = compileTaskName(spec);
            Gradle.register(project, export, ExportIrpaTask.class, task -> {
                task.setDescription("Exports the model " + spec.getName() + " (tapeout { models { " + spec.getName() + " } })");
                task.setGroup("tapeout");
                task.link(spec, ext, providers);
                useClasspath(task, runtime);
            });
            Gradle.register(project, compile, CompileIreeTask.class, task -> {
                task.setDescription("Compiles the model " + spec.getName() + " with iree-compile");
                task.setGroup("tapeout");
                task.link(spec, ext, providers, rootDir);
                task.dependsOn(export);
            });
            // exportIrpa and compileIree run every named model's.
            Gradle.configure(project, "exportIrpa", ExportIrpaTask.class, t -> {
                t.dependsOn(export);
                t.runsNamedModels();
            });
            Gradle.configure(project, "compileIree", CompileIreeTask.class, t -> {
                t.dependsOn(compile);
                t.runsNamedModels();
            });
        });
    }

    /** The export runs the classes on {@code runtime}, built first. */
    private static void useClasspath(ExportIrpaTask task, FileCollection runtime) {
        task.getClasspath().from(runtime);
        task.dependsOn(runtime);
    }

    /** {@code compileIree<Name>}. */
    static String compileTaskName(ModelSpec spec) {
        String n = spec.getName();
        return "compileIree" + Character.toUpperCase(n.charAt(0)) + n.substring(1);
    }

    /** {@code exportIrpa<Name>}. */
    static String taskName(ModelSpec spec) {
        String n = spec.getName();
        return "exportIrpa" + Character.toUpperCase(n.charAt(0)) + n.substring(1);
    }
}
