"""Plain data across the trust boundary: frames, and values in them.

A frame is ``[u32 header length][u64 body length][header][body]``: the header is UTF-8 JSON, the
body the raw bytes of the tensors and arrays the header points to (``"blobs"``: their lengths).
Both ends read a frame only within :data:`LIMITS` (sizes, counts, nesting depth), and a value
only as one of the forms below; anything else is refused with :class:`FrameError`. Nothing is
ever unpickled from the learner's side.

Values (``encode``/``decode``): ``None``, ``bool``, ``int``, ``float`` (NaN and infinities
included), ``str``, lists, tuples, dicts, sets, tensors (dtype, shape, whether they require grad
and have a grad_fn), numpy arrays and scalars, torch dtypes and sizes, and tagged objects that an
end's :class:`Codec` subclass knows how to write and read (models by handle, hooks as remote
callables, figures as descriptions). A value neither end knows crosses as an opaque record of its
type name and ``repr``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np
import torch

_HEAD = struct.Struct("!IQ")

#: The bytes of one tensor or value of a frame: bytes, or a view of a tensor's memory (written)
#: or of the frame's body (read).
Blob = bytes | memoryview


@dataclass(frozen=True)
class Limits:
    frame_bytes: int = 256 * 2**20  # the body: every tensor of one message
    header_bytes: int = 16 * 2**20
    items: int = 200_000  # values of any kind in one message
    depth: int = 40
    string_chars: int = 2**20
    blobs: int = 10_000


LIMITS = Limits()


class FrameError(Exception):
    """A frame or a value that breaks the protocol or its limits (says which)."""


class ChannelClosed(FrameError):
    """The other end closed the channel (it ended, crashed or was killed)."""


# --------------------------------------------------------------------------- frames


def _read_exactly(fd: int, n: int) -> bytearray:
    """``n`` bytes from ``fd``, read straight into one buffer (no chunks to join)."""
    buffer = bytearray(n)
    view, got = memoryview(buffer), 0
    while got < n:
        count = os.readv(fd, [view[got:]])
        if not count:
            raise ChannelClosed("the other end closed the channel")
        got += count
    return buffer


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_frame(fd: int, header: dict, blobs: list[Blob], limits: Limits = LIMITS) -> None:
    header = dict(header, blobs=[len(b) for b in blobs])
    text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    body = sum(len(b) for b in blobs)
    if len(text) > limits.header_bytes or body > limits.frame_bytes:
        raise FrameError(f"a message of {len(text) + body:,} bytes is larger than the channel's "
                         f"limit ({limits.frame_bytes:,} bytes of tensors)")
    _write_all(fd, _HEAD.pack(len(text), body) + text)
    for blob in blobs:
        _write_all(fd, blob)


def read_frame(fd: int, limits: Limits = LIMITS) -> tuple[dict, list[Blob]]:
    header_length, body_length = _HEAD.unpack(_read_exactly(fd, _HEAD.size))
    if header_length > limits.header_bytes or body_length > limits.frame_bytes:
        raise FrameError(f"a message of {header_length + body_length:,} bytes is larger than "
                         f"the channel's limit")
    try:
        header = json.loads(_read_exactly(fd, header_length).decode("utf-8"),
                            parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as error:
        raise FrameError(f"a message header is not valid JSON: {error}") from None
    sizes = header.get("blobs") if isinstance(header, dict) else None
    if (not isinstance(sizes, list) or len(sizes) > limits.blobs
            or not all(type(s) is int and s >= 0 for s in sizes) or sum(sizes) != body_length):
        raise FrameError("a message's blob table does not match its body")
    body = memoryview(_read_exactly(fd, body_length))
    blobs, at = [], 0
    for size in sizes:
        blobs.append(body[at:at + size])  # views of the one buffer: nothing copied
        at += size
    return header, blobs


def _no_constant(name):
    raise ValueError(f"{name} is not allowed in a message")


# --------------------------------------------------------------------------- values

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
_NP_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
              "uint16", "uint32", "uint64", "bool", "complex64", "complex128"}


class Codec:
    """Writes and reads values of one message. Subclasses add tagged objects.

    ``table`` lists the tensors and modules met while encoding (or decoding) a message, in
    traversal order, which is the same at both ends: a reply refers to an object of the request
    that the function returned as is, by its place (``{"$obj": "ref", "i": n}``), so that
    ``output[1] is block.extra`` still holds across the boundary.
    """

    def __init__(self, limits: Limits = LIMITS, known: dict | None = None,
                 table: list | None = None):
        self.limits = limits
        self.blobs: list[Blob] = []
        self.table: list = []  # objects of this message, in order
        self.known = known or {}  # id(object) -> its place in the request's table (replies)
        self.request_table = table or []  # the request's objects (decoding a reply)
        self.items = self.chars = self.size = 0  # values, string characters, tensor bytes

    # -- writing -------------------------------------------------------------

    def encode(self, value, depth: int = 0):
        self._count(depth)
        if isinstance(value, str):
            self.chars += len(value)
            if len(value) > self.limits.string_chars or self.chars > self.limits.header_bytes // 4:
                raise FrameError(f"a string of {len(value):,} characters is more than the "
                                 "channel takes")
            return value
        if value is None or type(value) in (bool, int):
            return value
        if type(value) is float:
            return value if math.isfinite(value) else {"$f": repr(value)}
        if id(value) in self.known:
            return {"$obj": "ref", "i": self.known[id(value)]}
        if isinstance(value, torch.Tensor):
            return self._encode_tensor(value)
        if isinstance(value, np.ndarray) and value.dtype.name in _NP_DTYPES:
            self._room_for(value.nbytes)
            array = np.ascontiguousarray(value)
            return {"$nd": self._blob(array.tobytes()), "dtype": array.dtype.name,
                    "shape": list(array.shape)}
        if isinstance(value, np.generic) and value.dtype.name in _NP_DTYPES:
            return {"$np": self.encode(value.item(), depth + 1), "dtype": value.dtype.name}
        if isinstance(value, torch.Size):
            return {"$size": [int(v) for v in value]}
        if isinstance(value, torch.dtype):
            return {"$dtype": str(value).removeprefix("torch.")}
        special = self.encode_object(value, depth)
        if special is not None:
            return special
        if type(value).__name__ == "BatchEncoding" and type(value).__module__.startswith(
                "transformers"):  # what a tokenizer returns: a dict of tensors
            return {"$obj": "batch", "data": self.encode(dict(value), depth + 1)}
        if type(value) is tuple:
            return {"$t": [self.encode(v, depth + 1) for v in value]}
        if type(value) is list:
            return [self.encode(v, depth + 1) for v in value]
        if type(value) is dict:
            return {"$d": [[self.encode(k, depth + 1), self.encode(v, depth + 1)]
                           for k, v in value.items()]}
        if type(value) in (set, frozenset):
            return {"$set": [self.encode(v, depth + 1) for v in value]}
        return self.opaque(value)

    def encode_object(self, value, depth: int):
        """A tagged form for ``value`` (``{"$obj": kind, ...}``), or None: subclasses."""
        return None

    def opaque(self, value) -> dict:
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a repr that raises is still a value
            text = "<no repr>"
        return {"$obj": "opaque", "type": type(value).__name__[:100], "repr": text[:300]}

    def _encode_tensor(self, tensor: torch.Tensor) -> dict:
        name = str(tensor.dtype).removeprefix("torch.")
        if name not in _DTYPES or tensor.layout != torch.strided:
            return self.opaque(tensor)
        self.table.append(tensor)
        self._room_for(tensor.numel() * tensor.element_size())
        data = tensor.detach().to("cpu")
        return {"$tensor": self._blob(_bytes_of(data)), "dtype": name, "shape": list(data.shape),
                "rg": bool(tensor.requires_grad), "gf": tensor.grad_fn is not None,
                "param": isinstance(tensor, torch.nn.Parameter)}

    def encode_call(self, args: tuple, kwargs: dict) -> dict:
        """A call's arguments, as fields of its request."""
        return {"args": self.encode(list(args)), "kwargs": self.encode(dict(kwargs))}

    def decode_call(self, message: dict, blobs: list[Blob]) -> tuple[list, dict]:
        """A request's arguments; ``versions`` then holds their tensors' versions, for
        :meth:`mutations` once the call is done."""
        args = self.decode(message.get("args", []), blobs)
        kwargs = self.decode(message.get("kwargs", {"$d": []}), blobs)
        if not isinstance(args, list) or not isinstance(kwargs, dict) \
                or not all(isinstance(k, str) for k in kwargs):
            raise FrameError("a call's arguments are not a list and a dict")
        self.versions = [getattr(t, "_version", None) for t in self.table]
        return args, kwargs

    def mutations(self, table: list, versions: list) -> list:
        """``[[place, tensor], ...]`` for each tensor of a request that the call changed in
        place (its ``_version`` moved), so the other end can change its original the same way."""
        changed = []
        for place, (value, before) in enumerate(zip(table, versions)):
            if isinstance(value, torch.Tensor) and before is not None \
                    and value._version != before:
                changed.append([place, self._encode_tensor(value)])
        return changed

    def apply_mutations(self, entries, blobs: list[Blob]) -> None:
        """Change this end's originals as the other end changed its copies in place."""
        if not isinstance(entries, list) or len(entries) > self.limits.blobs:
            raise FrameError("a list of changed tensors of no known form")
        for entry in entries:
            if (not isinstance(entry, list) or len(entry) != 2 or type(entry[0]) is not int
                    or not 0 <= entry[0] < len(self.request_table)
                    or not isinstance(entry[1], dict) or "$tensor" not in entry[1]):
                raise FrameError("a changed tensor of no known form")
            target, new = self.request_table[entry[0]], self._decode_tensor(entry[1], blobs)
            if isinstance(target, torch.Tensor) and target.shape == new.shape:
                with torch.no_grad():
                    target.copy_(new.to(target.dtype))

    def _room_for(self, nbytes: int) -> None:
        """Refuse a tensor that would not fit in the message before copying it (a 400 MB
        answer is refused at once, not after two copies of it)."""
        if self.size + nbytes > self.limits.frame_bytes:
            raise FrameError(f"more than {self.limits.frame_bytes // 2**20} MiB of tensors in "
                             "one message (the channel's limit)")

    def _blob(self, data: Blob) -> int:
        """Keep ``data`` (bytes, or a byte view of a tensor written with the message, before
        anyone can change it) for the message's body; its place among the blobs."""
        self._room_for(len(data))
        self.size += len(data)
        self.blobs.append(data)
        if len(self.blobs) > self.limits.blobs:
            raise FrameError("too many tensors in one message")
        return len(self.blobs) - 1

    def _count(self, depth: int) -> None:
        self.items += 1
        if self.items > self.limits.items:
            raise FrameError(f"a message holds more than {self.limits.items:,} values")
        if depth > self.limits.depth:
            raise FrameError(f"a value is nested deeper than {self.limits.depth} levels")

    # -- reading -------------------------------------------------------------

    def decode(self, node, blobs: list[Blob], depth: int = 0):
        self._count(depth)
        if isinstance(node, str) and len(node) > self.limits.string_chars:
            raise FrameError("a string is longer than the limit")
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            return [self.decode(v, blobs, depth + 1) for v in node]
        if not isinstance(node, dict) or len(node) == 0:
            raise FrameError("a value of no known form")
        if "$t" in node:
            return tuple(self.decode(v, blobs, depth + 1) for v in _list(node["$t"]))
        if "$d" in node:
            result = {}
            for pair in _list(node["$d"]):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise FrameError("a dict entry is not a pair")
                key = self.decode(pair[0], blobs, depth + 1)
                try:
                    result[key] = self.decode(pair[1], blobs, depth + 1)
                except TypeError:
                    raise FrameError("a dict key that cannot be a key") from None
            return result
        if "$set" in node:
            try:
                return set(self.decode(v, blobs, depth + 1) for v in _list(node["$set"]))
            except TypeError:
                raise FrameError("a set member that cannot be in a set") from None
        if "$f" in node:
            if node["$f"] not in ("nan", "inf", "-inf"):
                raise FrameError("a float of no known form")
            return float(node["$f"])
        if "$tensor" in node:
            return self._decode_tensor(node, blobs)
        if "$nd" in node:
            dtype = node.get("dtype")
            if dtype not in _NP_DTYPES:
                raise FrameError(f"an array of an unknown dtype {str(dtype)[:20]!r}")
            shape = _shape(node.get("shape"))
            raw = _blob_of(node["$nd"], blobs)
            if math.prod(shape) * np.dtype(dtype).itemsize != len(raw):
                raise FrameError("an array's data does not match its shape")
            return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        if "$np" in node:
            dtype = node.get("dtype")
            value = self.decode(node["$np"], blobs, depth + 1)
            if dtype not in _NP_DTYPES or not isinstance(value, (bool, int, float, complex)):
                raise FrameError("a numpy scalar of no known form")
            try:
                return np.dtype(dtype).type(value)
            except (OverflowError, ValueError, TypeError):
                raise FrameError("a numpy scalar out of its dtype's range") from None
        if "$size" in node:
            return torch.Size(_shape(node["$size"]))
        if "$dtype" in node:
            if node["$dtype"] not in _DTYPES:
                raise FrameError("an unknown dtype")
            return _DTYPES[node["$dtype"]]
        if node.get("$obj") == "ref":
            index = node.get("i")
            if type(index) is not int or not 0 <= index < len(self.request_table):
                raise FrameError("a reference to no object of the request")
            return self.request_table[index]
        if isinstance(node.get("$obj"), str):
            return self.decode_object(node["$obj"], node, blobs, depth)
        raise FrameError("a value of no known form")

    def decode_object(self, kind: str, node: dict, blobs: list[Blob], depth: int):
        """The object a tagged form stands for: subclasses. Unknown kinds are refused."""
        if kind == "opaque":
            return Opaque.of(str(node.get("type", "object"))[:100],
                             str(node.get("repr", ""))[:300])
        if kind == "batch":
            from transformers import BatchEncoding

            data = self.decode(node.get("data"), blobs, depth + 1)
            if not isinstance(data, dict):
                raise FrameError("a BatchEncoding that is not a dict")
            return BatchEncoding(data)
        raise FrameError(f"an object of unknown kind {kind[:40]!r}")

    def _decode_tensor(self, node: dict, blobs: list[Blob]) -> torch.Tensor:
        dtype = _DTYPES.get(node.get("dtype"))
        if dtype is None:
            raise FrameError("a tensor of an unknown dtype")
        shape = _shape(node.get("shape"))
        raw = _blob_of(node["$tensor"], blobs)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if math.prod(shape) * itemsize != len(raw):
            raise FrameError("a tensor's data does not match its shape")
        tensor = _tensor_of(raw, dtype, itemsize, shape)
        if node.get("rg") is True and (dtype.is_floating_point or dtype.is_complex):
            if node.get("param") is True:
                tensor = torch.nn.Parameter(tensor)
            elif node.get("gf") is True:
                tensor = tensor.requires_grad_(True) * 1  # not a leaf: it has a grad_fn
            else:
                tensor = tensor.requires_grad_(True)
        self.table.append(tensor)
        return tensor


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a CPU tensor, in row-major order: a view of its memory when it is
    contiguous, else of a contiguous copy."""
    if tensor.numel() == 0:
        return memoryview(b"")
    try:
        flat = tensor.contiguous().reshape(-1).view(torch.uint8)
    except RuntimeError:  # a view can count as contiguous (one element, any stride) and still
        # refuse .view
        flat = tensor.clone(memory_format=torch.contiguous_format).reshape(-1).view(torch.uint8)
    return memoryview(flat.numpy())


def _tensor_of(raw: Blob, dtype: torch.dtype, itemsize: int, shape: list[int]) -> torch.Tensor:
    """A tensor of ``dtype`` and ``shape`` holding the bytes ``raw``. When ``raw`` is a view of
    at least half of a frame's body (:func:`read_frame`; nobody else holds it) the tensor uses
    that memory, else a copy: a tensor keeps its frame's body alive, so it never keeps more
    than twice its own size (a small answer sent with a large unread blob would keep the blob).
    A view that is misaligned for ``dtype`` (a blob of an odd size came before it) is copied."""
    if not len(raw):
        return torch.empty(shape, dtype=dtype)
    shared = (isinstance(raw, memoryview) and not raw.readonly
              and isinstance(raw.obj, bytearray) and 2 * len(raw) >= len(raw.obj))
    data = torch.frombuffer(raw if shared else bytearray(raw), dtype=torch.uint8)
    if data.data_ptr() % itemsize:
        data = data.clone()
    return data.view(dtype).reshape(shape)


def _list(value) -> list:
    if not isinstance(value, list):
        raise FrameError("a sequence that is not a list")
    return value


def _shape(value) -> list[int]:
    if (not isinstance(value, list) or len(value) > 16
            or not all(type(v) is int and 0 <= v < 2**40 for v in value)):
        raise FrameError("a shape that is not a list of sizes")
    return value


def _blob_of(index, blobs: list[Blob]) -> Blob:
    if type(index) is not int or not 0 <= index < len(blobs):
        raise FrameError("a reference to no blob of the message")
    return blobs[index]


class Opaque:
    """A value of the other end that has no plain form: its type name and ``repr`` only.

    Its class is named like the original's (``SimpleNamespace``, ``Axes``...) so that a test's
    message ("should return a torch.Tensor, got SimpleNamespace") reads as it would in one
    process.
    """

    def __init__(self, text: str):
        self._text = text

    def __repr__(self) -> str:
        return self._text

    @classmethod
    def of(cls, type_name: str, text: str) -> Opaque:
        name = type_name if type_name.isidentifier() else "object"
        return named_class(name, cls, "kata.serve")(text)


@functools.cache
def named_class(name: str, base: type, module: str) -> type:
    """A subclass of ``base`` named as a type of the other end, so that a message naming the
    type reads as it would in one process."""
    return type(name, (base,), {"__module__": module})
