package dev.tapeout.gradle;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

import org.gradle.api.Action;
import org.gradle.api.GradleException;
import org.gradle.api.Project;
import org.gradle.api.Task;
import org.gradle.api.file.DirectoryProperty;
import org.gradle.api.file.ProjectLayout;
import org.gradle.api.model.ObjectFactory;
import org.gradle.api.provider.ListProperty;
import org.gradle.api.provider.Property;
import org.gradle.api.provider.Provider;
import org.gradle.api.provider.ProviderFactory;

/**
 * What differs between Gradle 4.4.1 and 8/9, by reflection: each method uses the newer API where it exists. The
 * plugins are compiled against 4.4.1's API (buildSrc on Debian's Gradle), so a newer type can only be reached this way.
 */
final class Gradle {
    private Gradle() {}

    /** {@code objects.directoryProperty()} (5.0+), else {@code layout.directoryProperty()} (4.3 to 5.x). */
    static DirectoryProperty directoryProperty(ObjectFactory objects, ProjectLayout layout) {
        return (DirectoryProperty) firstOf("directoryProperty", objects, layout);
    }

    private static Object firstOf(String method, Object... owners) {
        for (Object owner : owners) {
            try {
                return owner.getClass().getMethod(method).invoke(owner);
            } catch (NoSuchMethodException e) {
                // the next owner has it
            } catch (ReflectiveOperationException e) {
                throw new GradleException("cannot call " + method, e);
            }
        }
        throw new GradleException("this Gradle has no " + method + " (tapeout needs Gradle 4.4 or later)");
    }

    /** An empty list of strings ({@code listProperty} is empty until set on 5+; 4.4.1's is set to empty here). */
    static ListProperty<String> stringListProperty(ObjectFactory objects) {
        ListProperty<String> p = objects.listProperty(String.class);
        setList(p, new ArrayList<String>());
        return p;
    }

    /**
     * {@code list.set(values)}: {@code set(Iterable)} from Gradle 5 on, where {@code ListProperty} is no longer a
     * {@code Property<List>}; 4.4.1's {@code set(Object)}, which a call compiled against 4.4.1 names, is gone there.
     */
    static void setList(ListProperty<String> list, List<String> values) {
        try {
            list.getClass().getMethod("set", Iterable.class).invoke(list, values);
        } catch (NoSuchMethodException e) {
            list.set(values);
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot set a list", e);
        }
    }

    /**
     * An empty map of strings: {@code objects.mapProperty(String, String)} where Gradle has it (5.1+), else a
     * {@code Property<Map>} (4.4.1), both read as a {@code Provider<Map>}; {@link #put} adds to either.
     */
    @SuppressWarnings("unchecked")
    static Provider<Map<String, String>> stringMapProperty(ObjectFactory objects) {
        try {
            Method m = objects.getClass().getMethod("mapProperty", Class.class, Class.class);
            Provider<Map<String, String>> p = (Provider<Map<String, String>>) m.invoke(objects, String.class, String.class);
            p.getClass().getMethod("set", Map.class).invoke(p, new LinkedHashMap<String, String>());
            return p;
        } catch (NoSuchMethodException e) {
            Property<Map<String, String>> p = (Property<Map<String, String>>) (Property<?>) objects.property(Map.class);
            p.set(new LinkedHashMap<String, String>());
            return p;
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot create a MapProperty", e);
        }
    }

    /** {@code map.set(values)} on what {@link #stringMapProperty} made: lazily, from {@code values}. */
    @SuppressWarnings("unchecked")
    static void setMap(Provider<Map<String, String>> map, Provider<Map<String, String>> values) {
        try {
            map.getClass().getMethod("put", Object.class, Object.class);   // a MapProperty (5.1+)
            map.getClass().getMethod("set", Provider.class).invoke(map, values);
        } catch (NoSuchMethodException e) {
            ((Property<Map<String, String>>) map).set(values);
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot set a map", e);
        }
    }

    /** {@code map.put(key, value)} on what {@link #stringMapProperty} made. */
    @SuppressWarnings("unchecked")
    static void put(Provider<Map<String, String>> map, String key, String value) {
        try {
            map.getClass().getMethod("put", Object.class, Object.class).invoke(map, key, value);
        } catch (NoSuchMethodException e) {
            Map<String, String> copy = new LinkedHashMap<>(map.get());
            copy.put(key, value);
            ((Property<Map<String, String>>) map).set(copy);
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot set " + key, e);
        }
    }

    /**
     * The environment variable {@code name} as this build's client has it: {@code providers.environmentVariable}
     * where Gradle has it (6.1+: read per build, and a configuration cache input), else the process environment
     * (which a daemon took when it started), read when the value is asked for.
     */
    @SuppressWarnings("unchecked")
    static Provider<String> environmentVariable(ProviderFactory providers, String name) {
        try {
            return (Provider<String>) providers.getClass().getMethod("environmentVariable", String.class).invoke(providers, name);
        } catch (NoSuchMethodException e) {
            return providers.provider(() -> System.getenv(name));
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot read the environment variable " + name, e);
        }
    }

    /** The values as strings, in order. */
    static List<String> strings(List<?> values) {
        List<String> out = new ArrayList<>();
        for (Object o : values) out.add(String.valueOf(o));
        return Collections.unmodifiableList(out);
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

    /**
     * Configures the task {@code name} when it is created ({@code tasks.named(name).configure}, 5.0+: without creating
     * it now), or at once on older Gradle, where every task already exists.
     */
    @SuppressWarnings("unchecked")
    static <T extends Task> void configure(Project project, String name, Class<T> type, Action<? super T> configure) {
        try {
            Object provider = project.getTasks().getClass().getMethod("named", String.class).invoke(project.getTasks(), name);
            provider.getClass().getMethod("configure", Action.class).invoke(provider, (Action<Task>) t -> configure.execute(type.cast(t)));
        } catch (NoSuchMethodException e) {
            configure.execute(type.cast(project.getTasks().getByName(name)));
        } catch (ReflectiveOperationException e) {
            throw new GradleException("cannot configure task " + name, e);
        }
    }

    /**
     * Starts {@code command} and waits for its end, passing each line of its stdout to {@code out} and of its stderr
     * to {@code err} (or to {@code out} when {@code err} is null), read on threads of their own; returns its exit code.
     * When this thread is interrupted (Gradle interrupts a task's thread when the build is cancelled: Ctrl-C, a
     * daemon's cancel), the process and its children are destroyed first: a forked JVM or a compiler must not outlive
     * the build. A blocking read would not see the interrupt, hence the reader threads.
     */
    static int run(ProcessBuilder command, Consumer<String> out, Consumer<String> err) throws IOException, InterruptedException {
        command.redirectErrorStream(err == null);
        Process p = command.start();
        List<Thread> readers = new ArrayList<>();
        readers.add(reader(p.getInputStream(), out));
        if (err != null) readers.add(reader(p.getErrorStream(), err));
        try {
            int rc = p.waitFor();
            for (Thread t : readers) t.join();
            return rc;
        } catch (InterruptedException e) {
            destroy(p);
            throw e;
        }
    }

    private static Thread reader(InputStream stream, Consumer<String> lines) {
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) lines.accept(line);
            } catch (IOException ignored) {
                // the process is gone; its exit code tells
            }
        }, "tapeout process output");
        t.setDaemon(true);
        t.start();
        return t;
    }

    /** Destroys {@code process} and what it started ({@code ProcessHandle} where the JVM has it, Java 9+). */
    static void destroy(Process process) {
        try {
            Class<?> handle = Class.forName("java.lang.ProcessHandle");
            Method kill = handle.getMethod("destroyForcibly");
            Object self = Process.class.getMethod("toHandle").invoke(process);
            for (Object child : ((java.util.stream.Stream<?>) handle.getMethod("descendants").invoke(self)).toArray()) {
                kill.invoke(child);
            }
        } catch (ReflectiveOperationException ignored) {
            // Java 8: the process alone
        }
        process.destroyForcibly();
    }
}
