package dev.tapeout.gradle;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

import org.gradle.api.Plugin;
import org.gradle.api.Project;
import org.gradle.api.tasks.SourceSet;

/**
 * {@code dev.tapeout}: the {@code tapeout { }} extension and the {@code exportIrpa} task, plus one task
 * {@code exportIrpa<Name>} per entry of {@code tapeout { models { } }}, which {@code exportIrpa} runs too; and
 * likewise {@code compileIree} / {@code compileIree<Name>}, which compile each export with iree-compile to a
 * {@code .vmfb} beside its archive.
 */
public class TapeoutPlugin implements Plugin<Project> {
    @Override
    public void apply(Project project) {
        TapeoutExtension ext = project.getExtensions().create("tapeout", TapeoutExtension.class, project);
        Object main = Gradle.register(project, "exportIrpa", ExportIrpaTask.class, task -> {
            task.setDescription("Exports the model to <outputDir>/<moduleName>.mlir + .irpa (StableHLO + IREE parameters)"
                + " and every model of tapeout { models { } }");
            configure(project, task, ext);
            // With named models and no model of its own, exportIrpa only runs theirs.
            task.onlyIf(t -> ext.getModel().isPresent() || ext.getModels().isEmpty());
            task.dependsOn((Callable<List<String>>) () -> {
                List<String> names = new ArrayList<>();
                for (ModelSpec spec : ext.getModels()) names.add(taskName(spec));
                return names;
            });
        });
        ext.getModels().all(spec -> Gradle.register(project, taskName(spec), ExportIrpaTask.class, task -> {
            task.setDescription("Exports the model " + spec.getName() + " (tapeout { models { " + spec.getName() + " } })");
            configure(project, task, spec);
        }));
        if (main == null) throw new IllegalStateException("exportIrpa was not registered");
        Gradle.register(project, "compileIree", CompileIreeTask.class, task -> {
            task.setDescription("Compiles the exported module with iree-compile to <outputDir>/<moduleName>.vmfb, and every model of tapeout { models { } }");
            task.setGroup("tapeout");
            task.setSpec(ext, null);
            task.dependsOn("exportIrpa");
            task.onlyIf(t -> ext.getModel().isPresent() || ext.getModels().isEmpty());
            task.dependsOn((Callable<List<String>>) () -> {
                List<String> names = new ArrayList<>();
                for (ModelSpec spec : ext.getModels()) names.add(compileTaskName(spec));
                return names;
            });
        });
        ext.getModels().all(spec -> Gradle.register(project, compileTaskName(spec), CompileIreeTask.class, task -> {
            task.setDescription("Compiles the model " + spec.getName() + " with iree-compile");
            task.setGroup("tapeout");
            task.setSpec(spec, ext);
            task.dependsOn(taskName(spec));
        }));
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

    private static void configure(Project project, ExportIrpaTask task, ModelSpec spec) {
        task.setGroup("tapeout");
        task.setSpec(spec, spec instanceof TapeoutExtension ? null : (ModelSpec) project.getExtensions().getByType(TapeoutExtension.class));
        project.getPluginManager().withPlugin("java", applied -> {
            SourceSet main = KotlinPlugin.sourceSets(project).getByName("main");
            task.setClasspath(main.getRuntimeClasspath());
            task.dependsOn(main.getRuntimeClasspath());
        });
    }
}
