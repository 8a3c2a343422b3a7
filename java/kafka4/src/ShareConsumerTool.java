import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.config.ConfigResource;

/**
 * A KafkaShareConsumer (kafka-clients 4.4) for pybroker's share-group tests: subscribes to one
 * topic in a share group and prints one JSON line per event on stdout:
 *   {"event":"ready"}                                    after subscribe
 *   {"event":"record","partition":P,"offset":O,"delivery":D,"value":"..."}
 *   {"event":"ack","partition":P,"offsets":[...],"error":"..."|null}   (commit callback)
 *   {"event":"done","received":N}
 * Args: bootstrap group topic policy [key=value ...]
 *   policy: implicit | accept | release-first | release-all | reject:<substring> | hold |
 *           renew-accept (explicit; renews each record's lock once, then accepts)
 *   settings: count=N (stop after N records), idle-ms=T (stop after T ms with none),
 *             max-ms=T (stop after T ms), reset=earliest|latest|by_duration:... (set the
 *             group's share.auto.offset.reset first), any other key: a consumer config.
 * SIGTERM closes the consumer (leaving the group); "hold" polls once and keeps its records.
 */
public class ShareConsumerTool {
  static synchronized void out(String line) {
    System.out.println(line);
    System.out.flush();
  }

  static String q(String s) {
    if (s == null) return "null";
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
      else b.append(c);
    }
    return b.append('"').toString();
  }

  public static void main(String[] a) throws Exception {
    String bootstrap = a[0], group = a[1], topic = a[2], policy = a[3];
    long count = Long.MAX_VALUE, idleMs = Long.MAX_VALUE, maxMs = Long.MAX_VALUE;
    String reset = null;
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("group.id", group);
    p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
    p.put("share.acknowledgement.mode", policy.equals("implicit") ? "implicit" : "explicit");
    for (int i = 4; i < a.length; i++) {
      String[] kv = a[i].split("=", 2);
      switch (kv[0]) {
        case "count": count = Long.parseLong(kv[1]); break;
        case "idle-ms": idleMs = Long.parseLong(kv[1]); break;
        case "max-ms": maxMs = Long.parseLong(kv[1]); break;
        case "reset": reset = kv[1]; break;
        default: p.put(kv[0], kv[1]);
      }
    }
    if (reset != null) {
      Properties ap = new Properties();
      ap.put("bootstrap.servers", bootstrap);
      try (Admin admin = Admin.create(ap)) {
        ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
            new org.apache.kafka.clients.admin.ConfigEntry("share.auto.offset.reset", reset),
            AlterConfigOp.OpType.SET)))).all().get();
      }
    }
    AtomicBoolean stop = new AtomicBoolean(false);
    KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
    Thread main = Thread.currentThread();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      stop.set(true);
      c.wakeup();
      try { main.join(10000); } catch (InterruptedException e) { }
    }));
    if (!policy.equals("implicit")) {
      c.setAcknowledgementCommitCallback((offsets, error) -> offsets.forEach((tip, offs) ->
          out("{\"event\":\"ack\",\"partition\":" + tip.partition() + ",\"offsets\":"
              + new TreeSet<>(offs) + ",\"error\":" + q(error == null ? null : error.toString())
              + "}")));
    }
    c.subscribe(List.of(topic));
    out("{\"event\":\"ready\"}");
    long received = 0;
    long start = System.currentTimeMillis(), last = start;
    Set<Long> renewed = new HashSet<>();
    try {
      while (!stop.get() && received < count) {
        long now = System.currentTimeMillis();
        if (now - last > idleMs || now - start > maxMs) break;
        ConsumerRecords<String, String> recs;
        try {
          recs = c.poll(Duration.ofMillis(200));
        } catch (org.apache.kafka.common.errors.WakeupException e) {
          break;
        }
        if (recs.isEmpty()) continue;
        last = System.currentTimeMillis();
        boolean renewing = false;
        for (ConsumerRecord<String, String> r : recs) {
          received++;
          short d = r.deliveryCount().orElse((short) -1);
          out("{\"event\":\"record\",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
              + ",\"delivery\":" + d + ",\"value\":" + q(r.value()) + "}");
          AcknowledgeType t = null;
          if (policy.equals("accept")) t = AcknowledgeType.ACCEPT;
          else if (policy.equals("release-all")) t = AcknowledgeType.RELEASE;
          else if (policy.equals("release-first"))
            t = d <= 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
          else if (policy.startsWith("reject:"))
            t = r.value() != null && r.value().contains(policy.substring(7))
                ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
          else if (policy.equals("renew-accept")) {
            if (renewed.add(r.offset())) {
              t = AcknowledgeType.RENEW;
              renewing = true;
            } else {
              t = AcknowledgeType.ACCEPT;
            }
          }
          if (t != null) c.acknowledge(r, t);
        }
        if (policy.equals("hold")) {
          while (!stop.get()) Thread.sleep(100);
          break;
        }
        if (!policy.equals("implicit")) c.commitSync();
        if (renewing) {  // the renewed records: accept them now
          for (ConsumerRecord<String, String> r : recs) c.acknowledge(r, AcknowledgeType.ACCEPT);
          c.commitSync();
        }
      }
      if (policy.equals("implicit")) c.commitSync();
    } finally {
      out("{\"event\":\"done\",\"received\":" + received + "}");
      c.close(Duration.ofSeconds(10));
    }
  }
}
