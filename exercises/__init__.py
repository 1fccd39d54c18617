"""The learner's exercises: fill in the stubs, then run pytest and python grader.py."""
