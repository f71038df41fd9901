package dev.tapeout.gradle;

import java.lang.reflect.Method;

import org.gradle.api.Action;
import org.gradle.api.GradleException;
import org.gradle.api.Project;
import org.gradle.api.Task;
import org.gradle.api.file.DirectoryProperty;

/** What differs between Gradle 4.4.1 and 8/9, by reflection: each method uses the newer API where it exists. */
final class Gradle {
    private Gradle() {}

    /** {@code objects.directoryProperty()} (5.0+), else {@code layout.directoryProperty()} (4.3 to 5.x). */
    static DirectoryProperty directoryProperty(Project project) {
        Object objects = project.getObjects();
        Object layout = project.getLayout();
        for (Object owner : new Object[] {objects, layout}) {
            try {
                Method m = owner.getClass().getMethod("directoryProperty");
                return (DirectoryProperty) m.invoke(owner);
            } catch (NoSuchMethodException e) {
                // the other owner has it
            } catch (ReflectiveOperationException e) {
                throw new GradleException("cannot create a DirectoryProperty", e);
            }
        }
        throw new GradleException("this Gradle has no DirectoryProperty (tapeout needs Gradle 4.4 or later)");
    }

    /**
     * Registers a task lazily ({@code tasks.register}, 4.9+: created when something needs it) or, on older
     * Gradle, creates it. Returns what {@code dependsOn} accepts: the TaskProvider or the task.
     */
    static <T extends Task> Object register(Project project, String name, Class<T> type, Action<? super T> configure) {
        try {
            Method m = project.getTasks().getClass().getMethod("register", String.class, Class.class, Action.class);
            return m.invoke(project.getTasks(), name, type, configure);
        } catch (NoSuchMethodException e) {
            return project.getTasks().create(name, type, configure);
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot register task " + name, e);
        }
    }
}
