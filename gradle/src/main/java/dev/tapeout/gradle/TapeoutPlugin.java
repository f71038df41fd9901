package dev.tapeout.gradle;

import org.gradle.api.Plugin;
import org.gradle.api.Project;
import org.gradle.api.tasks.SourceSet;

/** {@code dev.tapeout}: the {@code tapeout { }} extension and the {@code exportIrpa} task. */
public class TapeoutPlugin implements Plugin<Project> {
    @Override
    public void apply(Project project) {
        TapeoutExtension ext = project.getExtensions().create("tapeout", TapeoutExtension.class, project);
        ExportIrpaTask task = project.getTasks().create("exportIrpa", ExportIrpaTask.class);
        task.setGroup("tapeout");
        task.setDescription("Exports the model to <outputDir>/<moduleName>.mlir + .irpa (StableHLO + IREE parameters)");
        task.getModelProperty().set(ext.getModel());
        task.getModuleNameProperty().set(ext.getModuleName());
        task.getOutputDirProperty().set(ext.getOutputDir());
        task.getScopeProperty().set(ext.getScope());
        task.getInlineBelowBytesProperty().set(ext.getInlineBelowBytes());
        task.getPackedConstantsProperty().set(ext.getPackedConstants());
        task.getHalfConstantsProperty().set(ext.getHalfConstants());
        task.getMaxArchiveBytesProperty().set(ext.getMaxArchiveBytes());
        task.getMaxHeapSizeProperty().set(ext.getMaxHeapSize());
        task.setInputFiles(ext.getInputFiles());
        task.setSystemProperties(ext.getSystemProperties());
        project.getPluginManager().withPlugin("java", applied -> {
            SourceSet main = KotlinPlugin.sourceSets(project).getByName("main");
            task.setClasspath(main.getRuntimeClasspath());
            task.dependsOn(main.getRuntimeClasspath());
        });
    }
}
