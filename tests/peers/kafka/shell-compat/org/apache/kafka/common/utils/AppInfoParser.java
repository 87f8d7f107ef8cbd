package org.apache.kafka.common.utils;

/** Forwards to Kafka 4.4's org.apache.kafka.common.utils.internals.AppInfoParser. */
public final class AppInfoParser {
    private AppInfoParser() {
    }

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }

    public static String getCommitId() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getCommitId();
    }
}
