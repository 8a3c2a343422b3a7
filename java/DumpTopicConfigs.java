import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.common.MetadataVersion;
import org.apache.kafka.server.config.ConfigSynonym;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

/** Kafka 3.9's topic configs (LogConfig's ConfigDef, in definition order) as JSON: type,
 *  default, the validator's description, documentation and the broker synonyms
 *  (ServerTopicConfigSynonyms); plus the version strings message.format.version accepts
 *  (MetadataVersion.fromVersionString).  scripts/gen-kafka-configs turns it into
 *  pybroker/kafka_topic_configs.py. */
public class DumpTopicConfigs {
  public static void main(String[] a) throws Exception {
    StringBuilder sb = new StringBuilder("{\"keys\":[");
    boolean first = true;
    for (ConfigDef.ConfigKey k : LogConfig.configKeys().values()) {
      if (!first) sb.append(","); first = false;
      Object dv = k.defaultValue;
      String d = (dv == ConfigDef.NO_DEFAULT_VALUE || dv == null) ? null : ConfigDef.convertToString(dv, k.type);
      List<String> synonyms = new ArrayList<>();
      for (ConfigSynonym s : ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS.getOrDefault(k.name, List.of()))
        synonyms.add(s.name());
      sb.append("{\"name\":").append(q(k.name))
        .append(",\"type\":").append(q(k.type.name()))
        .append(",\"default\":").append(d == null ? "null" : q(d))
        .append(",\"validator\":").append(k.validator == null ? "null" : q(k.validator.toString()))
        .append(",\"synonyms\":[");
      for (int i = 0; i < synonyms.size(); i++) sb.append(i > 0 ? "," : "").append(q(synonyms.get(i)));
      sb.append("],\"doc\":").append(q(k.documentation == null ? "" : k.documentation)).append("}");
    }
    sb.append("],\"versions\":[");
    Set<String> versions = new TreeSet<>();
    for (MetadataVersion v : MetadataVersion.VERSIONS) {
      versions.add(v.version());
      if (v.isProduction()) versions.add(v.shortVersion());
    }
    first = true;
    for (String v : versions) { if (!first) sb.append(","); first = false; sb.append(q(v)); }
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
