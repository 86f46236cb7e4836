"""The `string` and `binary` formats: a record's bytes as UTF-8 text, or as they are."""

from __future__ import annotations

import pyarrow as pa

from streamer.decode.decoded import Decoded, decode_each, decode_utf8


class Utf8Decoder:
    def decode(self, raw: pa.Array) -> Decoded:
        try:
            return raw.cast(pa.string()), {}
        except pa.ArrowInvalid:  # some record is not UTF-8: find which
            return decode_each(raw, decode_utf8, pa.string())


class BinaryDecoder:
    def decode(self, raw: pa.Array) -> Decoded:
        return raw, {}
