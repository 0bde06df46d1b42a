package io.deltaplane.spark;

import java.io.Closeable;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;
import org.roaringbitmap.PeekableIntIterator;
import org.roaringbitmap.RoaringBitmap;
import scala.Function1;
import scala.Option;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's Parquet format, leaving out the rows a file's deletion vector deletes as it decodes.
 * A row's position in a file with a deletion vector is counted where a task reads the whole file
 * and the query pushes no filter (nothing is skipped), else it is the row-index column Spark's
 * reader fills (so files still split and filters are still pushed); a batch with
 * deleted rows is handed on as a selection of its rows ({@link SelectedColumnVector}), a row
 * deleted is not handed on. Files without one are Spark's own read, untouched.
 */
public class DeletionVectorParquetFormat extends ParquetFileFormat {
  /** The column Spark's Parquet reader fills with each row's position in its file. */
  static final String ROW_INDEX = "_tmp_metadata_row_index";
  /** The option naming the table and version in errors. */
  public static final String TABLE = "deltaplane.table";

  private final boolean deletionVectors;

  /** {@code deletionVectors}: whether any file of the relation has one (else this is Spark's
   * format, and a query builds no reader for them). */
  public DeletionVectorParquetFormat(boolean deletionVectors) {
    this.deletionVectors = deletionVectors;
  }

  @Override
  public String toString() {
    return "Parquet (deletion vectors applied)";
  }

  @Override
  public boolean equals(Object other) {
    return other != null && other.getClass() == getClass();
  }

  @Override
  public int hashCode() {
    return getClass().hashCode();
  }

  /** The batches' vectors: Spark's own, or for a batch with deleted rows its live rows copied
   * into on-heap vectors (flat columns; {@link #copied}) or selected from Spark's (the others,
   * which code generated for the scan reads as any {@link ColumnVector}). Partition columns are
   * constant and go on as Spark's. */
  @Override
  public Option<Seq<String>> vectorTypes(StructType requiredSchema, StructType partitionSchema, SQLConf conf) {
    List<String> spark = new ArrayList<>(CollectionConverters.asJava(
        super.vectorTypes(requiredSchema, partitionSchema, conf).get()));
    boolean[] copied = copied(requiredSchema, spark);
    for (int i = 0; i < copied.length; i++) {
      if (!copied[i]) {
        spark.set(i, ColumnVector.class.getName());
      }
    }
    return Option.apply(CollectionConverters.asScala(spark).toList());
  }

  /** Which of the required columns a batch's live rows are copied from: flat types, where
   * Spark's reader decodes into on-heap vectors. */
  static boolean[] copied(StructType requiredSchema, List<String> sparkTypes) {
    boolean onHeap = !sparkTypes.isEmpty() && sparkTypes.get(0).equals(OnHeapColumnVector.class.getName());
    StructField[] fields = requiredSchema.fields();
    boolean[] out = new boolean[fields.length];
    for (int i = 0; i < fields.length; i++) {
      out[i] = onHeap && Compaction.copies(fields[i].dataType());
    }
    return out;
  }

  @Override
  public Function1<PartitionedFile, Iterator<InternalRow>> buildReaderWithPartitionValues(
      SparkSession session,
      StructType dataSchema,
      StructType partitionSchema,
      StructType requiredSchema,
      Seq<Filter> filters,
      Map<String, String> options,
      Configuration hadoopConf) {
    String table = options.getOrElse(TABLE, () -> "the table");
    // For the tasks' own reads (a file's size, a deletion vector), before Spark's reader writes
    // the schema it reads into the configuration it is given; so each reader gets its own.
    SerializableConfiguration conf = new SerializableConfiguration(new Configuration(hadoopConf));
    Function1<PartitionedFile, Iterator<InternalRow>> plain = new Opening(super.buildReaderWithPartitionValues(
        session, dataSchema, partitionSchema, requiredSchema, filters, options, new Configuration(hadoopConf)),
        table, conf);
    if (!deletionVectors) {
      return plain;
    }
    StructType withIndex = requiredSchema.add(ROW_INDEX, DataTypes.LongType, true);
    Function1<PartitionedFile, Iterator<InternalRow>> indexed = new Opening(super.buildReaderWithPartitionValues(
        session, dataSchema, partitionSchema, withIndex, filters, options, new Configuration(hadoopConf)),
        table, conf);
    // What a row-based reader gives (required, row index, partition values), less the index.
    List<Expression> kept = new ArrayList<>();
    StructField[] given = withIndex.merge(partitionSchema, false).fields();
    int rowIndex = requiredSchema.length();
    for (int i = 0; i < given.length; i++) {
      if (i != rowIndex) {
        kept.add(new BoundReference(i, given[i].dataType(), true));
      }
    }
    List<String> sparkTypes = CollectionConverters.asJava(
        super.vectorTypes(requiredSchema, partitionSchema, SQLConf.get()).get());
    boolean[] copied = copied(requiredSchema, sparkTypes);
    return new Reader(plain, indexed, rowIndex, kept, copied, conf, filters.isEmpty());
  }

  /** Per file: Spark's reader, and for a file with a deletion vector its rows less the deleted. */
  static final class Reader implements Function1<PartitionedFile, Iterator<InternalRow>>, Serializable {
    private static final long serialVersionUID = 1L;
    private final Function1<PartitionedFile, Iterator<InternalRow>> plain;
    private final Function1<PartitionedFile, Iterator<InternalRow>> indexed;
    private final int rowIndex;
    private final List<Expression> kept;
    private final boolean[] copied;
    private final SerializableConfiguration conf;
    private final boolean unfiltered;

    Reader(
        Function1<PartitionedFile, Iterator<InternalRow>> plain,
        Function1<PartitionedFile, Iterator<InternalRow>> indexed,
        int rowIndex,
        List<Expression> kept,
        boolean[] copied,
        SerializableConfiguration conf,
        boolean unfiltered) {
      this.conf = conf;
      this.unfiltered = unfiltered;
      this.plain = plain;
      this.indexed = indexed;
      this.rowIndex = rowIndex;
      this.kept = kept;
      this.copied = copied;
    }

    @Override
    @SuppressWarnings("unchecked")
    public Iterator<InternalRow> apply(PartitionedFile file) {
      RoaringBitmap deleted = DeletionVectors.load(
          file.otherConstantMetadataColumnValues(), conf.value(), file.filePath().toString());
      if (deleted == null) {
        return plain.apply(file);
      }
      String path = file.filePath().toString();
      Object live;
      if (unfiltered && file.start() == 0 && file.length() == file.fileSize()) {
        // The whole file, no filter pushed, so no row group or page skipped: the n-th row read
        // is the n-th row of the file. Spark's row-index column costs a boxed value per row.
        Iterator<Object> rows = (Iterator<Object>) (Object) plain.apply(file);
        live = new Live(rows, deleted, -1, rowIndex, null, copied, path);
      } else {
        Iterator<Object> rows = (Iterator<Object>) (Object) indexed.apply(file);
        live = new Live(rows, deleted, rowIndex, rowIndex, kept, copied, path);
      }
      return (Iterator<InternalRow>) live; // elements are batches or rows, as Spark's reader gives
    }
  }

  /** Spark's reader of one file, which first checks that the file is the one the log names:
   * there, and of the log's size (a file replaced behind the log's back, or missing, stops the
   * query; it is never skipped, whatever {@code spark.sql.files.ignoreMissingFiles} says). The
   * check is made by the task that reads a file's first bytes. */
  static final class Opening implements Function1<PartitionedFile, Iterator<InternalRow>>, Serializable {
    private static final long serialVersionUID = 1L;
    private final Function1<PartitionedFile, Iterator<InternalRow>> inner;
    private final String table;
    private final SerializableConfiguration conf;

    Opening(Function1<PartitionedFile, Iterator<InternalRow>> inner, String table, SerializableConfiguration conf) {
      this.inner = inner;
      this.table = table;
      this.conf = conf;
    }

    @Override
    public Iterator<InternalRow> apply(PartitionedFile file) {
      try {
        if (file.start() == 0) {
          Path path = file.toPath();
          long size = path.getFileSystem(conf.value()).getFileStatus(path).getLen();
          if (size != file.fileSize()) {
            throw new IllegalStateException(table + ": data file " + file.filePath() + " has " + size
                + " bytes where the log says " + file.fileSize() + "; the file changed after it was committed");
          }
        }
        return inner.apply(file);
      } catch (Exception e) {
        if (e instanceof FileNotFoundException) {
          throw new IllegalStateException("data file " + file.filePath() + " of " + table + " is missing; it may have "
              + "been removed by VACUUM (versions older than the VACUUM retention cannot be read) or deleted "
              + "outside Delta", e);
        }
        throw DeletionVectorParquetFormat.<RuntimeException>rethrow(e);
      }
    }
  }

  @SuppressWarnings("unchecked")
  private static <E extends Exception> E rethrow(Exception e) throws E {
    throw (E) e;
  }

  /** The live rows of one file (or split): batches less their deleted rows, rows not deleted. */
  static final class Live extends scala.collection.AbstractIterator<Object> implements Closeable {
    private final Iterator<Object> rows;
    private final RoaringBitmap deleted;
    private final int rowIndex; // -1: positions counted (the whole file, nothing skipped)
    private final int required; // the required columns, before the index and partition values
    private long counted; // rows read so far, where positions are counted
    private final List<Expression> kept;
    private final boolean[] copied;
    private final String path;
    private Object pending;
    private UnsafeProjection projection;
    private int[] selected = new int[0];
    private SelectedColumnVector[] selections;
    private OnHeapColumnVector[] copies;
    private int[] capacities;
    private PeekableIntIterator positions; // the bitmap from position next on
    private long next;

    Live(Iterator<Object> rows, RoaringBitmap deleted, int rowIndex, int required, List<Expression> kept,
        boolean[] copied, String path) {
      this.rows = rows;
      this.deleted = deleted;
      this.rowIndex = rowIndex;
      this.required = required;
      this.kept = kept;
      this.copied = copied;
      this.path = path;
    }

    @Override
    public boolean hasNext() {
      while (pending == null && rows.hasNext()) {
        Object next = rows.next();
        pending = next instanceof ColumnarBatch ? live((ColumnarBatch) next) : live((InternalRow) next);
      }
      return pending != null;
    }

    @Override
    public Object next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      Object out = pending;
      pending = null;
      return out;
    }

    /** The row less its index, or null where it is deleted. */
    private Object live(InternalRow row) {
      if (rowIndex < 0) {
        return isDeleted(false, counted++) ? null : row;
      }
      if (isDeleted(row.isNullAt(rowIndex), row.getLong(rowIndex))) {
        return null;
      }
      if (projection == null) {
        projection = UnsafeProjection.create(CollectionConverters.asScala(kept).toList());
      }
      return projection.apply(row);
    }

    /** The batch less its index column and its deleted rows, or null where none is left. */
    private ColumnarBatch live(ColumnarBatch batch) {
      int n = batch.numRows();
      int width = batch.numCols() - (rowIndex < 0 ? 0 : 1);
      if (n == 0) {
        return null;
      }
      int count = select(rowIndex < 0 ? null : batch.column(rowIndex), n);
      if (count == 0) {
        return null;
      }
      if (count == n && rowIndex < 0) {
        return batch;
      }
      ColumnVector[] columns = new ColumnVector[width];
      if (count == n) {
        for (int i = 0, j = 0; i < batch.numCols(); i++) {
          if (i != rowIndex) {
            columns[j++] = batch.column(i);
          }
        }
        return new ColumnarBatch(columns, n);
      }
      if (selections == null) {
        selections = new SelectedColumnVector[width];
        copies = new OnHeapColumnVector[width];
        capacities = new int[width];
      }
      for (int i = 0, j = 0; i < batch.numCols(); i++) {
        if (i == rowIndex) {
          continue;
        }
        ColumnVector column = batch.column(i);
        if (i >= required) { // a partition column: the same value in every row
          columns[j] = column;
        } else if (copied[i]) {
          if (copies[j] == null || capacities[j] < count) {
            capacities[j] = Math.max(count, 4096);
            copies[j] = new OnHeapColumnVector(capacities[j], column.dataType());
          }
          Compaction.copy(column, selected, count, copies[j]);
          columns[j] = copies[j];
        } else {
          if (selections[j] == null || selections[j].inner != column) {
            selections[j] = new SelectedColumnVector(column);
          }
          selections[j].select(selected, count);
          columns[j] = selections[j];
        }
        j++;
      }
      return new ColumnarBatch(columns, count);
    }

    /** Fills {@code selected} with the batch's live rows; returns how many. Spark's reader gives
     * a batch's positions in increasing order; where they are consecutive (no page skipped inside
     * the batch) only the deleted positions in their range are visited, else each row is looked
     * up. */
    private int select(ColumnVector index, int n) {
      long first;
      long last;
      if (index == null) {
        first = counted;
        last = counted + n - 1;
        counted += n;
      } else {
        if (index.isNullAt(0) || index.isNullAt(n - 1)) {
          isDeleted(true, 0);
        }
        first = index.getLong(0);
        last = index.getLong(n - 1);
      }
      if (selected.length < n) { // every selection is pointed at it before the batch goes on
        selected = new int[Math.max(n, 4096)];
      }
      int count = 0;
      if (last - first != n - 1 || first < 0 || last > 0xFFFFFFFFL) {
        for (int i = 0; i < n; i++) {
          boolean missing = index != null && index.isNullAt(i);
          if (!isDeleted(missing, index == null ? first + i : index.getLong(i))) {
            selected[count++] = i;
          }
        }
        return count;
      }
      if (positions == null || first < next) { // a split starts anywhere in the file
        positions = deleted.getIntIterator();
      }
      positions.advanceIfNeeded((int) first);
      int from = 0; // rows [from, deleted one) are live
      while (positions.hasNext()) {
        long position = Integer.toUnsignedLong(positions.peekNext());
        if (position > last) {
          break;
        }
        int gone = (int) (position - first);
        while (from < gone) {
          selected[count++] = from++;
        }
        from = gone + 1;
        positions.next();
      }
      next = last + 1;
      if (from == 0) {
        return n; // nothing deleted in the batch: handed on whole
      }
      while (from < n) {
        selected[count++] = from++;
      }
      return count;
    }

    private boolean isDeleted(boolean missing, long position) {
      if (missing) {
        throw new IllegalStateException(
            "Spark's Parquet reader gave no row index for a row of " + path + ", so its deletion vector cannot be applied");
      }
      return position >= 0 && position <= 0xFFFFFFFFL && deleted.contains((int) position);
    }

    @Override
    public void close() throws IOException {
      if (rows instanceof Closeable) {
        ((Closeable) rows).close();
      }
      for (OnHeapColumnVector copy : copies == null ? new OnHeapColumnVector[0] : copies) {
        if (copy != null) {
          copy.close();
        }
      }
    }
  }
}
