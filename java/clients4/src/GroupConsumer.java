import java.time.Duration;
import java.util.*;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * A consumer for pybroker's consumer group tests (Kafka's Java client 4.x): subscribes to a
 * topic list, a client-side Pattern ("pattern:..."), or a broker-side SubscriptionPattern
 * ("regex:..." - KIP-848's RE2J regex), polls, commits synchronously after every poll and on
 * revocation, and prints one JSON line per event on stdout:
 *   {"event":"assigned","partitions":["t-0",...],"t":ms}  (and "revoked", "lost")
 *   {"event":"record","topic":"t","partition":0,"offset":5,"value":"v","t":ms}
 *   {"event":"idle"} once the idle time passed after it had records; {"event":"closed"} at exit.
 * Args: bootstrap group subscription idleMs maxRecords [key=value consumer properties...].
 * It exits when maxRecords were read (0: no limit), after idleMs without records once it had
 * some (0: never), or on SIGTERM (closing the consumer first, which leaves the group).
 */
public class GroupConsumer {
  static synchronized void out(String s) { System.out.println(s); System.out.flush(); }

  static String json(Collection<TopicPartition> ps) {
    StringBuilder b = new StringBuilder("[");
    List<String> names = new ArrayList<>();
    for (TopicPartition p : ps) names.add(p.topic() + "-" + p.partition());
    Collections.sort(names);
    for (int i = 0; i < names.size(); i++) { if (i > 0) b.append(','); b.append('"').append(names.get(i)).append('"'); }
    return b.append(']').toString();
  }

  /** commitSync; a CommitFailedException (the member was fenced or is unknown to a new
   * coordinator: it rejoins and the records since the last commit come again) is reported and
   * the loop goes on, as the Java client's documentation tells applications to do. */
  static void commit(KafkaConsumer<String, String> c) {
    try {
      c.commitSync();
    } catch (CommitFailedException e) {
      out("{\"event\":\"commit_failed\",\"t\":" + System.currentTimeMillis() + "}");
    }
  }

  static String esc(String s) {
    return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    p.put("group.id", a[1]);
    p.put("group.protocol", "consumer");
    p.put("enable.auto.commit", "false");
    p.put("auto.offset.reset", "earliest");
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    String sub = a[2];
    long idleMs = Long.parseLong(a[3]);
    long max = Long.parseLong(a[4]);
    for (int i = 5; i < a.length; i++) { String[] kv = a[i].split("=", 2); p.put(kv[0], kv[1]); }
    final boolean[] stop = {false};
    final Thread main = Thread.currentThread();
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
      // SIGTERM: leave the group cleanly (close() sends the leave heartbeat), then exit
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        synchronized (stop) { stop[0] = true; }
        c.wakeup();
        try { main.join(20000); } catch (InterruptedException e) { }
      }));
      ConsumerRebalanceListener l = new ConsumerRebalanceListener() {
        public void onPartitionsRevoked(Collection<TopicPartition> ps) {
          commit(c);
          out("{\"event\":\"revoked\",\"partitions\":" + json(ps) + ",\"t\":" + System.currentTimeMillis() + "}");
        }
        public void onPartitionsAssigned(Collection<TopicPartition> ps) {
          out("{\"event\":\"assigned\",\"partitions\":" + json(ps) + ",\"t\":" + System.currentTimeMillis() + "}");
        }
        public void onPartitionsLost(Collection<TopicPartition> ps) {
          out("{\"event\":\"lost\",\"partitions\":" + json(ps) + ",\"t\":" + System.currentTimeMillis() + "}");
        }
      };
      if (sub.startsWith("regex:")) c.subscribe(new SubscriptionPattern(sub.substring(6)), l);
      else if (sub.startsWith("pattern:")) c.subscribe(Pattern.compile(sub.substring(8)), l);
      else c.subscribe(Arrays.asList(sub.split(",")), l);
      long n = 0, last = System.currentTimeMillis();
      boolean had = false;
      while (true) {
        synchronized (stop) { if (stop[0]) break; }
        ConsumerRecords<String, String> rs;
        try {
          rs = c.poll(Duration.ofMillis(200));
        } catch (org.apache.kafka.common.errors.WakeupException e) {
          break;
        }
        for (ConsumerRecord<String, String> r : rs) {
          out("{\"event\":\"record\",\"topic\":" + esc(r.topic()) + ",\"partition\":" + r.partition()
              + ",\"offset\":" + r.offset() + ",\"value\":" + esc(r.value()) + ",\"t\":" + System.currentTimeMillis() + "}");
          n++;
        }
        if (!rs.isEmpty()) { commit(c); last = System.currentTimeMillis(); had = true; }
        if (max > 0 && n >= max) break;
        if (idleMs > 0 && had && System.currentTimeMillis() - last > idleMs) { out("{\"event\":\"idle\"}"); break; }
      }
    }
    out("{\"event\":\"closed\"}");
  }
}
