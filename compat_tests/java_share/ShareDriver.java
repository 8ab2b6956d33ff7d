import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/** Reads COUNT records of TOPIC in share group GROUP, accepting each; prints the offsets. */
public final class ShareDriver {
    public static void main(String[] args) {
        String bootstrap = args[0], group = args[1], topic = args[2];
        int count = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        Set<Long> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> record : records) {
                    if (!seen.add(record.offset())) {
                        System.out.println("DUPLICATE " + record.offset());
                    }
                    consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                }
                consumer.commitSync();
            }
        }
        System.out.println("SEEN " + seen.size());
    }
}
