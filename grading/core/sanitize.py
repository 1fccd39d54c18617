"""Making what a submission controls safe to write: JSON, HTML, CSV, the terminal, and records.

A submission controls much of what the grader reports: the messages its code raised, the
diagnosis ids in its records (the sandbox can write any record), its own name (a file name).
Every writer of the kata passes them through here: strict JSON (:func:`json_text`), JSON inside
an HTML ``<script>`` (:func:`script_json`), CSV cells no spreadsheet runs (:func:`csv_cell`),
text without terminal controls (:func:`terminal`), and a record's fields checked and bounded
(:func:`diagnosis_id`, :func:`bounded`).
"""

from __future__ import annotations

import json
import math
import re

__all__ = ["MESSAGE_LIMIT", "UNKNOWN_DIAGNOSIS", "bounded", "csv_cell", "diagnosis_id",
           "finite", "json_text", "script_json", "terminal"]

#: The form of a diagnosis id (as :mod:`course.shared.diagnosis` enforces it when a test raises one).
DIAGNOSIS_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: Longest diagnosis id accepted (the catalogue's longest is under 50 characters).
DIAGNOSIS_ID_LIMIT = 64
#: What a record's diagnosis becomes when it is not an id: counted, but as one marker.
UNKNOWN_DIAGNOSIS = "unknown-diagnosis"
#: Longest message kept from a record (the recorder's own messages are far shorter).
MESSAGE_LIMIT = 4000
#: Longest short field kept from a record (names, node ids, functions, source lines).
FIELD_LIMIT = 500

_ELLIPSIS = " ... (cut)"


# --------------------------------------------------------------------------- JSON


def finite(data):
    """``data`` with every float that is NaN or infinite replaced by None (recursively through
    dicts, lists and tuples; dict keys are made strings, as JSON has them)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k if isinstance(k, str) else str(finite(k)): finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def json_text(data, **options) -> str:
    """Strict JSON: ``json.dumps(finite(data), allow_nan=False, **options)``."""
    return json.dumps(finite(data), allow_nan=False, **options)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                  "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(data) -> str:
    """JSON to place inside ``<script type="application/json">``: still the same JSON once
    parsed, but with no ``<``, ``>`` or ``&`` in its text (nor U+2028/2029)."""
    text = json_text(data)
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group()], text)


# --------------------------------------------------------------------------- CSV

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: a string that starts like a formula gets a
    leading ``'`` (plain numbers such as ``-1.5`` are left alone). Other values pass as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


# --------------------------------------------------------------------------- the terminal

# ESC sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC strings (ended by BEL or ESC \),
# and two-character escapes; then every other C0/C1 control except tab and newline, and DEL.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]"  # other escapes (ESC c, ESC ( B, ...)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c|\x1b\\)?"  # 8-bit OSC, DCS, ...
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal(text) -> str:
    """``text`` as a string safe to print: no escape sequences, no control characters other
    than newline and tab (a carriage return could overwrite what was printed)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", str(text)))


# --------------------------------------------------------------------------- records


def bounded(value, limit: int = MESSAGE_LIMIT) -> str:
    """``value`` as a string of at most ``limit`` characters (None becomes ``""``)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:max(0, limit - len(_ELLIPSIS))] + _ELLIPSIS
    return text


def optional(value, limit: int = FIELD_LIMIT) -> str | None:
    """None stays None; anything else is :func:`bounded`."""
    return None if value is None else bounded(value, limit)


def diagnosis_id(value) -> str | None:
    """A record's diagnosis as the grader counts it: None (no diagnosis), a kebab-case id, or
    :data:`UNKNOWN_DIAGNOSIS` for anything else (a list, a number, NaN, markup, a huge string)."""
    if value is None or value == "":
        return None
    if (isinstance(value, str) and len(value) <= DIAGNOSIS_ID_LIMIT
            and DIAGNOSIS_ID.fullmatch(value)):
        return value
    return UNKNOWN_DIAGNOSIS


def number(value, default: float = 0.0) -> float:
    """A finite float, or ``default`` (for durations and the like read from a record)."""
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return value if math.isfinite(value) else default
