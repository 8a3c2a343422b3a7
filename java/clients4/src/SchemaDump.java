import java.util.*;
import org.apache.kafka.common.protocol.types.*;

/**
 * Prints the wire layout of Kafka's generated message classes, one line per field:
 * "<message> v<version> <path> <type> <nullable>", for pybroker's schema cross-check.
 * Args: MessageDataClassName ... (e.g. ConsumerGroupHeartbeatRequestData); every SCHEMA_<n>.
 * A class the client on the classpath does not have prints nothing.
 */
public class SchemaDump {
  static void show(String msg, int v, Type t, String path) {
    if (!(t instanceof Schema)) return;
    for (BoundField f : ((Schema) t).fields()) {
      if (f.def.name.equals("_tagged_fields")) continue;
      Type ft = f.def.type;
      String p = path.isEmpty() ? f.def.name : path + "." + f.def.name;
      String kind = ft.toString();
      Optional<Type> elem = ft.arrayElementType();
      if (elem.isPresent()) kind = elem.get() instanceof Schema ? "[]struct" : "[]" + elem.get();
      else if (ft instanceof Schema) kind = "struct";
      System.out.println(msg + " v" + v + " " + p + " " + kind + " " + ft.isNullable());
      if (elem.isPresent()) show(msg, v, elem.get(), p);
      else show(msg, v, ft, p);
    }
  }

  public static void main(String[] a) throws Exception {
    for (String n : a) {
      Class<?> c;
      try {
        c = Class.forName("org.apache.kafka.common.message." + n);
      } catch (ClassNotFoundException e) {
        continue;  // this client version does not know the message
      }
      for (int v = 0; v < 32; v++) {  // (a message may start above v0: ShareFetch at v1)
        java.lang.reflect.Field f;
        try { f = c.getField("SCHEMA_" + v); } catch (NoSuchFieldException e) { continue; }
        if (f.get(null) != null) show(n, v, (Type) f.get(null), "");
      }
    }
  }
}
