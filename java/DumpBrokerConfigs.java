import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
/** Kafka 3.9's broker configs (KafkaConfig's ConfigDef) as JSON: type, default, the validator's
 *  description, internal or not, documentation; the dynamic update modes (KIP-226) and the
 *  replication quota names.  scripts/gen-kafka-configs turns it into
 *  pybroker/kafka_broker_configs.py. */
public class DumpBrokerConfigs {
  public static void main(String[] a) throws Exception {
    ConfigDef def = kafka.server.KafkaConfig.configDef();
    Map<String,String> modes = kafka.server.DynamicBrokerConfig$.MODULE$.dynamicConfigUpdateModes();
    StringBuilder sb = new StringBuilder("{\"keys\":{");
    boolean first = true;
    for (Map.Entry<String, ConfigDef.ConfigKey> e : new TreeMap<>(def.configKeys()).entrySet()) {
      ConfigDef.ConfigKey k = e.getValue();
      if (!first) sb.append(","); first = false;
      Object dv = k.defaultValue;
      String d = (dv == ConfigDef.NO_DEFAULT_VALUE || dv == null) ? null : ConfigDef.convertToString(dv, k.type);
      sb.append(q(e.getKey())).append(":{\"type\":").append(q(k.type.name()))
        .append(",\"default\":").append(d == null ? "null" : q(d))
        .append(",\"validator\":").append(k.validator == null ? "null" : q(k.validator.toString()))
        .append(",\"internal\":").append(k.internalConfig)
        .append(",\"doc\":").append(q(k.documentation == null ? "" : k.documentation)).append("}");
    }
    sb.append("},\"modes\":{");
    first = true;
    for (Map.Entry<String,String> e : new TreeMap<>(modes).entrySet()) {
      if (!first) sb.append(","); first = false;
      sb.append(q(e.getKey())).append(":").append(q(e.getValue()));
    }
    sb.append("},\"quota\":[");
    first = true;
    for (String n : new TreeSet<>(org.apache.kafka.server.config.QuotaConfigs.brokerQuotaConfigs().names())) {
      if (!first) sb.append(","); first = false; sb.append(q(n));
    }
    sb.append("]}");
    System.out.println(sb);
  }
  static String q(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 0x20) b.append(String.format("\\u%04x", (int)c));
      else b.append(c);
    }
    return b.append('"').toString();
  }
}
