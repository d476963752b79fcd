"""The pixel count an encoded image claims, read from its header inside the graph.

`tf.io.decode_image` allocates whatever the header asks for: a PNG of 20,000 x 20,000
zero pixels is about 400 KB on the wire and 1.2 GB once decoded. The serving signature
reads the size from the header first (PNG IHDR, JPEG SOFn through
`tf.io.extract_jpeg_shape`, GIF logical screen and every frame descriptor, BMP info
header) and refuses an image above `MAX_IMAGE_PIXELS` before anything is decoded.

The formats and their signatures are the ones `decode_image` itself recognises; other
bytes claim 0 pixels and are refused by the decoder as before.
"""

from __future__ import annotations

from components.trainer.keras import tf

# 4096 x 4096: a 12-megapixel phone photo (4000 x 3000) still passes. At this bound one
# image decodes to at most 16.8 M pixels x 3 channels x 2 bytes (16-bit PNG) = 100 MB
# before it is resized to 32 x 32.
MAX_IMAGE_PIXELS = 4096 * 4096
# A GIF is walked block by block to find every frame; 16,384 data sub-blocks are
# up to 4 MB of image data. Longer walks are refused so the check itself stays cheap.
MAX_GIF_BLOCKS = 1 << 14

_PNG, _JPEG, _GIF, _BMP = b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF8", b"BM"
_PADDING = b"\0" * 32  # header reads past a short file's end see zeros, never an error


def _has_prefix(padded: tf.Tensor, magic: bytes) -> tf.Tensor:
    return tf.equal(tf.strings.substr(padded, 0, len(magic)), magic)


def _read_bytes(padded: tf.Tensor, position, count: int) -> tf.Tensor:
    """`count` bytes from `position` as int64 [count]."""
    raw = tf.io.decode_raw(tf.strings.substr(padded, position, count), tf.uint8)
    return tf.cast(tf.reshape(raw, [count]), tf.int64)


def _unsigned(values: tf.Tensor, little_endian: bool) -> tf.Tensor:
    order = range(values.shape[0]) if little_endian else reversed(range(values.shape[0]))
    return sum(values[i] * (256**k) for k, i in enumerate(order))


def _png_size(padded: tf.Tensor):
    header = _read_bytes(padded, 16, 8)  # IHDR: width, height as big-endian uint32
    return _unsigned(header[:4], False), _unsigned(header[4:], False)


def _jpeg_size(encoded: tf.Tensor):
    shape = tf.cast(tf.io.extract_jpeg_shape(encoded), tf.int64)  # header only
    return shape[1], shape[0]


def _bmp_size(padded: tf.Tensor):
    header = _read_bytes(padded, 18, 8)  # int32 width, height; height < 0 means top-down

    def magnitude(word: tf.Tensor) -> tf.Tensor:
        value = _unsigned(word, True)
        return tf.abs(tf.where(value >= 2**31, value - 2**32, value))

    return magnitude(header[:4]), magnitude(header[4:])


def _colour_table_bytes(packed: tf.Tensor) -> tf.Tensor:
    return tf.where(
        tf.bitwise.bitwise_and(packed, 0x80) > 0,
        3 * tf.bitwise.left_shift(tf.constant(2, tf.int64), tf.bitwise.bitwise_and(packed, 7)),
        tf.constant(0, tf.int64),
    )


def _gif_size(padded: tf.Tensor, length: tf.Tensor):
    """(canvas width, canvas height, pixels, walk finished). The decoder's canvas covers
    the logical screen and every frame, and it holds every frame's pixels while it
    reads them, so the claim is the larger of the canvas and the sum of the frames."""
    screen = _read_bytes(padded, 6, 5)
    start = 13 + _colour_table_bytes(screen[4])

    def keep_walking(position, in_chain, width, height, frames, steps, done):
        return tf.logical_not(done) & (position < length) & (steps < MAX_GIF_BLOCKS)

    def step(position, in_chain, width, height, frames, steps, done):
        block = _read_bytes(padded, position, 10)
        kind = block[0]  # a block's introducer, or inside a chain the sub-block's length
        is_image = tf.logical_not(in_chain) & tf.equal(kind, 0x2C)
        is_extension = tf.logical_not(in_chain) & tf.equal(kind, 0x21)
        left, top = _unsigned(block[1:3], True), _unsigned(block[3:5], True)
        frame_width, frame_height = _unsigned(block[5:7], True), _unsigned(block[7:9], True)
        # image descriptor (10 bytes), local colour table, LZW code size byte, then data
        after_image = position + 11 + _colour_table_bytes(block[9])
        next_position = tf.where(
            in_chain, position + kind + 1, tf.where(is_image, after_image, position + 2)
        )
        next_in_chain = tf.where(in_chain, kind > 0, is_image | is_extension)
        ended = tf.logical_not(in_chain) & tf.logical_not(is_image | is_extension)
        width = tf.where(is_image, tf.maximum(width, left + frame_width), width)
        height = tf.where(is_image, tf.maximum(height, top + frame_height), height)
        frames += tf.where(is_image, frame_width * frame_height, tf.constant(0, tf.int64))
        return next_position, next_in_chain, width, height, frames, steps + 1, ended

    zero = tf.constant(0, tf.int64)
    position, _, width, height, frames, _, done = tf.while_loop(
        keep_walking,
        step,
        (
            start,
            tf.constant(False),
            _unsigned(screen[0:2], True),
            _unsigned(screen[2:4], True),
            zero,
            tf.constant(0),
            tf.constant(False),
        ),
    )
    finished = done | (position >= length)
    return width, height, tf.maximum(width * height, frames), finished


def claimed_size(encoded: tf.Tensor):
    """(width, height, pixels, header fully read) claimed by one encoded image, int64
    scalars; all zero (and read) for bytes of no recognised format."""
    padded = tf.strings.join([encoded, _PADDING])
    length = tf.cast(tf.strings.length(encoded), tf.int64)
    done = tf.constant(True)

    def area(size):
        return size[0], size[1], size[0] * size[1], done

    def unknown():
        zero = tf.constant(0, tf.int64)
        return zero, zero, zero, done

    return tf.case(
        [
            (_has_prefix(padded, _PNG), lambda: area(_png_size(padded))),
            (_has_prefix(padded, _JPEG), lambda: area(_jpeg_size(encoded))),
            (_has_prefix(padded, _GIF), lambda: _gif_size(padded, length)),
            (_has_prefix(padded, _BMP), lambda: area(_bmp_size(padded))),
        ],
        default=unknown,
        exclusive=True,
    )


def check_pixel_limit(encoded: tf.Tensor, max_pixels: int = MAX_IMAGE_PIXELS) -> tf.Operation:
    """An op that fails with InvalidArgumentError when the header claims more than
    `max_pixels`; run the decoder under a control dependency on it."""
    width, height, pixels, finished = claimed_size(encoded)
    side = int(max_pixels**0.5)
    limit = f"{max_pixels} pixels" + (f" ({side}x{side})" if side * side == max_pixels else "")
    too_complex = tf.debugging.Assert(
        finished, [f"image refused: GIF with more than {MAX_GIF_BLOCKS} blocks"]
    )
    with tf.control_dependencies([too_complex]):
        return tf.debugging.Assert(
            pixels <= max_pixels,
            [
                tf.strings.format(
                    "image refused: its header claims {}x{} ({} pixels), above the serving "
                    "limit of " + limit + "; downscale it before sending",
                    (width, height, pixels),
                )
            ],
        )
