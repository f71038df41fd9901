package dev.tapeout.gradle;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

/**
 * The Gradle side of the exchange with the forked export JVM ({@code dev.tapeout.ExportMain}, whose
 * {@code ExportRequest} and {@code ExportResponse} are the other side): the task writes a request file of properties
 * ({@code format = tapeout-export/1}, the settings, the model's {@code args.N} and where to write the response),
 * passes its path as the only argument, and reads back a response file: {@code status} ({@code ok} or
 * {@code failed}), {@code warning.N}, {@code output.N} (the files written) and, for a failure, {@code error.N} (the
 * lines of the message). A list is
 * {@code <name>.count} and {@code <name>.0} … in order.
 */
final class ExportExchange {
    /** The format both sides write and check. */
    static final String FORMAT = "tapeout-export/1";

    private ExportExchange() {}

    /** What the task asks the export JVM to do. */
    static final class Request {
        String model;
        File outputDir;
        String moduleName;
        String scope;
        long inlineBelowBytes;
        String packedConstants;
        String halfConstants;
        String exportTarget = "llvm-cpu";
        boolean tuning = true;
        long maxArchiveBytes;
        List<String> args = Collections.emptyList();
        File response;

        /** Writes the request to {@code file}. */
        void write(File file) throws IOException {
            Properties p = new Properties();
            p.setProperty("format", FORMAT);
            p.setProperty("model", model);
            p.setProperty("outputDir", outputDir.getAbsolutePath());
            p.setProperty("moduleName", moduleName);
            p.setProperty("scope", scope);
            p.setProperty("inlineBelowBytes", Long.toString(inlineBelowBytes));
            p.setProperty("packedConstants", packedConstants);
            p.setProperty("halfConstants", halfConstants);
            p.setProperty("exportTarget", exportTarget);
            p.setProperty("tuning", Boolean.toString(tuning));
            p.setProperty("maxArchiveBytes", Long.toString(maxArchiveBytes));
            p.setProperty("response", response.getAbsolutePath());
            putList(p, "args", args);
            try (OutputStream out = Files.newOutputStream(file.toPath())) {
                p.store(out, "tapeout exportIrpa request for dev.tapeout.ExportMain");
            }
        }
    }

    /** What the export JVM answered. */
    static final class Response {
        /** {@code true} when the export succeeded. */
        final boolean ok;
        /** Warnings to show whether or not it succeeded. */
        final List<String> warnings;
        /** The files the export wrote (empty on failure). */
        final List<String> outputs;
        /** The lines of the failure's message (empty on success). */
        final List<String> errors;

        private Response(boolean ok, List<String> warnings, List<String> outputs, List<String> errors) {
            this.ok = ok;
            this.warnings = warnings;
            this.outputs = outputs;
            this.errors = errors;
        }

        /** The response in {@code file}, or {@code null} when the export JVM wrote none (it died first). */
        static Response read(File file) throws IOException {
            if (!file.isFile()) return null;
            Properties p = new Properties();
            try (InputStream in = Files.newInputStream(file.toPath())) {
                p.load(in);
            }
            if (!FORMAT.equals(p.getProperty("format"))) {
                throw new IOException(file + " is not a " + FORMAT + " response (format '" + p.getProperty("format") + "')");
            }
            String status = p.getProperty("status", "");
            if (!status.equals("ok") && !status.equals("failed")) {
                throw new IOException(file + ": unknown status '" + status + "'");
            }
            return new Response(status.equals("ok"), getList(p, "warning", file), getList(p, "output", file), getList(p, "error", file));
        }
    }

    private static void putList(Properties p, String name, List<String> values) {
        p.setProperty(name + ".count", Integer.toString(values.size()));
        for (int i = 0; i < values.size(); i++) p.setProperty(name + "." + i, values.get(i));
    }

    private static List<String> getList(Properties p, String name, File file) throws IOException {
        List<String> out = new ArrayList<>();
        int n;
        try {
            n = Integer.parseInt(p.getProperty(name + ".count", "0"));
        } catch (NumberFormatException e) {
            throw new IOException(file + ": " + name + ".count is not a number");
        }
        for (int i = 0; i < n; i++) {
            String v = p.getProperty(name + "." + i);
            if (v == null) throw new IOException(file + ": " + name + "." + i + " is missing");
            out.add(v);
        }
        return out;
    }
}
