package org.apache.kafka.common.utils;

/** Forwards to Kafka 4.4's org.apache.kafka.common.utils.internals.Exit (see shell-compat/README.md). */
public final class Exit {
    private Exit() {
    }

    public static void exit(int statusCode) {
        org.apache.kafka.common.utils.internals.Exit.exit(statusCode);
    }

    public static void addShutdownHook(String name, Runnable runnable) {
        org.apache.kafka.common.utils.internals.Exit.addShutdownHook(name, runnable);
    }
}
