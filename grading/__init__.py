"""The trusted grader, in three layers that import downwards only:

* :mod:`grading.views`: what people read and type (the command line, the terminal, watch,
  figures, notebooks, CSV/JSON, the class report, Gradescope, Classroom, generated files);
* :mod:`grading.box`: running a submission's tests (the sandbox, its server's channels, the
  workers, the deadlines);
* :mod:`grading.core`: what a test did and what it earns (declarations, records, statuses,
  points, the reference cache).

None of it enters the learner's sandbox, which receives the ``kata/`` folder only.
"""
