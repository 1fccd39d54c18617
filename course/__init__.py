"""The course: one folder per exercise (its declaration, reference solution, tests, secret checks,
catalogued mistakes and correct variants, notebook and figures), and ``shared/`` for what the
exercises' tests have in common. The learner works in ``exercises/``; try them first!"""
