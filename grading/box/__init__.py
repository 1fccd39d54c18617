"""Running a submission's tests: the sandbox, the channels to its server, workers, deadlines."""
