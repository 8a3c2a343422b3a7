// Kafka Streams word count, the topology of Apache Kafka's own WordCountDemo
// (org.apache.kafka.streams.examples.wordcount; its kafka-streams-examples jar is not on this
// machine's Maven Central), with the settings a test needs passed as arguments.
// compat_tests/test_kafka_streams.py compiles it with javac against kafka-streams.
//   java WordCount <bootstrap> <application.id> <state.dir> <input topic> <output topic> [k=v...]
// (k=v: more Streams settings, e.g. topic.segment.bytes=2048 for its internal topics)
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Produced;

public final class WordCount {
    public static void main(final String[] args) throws InterruptedException {
        final Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);  // every update goes out
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        for (int i = 5; i < args.length; i++) {
            final String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }

        final StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[3])
            .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split(" ")))
            .groupBy((k, word) -> word)
            .count()
            .toStream()
            .to(args[4], Produced.with(Serdes.String(), Serdes.Long()));

        final KafkaStreams streams = new KafkaStreams(builder.build(), props);
        final CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
