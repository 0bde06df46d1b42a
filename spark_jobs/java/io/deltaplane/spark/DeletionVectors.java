package io.deltaplane.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;
import org.roaringbitmap.RoaringBitmap;
import scala.Option;
import scala.collection.immutable.Map;

/**
 * A file's deletion vector, loaded by the task that reads the file, from where the log says it is
 * (its metadata, see {@link LogFileIndex#file}): a frame in a deletion-vector file (big-endian
 * size, bitmap, big-endian CRC-32) or the bitmap itself (inline in the log). The bitmap is the
 * magic number and a portable 64-bit roaring bitmap (or the older layout of 32-bit bitmaps).
 */
final class DeletionVectors {
  static final String PATH = "deltaplane_dv_path";
  static final String OFFSET = "deltaplane_dv_offset";
  static final String SIZE = "deltaplane_dv_size";
  static final String CARDINALITY = "deltaplane_dv_cardinality";
  static final String INLINE = "deltaplane_dv_inline";
  private static final int MAGIC = 1681511377;
  private static final int LEGACY_MAGIC = 1681511376;

  private DeletionVectors() {}

  /** A deletion vector this reader will not use (not what the log says, or beyond it); the
   * message names it and says why. */
  static final class Refused extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    Refused(String message) {
      super(message);
    }
  }

  /** The file's deleted positions, or null where it has no deletion vector. */
  static RoaringBitmap load(Map<String, Object> metadata, Configuration conf, String file) {
    Option<Object> cardinality = metadata.get(CARDINALITY);
    if (cardinality.isEmpty()) {
      return null;
    }
    Option<Object> inline = metadata.get(INLINE);
    String where = inline.isDefined()
        ? "the inline deletion vector of " + file
        : "the deletion vector in " + metadata.get(PATH).get() + " of " + file;
    try {
      byte[] bitmap = inline.isDefined()
          ? (byte[]) inline.get()
          : frame(new Path((String) metadata.get(PATH).get()), (Long) metadata.get(OFFSET).get(),
              (Integer) metadata.get(SIZE).get(), conf, where);
      RoaringBitmap deleted = decode(bitmap, where);
      long expected = (Long) cardinality.get();
      if (deleted.getLongCardinality() != expected) {
        throw new Refused(where + " holds " + deleted.getLongCardinality()
            + " rows where the log says " + expected + "; it is corrupt");
      }
      return deleted;
    } catch (Refused e) {
      throw e;
    } catch (IOException | RuntimeException e) {
      throw new IllegalStateException(where + " is corrupt or unreadable: " + e, e);
    }
  }

  private static byte[] frame(Path path, long offset, int size, Configuration conf, String where) throws IOException {
    byte[] framed = new byte[size + 8];
    try (FSDataInputStream in = path.getFileSystem(conf).open(path)) {
      in.readFully(offset, framed);
    }
    ByteBuffer buffer = ByteBuffer.wrap(framed).order(ByteOrder.BIG_ENDIAN);
    if (buffer.getInt(0) != size) {
      throw new Refused(where + " has size " + buffer.getInt(0) + " where the log says " + size);
    }
    CRC32 crc = new CRC32();
    crc.update(framed, 4, size);
    if ((int) crc.getValue() != buffer.getInt(4 + size)) {
      throw new Refused(where + " fails its checksum");
    }
    byte[] bitmap = new byte[size];
    System.arraycopy(framed, 4, bitmap, 0, size);
    return bitmap;
  }

  /** Positions past 2^32 - 1 (a file of more than four billion rows) are refused. */
  static RoaringBitmap decode(byte[] bytes, String where) throws IOException {
    ByteBuffer buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
    int magic = buffer.getInt(0);
    RoaringBitmap low = new RoaringBitmap();
    int position;
    long count;
    if (magic == MAGIC) {
      count = buffer.getLong(4);
      position = 12;
    } else if (magic == LEGACY_MAGIC) {
      count = Integer.toUnsignedLong(buffer.getInt(4));
      position = 8;
    } else {
      throw new Refused(where + " has bad magic " + magic);
    }
    for (long i = 0; i < count; i++) {
      long high;
      if (magic == MAGIC) {
        high = Integer.toUnsignedLong(buffer.getInt(position));
        position += 4;
      } else {
        high = i;
        position += 4; // the bitmap's length
      }
      RoaringBitmap part = new RoaringBitmap();
      part.deserialize(ByteBuffer.wrap(bytes, position, bytes.length - position).slice());
      position += part.serializedSizeInBytes();
      if (high == 0) {
        low = part;
      } else if (!part.isEmpty()) {
        throw new Refused(where + " deletes rows past position 4,294,967,295, which this reader does not read");
      }
    }
    return low;
  }
}
