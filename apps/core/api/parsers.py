"""The API's JSON parser: DRF's, with a nesting limit checked before anything is decoded.

DRF's ``JSONParser`` hands the body to ``json.load``, whose C decoder recurses once per
level: ``[[[[...]]]]`` 100,000 deep is a ``RecursionError``, which DRF does not catch (a
500), and anything deep enough to decode still costs recursion in every serializer that
walks it. No Beacon request body nests past a handful of levels (an ingest batch: object,
list, object, list), so a body deeper than ``MAX_DEPTH`` is a 400 before it is decoded.
"""

from __future__ import annotations

import io
import re
from itertools import accumulate
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 32
# Strings first (a bracket inside one is text), then every bracket left. An unclosed string
# runs to the end, so every quote starts a match: a failed match at each of thousands of
# quotes would rescan the rest of the body each time.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """How deep lists and objects nest in ``text`` (JSON or not: brackets in strings do not
    count). Linear in the text, no recursion."""
    brackets = _BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(_STEP[c] for c in brackets), default=0)


class BoundedJSONParser(JSONParser):
    """``JSONParser`` that refuses a body nested deeper than ``MAX_DEPTH`` with a 400."""

    max_depth = MAX_DEPTH

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        body = stream.read() if stream is not None else b""
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            text = body.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding} text") from exc
        if nesting_depth(text) > self.max_depth:
            raise ParseError(f"JSON parse error - nested deeper than {self.max_depth} levels "
                             f"of lists and objects")
        return super().parse(io.BytesIO(body), media_type, parser_context)

