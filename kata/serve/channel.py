"""One end of a channel between the grader's trusted side and the learner's sandbox.

Two pipes, one each way. Either end may ask (``request``), and while it waits for the answer it
serves the other end's requests: the trusted side calls a learner's function; inside, the
learner's forward pass reaches a hook the test registered, which runs on the trusted side; its
answer comes back; the learner's function goes on. Requests nest, so replies come back in the
reverse order of the requests, over the same two pipes.

A request is ``{"op": ..., "id": n, ...}``; its reply ``{"reply": n, ...}``. Frames are read
only within the codec's limits (:mod:`kata.serve.codec`).

An exercise has a few channels, its *generations*: the first learner process serves on the
first; when a call ends that process (an endless loop past its deadline, a crash), the next
process, with the learner's file imported afresh, serves on the next, so that the exercise's
other functions are still graded. Before the next process answers, the server says on the new
channel how the one before ended (``{"op": "ended", ...}``: its signal or exit status, its peak
memory, whether the server killed it because the trusted side gave up on it). As text, an
exercise's channels are ``READ,WRITE;READ,WRITE;...`` (:func:`kata.serve.format_pairs`,
:func:`kata.serve.parse_pairs`).
"""

from __future__ import annotations

import select
import time
from typing import Callable

from kata.serve import close_all
from kata.serve.codec import LIMITS, Blob, ChannelClosed, FrameError, Limits, read_frame, write_frame

Handler = Callable[[dict, list], tuple[dict, list]]


class Peer:
    def __init__(self, read_fd: int, write_fd: int, serve: Handler, limits: Limits = LIMITS):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.serve = serve
        self.limits = limits
        self.counter = 0
        self.closed = False

    def send(self, header: dict, blobs: list[Blob]) -> None:
        write_frame(self.write_fd, header, blobs, self.limits)

    def request(self, header: dict, blobs: list[Blob],
                deadline: float = 0.0) -> tuple[dict, list[Blob]]:
        """Send a request; serve the other end's requests until its reply comes. With a
        ``deadline`` (seconds), raise :class:`TimeoutError` when no message has come by then."""
        self.counter += 1
        number = self.counter
        self.send({**header, "id": number}, blobs)
        ends = time.monotonic() + deadline if deadline else None
        while True:
            if ends is not None and not select.select([self.read_fd], [], [],
                                                      max(0.0, ends - time.monotonic()))[0]:
                raise TimeoutError(f"no answer within {deadline:g} seconds")
            message, data = read_frame(self.read_fd, self.limits)
            if message.get("reply") == number:
                return message, data
            if isinstance(message.get("op"), str) and type(message.get("id")) is int:
                self.serve_one(message, data)
                continue
            raise FrameError("a reply to no request")

    def serve_one(self, message: dict, data: list[Blob]) -> bool:
        """Answer one request; False when it asked this end to stop."""
        if message.get("op") == "bye":
            self.send({"reply": message.get("id")}, [])
            return False
        reply, blobs = self.serve(message, data)
        self.send({**reply, "reply": message["id"]}, blobs)
        return True

    def serve_forever(self) -> None:
        """Answer requests until the other end says bye or goes away."""
        while True:
            try:
                message, data = read_frame(self.read_fd, self.limits)
            except ChannelClosed:
                return
            if not (isinstance(message.get("op"), str) and type(message.get("id")) is int):
                raise FrameError("a message that is no request")
            if not self.serve_one(message, data):
                return

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_all((self.read_fd, self.write_fd))
