package io.deltaplane.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.execution.datasources.FileStatusWithMetadata;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The entry point Python calls: one planned table version (a JSON manifest the engine wrote)
 * as a DataFrame over Spark's Parquet scan, in one call however many files it has.
 *
 * <p>Manifest: {@code description}, {@code root} (a Hadoop location), {@code dataSchema} and
 * {@code partitionSchema} (Spark's JSON), {@code options} (the scan's options), and
 * {@code partitions}: each {@code values} (one per partition column, as {@link #value} reads
 * them) and {@code files}, each {@code [location, size, modificationTime, deletionVector]} (see
 * {@link #deletionVector}); and {@code columns}, the result's
 * columns, each {@code [read name, name, type to cast to or null]}. The format leaves out the
 * rows files' deletion vectors delete.
 */
public final class NativeScan {
  private NativeScan() {}

  public static Dataset<Row> load(SparkSession session, String manifest) throws IOException {
    JsonNode plan = new ObjectMapper().readTree(manifest);
    StructType dataSchema = (StructType) DataType.fromJson(plan.get("dataSchema").toString());
    StructType partitionSchema = (StructType) DataType.fromJson(plan.get("partitionSchema").toString());
    List<PartitionDirectory> partitions = new ArrayList<>();
    boolean deletionVectors = false;
    for (JsonNode partition : plan.get("partitions")) {
      List<FileStatusWithMetadata> files = new ArrayList<>();
      for (JsonNode file : partition.get("files")) {
        Map<String, Object> dv = deletionVector(file.get(3));
        deletionVectors |= dv != null;
        files.add(LogFileIndex.file(new Path(file.get(0).asText()), file.get(1).asLong(), file.get(2).asLong(), dv));
      }
      partitions.add(new PartitionDirectory(
          values(partition.get("values"), partitionSchema), CollectionConverters.asScala(files).toList()));
    }
    LogFileIndex index = new LogFileIndex(
        plan.get("description").asText(), new Path(plan.get("root").asText()), partitionSchema, partitions);
    scala.collection.immutable.Map<String, String> options = scala.collection.immutable.Map$.MODULE$.empty();
    Iterator<Map.Entry<String, JsonNode>> entries = plan.get("options").fields();
    while (entries.hasNext()) {
      Map.Entry<String, JsonNode> option = entries.next();
      options = options.updated(option.getKey(), option.getValue().asText());
    }
    HadoopFsRelation relation = new HadoopFsRelation(
        index, partitionSchema, dataSchema, scala.Option.empty(), new DeletionVectorParquetFormat(deletionVectors), options, session);
    Dataset<Row> scan = ((org.apache.spark.sql.classic.SparkSession) session).baseRelationToDataFrame(relation);
    List<Column> columns = new ArrayList<>();
    for (JsonNode column : plan.get("columns")) {
      Column read = functions.col(quoted(column.get(0).asText()));
      JsonNode cast = column.get(2);
      if (cast != null && !cast.isNull()) {
        read = read.cast(DataType.fromJson(cast.toString()));
      }
      columns.add(read.alias(column.get(1).asText()));
    }
    return scan.select(CollectionConverters.asScala(columns).toList());
  }

  private static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }

  /** Where a file's deletion vector is: {@code {"path", "offset", "size", "cardinality"}} or
   * {@code {"inline" (base64), "cardinality"}}; null where it has none. */
  private static Map<String, Object> deletionVector(JsonNode dv) throws IOException {
    if (dv == null || dv.isNull()) {
      return null;
    }
    Map<String, Object> out = new java.util.HashMap<>();
    out.put(DeletionVectors.CARDINALITY, dv.get("cardinality").asLong());
    if (dv.has("inline")) {
      out.put(DeletionVectors.INLINE, dv.get("inline").binaryValue());
    } else {
      out.put(DeletionVectors.PATH, dv.get("path").asText());
      out.put(DeletionVectors.OFFSET, dv.get("offset").asLong());
      out.put(DeletionVectors.SIZE, dv.get("size").asInt());
    }
    return out;
  }

  private static InternalRow values(JsonNode values, StructType schema) throws IOException {
    if (schema.length() == 0) {
      return InternalRow.empty();
    }
    Object[] row = new Object[schema.length()];
    for (int i = 0; i < row.length; i++) {
      row[i] = value(values.get(i), schema.fields()[i].dataType());
    }
    return new GenericInternalRow(row);
  }

  /** A partition value as Spark holds it: dates as days and timestamps as microseconds since
   * the epoch (UTC), decimals and floating-point numbers as text (NaN and infinities as Java
   * spells them), binary as base64. */
  static Object value(JsonNode node, DataType type) throws IOException {
    if (node == null || node.isNull()) {
      return null;
    }
    if (type instanceof StringType) {
      return UTF8String.fromString(node.asText());
    } else if (type instanceof BooleanType) {
      return node.asBoolean();
    } else if (type instanceof ByteType) {
      return (byte) node.asInt();
    } else if (type instanceof ShortType) {
      return (short) node.asInt();
    } else if (type instanceof IntegerType || type instanceof DateType) {
      return node.asInt();
    } else if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType) {
      return node.asLong();
    } else if (type instanceof FloatType) {
      return Float.parseFloat(node.asText());
    } else if (type instanceof DoubleType) {
      return Double.parseDouble(node.asText());
    } else if (type instanceof DecimalType) {
      DecimalType decimal = (DecimalType) type;
      return Decimal.apply(new BigDecimal(node.asText()), decimal.precision(), decimal.scale());
    } else if (type instanceof BinaryType) {
      return node.binaryValue();
    }
    throw new IllegalArgumentException("a partition column of type " + type.simpleString() + " cannot be read");
  }
}
