package io.deltaplane.spark;

import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.unsafe.types.UTF8String;

/** Copies some rows of a flat vector into an on-heap one (a batch's live rows, in order). */
final class Compaction {
  private Compaction() {}

  static boolean copies(DataType type) {
    return type instanceof BooleanType || type instanceof ByteType || type instanceof ShortType
        || type instanceof IntegerType || type instanceof DateType || type instanceof LongType
        || type instanceof TimestampType || type instanceof TimestampNTZType || type instanceof FloatType
        || type instanceof DoubleType || type instanceof DecimalType || type instanceof StringType
        || type instanceof BinaryType;
  }

  /** {@code out}'s rows {@code [0, count)} become {@code in}'s rows {@code rows[0, count)}. */
  static void copy(ColumnVector in, int[] rows, int count, WritableColumnVector out) {
    out.reset();
    DataType type = in.dataType();
    boolean nulls = in.hasNull();
    if (!nulls && type instanceof LongType) { // the common cases without a test per row
      for (int j = 0; j < count; j++) {
        out.putLong(j, in.getLong(rows[j]));
      }
      return;
    } else if (!nulls && type instanceof IntegerType) {
      for (int j = 0; j < count; j++) {
        out.putInt(j, in.getInt(rows[j]));
      }
      return;
    } else if (!nulls && type instanceof DoubleType) {
      for (int j = 0; j < count; j++) {
        out.putDouble(j, in.getDouble(rows[j]));
      }
      return;
    }
    for (int j = 0; j < count; j++) {
      int r = rows[j];
      if (nulls && in.isNullAt(r)) {
        out.putNull(j);
        continue;
      }
      if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType) {
        out.putLong(j, in.getLong(r));
      } else if (type instanceof IntegerType || type instanceof DateType) {
        out.putInt(j, in.getInt(r));
      } else if (type instanceof DoubleType) {
        out.putDouble(j, in.getDouble(r));
      } else if (type instanceof StringType || type instanceof BinaryType) {
        putBytes(in, r, j, out, type instanceof StringType);
      } else if (type instanceof DecimalType) {
        DecimalType decimal = (DecimalType) type;
        out.putDecimal(j, in.getDecimal(r, decimal.precision(), decimal.scale()), decimal.precision());
      } else if (type instanceof FloatType) {
        out.putFloat(j, in.getFloat(r));
      } else if (type instanceof ShortType) {
        out.putShort(j, in.getShort(r));
      } else if (type instanceof ByteType) {
        out.putByte(j, in.getByte(r));
      } else {
        out.putBoolean(j, in.getBoolean(r));
      }
    }
  }

  private static void putBytes(ColumnVector in, int r, int j, WritableColumnVector out, boolean string) {
    if (string) {
      UTF8String value = in.getUTF8String(r);
      if (value.getBaseObject() instanceof byte[]) {
        byte[] base = (byte[]) value.getBaseObject();
        int offset = (int) (value.getBaseOffset() - org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET);
        out.putByteArray(j, base, offset, value.numBytes());
        return;
      }
      out.putByteArray(j, value.getBytes());
      return;
    }
    out.putByteArray(j, in.getBinary(r));
  }
}
