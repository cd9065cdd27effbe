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
import org.apache.spark.sql.api.java.UDF4;

/**
 * A Protobuf value, as Confluent's serializer frames it, printed as JSON text for the transform's field rules.
 *
 * <p>Spark SQL function {@code kde_protobuf_json(payload, descriptor_set, file, key)} returns
 * {@code struct<json string, error string>}: {@code payload} is the value after the magic byte and schema id
 * (the message-index path, then the message); {@code descriptor_set} a {@code FileDescriptorSet} built by
 * protoc with {@code --include_imports}; {@code file} the name of the writer's file in it; {@code key} names
 * that pair, so each executor builds its descriptors once, however many rows it decodes. Exactly one of
 * {@code json} and {@code error} is set for a non-null payload.
 *
 * <p>JSON as protobuf-java-util prints it: field names as declared, fields without presence at their defaults
 * (a required {@code int32} of 0 is there), 64-bit integers as strings (exact), enums by name, unknown fields
 * left out.
 */
public final class ProtobufJson implements UDF4<byte[], byte[], String, String, Row> {
  private static final long serialVersionUID = 1L;

  /** Parsed descriptor sets by key: the messages of the writer's file, or why there are none. */
  private static final Map<String, Object> FILES = new ConcurrentHashMap<>();

  private static final JsonFormat.Printer PRINTER =
      JsonFormat.printer()
          .preservingProtoFieldNames()
          .alwaysPrintFieldsWithNoPresence()
          .omittingInsignificantWhitespace();

  @Override
  public Row call(byte[] payload, byte[] descriptorSet, String file, String key) {
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
    }
    try {
      return RowFactory.create(PRINTER.print(message), null);
    } catch (IOException | RuntimeException e) {
      return RowFactory.create(null, type.getFullName() + " cannot be printed as JSON: " + e.getMessage());
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
