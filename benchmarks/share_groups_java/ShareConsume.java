// Kafka's Java share consumer (4.4) in benchmarks/share_groups.py and
// tests/cluster/test_share_groups_cluster.py: subscribes to TOPIC in share group GROUP and, for
// every poll, prints each record it was delivered ("D partition offset deliveryCount value"), commits the poll's
// acknowledgements with commitSync (implicit mode: all of them accepted) and prints each record
// whose partition's commit succeeded ("A partition offset value"). Runs until its standard input
// closes, then closes the consumer (which leaves the group).
//
//   java -cp 'lib/*' ShareConsume.java BOOTSTRAP TOPIC GROUP

import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ShareConsume {
    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0], topic = args[1], group = args[2];
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "java-share-" + group);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) { }
            } catch (IOException e) {
                // the parent is gone: stop as on EOF
            }
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (stdin.isAlive()) {
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (KafkaException e) {
                    System.err.println("poll: " + e);
                    continue;
                }
                if (records.isEmpty()) {
                    continue;
                }
                StringBuilder out = new StringBuilder();
                for (ConsumerRecord<String, String> r : records) {
                    out.append("D ").append(r.partition()).append(' ').append(r.offset()).append(' ').append(r.deliveryCount().orElse((short) 0)).append(' ').append(r.value()).append('\n');
                }
                System.out.print(out);
                System.out.flush();
                Map<TopicIdPartition, Optional<KafkaException>> committed;
                try {
                    committed = consumer.commitSync(Duration.ofSeconds(30));
                } catch (KafkaException e) {
                    System.err.println("commitSync: " + e);
                    continue;
                }
                out.setLength(0);
                for (ConsumerRecord<String, String> r : records) {
                    boolean ok = committed.entrySet().stream().anyMatch(e -> e.getKey().partition() == r.partition() && e.getValue().isEmpty());
                    if (ok) {
                        out.append("A ").append(r.partition()).append(' ').append(r.offset()).append(' ').append(r.value()).append('\n');
                    }
                }
                System.out.print(out);
                System.out.flush();
            }
        }
    }
}
