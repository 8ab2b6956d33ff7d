import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count under exactly_once_v2: lines from the input topic, the running
 * count of each word to the output topic. Arguments: bootstrap servers, application id,
 * input topic, output topic, state directory and, optionally, the group protocol ("classic",
 * the default, or "streams": KIP-1071's rebalance protocol) and the number of instances (1 by
 * default). Each instance is a KafkaStreams of its own with a state directory of its own under
 * the given one, so each is a process of the group; instance i (i >= 1) closes when the file
 * stop-i appears in the state directory. Runs until SIGTERM, then closes.
 */
public final class WordCount {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        String protocol = args.length > 5 ? args[5] : "classic";
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        }
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 20000);
        int count = args.length > 6 ? Integer.parseInt(args[6]) : 1;
        Path root = Path.of(args[4]);
        List<KafkaStreams> instances = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Properties own = new Properties();
            own.putAll(props);
            own.put(StreamsConfig.STATE_DIR_CONFIG, count == 1 ? args[4] : root.resolve("instance-" + i).toString());
            KafkaStreams streams = new KafkaStreams(topology(args[2], args[3]), own);
            String name = "instance " + i;
            streams.setStateListener((now, before) -> System.out.println(name + " state " + before + " -> " + now));
            instances.add(streams);
        }
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            instances.parallelStream().forEach(streams -> streams.close(Duration.ofSeconds(10)));
            done.countDown();
        }));
        for (KafkaStreams streams : instances) {
            streams.start();
        }
        for (int i = 1; i < count; i++) {
            KafkaStreams streams = instances.get(i);
            Path stop = root.resolve("stop-" + i);
            String name = "instance " + i;
            Thread watcher = new Thread(() -> {
                try {
                    while (!Files.exists(stop)) {
                        Thread.sleep(100);
                    }
                } catch (InterruptedException e) {
                    return;
                }
                streams.close(Duration.ofSeconds(10));
                System.out.println(name + " closed");
            });
            watcher.setDaemon(true);
            watcher.start();
        }
        done.await();
    }

    private static Topology topology(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
            .count()
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }
}
