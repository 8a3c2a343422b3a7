"""Streaming decompression of a record batch's records section, with a bounded buffer.

Kafka's codecs (org.apache.kafka.common.compress): 1 gzip (RFC 1952; concatenated members are
read on, as Java's GZIPInputStream does), 2 snappy (xerial framing as snappy-java and
kafka-python write it, or one raw block as librdkafka does), 3 lz4 (LZ4 frame format with
independent blocks), 4 zstd (one or more frames; zstd-jni omits the content size).

:func:`decompressed_chunks` yields the decompressed bytes in chunks of at most ``CHUNK_BYTES``
(snappy: one block, whose size its header declares and which is checked first), so a reader that
stops early never inflates the rest, and it refuses to produce more than ``limit`` bytes in
total: a decompression bomb costs at most ``limit`` bytes of work and ``CHUNK_BYTES`` of memory
at a time.

Errors: a payload the codec cannot decode is InvalidRecordError(CORRUPT_MESSAGE); more than
``limit`` bytes is :class:`DecompressedSizeError` (MESSAGE_TOO_LARGE).  A truncated zstd frame
is not reported by the zstd library: it ends the output early, which the record walker then
refuses (fewer records than declared, or a truncated record).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from pybroker.errors import ErrorCode
from pybroker.wire.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    InvalidRecordError,
)

CHUNK_BYTES = 64 * 1024
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_INT32 = struct.Struct(">i")


class DecompressedSizeError(InvalidRecordError):
    """The records section inflates beyond the allowed size."""

    def __init__(self, limit: int) -> None:
        super().__init__(ErrorCode.MESSAGE_TOO_LARGE, f"records inflate to more than {limit} bytes")
        self.limit = limit


def _corrupt(codec: int, why: object) -> InvalidRecordError:
    names = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    return InvalidRecordError(
        ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {names.get(codec, codec)}: {why}"
    )


def _gzip(data: bytes) -> Iterator[bytes]:
    pending = data
    while pending:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while True:
            out = d.decompress(pending, CHUNK_BYTES)
            if out:
                yield out
            pending = d.unconsumed_tail
            if d.eof:
                pending = d.unused_data
                break
            if not pending and not out:
                # input used up: flush what is buffered, then it must be complete
                while out := d.decompress(b"", CHUNK_BYTES):
                    yield out
                if not d.eof:
                    raise zlib.error("truncated gzip stream")
                pending = d.unused_data
                break


def _snappy_block(block: bytes | memoryview, budget: int) -> bytes:
    import cramjam

    need = cramjam.snappy.decompress_raw_len(block)
    if need > budget:
        raise DecompressedSizeError(budget)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy(data: bytes, limit: int) -> Iterator[bytes]:
    if len(data) > 16 and data[:8] == _XERIAL_MAGIC:
        pos, end, made = 16, len(data), 0
        while pos < end:
            if pos + 4 > end:
                raise ValueError("torn xerial block header")
            (n,) = _INT32.unpack_from(data, pos)
            pos += 4
            if n < 0 or pos + n > end:
                raise ValueError("torn xerial block")
            out = _snappy_block(memoryview(data)[pos : pos + n], limit - made)
            made += len(out)
            pos += n
            yield out
    else:
        yield _snappy_block(data, limit)


def _lz4(data: bytes) -> Iterator[bytes]:
    import lz4.frame

    pending = data
    while pending:
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(pending, max_length=CHUNK_BYTES)
        while True:
            if out:
                yield out
            if d.eof:
                pending = d.unused_data or b""
                break
            if d.needs_input:
                raise RuntimeError("truncated lz4 frame")
            out = d.decompress(b"", max_length=CHUNK_BYTES)


def _zstd(data: bytes) -> Iterator[bytes]:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    while out := reader.read(CHUNK_BYTES):
        yield out


def decompressed_chunks(codec: int, data: bytes, limit: int) -> Iterator[bytes]:
    """The records section ``data`` (compressed with ``codec``) decompressed, chunk by chunk;
    at most ``limit`` bytes in total (else DecompressedSizeError)."""
    if codec == COMPRESSION_NONE:
        if len(data) > limit:
            raise DecompressedSizeError(limit)
        yield data
        return
    if codec == COMPRESSION_GZIP:
        source = _gzip(data)
    elif codec == COMPRESSION_SNAPPY:
        source = _snappy(data, limit)
    elif codec == COMPRESSION_LZ4:
        source = _lz4(data)
    elif codec == COMPRESSION_ZSTD:
        source = _zstd(data)
    else:
        raise InvalidRecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"codec {codec}")
    made = 0
    try:
        for chunk in source:
            made += len(chunk)
            if made > limit:
                raise DecompressedSizeError(limit)
            yield chunk
    except InvalidRecordError:
        raise
    except Exception as e:  # each codec library has its own error types
        raise _corrupt(codec, e) from e
    finally:
        source.close()
