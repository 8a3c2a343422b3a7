import java.time.Duration;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Bench W20: N KafkaShareConsumers (kafka-clients 4.4, one thread each, one JVM) in a fresh
 * share group read a topic from its start (share.auto.offset.reset=earliest, set first through
 * the Admin client) with implicit acknowledgement, until every one of `records` offsets has been
 * acknowledged (the acknowledgement commit callbacks, errors excluded). Prints one JSON line:
 *   {"consumers":N,"delivered":D,"acknowledged":A,"seconds":S,"redelivered":R,"polls":P,
 *    "empty_polls":E}
 * seconds: from the first record any consumer received to the last acknowledgement confirmed;
 * delivered counts every delivery (a redelivery too), acknowledged the distinct offsets; polls
 * the polls that returned records, empty_polls those that returned none after the first record.
 * Args: bootstrap group topic consumers records [key=value ...] (more consumer configs).
 */
public class ShareConsumerPerf {
  public static void main(String[] a) throws Exception {
    String bootstrap = a[0], group = a[1], topic = a[2];
    int consumers = Integer.parseInt(a[3]);
    long records = Long.parseLong(a[4]);
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("group.id", group);
    p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    for (int i = 5; i < a.length; i++) {
      String[] kv = a[i].split("=", 2);
      p.put(kv[0], kv[1]);
    }
    Properties ap = new Properties();
    ap.put("bootstrap.servers", bootstrap);
    try (Admin admin = Admin.create(ap)) {
      ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
      admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
          new ConfigEntry("share.auto.offset.reset", "earliest"),
          AlterConfigOp.OpType.SET)))).all().get();
    }
    Map<Integer, BitSet> acked = new HashMap<>();
    AtomicLong delivered = new AtomicLong(), redelivered = new AtomicLong();
    AtomicLong polls = new AtomicLong(), emptyPolls = new AtomicLong();
    AtomicLong first = new AtomicLong(0), last = new AtomicLong(0);
    long[] ackedCount = {0};
    AtomicBoolean stop = new AtomicBoolean(false);
    CountDownLatch done = new CountDownLatch(1);
    List<Thread> threads = new ArrayList<>();
    for (int k = 0; k < consumers; k++) {
      Thread t = new Thread(() -> {
        try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p)) {
          c.setAcknowledgementCommitCallback((offsets, error) -> {
            if (error != null) return;
            synchronized (acked) {
              offsets.forEach((tip, offs) -> {
                BitSet b = acked.computeIfAbsent(tip.partition(), x -> new BitSet());
                for (long o : offs) {
                  if (!b.get((int) o)) {
                    b.set((int) o);
                    ackedCount[0]++;
                  }
                }
              });
              if (ackedCount[0] >= records && !stop.get()) {
                last.set(System.nanoTime());
                stop.set(true);
                done.countDown();
              }
            }
          });
          c.subscribe(List.of(topic));
          while (!stop.get()) {
            ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(100));
            if (recs.isEmpty()) {
              if (first.get() != 0) emptyPolls.incrementAndGet();
              continue;
            }
            polls.incrementAndGet();
            first.compareAndSet(0, System.nanoTime());
            for (ConsumerRecord<byte[], byte[]> r : recs) {
              delivered.incrementAndGet();
              if (r.deliveryCount().orElse((short) 1) > 1) redelivered.incrementAndGet();
            }
          }
        }
      }, "share-consumer-" + k);
      t.start();
      threads.add(t);
    }
    done.await();
    for (Thread t : threads) t.join(30000);
    double seconds = (last.get() - first.get()) / 1e9;
    System.out.println("{\"consumers\":" + consumers + ",\"delivered\":" + delivered.get()
        + ",\"acknowledged\":" + ackedCount[0] + ",\"seconds\":" + seconds
        + ",\"redelivered\":" + redelivered.get() + ",\"polls\":" + polls.get()
        + ",\"empty_polls\":" + emptyPolls.get() + "}");
    System.out.flush();
    System.exit(0);
  }
}
