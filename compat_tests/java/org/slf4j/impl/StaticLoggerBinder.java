package org.slf4j.impl;

import java.io.PrintStream;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.time.LocalTime;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.ILoggerFactory;
import org.slf4j.Logger;
import org.slf4j.Marker;
import org.slf4j.helpers.FormattingTuple;
import org.slf4j.helpers.MessageFormatter;

/**
 * The smallest slf4j 1.7 binding: the Kafka client's own log lines go to stderr, so a
 * failing compat test shows what the client saw (retries, error codes, fallbacks) instead
 * of slf4j's "no binding" notice and silence.
 *
 * <p>The threshold comes from the system property {@code kbroker.log.level} (trace, debug,
 * info, warn, error, off; default warn). {@code kbroker.log.only} narrows it to logger
 * names starting with one of its comma-separated prefixes, which keeps DEBUG readable.
 */
public final class StaticLoggerBinder {
    public static String REQUESTED_API_VERSION = "1.6.99";

    // Before SINGLETON: its factory ranks levels while the class initialises.
    private static final String[] LEVELS = {"trace", "debug", "info", "warn", "error"};
    private static final StaticLoggerBinder SINGLETON = new StaticLoggerBinder();

    private final ILoggerFactory factory = new StderrLoggerFactory();

    public static StaticLoggerBinder getSingleton() {
        return SINGLETON;
    }

    public ILoggerFactory getLoggerFactory() {
        return factory;
    }

    public String getLoggerFactoryClassStr() {
        return StderrLoggerFactory.class.getName();
    }

    private static int rank(String level) {
        int i = Arrays.asList(LEVELS).indexOf(level.toLowerCase(Locale.ROOT));
        return i < 0 ? LEVELS.length : i;
    }

    private static final class StderrLoggerFactory implements ILoggerFactory {
        private final Map<String, Logger> loggers = new ConcurrentHashMap<>();
        private final int threshold = rank(System.getProperty("kbroker.log.level", "warn"));
        private final String[] only = System.getProperty("kbroker.log.only", "").split(",");

        @Override
        public Logger getLogger(String name) {
            return loggers.computeIfAbsent(name, this::create);
        }

        private Logger create(String name) {
            boolean selected = false;
            for (String prefix : only) {
                selected |= name.startsWith(prefix.trim());
            }
            int loggerThreshold = selected ? threshold : Math.max(threshold, rank("warn"));
            return (Logger)
                    Proxy.newProxyInstance(
                            Logger.class.getClassLoader(),
                            new Class<?>[] {Logger.class},
                            new Handler(name, loggerThreshold, System.err));
        }
    }

    /** Answers every Logger method: isXEnabled by rank, x(...) by formatting and printing. */
    private static final class Handler implements InvocationHandler {
        private final String name;
        private final int threshold;
        private final PrintStream out;

        Handler(String name, int threshold, PrintStream out) {
            this.name = name;
            this.threshold = threshold;
            this.out = out;
        }

        @Override
        public Object invoke(Object proxy, Method method, Object[] args) {
            String m = method.getName();
            switch (m) {
                case "getName":
                case "toString":
                    return name;
                case "hashCode":
                    return System.identityHashCode(proxy);
                case "equals":
                    return proxy == args[0];
                default:
                    break;
            }
            if (m.startsWith("is") && m.endsWith("Enabled")) {
                return rank(m.substring(2, m.length() - 7)) >= threshold;
            }
            if (rank(m) < threshold || args == null || args.length == 0) {
                return null;
            }
            int first = args[0] instanceof Marker ? 1 : 0;
            String pattern = String.valueOf(args[first]);
            Object[] rest = Arrays.copyOfRange(args, first + 1, args.length);
            if (rest.length == 1 && rest[0] instanceof Object[] varargs) {
                rest = varargs;
            }
            FormattingTuple tuple = MessageFormatter.arrayFormat(pattern, rest);
            synchronized (out) {
                out.printf(
                        "%s %-5s [%s] %s: %s%n",
                        LocalTime.now(),
                        m.toUpperCase(Locale.ROOT),
                        Thread.currentThread().getName(),
                        name,
                        tuple.getMessage());
                if (tuple.getThrowable() != null) {
                    tuple.getThrowable().printStackTrace(out);
                }
            }
            return null;
        }
    }
}
