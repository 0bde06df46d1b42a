package io.deltaplane.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BasePredicate;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Predicate;
import org.apache.spark.sql.catalyst.types.DataTypeUtils;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.FileStatusWithMetadata;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The live files of one table version, as the log names them: Spark lists, stats and globs
 * nothing. Each partition's values are the log's, typed; each file carries its deletion vector
 * (if any) to the reader in its metadata. Partition filters are applied here, as Spark expects
 * of a file index (it does not apply them again after the scan).
 */
public final class LogFileIndex implements FileIndex {
  private final String description;
  private final Path root;
  private final StructType partitionSchema;
  private final List<PartitionDirectory> partitions;
  private final String[] inputFiles;
  private final long sizeInBytes;

  LogFileIndex(String description, Path root, StructType partitionSchema, List<PartitionDirectory> partitions) {
    this.description = description;
    this.root = root;
    this.partitionSchema = partitionSchema;
    this.partitions = partitions;
    List<String> files = new ArrayList<>();
    long size = 0;
    for (PartitionDirectory partition : partitions) {
      for (FileStatusWithMetadata file : CollectionConverters.asJava(partition.files())) {
        files.add(file.getPath().toString());
        size += file.getLen();
      }
    }
    this.inputFiles = files.toArray(new String[0]);
    this.sizeInBytes = size;
  }

  /** One file as Spark's scan takes it, with where its deletion vector is (see
   * {@link DeletionVectors}; null: it has none). */
  static FileStatusWithMetadata file(Path path, long size, long modified, Map<String, Object> deletionVector) {
    FileStatus status = new FileStatus(size, false, 1, 128L << 20, modified, path);
    scala.collection.immutable.Map<String, Object> metadata = scala.collection.immutable.Map$.MODULE$.empty();
    if (deletionVector != null) {
      for (Map.Entry<String, Object> entry : deletionVector.entrySet()) {
        metadata = metadata.updated(entry.getKey(), entry.getValue());
      }
    }
    return new FileStatusWithMetadata(status, metadata);
  }

  @Override
  public Seq<Path> rootPaths() {
    return CollectionConverters.asScala(List.of(root)).toList();
  }

  @Override
  public Seq<PartitionDirectory> listFiles(Seq<Expression> partitionFilters, Seq<Expression> dataFilters) {
    List<PartitionDirectory> selected = partitions;
    if (partitionSchema.length() > 0 && partitionFilters.nonEmpty()) {
      BasePredicate predicate = partitionPredicate(CollectionConverters.asJava(partitionFilters));
      selected = new ArrayList<>();
      for (PartitionDirectory partition : partitions) {
        if (predicate.eval(partition.values())) {
          selected.add(partition);
        }
      }
    }
    return CollectionConverters.asScala(selected).toList();
  }

  /** The filters, all on partition columns, as one predicate over a partition's values. */
  private BasePredicate partitionPredicate(List<Expression> filters) {
    Expression all = filters.get(0);
    for (int i = 1; i < filters.size(); i++) {
      all = new And(all, filters.get(i));
    }
    // Bound by the filters' own attributes where they name a column, so by expression id.
    Map<String, Attribute> named = new HashMap<>();
    for (Attribute a : CollectionConverters.asJava(all.references().toSeq())) {
      named.put(a.name(), a);
    }
    List<Attribute> input = new ArrayList<>();
    for (Attribute a : CollectionConverters.asJava(DataTypeUtils.toAttributes(partitionSchema))) {
      input.add(named.getOrDefault(a.name(), a));
    }
    BasePredicate predicate = Predicate.create(all, CollectionConverters.asScala(input).toList());
    predicate.initialize(0);
    return predicate;
  }

  @Override
  public String[] inputFiles() {
    return inputFiles.clone();
  }

  @Override
  public void refresh() {
    // A version's files never change.
  }

  @Override
  public long sizeInBytes() {
    return sizeInBytes;
  }

  @Override
  public StructType partitionSchema() {
    return partitionSchema;
  }

  @Override
  public String toString() {
    return description;
  }
}
