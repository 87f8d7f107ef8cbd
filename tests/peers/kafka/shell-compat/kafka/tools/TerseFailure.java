package kafka.tools;

/** The name kafka-shell 4.3 catches; Kafka 4.4 has org.apache.kafka.server.util.TerseFailure. */
public class TerseFailure extends org.apache.kafka.common.KafkaException {
    public TerseFailure(String message) {
        super(message);
    }
}
