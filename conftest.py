# The kata's pytest plugin: --impl switch, session model fixtures, hook hygiene (course/shared/plugin.py).
pytest_plugins = ["course.shared.plugin"]
