import java.io.File;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.gradle.api.Action;
import org.gradle.api.Project;
import org.gradle.api.Task;
import org.gradle.api.internal.TaskInternal;
import org.gradle.api.internal.project.ProjectInternal;
import org.gradle.api.logging.configuration.WarningMode;
import org.gradle.api.problems.Problems;
import org.gradle.api.tasks.SourceSetContainer;
import org.gradle.internal.deprecation.DeprecationLogger;
import org.gradle.internal.operations.BuildOperationProgressEventEmitter;
import org.gradle.problems.buildtree.ProblemStream;
import org.gradle.testfixtures.ProjectBuilder;

/**
 * Gradle 8.10 in one JVM, for tests/gradle/test_gradle8.py: builds the project in a folder with {@code ProjectBuilder}
 * (its Groovy {@code build.gradle} evaluated as Gradle 8.10 evaluates it), writes a JSON report of every task the
 * tapeout plugins registered (type, dependencies, inputs, outputs) and what Gradle resolved, then runs the named tasks'
 * actions in order, the way Gradle's executor would (skipped where their {@code onlyIf} says so).
 *
 * <p>Usage: {@code Gradle8Harness PROJECT_DIR GRADLE_USER_HOME REPORT_JSON [TASK ...]}; with the environment variable
 * {@code GRADLE8_HARNESS_INTERRUPT_WHEN=FILE}, the tasks' thread is interrupted (a cancelled build) once FILE exists.
 * Exit code 1 when the build fails (its exception on stderr), 3 when Gradle reported a deprecated feature (its message
 * on stderr): the warning mode is {@code fail}, as with {@code --warning-mode=fail}, so a plugin that a later Gradle
 * would break fails the suite now.
 *
 * <p>Not Gradle's command line: no settings evaluation, no {@code plugins { }} block (the plugins are on this JVM's
 * classpath and applied by id), no Kotlin DSL, no configuration cache, and no task graph: the caller names the tasks,
 * dependencies first, and compiles the Kotlin sources itself (KGP's compile task needs Gradle's executor).
 */
public final class Gradle8Harness {
    private Gradle8Harness() {}

    /** Builds, reports and runs; see the class comment for the arguments and the exit codes. */
    public static void main(String[] argv) {
        // Gradle's build services leave non-daemon threads behind (jar transforms, build events): exit explicitly.
        try {
            build(argv);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    private static void build(String[] argv) throws Exception {
        File dir = new File(argv[0]).getAbsoluteFile();
        Project project = ProjectBuilder.builder().withProjectDir(dir).withName(dir.getName())
            .withGradleUserHomeDir(new File(argv[1])).build();
        failOnDeprecation((ProjectInternal) project);
        ((ProjectInternal) project).evaluate();
        Files.write(new File(argv[2]).toPath(), report(project).getBytes(StandardCharsets.UTF_8));
        interruptWhenFileAppears(System.getenv("GRADLE8_HARNESS_INTERRUPT_WHEN"));
        for (int i = 3; i < argv.length; i++) run(project.getTasks().getByName(argv[i]));
        Throwable deprecation = DeprecationLogger.getDeprecationFailure();
        if (deprecation != null) {
            System.err.println("gradle8: " + deprecation.getMessage());
            System.exit(3);
        }
    }

    /**
     * Gradle's deprecation logger in the {@code fail} mode, with this build's services: every deprecated feature is
     * logged (on stderr, with where it was used) and recorded as the build's failure.
     */
    private static void failOnDeprecation(ProjectInternal project) {
        DeprecationLogger.reset();
        DeprecationLogger.init(WarningMode.Fail, project.getServices().get(BuildOperationProgressEventEmitter.class),
            project.getServices().get(Problems.class), project.getServices().get(ProblemStream.class));
    }

    /**
     * With {@code path} set, interrupts this thread once the file {@code path} exists, as Gradle interrupts a task's
     * thread when a build is cancelled: how the test sees that a task's child process does not outlive it.
     */
    private static void interruptWhenFileAppears(String path) {
        if (path == null) return;
        Thread main = Thread.currentThread();
        Thread watcher = new Thread(() -> {
            try {
                while (!new File(path).exists()) Thread.sleep(100);
                main.interrupt();
            } catch (InterruptedException ignored) {
                // the build ended first
            }
        }, "cancel");
        watcher.setDaemon(true);
        watcher.start();
    }

    /** What Gradle's executor does for one task: its onlyIf, then its actions; a skip is printed like Gradle's. */
    private static void run(Task task) {
        if (!((TaskInternal) task).getOnlyIf().isSatisfiedBy((TaskInternal) task)) {
            System.out.println("> Task " + task.getPath() + " SKIPPED");
            return;
        }
        System.out.println("> Task " + task.getPath());
        for (Action<? super Task> action : task.getActions()) action.execute(task);
    }

    private static String report(Project project) throws Exception {
        StringBuilder sb = new StringBuilder("{\n\"gradleVersion\": ").append(json(project.getGradle().getGradleVersion()));
        sb.append(",\n\"plugins\": {");
        String sep = "";
        for (String id : new String[] {"dev.tapeout", "dev.tapeout.kotlin", "org.jetbrains.kotlin.jvm", "java"}) {
            sb.append(sep).append(json(id)).append(": ").append(project.getPluginManager().hasPlugin(id));
            sep = ", ";
        }
        sb.append("},\n\"kotlinOutput\": ").append(json(kotlinOutput(project)));
        SourceSetContainer sets = project.getExtensions().getByType(SourceSetContainer.class);
        sb.append(",\n\"runtimeClasspath\": ").append(json(paths(sets.getByName("main").getRuntimeClasspath().getFiles())));
        sb.append(",\n\"tasks\": {");
        sep = "\n";
        for (Task t : project.getTasks()) {
            if (!t.getClass().getName().startsWith("dev.tapeout.")) continue;
            sb.append(sep).append(json(t.getName())).append(": {");
            sb.append("\"type\": ").append(json(t.getClass().getName().replace("_Decorated", "")));
            sb.append(", \"group\": ").append(json(t.getGroup()));
            sb.append(", \"description\": ").append(json(t.getDescription()));
            Set<String> deps = new LinkedHashSet<>();
            for (Task d : t.getTaskDependencies().getDependencies(t)) deps.add(d.getName());
            sb.append(", \"dependsOn\": ").append(json(new ArrayList<>(deps)));
            // A task whose inputs cannot be read (a setting left unset) reports why: Gradle would fail it the same
            // way, unless its onlyIf skips it first.
            try {
                Map<String, String> inputs = new TreeMap<>();
                for (Map.Entry<String, Object> e : t.getInputs().getProperties().entrySet()) inputs.put(e.getKey(), String.valueOf(e.getValue()));
                sb.append(", \"inputs\": ").append(json(inputs));
            } catch (RuntimeException e) {
                Throwable cause = e;
                while (cause.getCause() != null) cause = cause.getCause();
                sb.append(", \"inputsError\": ").append(json(cause.getMessage()));
            }
            sb.append(", \"inputFiles\": ").append(json(paths(t.getInputs().getFiles().getFiles())));
            sb.append(", \"outputFiles\": ").append(json(paths(t.getOutputs().getFiles().getFiles())));
            sb.append('}');
            sep = ",\n";
        }
        return sb.append("\n}\n}\n").toString();
    }

    /** KGP's {@code compileKotlin} output folder ({@code destinationDirectory}), or null without KGP. */
    private static String kotlinOutput(Project project) throws Exception {
        Task t = project.getTasks().findByName("compileKotlin");
        if (t == null) return null;
        Method m = t.getClass().getMethod("getDestinationDirectory");
        Object dir = ((org.gradle.api.provider.Provider<?>) m.invoke(t)).get();
        return ((org.gradle.api.file.Directory) dir).getAsFile().getPath();
    }

    private static List<String> paths(Set<File> files) {
        List<String> out = new ArrayList<>();
        for (File f : files) out.add(f.getPath());
        return out;
    }

    private static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof List) {
            StringBuilder sb = new StringBuilder("[");
            for (Object e : (List<?>) o) sb.append(sb.length() > 1 ? ", " : "").append(json(e));
            return sb.append(']').toString();
        }
        if (o instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                sb.append(sb.length() > 1 ? ", " : "").append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char c : o.toString().toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }
}
