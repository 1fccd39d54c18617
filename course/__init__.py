"""Reference solutions. Try the exercises first!"""
