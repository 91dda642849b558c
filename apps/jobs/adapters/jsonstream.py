"""Stream one big array out of a JSON object, one element at a time, in bounded memory.

``walk(chunks, array_key)`` reads a top-level JSON object from byte chunks. Every member is
decoded whole except ``array_key``, whose elements are handed to ``on_items`` in lists, so
a multi-gigabyte ``traceEvents`` never sits in memory: at most one chunk of elements is
decoded at a time. A chunk's worth of elements is decoded per call where it can, by orjson
(1.7 times the standard library's C decoder on profiler traces, which measured about three
times as fast as ijson's yajl2_c backend); single values by the standard library's scanner.
Parsing is most of the work.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Callable, Generator, Iterator
from json.scanner import make_scanner
from typing import IO, Any

import orjson

MAX_VALUE_CHARS = 64 << 20  # one event (or metadata value) larger than this is refused
_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_START = set('[{"-0123456789tfn')


# Text of whole elements -> the same text without the elements its caller never needs, and
# how many it removed. It must remove whole elements only (with their separating comma) and
# may leave any it is unsure of; if what it leaves does not decode, the elements are decoded
# one at a time from the original text instead.
Prefilter = Callable[[str], tuple[str, int]]


class JsonStreamError(ValueError):
    """The bytes are not JSON (``not_json``) or not an object with the array expected."""

    def __init__(self, message: str, *, not_json: bool = True) -> None:
        super().__init__(message)
        self.not_json = not_json


class _Buffer:
    """Decoded text with a read position; pulls more chunks when a value runs past the end."""

    def __init__(self, chunks: Iterator[bytes], prefilter: Prefilter | None = None) -> None:
        self.chunks = chunks
        self.prefilter = prefilter
        self.filtered = 0  # elements the prefilter removed from batches that decoded
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.eof = "", 0, False
        self.fresh = False  # new text arrived since the last batch() attempt
        # the C scanner behind JSONDecoder.raw_decode, without its Python wrapper
        self.scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # stub quirk

    def more(self) -> bool:
        """Append the next chunk; False at the end of the input."""
        if self.eof:
            return False
        chunk = next(self.chunks, None)
        try:
            new = self.utf8.decode(chunk or b"", final=chunk is None)
        except UnicodeDecodeError as exc:
            raise JsonStreamError(f"not UTF-8 text ({exc.reason})") from exc
        self.eof = chunk is None
        self.text, self.pos = self.text[self.pos:] + new, 0
        self.fresh = True
        return True

    def batch(self) -> list[Any]:
        """Decode, in one C call, every complete element up to the last '},' in the text.

        The slice starts where an element starts, and ``json.loads('[' + slice + ']')``
        succeeds only when it is a run of complete elements: a cut inside an element leaves
        a brace open or a string unclosed. So a wrong guess fails and the caller goes on
        one value at a time. Tried at most once per chunk, so failures cost one parse.
        """
        if not self.fresh:
            return []
        self.fresh = False
        cut = self.text.rfind("},", self.pos)
        if cut < 0:
            return []
        body, removed = self.text[self.pos:cut + 1], 0
        if self.prefilter is not None:
            body, removed = self.prefilter(body)
        try:
            items: list[Any] = orjson.loads("[" + body + "]")
        except orjson.JSONDecodeError:  # also what orjson refuses and json takes (NaN,
            return []                   # huge integers): the value path decodes those
        self.pos = cut + 2
        self.filtered += removed
        return items

    def peek(self) -> str:
        """The next non-blank character, without consuming it ('' at the end)."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def expect(self, char: str, where: str) -> None:
        found = self.peek()
        if found != char:
            shown = repr(found) if found else "the end of the data (truncated?)"
            raise JsonStreamError(f"expected {char!r} {where}, found {shown}")
        self.pos += 1

    def value(self) -> Any:
        """Decode one JSON value; a value that reaches the end of the text waits for more."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            try:
                value, end = self.scan(self.text, self.pos)
            except (json.JSONDecodeError, StopIteration) as exc:
                if self._grow():
                    continue
                raise JsonStreamError(_describe(exc, self.pos)) from exc
            except RecursionError:
                # The C scanner recurses once per level. Real documents nest a handful of
                # levels (orjson, on the batch path, stops at 1024): deeper is not data.
                raise JsonStreamError("lists or objects nested too deeply (over about a "
                                      "thousand levels)", not_json=False) from None
            except ValueError as exc:  # an integer of more than 4300 digits (CVE-2020-10735)
                raise JsonStreamError(f"a number too long to read ({sys.get_int_max_str_digits()}"
                                      f" digits at most)", not_json=False) from exc
            # a number cut by a chunk boundary decodes "successfully" too: wait for more
            if end == len(self.text) and self._grow():
                continue
            self.pos = end
            return value

    def skip_comma(self) -> bool:
        """Step over the ',' that follows a value, if it is there (the fast path)."""
        pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
        if pos < len(self.text) and self.text[pos] == ",":
            self.pos = pos + 1
            return True
        self.pos = pos
        return False

    def _grow(self) -> bool:
        if len(self.text) - self.pos > MAX_VALUE_CHARS:
            raise JsonStreamError(f"a value larger than {MAX_VALUE_CHARS >> 20} MiB, or "
                                  f"invalid JSON")
        return self.more()


def _describe(exc: Exception, pos: int) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos}"
    return f"Expecting value at character {pos}"


def walk(chunks: Iterator[bytes], array_key: str, on_items: Callable[[list[Any]], None],
         prefilter: Prefilter | None = None) -> dict[str, Any]:
    """Stream ``array_key``'s elements to ``on_items``, a list at a time; return the rest.

    ``prefilter`` may drop elements from the text of a batch before it is decoded (see
    ``Prefilter``); ``array_key``'s member then counts them too.
    Raises ``JsonStreamError``; its ``not_json`` is False when the text is JSON but not an
    object holding an ``array_key`` list.
    """
    members: dict[str, Any] = {}
    for items in stream(chunks, array_key, members, prefilter=prefilter):
        on_items(items)
    return members


def stream(chunks: Iterator[bytes], array_key: str, members: dict[str, Any] | None = None,
           batches: bool = True, prefilter: Prefilter | None = None,
           inside: tuple[str, ...] = ()) -> Iterator[list[Any]]:
    """The generator behind ``walk``: yields ``array_key``'s elements a list at a time and
    stores every other member in ``members`` as it is read (``array_key`` itself gets the
    element count), so a caller sees members that come before the array (``errors``) by
    the time the first elements arrive.

    ``batches=False`` decodes one element per call only: right for elements with nested
    lists of objects (sacct's jobs), where the last ``},`` of a chunk is nearly always
    inside an element and the chunk-wide attempt would fail and cost a parse for nothing.

    ``inside`` are the keys of nested objects the array sits in (Prometheus's
    ``{"data": {"result": [...]}}``: ``inside=("data",)``, ``array_key="result"``); their
    other members go into ``members`` too, under their own keys.
    """
    members = {} if members is None else members
    buffer = _Buffer(chunks, prefilter)
    first = buffer.peek()
    if first != "{":
        if first in _JSON_START:
            raise JsonStreamError("the JSON is not an object", not_json=False)
        raise JsonStreamError(f"it starts with {first!r}" if first else "no data")
    yield from _object(buffer, (*inside, array_key), members, batches)


def _object(buffer: _Buffer, path: tuple[str, ...], members: dict[str, Any],
            batches: bool) -> Generator[list[Any], None, None]:
    """The object at the buffer (its ``{`` next): ``path[0]`` streamed when it is the
    last key, else descended into; every other member decoded into ``members``."""
    buffer.pos += 1
    while buffer.peek() != "}":
        key = buffer.value()
        if not isinstance(key, str):
            raise JsonStreamError(f"an object key must be a string, found {key!r}")
        buffer.expect(":", f"after the key {key!r}")
        if key == path[0] and len(path) > 1:
            if buffer.peek() != "{":
                raise JsonStreamError(f"its member {key!r} is not an object", not_json=False)
            yield from _object(buffer, path[1:], members, batches)
        elif key == path[0]:
            members[key] = (yield from _stream_array(buffer, batches)) + buffer.filtered
        else:
            members[key] = buffer.value()
        if buffer.peek() == ",":
            buffer.pos += 1
        elif buffer.peek() != "}":
            buffer.expect("}", "at the end of the object")
    buffer.pos += 1


def _stream_array(buffer: _Buffer, batches: bool) -> Generator[list[Any], None, int]:
    """Yield the elements in lists; return how many there were."""
    if buffer.peek() != "[":
        raise JsonStreamError("its member is not a list", not_json=False)
    buffer.pos += 1
    count = 0
    if buffer.peek() == "]":
        buffer.pos += 1
        return count
    while True:
        items = buffer.batch() if batches else []  # fast path: a chunk of whole elements
        if items:
            yield items
            count += len(items)
        yield [buffer.value()]
        count += 1
        if buffer.skip_comma():
            continue
        if buffer.peek() == ",":  # the slow path: the comma was in the next chunk
            buffer.pos += 1
            continue
        buffer.expect("]", "after an element of the list")
        return count


def read_chunks(stream: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """A binary stream as chunks of at most ``size`` bytes. ``read1`` where the stream has
    it: a pipe then hands over what has arrived instead of waiting for a full chunk."""
    read = getattr(stream, "read1", None) or stream.read
    while data := read(size):
        yield data
