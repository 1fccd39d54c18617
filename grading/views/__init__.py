"""What people read and type: the command line, reports, figures, notebooks, generated files."""
