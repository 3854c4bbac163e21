import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Kafka Streams' word count with a RocksDB state store ("counts"): args are bootstrap servers,
 * application id, input topic, output topic, state dir, processing guarantee and group protocol
 * (streams: KIP-1071's rebalance protocol; classic: the consumer group protocol with Kafka Streams'
 * own assignor), then any number of StreamsConfig key=value pairs (replication.factor=3 for the
 * internal topics of a three-node cluster). It prints each state it moves to (STATE RUNNING, ...)
 * and stops on stdin's end.
 */
public final class WordCount {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, args[6]);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        for (String setting : Arrays.copyOfRange(args, 7, args.length)) {
            String[] keyValue = setting.split("=", 2);
            props.put(keyValue[0], keyValue[1]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, Long> counts = builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word)
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"));
        counts.toStream().to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.start();
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // Runs until its input closes: the test's way of stopping it.
                }
            } catch (java.io.IOException e) {
                // Stopping either way.
            }
            stopped.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        stopped.await();
        streams.close(Duration.ofSeconds(20));
        System.out.println("CLOSED");
    }
}
