import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * One run of an old kafka-clients (0.11-2.0, whose API this sticks to): produce COUNT
 * records, read the topic from the start in GROUP until EXPECTED records arrived, commit,
 * and print one JSON line: the offsets and values read and the committed offset.
 * Usage: OldClient BOOTSTRAP TOPIC GROUP COUNT EXPECTED COMPRESSION
 */
public final class OldClient {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]), expected = Integer.parseInt(args[4]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("compression.type", args[5]);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "java-old-" + i)).get();
            }
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        List<String> seen = new ArrayList<>();
        long committed;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(Collections.singletonList(topic));
            long deadline = System.currentTimeMillis() + 40000;
            while (seen.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(200)) {
                    seen.add("[" + r.offset() + ",\"" + r.value() + "\"]");
                }
            }
            consumer.commitSync();
            OffsetAndMetadata at = consumer.committed(new TopicPartition(topic, 0));
            committed = at == null ? -1 : at.offset();
        }
        System.out.println("{\"records\":[" + String.join(",", seen) + "],\"committed\":" + committed + "}");
    }
}
