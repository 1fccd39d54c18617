# The kata's pytest plugin: --impl switch, session model fixtures, hook hygiene (kata/pytest_plugin.py).
pytest_plugins = ["kata.pytest_plugin"]
