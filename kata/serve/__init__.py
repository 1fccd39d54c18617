"""The learner's side of trusted grading, and the plain-data channel both sides speak.

:mod:`kata.serve.server` runs in a submission's sandbox and answers the trusted side's calls of
the learner's functions; :mod:`kata.serve.codec` and :mod:`kata.serve.channel` are the bounded
frames and values between them; :mod:`kata.serve.figures` turns a figure into what is drawn and
back. Nothing here knows an answer: the tests and references stay on the trusted side
(:mod:`grading.box.remote`).
"""
