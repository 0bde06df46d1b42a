package io.deltaplane.spark;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Some rows of another vector, without copying them: row {@code i} is the other vector's row
 * {@code rows[i]}. A batch's deleted rows leave it this way (Spark's batches have no selection of
 * their own). Nested values select the same rows of their children.
 */
final class SelectedColumnVector extends ColumnVector {
  final ColumnVector inner;
  private int[] rows;
  private int count;
  private SelectedColumnVector[] children;

  SelectedColumnVector(ColumnVector inner) {
    super(inner.dataType());
    this.inner = inner;
  }

  /** Selects {@code rows[0, count)} (the array is the caller's, reused batch after batch). */
  void select(int[] rows, int count) {
    this.rows = rows;
    this.count = count;
    if (children != null) {
      for (SelectedColumnVector child : children) {
        if (child != null) {
          child.select(rows, count);
        }
      }
    }
  }

  @Override
  public void close() {
    // the reader owns the vector it selects from
  }

  @Override
  public boolean hasNull() {
    return inner.hasNull() && numNulls() > 0;
  }

  @Override
  public int numNulls() {
    if (!inner.hasNull()) {
      return 0;
    }
    int nulls = 0;
    for (int i = 0; i < count; i++) {
      if (inner.isNullAt(rows[i])) {
        nulls++;
      }
    }
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return inner.isNullAt(rows[rowId]);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return inner.getBoolean(rows[rowId]);
  }

  @Override
  public byte getByte(int rowId) {
    return inner.getByte(rows[rowId]);
  }

  @Override
  public short getShort(int rowId) {
    return inner.getShort(rows[rowId]);
  }

  @Override
  public int getInt(int rowId) {
    return inner.getInt(rows[rowId]);
  }

  @Override
  public long getLong(int rowId) {
    return inner.getLong(rows[rowId]);
  }

  @Override
  public float getFloat(int rowId) {
    return inner.getFloat(rows[rowId]);
  }

  @Override
  public double getDouble(int rowId) {
    return inner.getDouble(rows[rowId]);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    return inner.getArray(rows[rowId]);
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    return inner.getMap(rows[rowId]);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return inner.getDecimal(rows[rowId], precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return inner.getUTF8String(rows[rowId]);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return inner.getBinary(rows[rowId]);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    ColumnVector child = inner.getChild(ordinal);
    if (child == null) {
      return null;
    }
    if (children == null) {
      children = new SelectedColumnVector[ordinal + 1];
    } else if (children.length <= ordinal) {
      children = java.util.Arrays.copyOf(children, ordinal + 1);
    }
    if (children[ordinal] == null) {
      children[ordinal] = new SelectedColumnVector(child);
      children[ordinal].select(rows, count);
    }
    return children[ordinal];
  }
}
