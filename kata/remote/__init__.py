"""The learner's side of trusted grading, and the plain-data channel both sides speak.

:mod:`kata.remote.server` runs in a submission's sandbox and answers the trusted side's calls of
the learner's functions; :mod:`kata.remote.codec` and :mod:`kata.remote.channel` are the bounded
frames and values between them; :mod:`kata.remote.figures` turns a figure into what is drawn and
back. Nothing here knows an answer: the tests and references stay on the trusted side
(:mod:`kata.grading.remote`).
"""
