package kde.functions;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.util.JsonFormat;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF5;

/**
 * A Protobuf value, as Confluent's serializer frames it, printed as JSON text for the transform's field rules.
 *
 * <p>Spark SQL function {@code kde_protobuf_json(payload, descriptor_set, file, key, max_json)} returns
 * {@code struct<json string, error string>}: {@code payload} is the value after the magic byte and schema id
 * (the message-index path, then the message); {@code descriptor_set} a {@code FileDescriptorSet} built by
 * protoc with {@code --include_imports}; {@code file} the name of the writer's file in it; {@code key} names
 * that pair, so each executor builds its descriptors once, however many rows it decodes; {@code max_json} the
 * most characters the JSON may take. Exactly one of {@code json} and {@code error} is set for a non-null
 * payload.
 *
 * <p>A producer's bytes cost bounded memory: a length the bytes claim is checked against the bytes there are
 * before anything is allocated (protobuf-java's array input), and the JSON is written into a buffer that
 * refuses to grow past {@code max_json}, since printing a field at its default makes an empty sub-message of a
 * repeated field (two bytes) tens of characters. Running out of memory all the same fails the record, not the
 * executor.
 *
 * <p>JSON as protobuf-java-util prints it: field names as declared, fields without presence at their defaults
 * (a required {@code int32} of 0 is there), 64-bit integers as strings (exact), enums by name, unknown fields
 * left out.
 */
public final class ProtobufJson implements UDF5<byte[], byte[], String, String, Integer, Row> {
  private static final long serialVersionUID = 1L;

  /** Parsed descriptor sets by key: the messages of the writer's file, or why there are none. */
  private static final Map<String, Object> FILES = new ConcurrentHashMap<>();

  private static final JsonFormat.Printer PRINTER =
      JsonFormat.printer()
          .preservingProtoFieldNames()
          .alwaysPrintFieldsWithNoPresence()
          .omittingInsignificantWhitespace();

  @Override
  public Row call(byte[] payload, byte[] descriptorSet, String file, String key, Integer maxJson) {
    if (payload == null) {
      return null;
    }
    Object found = FILES.computeIfAbsent(key, k -> build(descriptorSet, file));
    if (found instanceof String) {
      return RowFactory.create(null, (String) found);
    }
    FileDescriptor fd = (FileDescriptor) found;
    CodedInputStream in = CodedInputStream.newInstance(payload);
    Descriptor type;
    List<Integer> path = new ArrayList<>();
    try {
      type = messageType(fd, in, path);
    } catch (IOException e) {
      return RowFactory.create(null, "the message-index path after the schema id does not parse: " + e.getMessage());
    } catch (IllegalArgumentException e) {
      return RowFactory.create(null, e.getMessage());
    }
    DynamicMessage message;
    try {
      message = DynamicMessage.newBuilder(type).mergeFrom(in).build();
    } catch (InvalidProtocolBufferException e) {
      return RowFactory.create(null, "the bytes do not parse as " + type.getFullName() + ": " + e.getMessage());
    } catch (IOException | RuntimeException e) {
      return RowFactory.create(null, "the bytes do not parse as " + type.getFullName() + ": " + e);
    } catch (OutOfMemoryError e) {
      return RowFactory.create(null, outOfMemory(type, payload, "parsing"));
    }
    Bounded json = new Bounded(maxJson == null ? Integer.MAX_VALUE : maxJson);
    try {
      PRINTER.appendTo(message, json);
      return RowFactory.create(json.toString(), null);
    } catch (Bounded.Full e) {
      return RowFactory.create(null, type.getFullName() + " prints as more than " + json.max + " characters of "
          + "JSON, the bound transform.max_value_bytes sets (16 times it, at most 256 MiB); raise "
          + "transform.max_value_bytes, or fix the producer");
    } catch (IOException | RuntimeException e) {
      return RowFactory.create(null, type.getFullName() + " cannot be printed as JSON: " + e.getMessage());
    } catch (OutOfMemoryError e) {
      return RowFactory.create(null, outOfMemory(type, payload, "printing it as JSON"));
    }
  }

  private static String outOfMemory(Descriptor type, byte[] payload, String doing) {
    return "the executor ran out of memory " + doing + " as " + type.getFullName() + " (" + payload.length
        + " bytes); give the cluster's executors more memory, or lower transform.max_value_bytes";
  }

  /** A character buffer that refuses to grow past {@code max}: it throws {@link Full} instead. */
  static final class Bounded implements Appendable {
    /** Thrown when an append would pass the bound; no stack trace, as it is an answer, not a bug. */
    static final class Full extends RuntimeException {
      private static final long serialVersionUID = 1L;

      Full() {
        super(null, null, false, false);
      }
    }

    final int max;
    private final StringBuilder out = new StringBuilder();

    Bounded(int max) {
      this.max = max;
    }

    @Override
    public Appendable append(CharSequence text) {
      CharSequence s = text == null ? "null" : text;
      return append(s, 0, s.length());
    }

    @Override
    public Appendable append(CharSequence text, int start, int end) {
      if (end - start > max - out.length()) {
        throw new Full();
      }
      out.append(text, start, end);
      return this;
    }

    @Override
    public Appendable append(char c) {
      if (out.length() >= max) {
        throw new Full();
      }
      out.append(c);
      return this;
    }

    @Override
    public String toString() {
      return out.toString();
    }
  }

  /**
   * The message type Confluent's message-index path names: a count, then one index per level, each a zigzag
   * varint (count 0 is the path [0]); top-level messages first, then nested ones, map entries not counted.
   */
  static Descriptor messageType(FileDescriptor fd, CodedInputStream in, List<Integer> path) throws IOException {
    int count = in.readSInt32();
    if (count < 0 || count > 32) {
      throw new IllegalArgumentException("the message-index path after the schema id is malformed (count " + count + ")");
    }
    if (count == 0) {
      path.add(0);
    }
    for (int i = 0; i < count; i++) {
      path.add(in.readSInt32());
    }
    List<Descriptor> level = messages(fd.getMessageTypes());
    Descriptor type = null;
    for (int index : path) {
      if (index < 0 || index >= level.size()) {
        throw new IllegalArgumentException(
            "message index " + path + " is out of range: "
                + (type == null ? "the schema has " + level.size() + " top-level message type(s)"
                    : type.getFullName() + " has " + level.size() + " nested message type(s)"));
      }
      type = level.get(index);
      level = messages(type.getNestedTypes());
    }
    return type;
  }

  private static List<Descriptor> messages(List<Descriptor> types) {
    List<Descriptor> out = new ArrayList<>();
    for (Descriptor d : types) {
      if (!d.getOptions().getMapEntry()) {
        out.add(d);
      }
    }
    return out;
  }

  /** The named file of a descriptor set, with its imports built first; or the reason as a String. */
  static Object build(byte[] descriptorSet, String file) {
    try {
      FileDescriptorSet set = FileDescriptorSet.parseFrom(descriptorSet);
      Map<String, FileDescriptor> built = new HashMap<>();
      // protoc --include_imports writes every file after the files it imports.
      for (FileDescriptorProto proto : set.getFileList()) {
        List<FileDescriptor> deps = new ArrayList<>();
        for (String dep : proto.getDependencyList()) {
          FileDescriptor d = built.get(dep);
          if (d == null) {
            return "descriptor set: " + proto.getName() + " imports " + dep + ", which comes after it or is missing";
          }
          deps.add(d);
        }
        built.put(proto.getName(), FileDescriptor.buildFrom(proto, deps.toArray(new FileDescriptor[0])));
      }
      FileDescriptor fd = built.get(file);
      return fd != null ? fd : "descriptor set has no file " + file;
    } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
      return "descriptor set does not build: " + e.getMessage();
    }
  }
}
