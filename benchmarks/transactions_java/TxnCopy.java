// Kafka's Java client (4.4) in benchmarks/transactions.py's consume-transform-produce loop:
// a read_committed group consumer and a transactional producer copy per-txn records of the
// source topic to the destination per transaction, the consumer's offsets sent to each one.
// Prints one JSON line per transaction (its latency from beginTransaction to the return of
// commitTransaction) and a summary line, as benchmarks/transactions_go does.
//
//   java -cp 'DIR:lib/*' TxnCopy BOOTSTRAP SOURCE DEST GROUP TRANSACTIONAL_ID TXNS PER_TXN

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnCopy {
    public static void main(String[] args) {
        String bootstrap = args[0], source = args[1], dest = args[2], group = args[3], txnId = args[4];
        int txns = Integer.parseInt(args[5]), perTxn = Integer.parseInt(args[6]);

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        // initTransactions waits for a cold Kafka's first producer id block: longer than the
        // default 60 s on a loaded machine.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "300000");

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            consumer.subscribe(List.of(source));
            ArrayDeque<ConsumerRecord<byte[], byte[]>> polled = new ArrayDeque<>();
            long start = System.nanoTime();
            for (int i = 0; i < txns; i++) {
                long t0 = System.nanoTime();
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (int n = 0; n < perTxn; n++) {
                    while (polled.isEmpty()) {
                        consumer.poll(Duration.ofMillis(100)).forEach(polled::add);
                    }
                    // Exactly per-txn records each: what a poll brings past them waits for the next.
                    ConsumerRecord<byte[], byte[]> r = polled.poll();
                    producer.send(new ProducerRecord<>(dest, r.key(), r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                System.out.printf("{\"txn\":%d,\"ms\":%.3f,\"committed\":true}%n", i, (System.nanoTime() - t0) / 1e6);
            }
            System.out.printf("{\"committed\":%d,\"aborted\":0,\"seconds\":%.3f}%n", txns, (System.nanoTime() - start) / 1e9);
        }
    }
}
